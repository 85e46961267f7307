"""The invariant catalogue (docs/design.md, Invariants): pure functions from a `Transcript` to violations.

Each invariant is a function ``Transcript -> list[Violation]``.  They read the
recorded run only and never import the simulator, so a transcript written to
disk (or built by hand in a test) is checked exactly like a live one, and a new
invariant is one more function in `CATALOGUE`.

Conventions shared by every invariant:

* A *step* is a logical model call: a `Request` to ``/v1/messages``, numbered
  by ``Request.call``.  SDK retries keep the call number, so they count once.
* A violation names the step, a message path (``messages[4].content[0]``)
  when there is one, and says what a correct loop does instead.
* Rules only flag clear faults.  A loop may stop early for its own reasons;
  it may not claim a reason the transcript contradicts.

Example::

    report = check(transcript)                      # every invariant
    report = check(transcript, invariants=["pairing", "no_rerun"])
    report.raise_for_violations()                   # InvariantViolation if any
"""

from __future__ import annotations

import bisect
import difflib
import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from simloop.errors import InvariantViolation, SimloopInternalError, UsageError
from simloop.scenario import INVARIANT_IDS
from simloop.transcript import OutcomeEvent, Request, Response, ToolEnd, ToolStart, Transcript

__all__ = ["CATALOGUE", "REASONS", "Invariant", "Report", "Violation", "check"]

#: The outcome reasons a loop may declare (docs/design.md, Outcome reasons).
REASONS = (
    "final", "max_steps", "deadline", "aborted", "error_budget", "token_budget", "refusal", "truncated",
    "repetition", "error",
)
MESSAGES_PATH = "/v1/messages"
_FINAL_STOPS = ("end_turn", "stop_sequence")
# Body fields a loop may change when it resends a request without making it a different request.
_VOLATILE_BODY = frozenset({"messages", "stream", "metadata", "max_tokens"})
_SIZE_HINTS = ("prompt is too long", "context window", "request_too_large", "too large")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: which (an id from docs/design.md, Invariants), what and where, and the evidence.

    ``step`` is the logical model call (1-based) where it happened, or None.
    ``evidence`` holds the transcript coordinates: ``request`` (a request index),
    ``path``, ``tool_use_id``, ``tool``, ``exec`` (a tool execution number)...
    """

    invariant: str
    message: str
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict, hash=False)  # hashable without it, for sets

    def __str__(self) -> str:
        where = [f"step {self.step}"] if self.step is not None else []
        if self.evidence.get("path"):
            where.append(str(self.evidence["path"]))
        return f"[{self.invariant}] " + (", ".join(where) + ": " if where else "") + self.message


@dataclass
class Report:
    """The result of `check`: the violations found and the invariant ids that were checked."""

    violations: list[Violation]
    checked: tuple[str, ...]
    transcript: Transcript | None = field(default=None, repr=False)
    examples: int | None = None  # how many runs `verify` tried (None for a single check)

    @property
    def ok(self) -> bool:
        """True when no checked invariant was violated."""
        return not self.violations

    def raise_for_violations(self) -> None:
        """Raise `simloop.InvariantViolation` (an AssertionError) listing every violation; do nothing if ok."""
        if self.violations:
            raise InvariantViolation(str(self), violations=list(self.violations))

    def __str__(self) -> str:
        run = ""
        if self.transcript is not None:
            run = f" in scenario {self.transcript.header.scenario!r} (seed {self.transcript.header.seed})"
        if self.ok:
            return f"simloop: all {len(self.checked)} invariants hold{run}: {', '.join(self.checked)}"
        broken = list(dict.fromkeys(v.invariant for v in self.violations))
        head = (
            f"simloop: {len(self.violations)} violation(s) of {len(broken)} invariant(s){run} "
            f"({', '.join(broken)}; {len(self.checked)} checked)"
        )
        return "\n".join([head, *(f"  {v}" for v in self.violations)])


Invariant = Callable[[Transcript], list[Violation]]


# -- a positional view of the transcript, shared by the invariants ----------------------------------------------


@dataclass
class _View:
    """Event positions and lookups the invariants need (built per call: invariants stay pure)."""

    t: Transcript
    size: int  # len(t.events) when built: a transcript only grows, so the same size is the same view
    model_requests: list[tuple[int, Request]] = field(default_factory=list)
    request_at: dict[int, Request] = field(default_factory=dict)  # request index -> request
    replies: list[tuple[int, Response]] = field(default_factory=list)  # model replies that arrived
    starts: list[tuple[int, ToolStart]] = field(default_factory=list)
    ends: dict[int, tuple[int, ToolEnd]] = field(default_factory=dict)  # exec -> (position, end)
    issued: dict[str, tuple[int, Response]] = field(default_factory=dict)  # tool_use id -> its reply
    outcome_pos: int | None = None
    _inputs: dict[int, str] = field(default_factory=dict)  # exec -> canonical input

    def step_at(self, pos: int) -> int | None:
        """The logical model call in progress at event position ``pos`` (the last one sent before it)."""
        i = bisect.bisect_right(self.model_requests, pos, key=lambda pr: pr[0])
        return self.model_requests[i - 1][1].call if i else None

    @property
    def outcome(self) -> OutcomeEvent | None:
        return self.t.outcome

    def before_outcome(self, pos: int) -> bool:
        return self.outcome_pos is None or pos < self.outcome_pos

    def input_of(self, s: ToolStart) -> str:
        """The execution's input in canonical JSON (memoised: the rerun checks compare executions pairwise)."""
        canon = self._inputs.get(s.exec)
        if canon is None:
            canon = self._inputs[s.exec] = _canon(s.input)
        return canon

    @functools.cached_property
    def result_sent(self) -> dict[str, int]:
        """tool_use id -> position of the first model request that carries a tool_result for it."""
        first: dict[str, int] = {}
        walked: list[Any] = []
        for pos, r in self.model_requests:
            conversation = r.conversation
            # the history the last request sent (the same objects, usually) holds no result not recorded yet
            n = len(walked) if conversation[: len(walked)] == walked else 0
            walked = conversation
            for m in conversation[n:]:
                content = m.get("content") if isinstance(m, dict) else None
                if isinstance(content, list):
                    for b in content:
                        if isinstance(b, dict) and b.get("type") == "tool_result":
                            first.setdefault(b.get("tool_use_id"), pos)  # type: ignore[arg-type]
        return first


def _view(t: Transcript) -> _View:
    """The view of ``t`` as it is now: built once and shared by the invariants checked one after another."""
    cached = _LAST_VIEW[0]
    if cached is not None and cached.t is t and cached.size == len(t.events):
        return cached
    v = _build_view(t)
    _LAST_VIEW[0] = v
    return v


_LAST_VIEW: list[_View | None] = [None]  # one entry: `check` runs the invariants over one transcript in turn


def _build_view(t: Transcript) -> _View:
    v = _View(t, size=len(t.events))
    for pos, e in enumerate(t.events):
        if isinstance(e, Request):
            v.request_at[e.index] = e
            if e.path == MESSAGES_PATH:
                v.model_requests.append((pos, e))
        elif isinstance(e, Response) and _is_reply(e):
            req = v.request_at.get(e.index)
            if req is None or req.path == MESSAGES_PATH:
                v.replies.append((pos, e))
                for block in e.tool_uses:
                    v.issued.setdefault(str(block.get("id")), (pos, e))
        elif isinstance(e, ToolStart):
            v.starts.append((pos, e))
        elif isinstance(e, ToolEnd):
            v.ends[e.exec] = (pos, e)
        elif isinstance(e, OutcomeEvent):
            v.outcome_pos = pos
    return v


def _is_reply(r: Response) -> bool:
    return r.kind not in ("error", "rejected") and r.stop_reason is not None


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _is_write(t: Transcript, s: ToolStart) -> bool:
    return t.header.tools.get(s.tool, s.kind) == "write"


# -- stops ------------------------------------------------------------------------------------------------------


def stops(t: Transcript) -> list[Violation]:
    """The loop returned on its own: no `Halt` (runaway budget) in the transcript."""
    halt = t.halt
    if halt is None:
        return []
    v = _view(t)
    step = v.model_requests[-1][1].call if v.model_requests else None
    ran_out = {
        "model_calls": f"the loop made {t.model_calls} model calls without stopping",
        "virtual_time": f"the loop ran for {halt.t:g} virtual seconds without stopping",
        "watchdog": "the loop did not return before the real-time watchdog fired",
    }.get(halt.budget, f"simloop halted the loop (budget {halt.budget!r})")
    fix = {
        "virtual_time": "a correct loop enforces a deadline and bounds its retries, backoff and tool timeouts",
        "watchdog": "a correct loop never blocks or spins without a bound: every wait has a timeout",
    }.get(halt.budget, "a correct loop caps its steps (max_steps) and stops on repeated identical tool calls")
    message = f"{ran_out}; {_runaway(v)}; {fix}"
    evidence = {"budget": halt.budget, "model_calls": t.model_calls, "t": halt.t, "detail": halt.detail}
    return [Violation("stops", message, step, evidence)]


def _runaway(v: _View) -> str:
    """What the loop kept doing before it was halted, in a phrase."""
    if not v.model_requests:
        return "it made no model call at all (it was blocked or busy elsewhere)"
    calls = Counter(
        (str(b.get("name")), _canon(b.get("input"))) for _, r in v.replies for b in r.tool_uses
    )
    if calls:
        (name, _), n = calls.most_common(1)[0]
        if n >= 3:
            return f"the model kept asking for {name} with the same input ({n} times)"
    responses = v.t.responses
    failed = 0
    for r in reversed(responses):
        if _is_reply(r):
            break
        failed += 1
    if failed >= 2:
        kinds = ", ".join(sorted({r.fault or r.kind for r in responses[-failed:]}))
        return f"the last {failed} model calls failed ({kinds}) and the loop kept retrying"
    if calls:
        return f"the model kept asking for tools ({sum(calls.values())} tool calls) and the loop kept running them"
    return "the loop kept calling the model"


# -- pairing ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Offence:
    kind: str  # missing_result | result_not_first | orphan_result | duplicate_result | duplicate_tool_use
    order: tuple[int, int]
    path: str
    tool_use_id: str
    tool: str | None
    what: str


_PAIRING_FIX = {
    "missing_result": "a correct loop answers every tool_use with a tool_result at the start of the very next "
    "user message, also when the tool failed (is_error: true) or was not run",
    "result_not_first": "a correct loop puts the tool_result blocks first in the user message, any text after them",
    "orphan_result": "a correct loop sends each tool_result right after the assistant message that asked for it "
    "and keeps that assistant message in the history",
    "duplicate_result": "a correct loop sends exactly one tool_result per tool_use",
    "duplicate_tool_use": "a correct loop appends each assistant reply to the history once, as received",
}


Block = tuple[tuple[int, int], dict[str, Any]]  # (message index, block index or -1 for string content), block


def _path(order: tuple[int, int]) -> str:
    i, j = order
    return f"messages[{i}].content" if j < 0 else f"messages[{i}].content[{j}]"


def _turns(conversation: list[Any], start: int = 0) -> list[tuple[str, list[Block]]]:
    """Messages (from ``start``) with consecutive same-role messages merged (as the API merges them); blocks
    keep their place (made a path by `_path` only for an offence: every request re-sends the whole history)."""
    turns: list[tuple[str, list[Block]]] = []
    for i in range(start, len(conversation)):
        msg = conversation[i]
        if not isinstance(msg, dict):
            continue
        role, content = str(msg.get("role")), msg.get("content")
        if isinstance(content, str):
            blocks: list[Block] = [((i, -1), {"type": "text", "text": content})]
        elif isinstance(content, list):
            blocks = [((i, j), b) for j, b in enumerate(content) if isinstance(b, dict)]
        else:
            blocks = []
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return turns


@dataclass(slots=True)
class _Walk:
    """The pairing walk's state after the closed turns of a conversation: ``found`` so far, the ids seen."""

    messages: list[Any]  # the conversation walked
    found: list[_Offence] = field(default_factory=list)
    uses_seen: dict[str, tuple[tuple[int, int], str]] = field(default_factory=dict)  # id -> (place, tool name)
    results_seen: dict[str, tuple[int, int]] = field(default_factory=dict)


def _pairing_offences(conversation: list[Any]) -> list[_Offence]:
    """Every tool_use/tool_result pairing problem of one conversation, in message order."""
    return _walk(conversation).found


def _walk(conversation: list[Any], resume: _Walk | None = None) -> _Walk:
    """Walk ``conversation`` for pairing offences, from where ``resume`` stopped if this conversation extends it.

    A loop resends its history with each request, so the next conversation is usually the last one plus
    an assistant message and a user message.  When the last one ended with a closed (non-assistant) turn
    and the next starts its new part with an assistant message, the turns of the history are unchanged and
    the walk resumes after them; otherwise it walks the whole conversation.  (A walk that ended with an
    assistant turn, whose prefill rule depends on its being last, is never resumed.)
    """
    start = 0
    walk = _Walk(conversation)
    if resume is not None and _extends(conversation, resume.messages):
        start = len(resume.messages)
        walk.found = resume.found[:]
        walk.uses_seen = dict(resume.uses_seen)
        walk.results_seen = dict(resume.results_seen)
    found, uses_seen, results_seen = walk.found, walk.uses_seen, walk.results_seen
    pending: dict[str, tuple[tuple[int, int], str]] = {}  # tool_uses of the previous assistant message

    def offence(kind: str, order: tuple[int, int], uid: str, tool: str | None, what: str) -> None:
        found.append(_Offence(kind, order, _path(order), uid, tool, what))

    turns = _turns(conversation, start)
    for k, (role, blocks) in enumerate(turns):
        if role == "assistant":
            pending = {}
            for order, b in blocks:
                if b.get("type") != "tool_use":
                    continue
                uid, name = str(b.get("id")), str(b.get("name"))
                if uid in uses_seen:
                    offence("duplicate_tool_use", order, uid, name,
                            f"the tool_use id {uid} appears twice (first at {_path(uses_seen[uid][0])})")
                    continue
                uses_seen[uid] = (order, name)
                pending[uid] = (order, name)
            if k == len(turns) - 1:  # a final assistant message is a prefill: fine unless it asks for tools
                for uid, (order, name) in pending.items():
                    offence("missing_result", order, uid, name,
                            f"the tool_use {uid} ({name}) ends the conversation with no tool_result after it")
            continue
        answered: set[str] = set()
        leading = True
        for order, b in blocks:
            if b.get("type") != "tool_result":
                leading = False
                continue
            uid = str(b.get("tool_use_id"))
            tool = uses_seen[uid][1] if uid in uses_seen else None
            if uid in results_seen:
                offence("duplicate_result", order, uid, tool,
                        f"a second tool_result for {uid} (the first is at {_path(results_seen[uid])})")
            elif uid not in pending:
                where = f"it was asked for at {_path(uses_seen[uid][0])}" if uid in uses_seen else "no tool_use has that id"
                offence("orphan_result", order, uid, tool,
                        f"a tool_result answers {uid}, which is not a tool_use of the previous assistant message ({where})")
            else:
                answered.add(uid)
                if not leading:
                    offence("result_not_first", order, uid, tool,
                            f"the tool_result for {uid} comes after other content in its message")
            results_seen.setdefault(uid, order)
        for uid, (order, name) in pending.items():
            if uid not in answered:
                offence("missing_result", order, uid, name,
                        f"the tool_use {uid} ({name}) has no tool_result at the start of the next message")
        pending = {}
    found.sort(key=lambda o: o.order)
    return walk


def _extends(conversation: list[Any], walked: list[Any]) -> bool:
    """``conversation`` is ``walked`` (ending with a closed turn) plus messages that start with an assistant one."""
    n = len(walked)
    if len(conversation) <= n or not n:
        return False
    last, following = walked[-1], conversation[n]
    return (
        type(last) is dict and last.get("role") != "assistant"
        and type(following) is dict and following.get("role") == "assistant"
        and conversation[:n] == walked  # the very same objects, as the simulator's parser shares them: quick
    )


def pairing(t: Transcript) -> list[Violation]:
    """Every tool_use is answered by exactly one tool_result at the start of the next message; no strays, no dups.

    The first new offence of each request is reported; an offence re-sent in
    later requests (the same broken history, every step) is reported once.
    """
    out: list[Violation] = []
    seen: set[tuple[str, str]] = set()
    walk: _Walk | None = None
    for r in t.requests:
        walk = _walk(r.conversation, walk)
        offences = walk.found
        new = [o for o in offences if (o.kind, o.tool_use_id) not in seen]
        seen.update((o.kind, o.tool_use_id) for o in offences)
        if not new:
            continue
        o = new[0]
        more = f" ({len(new) - 1} more pairing problem(s) in this request)" if len(new) > 1 else ""
        evidence: dict[str, Any] = {"request": r.index, "path": o.path, "kind": o.kind, "tool_use_id": o.tool_use_id}
        if o.tool:
            evidence["tool"] = o.tool
        out.append(Violation("pairing", f"{o.what}{more}; {_PAIRING_FIX[o.kind]}", r.call, evidence))
    return out


# -- request_valid ----------------------------------------------------------------------------------------------


def _api_path(path: Any) -> str | None:
    """``messages.4.content.0`` (the API's form) -> ``messages[4].content[0]``."""
    if not path:
        return None
    return re.sub(r"\.(\d+)", r"[\1]", str(path))


def request_valid(t: Transcript) -> list[Violation]:
    """No request is rejected by the API for a reason other than pairing (its own invariant) or size.

    The same rejection coming back for later requests is reported once, with the count.
    """
    requests = {r.index: r for r in t.requests}
    groups: dict[tuple[str, str, str | None], list[Response]] = {}
    for resp in t.responses:
        if resp.kind != "rejected":
            continue
        rej = resp.rejection or {}
        text = str(rej.get("message", ""))
        status = int(rej.get("status") or resp.status)
        if status == 413 or any(h in f"{text} {rej.get('type', '')}".lower() for h in _SIZE_HINTS):
            continue  # answered as the real API does; not a malformed request
        req = requests.get(resp.index)
        if req is not None and _pairing_offences(req.conversation):
            continue  # reported (once) by `pairing`
        groups.setdefault((str(rej.get("type")), text, _api_path(rej.get("path"))), []).append(resp)
    out: list[Violation] = []
    for (kind, text, path), resps in groups.items():
        resp = resps[0]
        req = requests.get(resp.index)
        status = int((resp.rejection or {}).get("status") or resp.status)
        again = f" (the same rejection came back {len(resps) - 1} more time(s))" if len(resps) > 1 else ""
        message = (
            f'the API rejected the request with {status} {kind}: "{text}"{again}; a correct loop builds requests '
            "the API accepts (fix the part the API names) and does not resend one the API rejected"
        )
        evidence = {"request": resp.index, "path": path, "status": status, "type": kind, "api_message": text}
        out.append(Violation("request_valid", message, req.call if req else resp.call, evidence))
    return out


# -- no_rerun ---------------------------------------------------------------------------------------------------


def no_rerun(t: Transcript) -> list[Violation]:
    """Each execution answers a tool_use not executed before; a committed write never runs again.

    A second execution that answers a *different* tool_use the model issued (two
    identical calls in one reply, or the model asking again) is the model's
    decision, not a rerun; the loop reruns when an execution answers a tool_use
    already executed, or none at all.
    """
    v = _view(t)
    out: list[Violation] = []
    by_tool_use: dict[str, ToolStart] = {}
    # the writes that committed, by tool and input: (position of the ToolEnd, the write), in execution order
    committed: dict[tuple[str, str], list[tuple[int, ToolStart]]] = {}
    written: set[str] = set()  # the tools among them (an input is made canonical only when it may matter)
    for pos, s in v.starts:
        same = committed.get((s.tool, v.input_of(s)), []) if s.tool in written else []
        found = _rerun_of_commit(v, pos, s, same) or _unrequested_or_repeated(v, pos, s, by_tool_use)
        if found is not None:
            out.append(found)
        if s.matched is not None:
            by_tool_use.setdefault(s.matched, s)
        end = v.ends.get(s.exec)
        if end is not None and end[1].committed and _is_write(t, s):
            committed.setdefault((s.tool, v.input_of(s)), []).append((end[0], s))
            written.add(s.tool)
    return out


def _rerun_of_commit(v: _View, pos: int, s: ToolStart, same: list[tuple[int, ToolStart]]) -> Violation | None:
    """A rerun of one of ``same``: the committed writes of the same tool with the same input."""
    for end_pos, prior in same:
        if end_pos > pos:
            continue
        if s.matched is not None and s.matched != prior.matched:
            answered = v.result_sent.get(s.matched)
            if answered is None or answered > pos:
                continue  # the model asked for it in its own tool_use: its call, not the loop's
            why = f" for tool_use {s.matched}, whose result the loop had already sent to the model"
        elif s.matched is not None:
            why = f" for the same tool_use {s.matched}"
        else:
            why = " without a tool_use asking for it"
        message = (
            f"{s.tool} ran again with the same input (exec {s.exec}) after exec {prior.exec} had committed{why}; "
            "a correct loop never re-executes a completed write: it reports the first result (or error) to the "
            "model and lets the model decide, with an idempotency key if it must retry"
        )
        evidence = {"exec": s.exec, "first_exec": prior.exec, "tool": s.tool, "tool_use_id": s.matched}
        return Violation("no_rerun", message, v.step_at(pos), evidence)
    return None


def _unrequested_or_repeated(v: _View, pos: int, s: ToolStart, by_tool_use: dict[str, ToolStart]) -> Violation | None:
    if s.matched is None:
        given = f" (the loop passed id {s.tool_use_id}, which matches none)" if s.tool_use_id else ""
        evidence: dict[str, Any] = {"exec": s.exec, "tool": s.tool, "tool_use_id": s.tool_use_id}
        same = next((p for _, p in v.starts if p.exec < s.exec and p.tool == s.tool and v.input_of(p) == v.input_of(s)),
                    None)
        if same is not None:
            given += f"; it repeats exec {same.exec} with the same input"
            evidence = {"exec": s.exec, "first_exec": same.exec, "tool": s.tool, "tool_use_id": s.tool_use_id}
        message = (
            f"{s.tool} was executed (exec {s.exec}) but no tool_use asked for it{given}; a correct loop only runs "
            "tools the model asked for, once per tool_use block"
        )
        return Violation("no_rerun", message, v.step_at(pos), evidence)
    if s.matched in by_tool_use:
        prior = by_tool_use[s.matched]
        message = (
            f"{s.tool} ran twice for tool_use {s.matched} (exec {prior.exec} and exec {s.exec}); a correct loop runs "
            "each tool_use once and reports a failure as an is_error tool_result instead of retrying"
        )
        evidence = {"exec": s.exec, "first_exec": prior.exec, "tool": s.tool, "tool_use_id": s.matched}
        return Violation("no_rerun", message, v.step_at(pos), evidence)
    return None


# -- truncation -------------------------------------------------------------------------------------------------


def truncation(t: Transcript) -> list[Violation]:
    """No tool from a max_tokens reply runs, and a max_tokens reply is not reported as final."""
    v = _view(t)
    out: list[Violation] = []
    for _, s in v.starts:
        if s.matched in v.issued and v.issued[s.matched][1].stop_reason == "max_tokens":
            reply = v.issued[s.matched][1]
            message = (
                f"{s.tool} was executed (exec {s.exec}) from a reply cut off at max_tokens; its input may be "
                "partial; a correct loop never runs tool calls from a max_tokens reply: it retries the turn with a "
                "larger max_tokens or stops with reason 'truncated'"
            )
            evidence = {"request": reply.index, "exec": s.exec, "tool": s.tool, "tool_use_id": s.matched}
            out.append(Violation("truncation", message, reply.call, evidence))
    last = _last_reply(v)
    outcome = v.outcome
    if outcome is not None and outcome.reason == "final" and last is not None and last.stop_reason == "max_tokens":
        message = (
            "the loop reported 'final' but the last reply was cut off at max_tokens; a correct loop treats "
            "max_tokens as unfinished: it continues or retries with more room, or stops with reason 'truncated'"
        )
        evidence = {"request": last.index, "reason": "final", "last_stop_reason": "max_tokens"}
        out.append(Violation("truncation", message, last.call, evidence))
    return out


def _last_reply(v: _View) -> Response | None:
    replies = [r for pos, r in v.replies if v.before_outcome(pos)]
    return replies[-1] if replies else None


# -- refusal ----------------------------------------------------------------------------------------------------


def _signature(r: Request) -> str:
    body = r.body if isinstance(r.body, dict) else {}
    return _canon({"conversation": r.conversation, "body": {k: x for k, x in body.items() if k not in _VOLATILE_BODY}})


def refusal(t: Transcript) -> list[Violation]:
    """After a refusal, the loop does not send the same request again (as a new model call)."""
    v = _view(t)
    out: list[Violation] = []
    reported: set[str] = set()
    for pos, reply in v.replies:
        req = v.request_at.get(reply.index)
        if reply.stop_reason != "refusal" or req is None:
            continue
        sig = _signature(req)
        if sig in reported:
            continue
        again = [r for p, r in v.model_requests if p > pos and r.call > req.call and r.attempt == 0
                 and _signature(r) == sig]
        if not again:
            continue
        reported.add(sig)
        message = (
            f"the model refused at step {req.call} and the loop sent the same request again "
            f"({len(again)} time(s)); a correct loop stops on a refusal and reports reason 'refusal' "
            "(or changes the conversation), it does not resend the same request"
        )
        evidence = {"request": again[0].index, "refused_request": req.index, "resends": len(again)}
        out.append(Violation("refusal", message, again[0].call, evidence))
    return out


# -- honest_outcome ---------------------------------------------------------------------------------------------


def honest_outcome(t: Transcript) -> list[Violation]:
    """The declared reason is not contradicted by the transcript (only clear lies are flagged)."""
    v = _view(t)
    outcome = v.outcome
    if outcome is None or outcome.exception is not None:
        return []  # an escaped exception is not a declared reason
    last = _last_reply(v)
    replies = [r for pos, r in v.replies if v.before_outcome(pos)]
    step = last.call if last else (v.model_requests[-1][1].call if v.model_requests else None)
    evidence = {
        "reason": outcome.reason,
        "last_stop_reason": last.stop_reason if last else None,
        "request": last.index if last else None,
    }
    lie: str | None = None
    if outcome.reason not in REASONS:
        lie = f"the loop declared reason {outcome.reason!r}, which is not one of {', '.join(REASONS)}"
    elif outcome.reason == "final" and (last is None or last.stop_reason not in _FINAL_STOPS):
        lie = "the loop reported 'final' but " + {
            None: "the model never replied",
            "pause_turn": "the last reply was pause_turn, which is continued (send it back), not final",
            "max_tokens": "the last reply was cut off at max_tokens",
            "tool_use": "the last reply asked for tools and the loop never sent their results back",
            "refusal": "the last reply was a refusal (reason 'refusal')",
        }.get(last.stop_reason if last else None, f"the last reply stopped with {last.stop_reason if last else None}")
    elif outcome.reason == "refusal" and not any(r.stop_reason == "refusal" for r in replies):
        lie = "the loop reported 'refusal' but no reply was a refusal"
    elif outcome.reason == "truncated" and not any(r.stop_reason == "max_tokens" for r in replies):
        lie = "the loop reported 'truncated' but no reply was cut off at max_tokens"
    if lie is None:
        return []
    fix = "a correct loop reports why it actually stopped: 'final' only after end_turn or stop_sequence"
    return [Violation("honest_outcome", f"{lie}; {fix}", step, evidence)]


# -- limits -----------------------------------------------------------------------------------------------------


def limits(t: Transcript) -> list[Violation]:
    """The loop honours the limits it declared: max_steps, deadline_s, max_total_tokens (each only if declared)."""
    v = _view(t)
    declared = t.header.limits
    max_steps, deadline, budget = declared.get("max_steps"), declared.get("deadline_s"), declared.get("max_total_tokens")
    out: list[Violation] = []
    done: set[str] = set()
    calls_seen: set[int] = set()
    used = 0
    reply_positions = {pos for pos, _ in v.replies}
    for pos, e in enumerate(t.events):
        if isinstance(e, Response) and pos in reply_positions:
            used += e.input_tokens + e.output_tokens
        if not isinstance(e, Request) or e.path != MESSAGES_PATH or e.call in calls_seen:
            continue
        calls_seen.add(e.call)  # the first attempt of a logical call; SDK retries are the same call
        if max_steps is not None and e.call > max_steps and "max_steps" not in done:
            done.add("max_steps")
            message = (
                f"the loop declared max_steps={max_steps} but made model call {e.call} ({t.model_calls} in all); "
                "a correct loop checks its step count before each call and stops with reason 'max_steps'"
            )
            evidence = {"request": e.index, "max_steps": max_steps, "model_calls": t.model_calls}
            out.append(Violation("limits", message, e.call, evidence))
        if deadline is not None and e.t >= deadline and "deadline_s" not in done:
            done.add("deadline_s")
            message = (
                f"model call {e.call} started at t={e.t:g}s, at or after the declared deadline_s={deadline:g}; a "
                "correct loop checks the clock before each call and stops with reason 'deadline'"
            )
            out.append(Violation("limits", message, e.call, {"request": e.index, "deadline_s": deadline, "t": e.t}))
        if budget is not None and used >= budget and "max_total_tokens" not in done:
            done.add("max_total_tokens")
            message = (
                f"model call {e.call} started after {used} tokens were used, reaching the declared "
                f"max_total_tokens={budget}; a correct loop sums usage.input_tokens + usage.output_tokens after "
                "each reply and stops with reason 'token_budget' once the budget is reached"
            )
            evidence = {"request": e.index, "max_total_tokens": budget, "used": used}
            out.append(Violation("limits", message, e.call, evidence))
    return out


# -- tool_errors ------------------------------------------------------------------------------------------------


_EXC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::\s*(.*)|\((.*)\))?\s*$", re.DOTALL)


def _same_exception(error: str | None, escaped: str | None) -> bool:
    """Does the escaped exception's text name the tool's exception (type and message)?"""
    if not error or not escaped or not error.strip():
        return False
    if error.strip() in escaped:
        return True
    lines = [ln for ln in escaped.strip().splitlines() if ln.strip()]  # a traceback ends with the exception
    a, b = _EXC.match(error.strip()), _EXC.match(lines[-1]) if lines else None
    return a is not None and b is not None and _exc_parts(a) == _exc_parts(b)


def _exc_parts(m: re.Match[str]) -> tuple[str, str]:
    """(short type name, message) from ``Type: message`` or ``Type('message')``."""
    return m.group(1).rsplit(".", 1)[-1], (m.group(2) or m.group(3) or "").strip().strip("'\"")


def tool_errors(t: Transcript) -> list[Violation]:
    """A tool's exception becomes an is_error tool_result; it does not escape the loop.

    After a `Halt` the exception that ended the run is simloop's own unwinding, not a tool's.
    """
    v = _view(t)
    out: list[Violation] = []
    outcome = v.outcome if t.halt is None else None
    raised = [(v.ends[s.exec], s) for _, s in v.starts if s.exec in v.ends and v.ends[s.exec][1].status == "raised"]
    escaped = next(
        (s.exec for (_, end), s in reversed(raised) if outcome and _same_exception(end.error, outcome.exception)), None
    )
    for (pos, end), s in raised:
        uid = s.matched or s.tool_use_id
        ev = {"exec": s.exec, "tool": s.tool, "tool_use_id": uid, "error": end.error, "kind": "escaped"}
        if s.exec == escaped:
            message = (
                f"{s.tool} raised ({end.error}) and the exception escaped the loop; a correct loop catches a tool's "
                "exception and sends it back as a tool_result with is_error: true"
            )
            out.append(Violation("tool_errors", message, v.step_at(pos), ev))
            continue
        later = [r for p, r in v.model_requests if p > pos]
        if uid is None or not later:
            continue
        results = [
            b for r in later for m in r.conversation if isinstance(m, dict) and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == uid
        ]
        if any(b.get("is_error") is True for b in results):
            continue
        how = "was reported as a success (no is_error)" if results else "was never reported to the model"
        ev["kind"] = "not_is_error" if results else "unreported"
        message = (
            f"{s.tool} raised ({end.error}) and the error {how}; a correct loop makes the error an observation: "
            "a tool_result with is_error: true"
        )
        out.append(Violation("tool_errors", message, v.step_at(pos), ev))
    return out


# -- no_work_after_return ---------------------------------------------------------------------------------------


def no_work_after_return(t: Transcript) -> list[Violation]:
    """When the loop returns, nothing it started is still running and nothing new starts.

    Not checked after a `Halt`: simloop itself cut the work short (and `stops` reports why).
    """
    v = _view(t)
    at = v.outcome_pos
    if at is None or t.halt is not None:
        return []
    out: list[Violation] = []
    fix = "a correct loop waits for (or cancels and awaits) every tool and model call it started before it returns"
    for pos, s in v.starts:
        end = v.ends.get(s.exec)
        if end is not None and end[0] < at:
            continue
        state = "started after the loop returned" if pos > at else (
            "was still running when the loop returned" + ("" if end else " (it never ended)")
        )
        message = f"{s.tool} (exec {s.exec}) {state}; {fix}"
        out.append(Violation("no_work_after_return", message, v.step_at(pos), {"exec": s.exec, "tool": s.tool}))
    reported: set[int] = set()
    for e in t.events[at + 1:]:
        if isinstance(e, (Request, Response)) and e.index not in reported:
            reported.add(e.index)
            req = v.request_at.get(e.index)
            state = "started after the loop returned" if isinstance(e, Request) else "was still running when it returned"
            message = f"model call {req.call if req else e.call} (request {e.index}) {state}; {fix}"
            out.append(Violation("no_work_after_return", message, req.call if req else e.call, {"request": e.index}))
    return out


# -- the catalogue and check() ----------------------------------------------------------------------------------

CATALOGUE: dict[str, Invariant] = {
    "stops": stops,
    "pairing": pairing,
    "request_valid": request_valid,
    "no_rerun": no_rerun,
    "truncation": truncation,
    "refusal": refusal,
    "honest_outcome": honest_outcome,
    "limits": limits,
    "tool_errors": tool_errors,
    "no_work_after_return": no_work_after_return,
}
if tuple(CATALOGUE) != INVARIANT_IDS:  # pragma: no cover - a development-time consistency check
    raise SimloopInternalError("simloop.invariants.CATALOGUE is out of step with scenario.INVARIANT_IDS")


def _resolve(invariants: Iterable[str] | None) -> tuple[str, ...]:
    known = ", ".join(CATALOGUE)
    if invariants is None:
        return tuple(CATALOGUE)
    if isinstance(invariants, str):
        raise UsageError(f"invariants= takes a list of ids, not the string {invariants!r}; try [{invariants!r}]")
    wanted = list(invariants)
    for name in wanted:
        if name not in CATALOGUE:
            close = difflib.get_close_matches(str(name), CATALOGUE, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(
                f"unknown invariant id {name!r}{hint}; the known ids are: {known}. "
                "Pass a subset of them as invariants=, or None to check all."
            )
    return tuple(i for i in CATALOGUE if i in wanted)


def check(transcript: Transcript, *, invariants: Iterable[str] | None = None) -> Report:
    """Check a transcript against the catalogue (all invariants, or the ids in ``invariants``).

    Returns a `Report`; raises `simloop.UsageError` for an unknown invariant id.
    A fault two checked invariants both see is reported once (see `_fold_overlaps`).

    Example: ``check(sim.transcript, invariants=["pairing"]).raise_for_violations()``
    """
    if not isinstance(transcript, Transcript):
        raise UsageError(
            f"check() takes a simloop Transcript, got {type(transcript).__name__}; "
            "pass sim.transcript or Transcript.read(path)"
        )
    ids = _resolve(invariants)
    try:
        violations = _fold_overlaps([v for i in ids for v in CATALOGUE[i](transcript)])
    finally:
        _LAST_VIEW[0] = None  # the view holds the transcript: keep it no longer than the caller does
    return Report(violations, ids, transcript)


def _fold_overlaps(violations: list[Violation]) -> list[Violation]:
    """Report one fault once when two checked invariants both see it (each still sees it when checked alone).

    "final after a max_tokens reply" stays under ``truncation``; a failed tool
    whose tool_result is missing altogether stays under ``pairing``.
    """
    cut_final = any(v.invariant == "truncation" and v.evidence.get("last_stop_reason") for v in violations)
    missing = {
        v.evidence.get("tool_use_id")
        for v in violations
        if v.invariant == "pairing" and v.evidence.get("kind") == "missing_result"
    }
    return [
        v for v in violations
        if not (v.invariant == "honest_outcome" and cut_final and v.evidence.get("last_stop_reason") == "max_tokens")
        and not (v.invariant == "tool_errors" and v.evidence.get("kind") == "unreported"
                 and v.evidence.get("tool_use_id") in missing)
    ]
