"""The ``approval`` invariant: the permission gate holds (docs/design.md, Approvals).

Checked only when the run has the approval policy (the header's ``approval``: the tools that need a person's yes):
a run without it has nothing to hold the loop to.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any

from simloop.invariants._base import Violation, _View, _view, result_text
from simloop.transcript import ApprovalEvent, Restart, ToolStart, Transcript, TurnStart

__all__ = ["approval"]

# A tool_result that tells the model its call was not approved (or not run for want of an answer).
_SAYS_DENIED = re.compile(
    r"\b(denied|not approved|disapproved|unapproved|declined|rejected|refused|not allowed|not permitted|"
    r"no approval|without approval|approval|not run|not executed|no answer|did not answer|timed out|away)\b",
    re.IGNORECASE,
)
_EPS = 1e-9


def approval(t: Transcript) -> list[Violation]:
    """A call that needs approval runs only after a yes for that very call; a no is told to the model; the wait
    for a person ends by the loop's own deadline.

    * each execution of a gated tool follows a yes for the same tool and input (and the same tool_use, when
      both are known: a yes under the call's id about another input does not count), the latest answer for that
      call before it ran that had reached the executing thread (`ToolStart.own`, `ToolStart.heard`): not one
      asked after it ran, not one still coming to that thread, not one given to another call, not a no or no
      answer;
    * a call the person did not approve, and that did not run, is answered (when the loop goes on) by a
      tool_result saying so (``is_error``, or text saying it was denied), not one that reads as a success;
      it is not asked about again after a no (in the same life);
    * a wait for an answer ends by the declared ``deadline_s`` of the turn.
    """
    gated = t.header.approval
    if gated is None:
        return []
    v = _view(t)
    asks = [(pos, e) for pos, e in enumerate(t.events) if isinstance(e, ApprovalEvent)]
    out: list[Violation] = []
    ran: set[str] = set()
    used: set[int] = set()  # the yeses already taken by an execution matched by tool and input
    for pos, s in v.starts:
        if s.tool not in gated:
            continue
        uid = v.bound(s)
        if uid is not None:
            ran.add(uid)
        found = _gate(v, asks, used, pos, s, uid)
        if found is not None:
            out.append(found)
    out += _told(t, asks, ran)
    out += _deadline(t, asks)
    return out


def _gate(
    v: _View, asks: list[tuple[int, ApprovalEvent]], used: set[int], pos: int, s: ToolStart, uid: str | None,
) -> Violation | None:
    """Execution ``s`` (at event position ``pos``) of a gated tool: None if it followed a yes for that very call.

    The yes it runs on is added to ``used`` (a yes matched by tool and input is taken once); otherwise the
    violation says what it ran on instead (a no, no answer, an answer it had not heard, none, another call's yes).
    """
    canon = v.input_of(s)

    def same(a: ApprovalEvent, canon: str = canon, tool: str = s.tool) -> bool:
        return a.tool == tool and _canon(a.input) == canon

    # the answers the executing thread had heard when it began: recorded before it, and given by its own time
    heard = [(p, a) for p, a in asks if p < pos and (s.own is None or a.t <= s.own + _EPS)
             and (s.heard is None or a.seq is None or a.seq <= s.heard)]
    exact = [(p, a) for p, a in heard if s.tool_use_id is not None and a.tool_use_id == s.tool_use_id]
    if exact:  # both sides name the call: its latest answer decides, if it was about what runs
        used.add(exact[-1][0])
        answer = exact[-1][1]
        if answer.approved and not same(answer):
            return _other_input(v, pos, s, uid, answer)
        latest: ApprovalEvent | None = answer
    else:  # identical calls are one set: each execution takes a yes of its own, in order
        earlier = [(p, a) for p, a in heard if same(a) and p not in used]
        yes = next((p for p, a in earlier if a.approved), None)
        if yes is not None:
            used.add(yes)
            return None
        latest = earlier[-1][1] if earlier else None
    if latest is not None and latest.approved:
        return None
    yes_to_it = next((a for _, a in reversed(heard) if a.approved and uid is not None and a.tool_use_id == uid), None)
    if yes_to_it is not None:  # the run named no call, the question did: a yes to this call, about another input
        return _other_input(v, pos, s, uid, yes_to_it)
    call = f"{s.tool}({_shown(s.input)})" + (f" (tool_use {uid})" if uid else "")
    what, kind = _ran_on(asks, heard, pos, s, latest, same)
    return Violation(
        "approval",
        f"{call} needs approval: {what}; a correct loop asks sim.approve(name, input, tool_use_id=...) for each "
        "call before running it, and runs only that call on a yes",
        v.step_at(pos), {"tool": s.tool, "exec": s.exec, "tool_use_id": uid, "kind": kind},
    )


def _ran_on(
    asks: list[tuple[int, ApprovalEvent]], heard: list[tuple[int, ApprovalEvent]], pos: int, s: ToolStart,
    latest: ApprovalEvent | None, same: Callable[[ApprovalEvent], bool],
) -> tuple[str, str]:
    """What gated execution ``s`` ran on instead of a yes for it, in words, and the violation's kind.

    ``latest`` is the last answer for that call it had heard (a no, or no answer), ``heard`` all it had heard, and
    ``same`` tells an answer about its tool and input.
    """
    if latest is not None:
        said = "said no" if latest.answer == "denied" else "gave no answer"
        return f"the person {said} at {latest.t:g}s, yet execution {s.exec} ran it at {s.t:g}s", "ran_denied"
    if (pending := next((a for p, a in asks if p < pos and same(a) and (p, a) not in heard), None)) is not None:
        what = (f"execution {s.exec} ran it at {s.t if s.own is None else s.own:g}s of its own thread's time "
                f"before the answer reached that thread (the question was asked at {pending.asked:g}s, and the "
                f"person answered at {pending.t:g}s to another thread it had not waited on); a gated call waits "
                "for the answer in the thread that runs it")
        return what, "unanswered"
    if any(p > pos and same(a) for p, a in asks):
        return f"execution {s.exec} ran it at {s.t:g}s and only then asked the person (sim.approve)", "asked_after"
    other = next((a for p, a in reversed(asks) if p < pos and a.tool == s.tool and a.approved), None)
    if other is not None:
        what = (f"execution {s.exec} ran it on the yes given to another call, {other.tool}"
                f"({_shown(other.input)})" + (f" (tool_use {other.matched})" if other.matched else ""))
        return what, "reused"
    return f"execution {s.exec} ran it without asking the person (sim.approve)", "unasked"


def _other_input(v: _View, pos: int, s: ToolStart, uid: str | None, yes: ApprovalEvent) -> Violation:
    """The person said yes under this call's id, but to another tool or input than the one that ran."""
    return Violation(
        "approval",
        f"{s.tool}({_shown(s.input)})" + (f" (tool_use {uid})" if uid else "") + f" needs approval: the person said "
        f"yes at {yes.t:g}s to {yes.tool}({_shown(yes.input)}) under this call's id, yet execution {s.exec} ran "
        f"{s.tool}({_shown(s.input)}) at {s.t:g}s; a yes is for the tool and input it was asked about: a correct "
        "loop asks sim.approve(name, input, tool_use_id=...) with the very input it then runs",
        v.step_at(pos), {"tool": s.tool, "exec": s.exec, "tool_use_id": uid, "kind": "other_input"},
    )


def _told(t: Transcript, asks: list[tuple[int, ApprovalEvent]], ran: set[str]) -> list[Violation]:
    """A call the person did not approve is told to the model as such, and not asked about again after a no."""
    v = _view(t)
    out: list[Violation] = []
    answers: dict[str, list[tuple[int, ApprovalEvent]]] = {}
    for pos, a in asks:
        about = v.asked_about.get(pos, a.matched)  # bound by evidence (see _base._bind_asks)
        if about is not None:
            answers.setdefault(about, []).append((pos, a))
    restarts = [pos for pos, e in enumerate(t.events) if isinstance(e, Restart)]
    for uid, mine in answers.items():
        for (p1, first), (p2, again) in itertools.pairwise(mine):
            if first.answer == "denied" and not any(p1 < r < p2 for r in restarts):
                out.append(Violation(
                    "approval",
                    f"the person said no to {first.tool} (tool_use {uid}) at {first.t:g}s and the loop asked again "
                    f"at {again.asked:g}s; a correct loop takes the no and tells the model (an is_error tool_result)",
                    v.step_at(p2), {"tool": first.tool, "tool_use_id": uid, "kind": "asked_again"},
                ))
                break
        sent = v.result_sent.get(uid)
        if uid in ran or sent is None:
            continue  # ran: reported above; no result: the loop stopped there
        told = [a for p, a in mine if p < sent]
        if not told or told[-1].approved:
            continue
        block = v.result_block.get(uid, {})
        text = result_text(block)
        last = told[-1]
        said = "said no" if last.answer == "denied" else "gave no answer"
        if _SAYS_DENIED.search(text):
            continue  # told (an is_error result, or a plain one whose text says it was denied: a framework's way)
        if block.get("is_error") is not True:
            problem = f"the loop answered it with a plain tool_result ({_shown(text)}), as if it had run"
            kind = "swallowed"
        else:
            problem = f"its is_error tool_result ({_shown(text)}) does not say it was denied or not run"
            kind = "unexplained"
        request = t.events[sent]
        out.append(Violation(
            "approval",
            f"the person {said} to {last.tool} (tool_use {uid}), which did not run, but {problem}; a correct loop "
            "answers a denied call with an is_error tool_result saying it was denied",
            getattr(request, "call", None),
            {"tool": last.tool, "tool_use_id": uid, "kind": kind, "request": getattr(request, "index", None)},
        ))
    return out


def _deadline(t: Transcript, asks: list[tuple[int, ApprovalEvent]]) -> list[Violation]:
    """A wait for a person ends by the loop's declared deadline (counted from the start of the turn)."""
    deadline = t.header.limits.get("deadline_s")
    if not isinstance(deadline, (int, float)):
        return []
    v = _view(t)
    out: list[Violation] = []
    start = 0.0
    turn_at = {pos: e.t for pos, e in enumerate(t.events) if isinstance(e, TurnStart)}
    for pos in range(len(t.events)):
        if pos in turn_at:
            start = turn_at[pos] if any(p < pos for p in turn_at) else 0.0
        e = t.events[pos]
        if isinstance(e, ApprovalEvent) and e.t > start + deadline + _EPS and e.t > e.asked + _EPS:
            out.append(Violation(
                "approval",
                f"the loop waited for the person's answer about {e.tool} from {e.asked:g}s to {e.t:g}s, past its "
                f"deadline ({deadline:g}s, at {start + deadline:g}s); a correct loop waits no longer than its own "
                "deadline (sim.approve's default), then treats the call as not approved",
                v.step_at(pos), {"tool": e.tool, "tool_use_id": e.matched, "kind": "past_deadline"},
            ))
            break
    return out


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else _canon(value)
    return repr(text if len(text) <= 60 else text[:57] + "...")
