"""The transcript: everything one simulated run did, in order, on virtual time.

A `Transcript` is the only thing the invariants see.  It holds a header (the
scenario's name, seed, declared limits and tool kinds) and a list of events:

* `Request`   — a request the loop sent (one per HTTP attempt; SDK retries share ``call``)
* `Response`  — what the simulated API answered (a message, an error, a cut stream, a 400)
* `ToolStart` / `ToolEnd` — one tool execution, matched to the tool_use it answers
* `OutcomeEvent` — what the loop said it did when it returned (or the exception that escaped)
* `Halt`      — simloop unwound a runaway loop (model-call budget, virtual time, watchdog, a deadlock,
  a blocked network connection)
* `ThreadLeft` — a thread the loop started was still running when it returned
* `TurnStart` — a user turn of a conversation began (the drive took it from ``sim.user_turns``)
* `AbortEvent` — the user pressed Stop: ``sim.abort`` fired
* `Restart`   — the process died (a ``crash`` fault) and the drive was run again
* `ApprovalEvent` — the loop asked the person to approve a tool call (``sim.approve``), and what came of it
* `SubagentStart` / `SubagentEnd` — a sub-agent run (``sim.subagent``) began and ended: the model calls and
  tool executions between them are the sub-run's, a nested run checked on its own

Times ``t`` are virtual seconds since the run started, so a transcript is a
pure function of the scenario and seed: it serialises to JSONL byte for byte
the same on every run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from simloop.errors import UsageError

#: The sub-agent run (`simloop.Sim.subagent`) the code running here works for: set by the sub-run in the context
#: its loop runs in (and around ``sub.run_tool``), None in the top run.  Model calls and tool executions record
#: it, so sub-runs that overlap in time (delegate tools run on threads at once) are told apart.
SUBRUN: ContextVar[int | None] = ContextVar("simloop_subrun", default=None)

__all__ = [
    "AbortEvent",
    "ApprovalEvent",
    "Event",
    "Halt",
    "Header",
    "OutcomeEvent",
    "Request",
    "Response",
    "Restart",
    "SubagentEnd",
    "SubagentStart",
    "ThreadLeft",
    "ToolEnd",
    "ToolStart",
    "Transcript",
    "TranscriptError",
    "TurnStart",
]

VERSION = 1


@dataclass(slots=True)
class Header:
    """What the run was: scenario name, seed, the declared limits and who declared each, the tools' kinds.

    ``prices`` holds the scenario's price overrides (``prices:``) that a cost budget is counted with.
    ``limits_from`` maps each declared limit to ``"loop"`` (given by the run: `simloop.verify`'s ``limits``,
    ``Sim(limits=...)``) or ``"scenario"`` (the scenario's own ``limits:``); older transcripts have none.
    ``context``: the loop claims it keeps its requests inside the model's context window (the scenario
    ``requires: [context]``, `simloop.verify`'s ``context=True``), so a prompt refused as too long is a violation.
    """

    scenario: str
    seed: int
    limits: dict[str, Any] = field(default_factory=dict)
    limits_from: dict[str, str] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)  # name -> "read" | "write"
    # the tools whose calls need a person's yes first, when the run has the approval policy (None: it has not)
    approval: list[str] | None = None
    context: bool = False
    version: int = VERSION
    # the scenario's ``prices:`` (model -> USD per million tokens; `simloop.pricing`), written only when given
    prices: dict[str, Any] = field(default_factory=dict)
    type: str = "header"


@dataclass(slots=True)
class Request:
    """One HTTP request the loop sent to the simulated API.

    ``call`` is the logical model call (1-based); an SDK retry (header
    ``x-stainless-retry-count`` > 0) keeps the call number and bumps
    ``attempt``.  ``body`` is the JSON body as sent; ``messages`` is the whole
    conversation the request stands for (it differs from ``body["messages"]``
    only for a message-thread continuation, which sends the new messages only).
    """

    t: float
    index: int
    call: int
    attempt: int
    path: str
    stream: bool
    body: Any
    messages: list[Any] | None = None
    input_tokens: int = 0
    subrun: int | None = None  # the sub-agent run it was made in (`SUBRUN`), None: the top run
    own: float | None = None  # the calling thread's own time, when behind ``t`` (see `ToolStart`)
    # the calling thread: None for the drive's own (and a loop in another process), 1, 2, ... for the loop's other
    # threads in the order they first called: several conversations at once are told apart by it (docs/design.md,
    # Conversations)
    thread: int | None = None
    type: str = "request"

    @property
    def conversation(self) -> list[Any]:
        """The full message list this request stands for."""
        if self.messages is not None:
            return self.messages
        msgs = self.body.get("messages") if isinstance(self.body, dict) else None
        return msgs if isinstance(msgs, list) else []


@dataclass(slots=True)
class Response:
    """The simulated API's answer to the request with the same ``index``.

    ``kind`` is the reply kind (``end_turn``, ``tool_use``, ``max_tokens``,
    ``stop_sequence``, ``refusal``, ``pause_turn``), ``error`` for a scripted
    API fault, or ``rejected`` for a request the real API would answer with a
    400 (``rejection`` then holds the message and its path).  ``fault`` names
    how an error reached the client: ``http``, ``connection``, ``timeout``,
    ``stream_error`` or ``stream_cut``; or ``crash`` for a reply that never
    reached it (the process died while the call was in flight, see
    docs/design.md, Crash and restart): the invariants read it as no reply.
    """

    t: float
    index: int
    call: int
    status: int
    kind: str
    stop_reason: str | None = None
    message: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    fault: str | None = None
    rejection: dict[str, Any] | None = None
    latency: float = 0.0
    type: str = "response"

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        """The tool_use blocks of the reply (what the model asked to run)."""
        if not self.message:
            return []
        return [b for b in self.message.get("content", []) if b.get("type") == "tool_use"]

    @property
    def output_tokens(self) -> int:
        usage = (self.message or {}).get("usage") or {}
        return int(usage.get("output_tokens") or 0)

    @property
    def input_tokens(self) -> int:
        usage = (self.message or {}).get("usage") or {}
        return int(usage.get("input_tokens") or 0)


@dataclass(slots=True)
class ToolStart:
    """A tool execution began.

    ``exec`` numbers executions in the run (1-based); ``nth`` is the execution
    number of this tool; ``tool_use_id`` is the id the loop passed (or None);
    ``matched`` is the tool_use id simloop matched it to when it began (by id,
    else by name and input among the not-yet-executed tool_use blocks, a live
    reply's first, the latest first), None if it answers nothing the model asked
    for; the invariants' view may rebind identical calls by where their outputs
    went (docs/design.md, How an execution is bound to its tool_use).
    ``arrived``, for a call that came over MCP to a `Sim`'s server, is where its
    request arrived: the number of events recorded before the client sent it
    (``abort`` forgives a call whose request arrived before the Stop); None
    otherwise, and then not written.  ``own`` is the executing thread's own time when it is behind ``t``:
    another thread of the run moved the shared clock on (a background wait of 30 s is over at once) and this one
    has not waited since (`simloop._runtime.clock.VirtualClock.own_now`); None otherwise, and then not written.
    ``heard``, under the approval policy, is how many of the person's answers (`ApprovalEvent.seq`) had reached
    the executing thread when some had not (an answer given to another thread it has not waited on since); None
    when all had, and then not written.
    """

    t: float
    exec: int
    tool: str
    input: Any
    nth: int
    kind: str
    tool_use_id: str | None = None
    matched: str | None = None
    fault: str | None = None
    subrun: int | None = None  # the sub-agent run it ran in (`SUBRUN`), None: the top run
    arrived: int | None = None
    own: float | None = None
    heard: int | None = None
    type: str = "tool_start"


@dataclass(slots=True)
class ToolEnd:
    """A tool execution ended: ``status`` is ``ok``, ``raised``, ``cancelled`` or ``crashed`` (the process died).

    ``committed`` says whether the tool's effect happened (true for every
    completed write, and for a ``commit_then_raise`` fault even though it raised).
    """

    t: float
    exec: int
    status: str
    result: str | None = None
    error: str | None = None
    committed: bool = False
    type: str = "tool_end"


@dataclass(slots=True)
class OutcomeEvent:
    """How the loop returned: its declared reason and text, or the exception that escaped it.

    For an escaped exception, ``where`` is the line that raised it, as ``file:line in function``: the
    deepest frame of the loop's own code (not simloop's, the SDK's or another library's, when the
    traceback has such a frame).
    """

    t: float
    reason: str
    text: str = ""
    exception: str | None = None
    where: str | None = None
    turn: int | None = None  # the user turn it ends (0-based), for a drive that returned one outcome per turn
    own: float | None = None  # when the drive returned in its own thread's time, when behind ``t`` (see ToolStart)
    type: str = "outcome"


@dataclass(slots=True)
class Halt:
    """simloop unwound the loop.

    ``budget`` is what ran out or went wrong: ``model_calls``, ``virtual_time``, ``watchdog`` (no model
    or tool call for too long in real time), ``deadlock`` (an event loop that can never wake up),
    ``network`` (a real network connection, blocked), ``fork`` (a child forked during the run called the
    model or a tool through its copy of the Sim, or the network; refused there) or ``abandoned`` (a second
    Halt: the loop did not unwind, and simloop left its thread parked).  ``where`` is ``FILE:LINE in
    function`` of the loop when it was halted, ``target`` the ``host:port`` of a blocked connection.
    """

    t: float
    budget: str
    detail: str = ""
    where: str | None = None
    target: str | None = None
    type: str = "halt"


@dataclass(slots=True)
class ThreadLeft:
    """A thread the loop started was still running when the loop returned.

    ``where`` is ``FILE:LINE in function`` of the thread at that moment.  The thread never holds the
    process: simloop's threads are daemons and the ``simloop`` command exits after its report.  With
    ``pid``, a child process the loop started and left running (simloop killed it).
    """

    t: float
    name: str
    where: str
    pid: int | None = None
    type: str = "thread_left"


@dataclass(slots=True)
class TurnStart:
    """User turn ``turn`` (0-based: the task is turn 0) began: the drive took ``text`` from ``sim.user_turns``."""

    t: float
    turn: int
    text: str = ""
    type: str = "turn"


@dataclass(slots=True)
class AbortEvent:
    """The abort fired (the user's Stop): ``trigger`` says where (``after model call 2``, ``at 12s``, ...)."""

    t: float
    trigger: str = ""
    # with MCP tools: how many events were recorded before it, the count `ToolStart.arrived` is in (a sub-run's
    # split of the transcript moves positions, not this)
    at: int | None = None
    type: str = "abort"


@dataclass(slots=True)
class Restart:
    """The process died (``detail``) and the drive began life ``life`` (2 for the first restart)."""

    t: float
    life: int
    detail: str = ""
    type: str = "restart"


@dataclass(slots=True)
class ApprovalEvent:
    """The loop asked the person to approve a call (``sim.approve``) at ``asked``; ``t`` is when the wait ended.

    ``answer`` is ``approved``, ``denied`` or ``none`` (no answer before the wait ended: the person was away,
    or answered after the loop's deadline or timeout).  ``tool_use_id`` is the id the loop passed, ``matched``
    the tool_use the request is bound to (by that id, else by name and input: the latest reply's first call not
    yet asked about), None when the model never made that call.
    """

    t: float
    tool: str
    input: Any
    asked: float
    answer: str
    tool_use_id: str | None = None
    matched: str | None = None
    seq: int | None = None  # the answer's number in the run (1-based): which threads heard it (`ToolStart.heard`)
    type: str = "approval"

    @property
    def approved(self) -> bool:
        return self.answer == "approved"


@dataclass(slots=True)
class SubagentStart:
    """Sub-agent run ``run`` (1-based in the run) began (``sim.subagent``): the model calls and tool executions
    until its `SubagentEnd` are its own.  ``exec`` is the tool execution it runs in (the parent's delegate call;
    None when it was started outside one), ``limits`` what the sub-agent's loop declares."""

    t: float
    run: int
    task: str = ""
    exec: int | None = None
    tool: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    parent: int | None = None  # the run it was started in: 0 the top run (None: a transcript from before the tags)
    type: str = "subagent_start"


@dataclass(slots=True)
class SubagentEnd:
    """Sub-agent run ``run`` ended: the reason its loop gave (None when none is known: it was unwound by a halt
    or a process death), its text, or the exception that escaped it."""

    t: float
    run: int
    reason: str | None = None
    text: str = ""
    exception: str | None = None
    type: str = "subagent_end"


Event = (
    Request | Response | ToolStart | ToolEnd | OutcomeEvent | Halt | ThreadLeft | TurnStart | AbortEvent | Restart
    | ApprovalEvent | SubagentStart | SubagentEnd
)
_TYPES: dict[str, type[Any]] = {
    str(c.__dataclass_fields__["type"].default): c
    for c in (Header, Request, Response, ToolStart, ToolEnd, OutcomeEvent, Halt, ThreadLeft, TurnStart, AbortEvent,
              Restart, ApprovalEvent, SubagentStart, SubagentEnd)
}


class TranscriptError(UsageError):
    """A transcript file cannot be read; the message names the file and line."""


@dataclass(slots=True)
class Transcript:
    """A header and the run's events in order."""

    header: Header
    events: list[Event] = field(default_factory=list)

    def append(self, event: Event) -> None:
        self.events.append(event)

    # -- views the invariants and reports use -----------------------------------

    def of(self, kind: type[Any]) -> list[Any]:
        """The events of one class, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def requests(self) -> list[Request]:
        return self.of(Request)

    @property
    def responses(self) -> list[Response]:
        return self.of(Response)

    @property
    def outcome(self) -> OutcomeEvent | None:
        return next((e for e in reversed(self.events) if isinstance(e, OutcomeEvent)), None)  # the last one

    @property
    def turns(self) -> list[TurnStart]:
        """The user turns the run began, in order (none for a single-turn run that never read ``sim.user_turns``)."""
        return self.of(TurnStart)

    @property
    def halt(self) -> Halt | None:
        return next((e for e in self.events if isinstance(e, Halt)), None)  # the first one

    def response_to(self, index: int) -> Response | None:
        """The response to request ``index``, if one was recorded."""
        for e in self.events:
            if isinstance(e, Response) and e.index == index:
                return e
        return None

    @property
    def model_calls(self) -> int:
        """Logical model calls to ``/v1/messages``, ``/v1/chat/completions`` or ``/v1/responses`` (retries of one call
        count once)."""
        return len({r.call for r in self.requests if r.path in ("/v1/messages", "/v1/chat/completions",
                                                                "/v1/responses")})

    # -- JSONL -------------------------------------------------------------------

    def to_jsonl(self) -> str:
        """One JSON object a line: the header first, then each event."""
        return "".join(_line(x) for x in (self.header, *self.events))

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_jsonl(), encoding="utf-8")
        return p

    @classmethod
    def from_jsonl(cls, text: str | Iterable[str], *, path: str | Path | None = None) -> Transcript:
        """Read a transcript written by `to_jsonl`; errors name the file and line."""
        # JSONL lines end at "\n" only: str.splitlines would also split at U+2028, U+0085 and the other
        # line boundaries Unicode knows, which a reply's text may hold.
        lines: Iterator[str] = iter(text.split("\n") if isinstance(text, str) else text)
        where = str(path) if path is not None else "<transcript>"
        header: Header | None = None
        events: list[Event] = []
        for n, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            item = _event(raw, f"{where}:{n}")
            if isinstance(item, Header):
                if item.version != VERSION:
                    raise TranscriptError(
                        f"{where}:{n}: transcript version {item.version} is not supported; this simloop reads {VERSION}"
                    )
                header = item
            else:
                events.append(item)
        if header is None:
            raise TranscriptError(f"{where}:1: the transcript has no header line")
        return cls(header=header, events=events)

    @classmethod
    def read(cls, path: str | Path) -> Transcript:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise TranscriptError(f"{p}: cannot read the transcript: {e}") from None
        return cls.from_jsonl(text, path=p)


def _line(obj: Any) -> str:
    data = asdict(obj)
    if data.get("subrun", 0) is None:
        del data["subrun"]  # the top run's calls and tools write what they always wrote
    for name in ("own", "heard", "seq", "thread"):
        if data.get(name, 0) is None:
            del data[name]  # a thread that lived up to the clock's time writes what it always wrote
    if isinstance(obj, Header) and obj.approval is None:
        del data["approval"]  # a run without the approval policy writes the header it always wrote
    if isinstance(obj, Header) and not obj.prices:
        del data["prices"]  # the common case, and every transcript written before prices existed, stays the same
    if isinstance(obj, AbortEvent) and obj.at is None:
        del data["at"]  # a run without MCP tools writes the Stop it always wrote
    if isinstance(obj, ToolStart) and obj.arrived is None:
        del data["arrived"]  # a call that did not come over MCP is written as it always was
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Escaped, though JSON allows them raw: readers that split lines the Unicode way would cut the line there.
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085") + "\n"


_NOT_OURS = "; the file is not a transcript this simloop wrote, or it was edited. Write it again with --trace"


def _event(raw: str, where: str) -> Any:
    """One line of a transcript as its event; `TranscriptError` naming ``where`` and what was expected."""
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise TranscriptError(f"{where}: not a JSON object ({e}){_NOT_OURS}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str) or obj["type"] not in _TYPES:
        kinds = ", ".join(sorted(_TYPES))
        got = repr(obj.get("type")) if isinstance(obj, dict) else f"a JSON {type(obj).__name__}"
        raise TranscriptError(f"{where}: expected an event whose type is one of {kinds}; got {got}{_NOT_OURS}")
    cls_ = _TYPES[obj["type"]]
    kept = {}
    for f in fields(cls_):
        if f.name not in obj:
            if f.default is MISSING and f.default_factory is MISSING:
                raise TranscriptError(f"{where}: the {obj['type']} event has no {f.name!r}{_NOT_OURS}")
            continue
        value = obj[f.name]
        if not _fits(value, str(f.type)):
            raise TranscriptError(
                f"{where}: {obj['type']}.{f.name} is {json.dumps(value)[:60]}, expected {_EXPECTED.get(str(f.type), f.type)}"
                f"{_NOT_OURS}"
            )
        kept[f.name] = value
    return cls_(**kept)


_EXPECTED = {"float": "a number", "int": "an integer", "str": "a string", "bool": "true or false"}


def _fits(value: Any, annotation: str) -> bool:
    """Whether a JSON value fits a field's annotation (``float``, ``str | None``, ``dict[str, Any]``, ...)."""
    for option in annotation.split(" | "):
        base = option.split("[", 1)[0].strip()
        if (
            base == "Any"
            or (base == "None" and value is None)
            or (base == "float" and isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
            or (base == "int" and isinstance(value, int) and not isinstance(value, bool))
            or (base == "str" and isinstance(value, str))
            or (base == "bool" and isinstance(value, bool))
            or (base == "dict" and isinstance(value, dict))
            or (base == "list" and isinstance(value, list))
        ):
            return True
    return False
