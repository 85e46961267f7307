"""The shared ground of the invariants: `Violation`, and the positional view of a transcript.

Private: the family modules read a transcript through `_View` (event positions
and lookups, built once per transcript and shared by the invariants that `check`
runs one after another) and report through `Violation` (public as
``simloop.invariants.Violation``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simloop.transcript import (
    ApprovalEvent,
    Event,
    Halt,
    OutcomeEvent,
    Request,
    Response,
    Restart,
    ToolEnd,
    ToolStart,
    Transcript,
    TurnStart,
)

__all__ = [
    "MESSAGES_PATH", "MODEL_PATHS", "REASONS", "RESPONSES_PATH", "Invariant", "Split", "TurnSlice", "Violation", "per_turn", "result_text",
    "too_large", "turn_slices",
]

#: The outcome reasons a loop may declare (docs/design.md, Outcome reasons).
REASONS = (
    "final", "max_steps", "deadline", "aborted", "error_budget", "token_budget", "cost_budget", "refusal",
    "truncated",
    "repetition", "error",
)
MESSAGES_PATH = "/v1/messages"
#: The paths of model calls: the Messages API, and the OpenAI wire's Chat Completions and Responses APIs (recorded in
#: the Messages shape, a Responses request with its ``previous_response_id`` chain: docs/design.md, The OpenAI wire).
RESPONSES_PATH = "/v1/responses"
MODEL_PATHS = frozenset({MESSAGES_PATH, "/v1/chat/completions", RESPONSES_PATH})
_FINAL_STOPS = ("end_turn", "stop_sequence")
_SIZE_HINTS = ("prompt is too long", "context window", "request_too_large", "too large", "maximum context length")


def too_large(resp: Response) -> bool:
    """Whether the API refused this request for its size: the prompt over the context window, or a 413."""
    rej = resp.rejection or {}
    status = int(rej.get("status") or resp.status)
    return status == 413 or any(h in f"{rej.get('message', '')} {rej.get('type', '')}".lower() for h in _SIZE_HINTS)


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
    use_block: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool_use id -> its block in that reply
    outcome_pos: int | None = None
    restarts: list[int] = field(default_factory=list)  # positions of the restarts (a crash, then a new life)
    binding: dict[int, str | None] = field(default_factory=dict)  # exec -> the tool_use it answers (see _bind)
    asks: list[tuple[int, ApprovalEvent]] = field(default_factory=list)  # the requests for approval
    asked_about: dict[int, str | None] = field(default_factory=dict)  # request position -> its tool_use (_bind_asks)
    twins: dict[str, list[str]] = field(default_factory=dict)  # tool_use id -> the identical calls of its reply
    _inputs: dict[int, str] = field(default_factory=dict)  # exec -> canonical input
    _probes: dict[int, str] = field(default_factory=dict)  # exec -> its result's first characters (`probe`)

    def bound(self, s: ToolStart) -> str | None:
        """The tool_use id execution ``s`` answers, as every invariant reads it (see `_bind`)."""
        return self.binding.get(s.exec, s.matched)

    def step_at(self, pos: int) -> int | None:
        """The logical model call in progress at event position ``pos`` (the last one sent before it)."""
        i = bisect.bisect_right(self.model_requests, pos, key=lambda pr: pr[0])
        return self.model_requests[i - 1][1].call if i else None

    @property
    def outcome(self) -> OutcomeEvent | None:
        return self.t.outcome

    def before_outcome(self, pos: int) -> bool:
        return self.outcome_pos is None or pos < self.outcome_pos

    def probe(self, exec_: int) -> str:
        """The first characters of execution ``exec_``'s result, stripped ("" without one): what a tool_result carrying
        its output holds (memoised: `results_real` looks for each execution's in several results)."""
        probe = self._probes.get(exec_)
        if probe is None:
            end = self.ends.get(exec_)
            probe = self._probes[exec_] = ((end[1].result or "") if end is not None else "")[:200].strip()
        return probe

    def input_of(self, s: ToolStart) -> str:
        """The execution's input in canonical JSON (memoised: the rerun checks compare executions pairwise)."""
        canon = self._inputs.get(s.exec)
        if canon is None:
            canon = self._inputs[s.exec] = _canon(s.input)
        return canon

    @functools.cached_property
    def starts_of(self) -> dict[str, list[tuple[int, ToolStart]]]:
        """tool name -> its executions (position, start), in order: `starts` by tool, for the checks that look
        for an earlier execution of the same tool."""
        out: dict[str, list[tuple[int, ToolStart]]] = {}
        for pos, s in self.starts:
            out.setdefault(s.tool, []).append((pos, s))
        return out

    @property
    def result_sent(self) -> dict[str, int]:
        """tool_use id -> position of the first model request that carries a tool_result for it."""
        return self._results[0]

    @property
    def forks(self) -> int:
        """How many model requests do not extend the messages of the request before them (0: one history throughout,
        the common case; more: a reset history, a retry without the reply, or several conversations at once)."""
        return self._results[3]

    @property
    def split_results(self) -> list[Split]:
        """The assistant turns whose tool_results went back in more than one user message, each once."""
        return self._results[1]

    @property
    def result_block(self) -> dict[str, dict[str, Any]]:
        """tool_use id -> the tool_result block that first answered it (as that request sent it)."""
        return self._results[2]

    @functools.cached_property
    def _results(self) -> tuple[dict[str, int], list[Split], dict[str, dict[str, Any]], int]:
        """One walk over the results the requests carry: where each first went, and the turns split apart.

        A loop resends its history with each request, so only the messages a request adds to the previous
        one are walked; what the last assistant turn has gathered so far is carried over (a split shows
        when a later request adds a second user message with that turn's results).
        """
        first: dict[str, int] = {}
        blocks: dict[str, dict[str, Any]] = {}
        splits: list[Split] = []
        split_ids: set[str] = set()
        walked: list[Any] = []
        turn: tuple[int, list[str]] | None = None  # the last assistant message: index, tool_use ids
        carrying: list[int] = []  # the user messages after it that carry its results
        forks = 0
        for pos, r in self.model_requests:
            conversation = r.conversation
            # the history the last request sent (the same objects, usually) holds no result not recorded yet
            n = len(walked) if conversation[: len(walked)] == walked else 0
            if n == 0:
                turn, carrying = None, []
                forks += bool(walked)
            walked = conversation
            for i in range(n, len(conversation)):
                m = conversation[i]
                content = m.get("content") if isinstance(m, dict) else None
                if not isinstance(content, list):
                    if isinstance(m, dict) and m.get("role") == "assistant":
                        turn, carrying = None, []
                    continue
                if m.get("role") == "assistant":
                    uses = [str(b.get("id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
                    turn, carrying = ((i, uses) if uses else None), []
                    continue
                answers = False
                for b in content:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        uid = b.get("tool_use_id")
                        if not isinstance(uid, str):  # a rejected request's id may be any JSON: it answers no call
                            continue
                        first.setdefault(uid, pos)
                        blocks.setdefault(uid, b)
                        answers = answers or (turn is not None and uid in turn[1])
                if answers and turn is not None:
                    carrying.append(i)
                    if len(carrying) > 1 and turn[1][0] not in split_ids:
                        split_ids.add(turn[1][0])
                        splits.append(Split(r, turn[0], turn[1], carrying))  # the list grows with later messages
        return first, splits, blocks, forks


@dataclass(frozen=True, slots=True)
class Split:
    """An assistant turn (``messages[index]``, its tool_use ``uses``) whose results went back in several user
    messages (``carrying``, their indices), first seen in ``request``."""

    request: Request
    index: int
    uses: list[str]
    carrying: list[int]


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
    kinds = _KINDS
    e: Any  # (filed by its class's branch number, which mypy does not narrow on)
    for pos, e in enumerate(t.events):
        kind = kinds.get(type(e))  # (one lookup, not a chain of isinstance tests: the class picks the branch)
        if kind is None:
            kind = _kind_of(e)
        if kind == 0:
            v.request_at[e.index] = e
            if e.path in MODEL_PATHS:
                v.model_requests.append((pos, e))
        elif kind == 1:
            if _is_reply(e):
                _add_reply(v, pos, e)
        elif kind == 2:
            v.starts.append((pos, e))
        elif kind == 3:
            v.ends[e.exec] = (pos, e)
        elif kind == 4:
            v.outcome_pos = pos
        elif kind == 5:
            v.restarts.append(pos)
        elif kind == 6:
            v.asks.append((pos, e))
            v.asked_about[pos] = e.matched
    _bind(v)
    _bind_asks(v)
    return v


#: The event classes `_build_view` files, in the order of its branches (a subclass is filed as its first base).
_FILED: tuple[type, ...] = (Request, Response, ToolStart, ToolEnd, OutcomeEvent, Restart, ApprovalEvent)
_KINDS: dict[type, int] = {cls: i for i, cls in enumerate(_FILED)}


def _kind_of(e: Any) -> int:
    """The branch of `_build_view` for an event whose class is not in `_KINDS` (a subclass; -1: none)."""
    return next((i for i, cls in enumerate(_FILED) if isinstance(e, cls)), -1)


def _add_reply(v: _View, pos: int, e: Response) -> None:
    """File a model reply the loop received: its tool_uses as issued (the first reply of an id), its twins."""
    req = v.request_at.get(e.index)
    if req is None or req.path in MODEL_PATHS:
        v.replies.append((pos, e))
        uses = e.tool_uses
        for block in uses:
            uid = str(block.get("id"))
            if uid not in v.issued:
                v.issued[uid] = (pos, e)
                v.use_block[uid] = block
        if len(uses) > 1:
            _find_twins(v, uses)


# -- how an execution is bound to its tool_use (docs/design.md, How an execution is bound to its tool_use) -------

_MAX_SET = 6  # identical calls rebound as a set at most (6! orderings): beyond it the match made at run time stands


def _bind(v: _View) -> None:
    """Bind each execution to the tool_use it answers, by evidence, and put the binding in ``v.starts``.

    An id the loop passed is exact.  Without one, the `ToolBox` matched the execution when it began (a live
    reply's calls before a dead one's, the latest reply first); executions of the same tool with the same input
    are then bound as a set to the identical tool_uses they matched and to the identical calls of the same
    replies that no execution answered (identical calls, run concurrently or in any order, or only some of them
    run) by where each output went: the binding under which the most outputs (an error's text, a result's first
    characters) and error flags appear in the tool_result answering their tool_use wins, and the match made at
    run time breaks a tie.  An execution is never bound to a tool_use issued after it began, nor to one whose
    tool_result was sent before it began.  A set too large to try every binding of is bound reply by reply.
    """
    groups: dict[tuple[str, str], list[tuple[int, ToolStart]]] = {}
    for pos, s in v.starts:
        if s.tool_use_id is None and s.matched is not None:
            groups.setdefault((s.tool, v.input_of(s)), []).append((pos, s))
    answered = {s.matched for _, s in v.starts if s.matched is not None}
    for group in groups.values():
        if len({s.matched for _, s in group}) != len(group):
            continue  # a rerun of one tool_use (no_rerun's): the match stands
        def pool_of(members: list[tuple[int, Any]]) -> list[str | None]:
            ids = [e.matched for _, e in members]
            return [*ids, *(u for u in _identical(v, ids) if u not in answered)]

        for members in _sets(v, group, pool_of):
            pool = pool_of(members)
            best = _assign(v, members, pool, lambda pos, s, uid: _evidence(v, s, uid),
                           lambda pos, uid: v.result_sent.get(uid, pos) < pos)
            for (_, s), uid in zip(members, best or (), strict=False):
                if uid != s.matched:
                    v.binding[s.exec] = uid
    if v.binding:
        v.starts = [(pos, dataclasses.replace(s, matched=v.binding[s.exec]) if s.exec in v.binding else s)
                    for pos, s in v.starts]


def _sets(
    v: _View, group: list[tuple[int, Any]], pool_of: Callable[[list[tuple[int, Any]]], list[str | None]],
) -> list[list[tuple[int, Any]]]:
    """``group`` as the sets to bind: one, or reply by reply (the reply of each one's match) when the tool_uses it
    may answer (``pool_of``) are too many to try every binding of."""
    if len(group) <= _MAX_SET and len(pool_of(group)) <= _MAX_SET:
        return [group]
    if not any(str(e.matched) in v.twins for _, e in group):
        return []  # no reply holds two of them: each is its reply's only such call, its match stands
    by_reply: dict[int, list[tuple[int, Any]]] = {}
    for pos, e in group:
        by_reply.setdefault(v.issued.get(str(e.matched), (-1,))[0], []).append((pos, e))
    return list(by_reply.values())


def _assign(
    v: _View, members: list[tuple[int, Any]], pool: list[str | None], score: Callable[[int, Any, str], int],
    refused: Callable[[int, str], bool],
) -> tuple[str | None, ...] | None:
    """The binding of ``members`` (position, event; each with ``matched``) to distinct tool_uses of ``pool`` that
    scores best (`score`), the one keeping most matches made at run time on a tie; never to a tool_use issued
    after the member, nor one ``refused`` for it.  None when there is no other choice, or too many to try."""
    if len(pool) < 2 or len(pool) > _MAX_SET:
        return None  # one member and no other call it may answer, or too many: the match made at run time stands
    best: tuple[tuple[int, int], tuple[str | None, ...]] | None = None
    for order in itertools.permutations(pool, len(members)):
        pairs = list(zip(members, order, strict=True))
        if any(v.issued.get(str(uid), (-1,))[0] > pos or refused(pos, str(uid)) for (pos, _), uid in pairs):
            continue
        points = sum(score(pos, e, str(uid)) for (pos, e), uid in pairs)
        kept = sum(uid == e.matched for (_, e), uid in pairs)
        if best is None or (points, kept) > best[0]:
            best = ((points, kept), order)
    return None if best is None else best[1]


def _find_twins(v: _View, uses: list[dict[str, Any]]) -> None:
    """Note the identical calls (the same name and input) among one reply's tool_uses, in ``v.twins``.

    Only calls of one name are compared (a name's calls found in one pass), in the order every pair was compared
    before, so each id's twins are listed in the same order.
    """
    names = [u.get("name") for u in uses]
    try:
        of_name: dict[Any, list[int]] = {}
        for k, name in enumerate(names):
            of_name.setdefault(name, []).append(k)
        if len(of_name) == len(uses):
            return  # no two calls of one name
        groups = [of_name[name] for name in names]
    except TypeError:  # a name that is no key (not simloop's own reply): every call against every other
        groups = [list(range(len(uses)))] * len(uses)
    inputs = [u.get("input") for u in uses]
    canon: dict[int, str] = {}  # index in uses -> its input's canonical form, made once, when first needed

    def canon_of(k: int) -> str:
        made = canon.get(k)
        if made is None:
            made = canon[k] = _canon(inputs[k])
        return made

    for i, group in enumerate(groups):
        for j in group:
            # (== first: it is cheap, and calls that differ, the common case, never reach the canonical form)
            if j > i and names[i] == names[j] and inputs[i] == inputs[j] and canon_of(i) == canon_of(j):
                ida, idb = str(uses[i].get("id")), str(uses[j].get("id"))
                v.twins.setdefault(ida, []).append(idb)
                v.twins.setdefault(idb, []).append(ida)


def _identical(v: _View, ids: list[str | None]) -> list[str]:
    """The other tool_uses identical to ``ids`` (the same name and input) in the replies that issued them, in order."""
    seen = {str(uid) for uid in ids}
    out: list[str] = []
    for uid in ids:
        for twin in v.twins.get(str(uid), ()):
            if twin not in seen:
                seen.add(twin)
                out.append(twin)
    return out


def _bind_asks(v: _View) -> None:
    """Bind each request for approval made without an id to the tool_use it asked about, by evidence.

    The `Gate` bound it when it was asked (the latest reply's first call of that tool and input not asked about
    yet); a loop that asks about identical calls in another order (last first, or as a framework hands them
    over) asked about the same calls all the same.  The requests about one tool and input are rebound as a set,
    over the identical calls of the replies they matched: a yes to a call that an execution answered after it,
    a no (or no answer) to a call that did not run and whose tool_result is an error; the match made when it
    was asked breaks a tie.  A request is never bound to a tool_use issued after it.
    """
    ran: dict[str, int] = {s.matched: pos for pos, s in reversed(v.starts) if s.matched is not None}  # -> first run
    groups: dict[tuple[str, str], list[tuple[int, ApprovalEvent]]] = {}
    for pos, a in v.asks:
        if a.tool_use_id is None and a.matched is not None:
            groups.setdefault((a.tool, _canon(a.input)), []).append((pos, a))
    for group in groups.values():
        if len({a.matched for _, a in group}) != len(group):
            continue  # the same call asked about again: the match stands
        def pool_of(members: list[tuple[int, Any]]) -> list[str | None]:
            ids = [e.matched for _, e in members]
            return [*ids, *_identical(v, ids)]

        for members in _sets(v, group, pool_of):
            best = _assign(v, members, pool_of(members),
                           lambda pos, a, uid: _ask_evidence(v, pos, a, uid, ran), lambda pos, uid: False)
            for (pos, _), uid in zip(members, best or (), strict=False):
                v.asked_about[pos] = uid


def _ask_evidence(v: _View, pos: int, a: ApprovalEvent, uid: str, ran: dict[str, int]) -> int:
    """How well answer ``a`` (at ``pos``) fits tool_use ``uid``: 2 for a yes to a call run after it; for a no (or
    no answer), 1 for a call that never ran and 1 more when its tool_result is an error."""
    run = ran.get(uid)
    if a.approved:
        return 2 if run is not None and run > pos else 0
    if run is not None:
        return 0
    block = v.result_block.get(uid)
    return 1 + int(block is not None and block.get("is_error") is True)


def _evidence(v: _View, s: ToolStart, uid: str) -> int:
    """How well the tool_result answering ``uid`` carries execution ``s``'s output: 2 for its text (3 for its text
    alone: "sent" is in "Denied; not sent." too), 1 for its error flag (an is_error result for a tool that raised, a
    plain one for a tool that answered; the OpenAI wires have no flag, so the text decides there)."""
    end = v.ends.get(s.exec)
    block = v.result_block.get(uid)
    if end is None or block is None:
        return 0
    failed = end[1].status == "raised"
    score = int((block.get("is_error") is True) == failed)
    payload = (end[1].error or "").split(": ", 1)[-1] if failed else (end[1].result or "")
    probe = payload[:200].strip()
    text = result_text(block)
    if probe and probe in text:
        score += 2 + (text.strip() == payload.strip())
    return score


def result_text(block: dict[str, Any]) -> str:
    """The text a tool_result block carries (its string content, or its text blocks joined)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _is_reply(r: Response) -> bool:
    """A reply the loop received (not an error, a rejection, or one the process died before reading)."""
    return r.kind not in ("error", "rejected") and r.stop_reason is not None and r.fault != "crash"


#: One encoder for `_canon`, not one a call (``json.dumps`` with arguments builds a `JSONEncoder` each time); the
#: same settings, so the same text.
_CANON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)


def _canon(value: Any) -> str:
    """``value`` as canonical JSON (keys sorted, no spaces; what is not JSON as its repr): equal inputs compare equal."""
    return _CANON.encode(value)


def _is_write(t: Transcript, s: ToolStart) -> bool:
    return t.header.tools.get(s.tool, s.kind) == "write"



# -- user turns -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnSlice:
    """One user turn of a conversation as a transcript of its own: its events with model calls numbered from 1
    and times from the turn's start, and the outcome the drive gave for it (``calls_before`` and ``t_before``
    map them back)."""

    turn: int
    calls_before: int
    t_before: float
    transcript: Transcript


def turn_slices(t: Transcript) -> list[TurnSlice]:
    """The transcript cut at each `TurnStart`: the per-turn view of `honest_outcome` and `limits`.

    A run with at most one turn is itself (the same object: no copy).  The events before the first turn
    mark belong to the first turn; a turn's outcome is the `OutcomeEvent` recorded for it, and an outcome
    with no turn (the drive returned only the last) or an escaped exception belongs to the last turn.
    """
    marks = [pos for pos, e in enumerate(t.events) if isinstance(e, TurnStart)]
    if len(marks) <= 1:
        return [TurnSlice(0, 0, 0.0, t)]
    outcomes = [(pos, e) for pos, e in enumerate(t.events) if isinstance(e, OutcomeEvent)]
    end = outcomes[0][0] if outcomes else len(t.events)
    by_turn = {e.turn: e for _, e in outcomes if e.turn is not None}
    untagged = [e for _, e in outcomes if e.turn is None]
    # the outcomes are the last life's: a turn of a life that died before the drive returned has none
    last_life = max((pos for pos, e in enumerate(t.events) if isinstance(e, Restart)), default=-1)
    replayed = _replayed(t, marks, last_life, end)
    ran = set(replayed.values())
    out: list[TurnSlice] = []
    calls_before = 0
    for i, start in enumerate(marks):
        mark = t.events[start]
        assert isinstance(mark, TurnStart)
        stop = marks[i + 1] if i + 1 < len(marks) else end
        events = t.events[0 if i == 0 else start : stop]
        t0 = mark.t if i else 0.0
        first_call = next((e.call for e in events if isinstance(e, Request) and e.path in MODEL_PATHS), None)
        base = calls_before if first_call is None else first_call - 1
        shifted: list[Event] = [_shift(e, t0, base) for e in events if not isinstance(e, TurnStart)]
        outcome = by_turn.get(mark.turn)
        if i in ran:
            pass  # a turn finished before its life died, whose outcome the last life gave from its store
        elif i in replayed or start < last_life or any(isinstance(e, Restart) for e in events):
            outcome = None  # a life that died: no outcome known (or one judged where the turn ran)
        elif outcome is None and i == len(marks) - 1 and untagged:
            outcome = untagged[-1]
        if outcome is not None:
            shifted.append(dataclasses.replace(outcome, t=outcome.t - t0, **_own_from(outcome, t0)))
        out.append(TurnSlice(mark.turn, base, t0, Transcript(header=t.header, events=shifted)))
        calls_before = max((e.call for e in events if isinstance(e, Request) and e.path in MODEL_PATHS),
                           default=base)
    return out


def _replayed(t: Transcript, marks: list[int], last_life: int, end: int) -> dict[int, int]:
    """The turns the last life took again without a model call, each (its index in ``marks``) with the mark of the
    earlier life that ran it to its end: a durable conversation keeps its finished turns in ``sim.store`` and goes
    through them again after a restart, giving their outcomes, which are judged on the replies of that life."""

    def span(i: int) -> list[Event]:
        return t.events[marks[i] : marks[i + 1] if i + 1 < len(marks) else end]

    def called(i: int) -> bool:
        return any(isinstance(e, Request) and e.path in MODEL_PATHS for e in span(i))

    turns = [e.turn for e in t.events if isinstance(e, TurnStart)]  # each mark's turn
    out: dict[int, int] = {}
    for i, start in enumerate(marks):
        if start < last_life or called(i):
            continue
        ran = [j for j in range(i) if marks[j] < last_life and turns[j] == turns[i] and called(j)
               and not any(isinstance(e, Restart) for e in span(j))]
        if ran:
            out[i] = ran[-1]
    return out


def _shift(e: Event, t0: float, calls: int) -> Event:
    if isinstance(e, (Request, Response)):
        return dataclasses.replace(e, t=e.t - t0, call=e.call - calls, **_own_from(e, t0))
    if isinstance(e, (ToolStart, ToolEnd, Halt, OutcomeEvent)):
        return dataclasses.replace(e, t=e.t - t0, **_own_from(e, t0)) if t0 else e
    return e


def _own_from(e: Event, t0: float) -> dict[str, Any]:
    """An event's own time (a thread behind the clock: `ToolStart.own`) counted from ``t0`` too, when it has one."""
    own = getattr(e, "own", None)
    return {"own": own - t0} if own is not None else {}


def _slices(t: Transcript) -> list[TurnSlice]:
    """`turn_slices` of ``t`` as it is now: cut once and shared by the per-turn invariants `check` runs in turn
    (one entry, like the view's; `check` lets it go when it is done)."""
    cached = _LAST_SLICES[0]
    if cached is not None and cached[0] is t and cached[1] == len(t.events):
        return cached[2]
    slices = turn_slices(t)
    _LAST_SLICES[0] = (t, len(t.events), slices)
    return slices


_LAST_SLICES: list[tuple[Transcript, int, list[TurnSlice]] | None] = [None]


def per_turn(check: Invariant) -> Invariant:
    """``check`` run on each user turn (see `turn_slices`); a violation names its turn and conversation step."""

    def each(t: Transcript) -> list[Violation]:
        slices = _slices(t)
        if len(slices) == 1:
            return check(slices[0].transcript)
        out: list[Violation] = []
        for s in slices:
            for v in check(s.transcript):
                step = None if v.step is None else v.step + s.calls_before
                evidence = {**v.evidence, "turn": s.turn}
                out.append(Violation(v.invariant, f"in user turn {s.turn + 1}: {v.message}", step, evidence))
        return out

    each.__name__ = getattr(check, "__name__", "invariant")
    each.__doc__ = check.__doc__
    return each
