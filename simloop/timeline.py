"""A run as plain text, one model call a line: what failure reports and replays show.

Stable text that diffs well (no colours, no real times): step, virtual time,
input/output tokens, the reply (SDK retries folded in), the tools run with
their outcome, and the violations marked at the step where they happened.
The rich terminal and HTML renderings (`simloop.report`) build on the same
rows: `Step` also carries the structured data they need (the reply kind, the
SDK retries, each tool execution as a `ToolRun` with its outcome, the
requests and responses, the violations found at the step).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from simloop.pricing import cost_usd
from simloop.transcript import (
    AbortEvent,
    ApprovalEvent,
    Halt,
    OutcomeEvent,
    Request,
    Response,
    Restart,
    SubagentEnd,
    SubagentStart,
    ToolEnd,
    ToolStart,
    Transcript,
    TurnStart,
)

__all__ = ["TOOL_OUTCOMES", "Step", "ToolRun", "render_timeline", "steps", "tool_outcome"]

#: What a tool execution came to, as the timelines name it.
TOOL_OUTCOMES = ("ok", "slow", "huge", "raised", "timeout", "committed-then-lost", "cancelled", "running")


@dataclass(slots=True)
class ToolRun:
    """One tool execution, attached to the step whose reply it answers (the step in progress when it started).

    ``outcome`` is one of `TOOL_OUTCOMES`: ``ok``; ``slow`` / ``huge`` (answered, after a
    slow or huge-output fault); ``raised``; ``timeout``; ``committed-then-lost`` (the effect
    happened, then the tool raised); ``cancelled``; ``running`` (no end recorded: the loop
    returned or was halted while it ran).
    """

    exec: int
    tool: str
    input: Any
    kind: str
    outcome: str
    t: float
    took: float = 0.0
    fault: str | None = None
    result: str | None = None
    error: str | None = None
    matched: bool = True


@dataclass(slots=True)
class Step:
    """One logical model call and what followed it until the next call.

    The text fields (``reply``, ``attempts``, ``tools``, ``marks``) are what
    `render_timeline` prints; the others are the structured data behind them.
    """

    call: int
    t: float
    input_tokens: int = 0
    output_tokens: int = 0
    reply: str = ""
    attempts: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    kind: str = ""  # the reply's kind (end_turn, tool_use, ...); "" when no reply arrived
    retries: int = 0  # SDK retries of this call (requests beyond the first)
    runs: list[ToolRun] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)
    violations: list[Any] = field(default_factory=list)  # simloop.Violation found at this step
    turn: int | None = None  # the user turn (0-based) that begins with this step, in a conversation
    turn_text: str = ""  # that turn's user message
    aborts: list[str] = field(default_factory=list)  # the user's Stop, pressed during this step
    restarts: list[str] = field(default_factory=list)  # the process died during this step, and the loop restarted
    subagent: int | None = None  # the sub-agent run (``sim.subagent``) this call belongs to, None: the main run
    cost_usd: float = 0.0  # what the run's replies had cost by this step's reply, in US dollars (`simloop.pricing`)


def steps(transcript: Transcript, violations: Sequence[Any] = ()) -> list[Step]:
    """The transcript grouped by logical model call; ``violations`` are attached to their step."""
    walk = _Walk(transcript)
    for e in transcript.events:
        walk.take(e)
    for v in violations:
        at = walk.by_call.get(v.step) if v.step is not None else None
        if at is not None:
            at.violations.append(v)
            at.marks.append(v.invariant)
    return walk.out


class _Walk:
    """`steps`' pass over the events: the steps so far, the step in progress, the open tool and sub-agent runs."""

    def __init__(self, transcript: Transcript) -> None:
        self.out: list[Step] = []
        self.by_call: dict[int, Step] = {}
        self.starts: dict[int, ToolStart] = {}
        self.runs: dict[int, ToolRun] = {}
        self.current: Step | None = None
        # turn marks are shown only for a conversation (more than one turn)
        self.turn: TurnStart | None = None
        self.conversation = sum(isinstance(e, TurnStart) for e in transcript.events) > 1
        self.prices = transcript.header.prices
        self.spent = 0.0
        self.parents: list[Step | None] = []  # the step each open sub-agent run was started from
        self.inside: list[int] = []  # the open sub-agent runs, innermost last
        # calls and tools that name their sub-run (``subrun``) go under its latest step, even when sub-runs overlap
        self.tagged = any(isinstance(e, SubagentStart) and e.parent is not None for e in transcript.events)
        self.latest: dict[int | None, Step] = {}

    def take(self, e: Any) -> None:
        """One event: a step begins (a model call), or what it records goes to the step it belongs to."""
        current = self.current
        if isinstance(e, SubagentStart):
            self._subagent_start(e)
        elif isinstance(e, SubagentEnd):
            self._subagent_end(e)
        elif isinstance(e, TurnStart) and self.conversation:
            self.turn = e
        elif isinstance(e, AbortEvent) and current is not None:
            current.aborts.append(f"STOP pressed ({e.trigger}) at {e.t:.3f}s")
            current.tools.append(current.aborts[-1])  # in its place among the tool lines
        elif isinstance(e, ApprovalEvent) and current is not None:
            waited = f" after {e.t - e.asked:.1f}s" if e.t - e.asked >= 0.05 else ""
            current.tools.append(f"APPROVAL {e.answer}{waited}: {e.tool}({_args(e.input)})")
        elif isinstance(e, Restart) and current is not None:
            _restart(current, e)
        elif isinstance(e, Request) and e.path.endswith(("/messages", "/chat/completions", "/responses")):
            self._request(e)
        elif isinstance(e, Response) and e.index is not None and current is not None:
            self._response(self.by_call.get(e.call, current), e)
        elif isinstance(e, ToolStart):
            self._tool_start(e)
        elif isinstance(e, ToolEnd) and current is not None:
            self._tool_end(current, e)

    def _subagent_start(self, e: SubagentStart) -> None:
        """A sub-agent run starts: a line at the step it starts from, which its end returns to."""
        where = f" in {e.tool} (exec {e.exec})" if e.tool else ""
        line = f"sub-agent {e.run} starts{where}: {json.dumps(e.task[:50], ensure_ascii=False)}"
        if self.current is not None:
            self.current.tools.append(line)
        self.parents.append(self.current)
        self.inside.append(e.run)

    def _subagent_end(self, e: SubagentEnd) -> None:
        """A sub-agent run returns: a line at its last step, and the step it started from goes on."""
        told = e.exception or json.dumps(e.text[:40], ensure_ascii=False)
        line = f"sub-agent {e.run} returned {e.reason or '(no outcome)'} {told}"
        if self.current is not None:
            self.current.tools.append(line)
        if self.inside:
            self.inside.pop()
            self.current = self.parents.pop()

    def _request(self, e: Request) -> None:
        """A model call: a new step (the turn it begins, the sub-agent run it belongs to), or an SDK retry of one."""
        current = self.by_call.get(e.call)
        if current is None:
            subagent = e.subrun if self.tagged else self.inside[-1] if self.inside else None
            current = self.by_call[e.call] = Step(call=e.call, t=e.t, input_tokens=e.input_tokens, subagent=subagent)
            if self.turn is not None:
                current.turn, current.turn_text, self.turn = self.turn.turn, self.turn.text, None
            self.out.append(current)
        else:
            current.retries += 1
        current.requests.append(e)
        self.latest[current.subagent] = current
        self.current = current

    def _response(self, step: Step, e: Response) -> None:
        """An answer to the step's call: its reply, tokens and running cost, or the rejection or fault it met."""
        step.responses.append(e)
        if e.status == 200 and e.message is not None:
            step.reply = _reply(e)
            step.kind = e.kind
            step.output_tokens = e.output_tokens
            step.input_tokens = e.input_tokens or step.input_tokens
            if e.fault == "crash":
                step.attempts.append("never read: the process died")
            self.spent += cost_usd(e.message.get("usage"), e.message.get("model"), self.prices)
            step.cost_usd = self.spent
        elif e.kind == "rejected":
            step.attempts.append(f"400 {(e.rejection or {}).get('message', '')[:70]}")
        else:
            step.attempts.append(_fault(e))

    def _tool_start(self, e: ToolStart) -> None:
        """A tool execution starts: a `ToolRun` (``running`` until it ends) under the step whose reply asked it."""
        self.starts[e.exec] = e
        if self.tagged:
            self.current = self.latest.get(e.subrun, self.current)
        if self.current is not None:
            self.runs[e.exec] = started = ToolRun(
                exec=e.exec, tool=e.tool, input=e.input, kind=e.kind, outcome="running", t=e.t, fault=e.fault,
                matched=e.matched is not None,
            )
            self.current.runs.append(started)

    def _tool_end(self, current: Step, e: ToolEnd) -> None:
        """A tool execution ends: its line, and its `ToolRun`'s outcome, duration and result."""
        start = self.starts.get(e.exec)
        if start is not None and self.tagged:
            current = self.current = self.latest.get(start.subrun, current)
        if start is not None:
            current.tools.append(_tool(start, e))
            ended = self.runs.get(e.exec)
            if ended is not None:
                ended.outcome = tool_outcome(start, e)
                ended.took = e.t - start.t
                ended.result, ended.error = e.result, e.error


def _restart(step: Step, e: Restart) -> None:
    """The process died during ``step`` and the loop restarted: the line saying so (and whether a reply was lost)."""
    lost = bool(step.responses) and step.responses[-1].fault == "crash"
    during = " with the call in flight (its reply never read)" if lost else ""
    step.restarts.append(f"PROCESS DIED at {e.t:.3f}s{during}: the loop restarts (life {e.life}), sim.store kept")
    step.tools.append(step.restarts[-1])


def unstarted_turn(transcript: Transcript) -> TurnStart | None:
    """The last user turn of a conversation when the run ended before its first model call (the loop crashed or
    returned at its start), else None: no step begins it, so the timeline and the reports name it apart."""
    waiting: TurnStart | None = None
    for e in transcript.events:
        if isinstance(e, TurnStart):
            waiting = e if e.turn > 0 else None
        elif isinstance(e, Request) and e.path.endswith(("/messages", "/chat/completions", "/responses")):
            waiting = None
        elif isinstance(e, OutcomeEvent):
            break
    return waiting


def tool_outcome(start: ToolStart, end: ToolEnd | None) -> str:
    """What one execution came to: one of `TOOL_OUTCOMES`."""
    if end is None:
        return "running"
    if end.status in ("cancelled", "crashed"):
        return "cancelled" if end.status == "cancelled" else "committed-then-lost"
    if end.status == "ok":
        return {"slow": "slow", "huge_output": "huge"}.get(start.fault or "", "ok")
    if end.committed:
        return "committed-then-lost"
    return "timeout" if start.fault == "timeout" else "raised"


def render_timeline(
    transcript: Transcript, violations: Sequence[Any] = (), *, width: int = 100
) -> str:
    """The run as text: a header line, one line per step (plus tool lines), the outcome and violations."""
    rows = steps(transcript)
    marks: dict[int | None, list[str]] = {}
    for v in violations:
        marks.setdefault(v.step, []).append(v.invariant)
    # the cost so far is a column when the run declared a cost budget (other timelines read as they always did)
    priced = "max_cost_usd" in transcript.header.limits
    lines = [f"{'step':>4}  {'time':>9}  {'in':>7} {'out':>6}  {'cost':>8}  reply" if priced else
             f"{'step':>4}  {'time':>9}  {'in':>7} {'out':>6}  reply"]
    for s in rows:
        if s.turn is not None:
            lines.append(_clip(f"-- user turn {s.turn + 1}: {json.dumps(s.turn_text, ensure_ascii=False)}", width))
        retry = f"  [{', '.join(s.attempts)}]" if s.attempts else ""
        flag = f"  <-- {', '.join(marks[s.call])}" if s.call in marks else ""
        cost = f"{'$' + format(s.cost_usd, '.4f'):>8}  " if priced else ""
        nested = f"[sub-agent {s.subagent}] " if s.subagent is not None else ""
        line = (f"{s.call:>4}  {s.t:>8.3f}s  {s.input_tokens:>7} {s.output_tokens:>6}  {cost}"
                f"{nested}{s.reply or '(no reply)'}{retry}{flag}")
        lines.append(_clip(line, width))
        lines.extend(_clip(f"{'':>{43 if priced else 33}}{tool}", width) for tool in s.tools)
    waiting = unstarted_turn(transcript)
    if waiting is not None:  # the run ended in a turn it began but made no model call in (a crash at its start)
        text = f"-- user turn {waiting.turn + 1}: {json.dumps(waiting.text, ensure_ascii=False)} (no model call)"
        lines.append(_clip(text, width))
    outcome = transcript.outcome
    halt = transcript.of(Halt)
    if halt:
        lines.append(f"halted by simloop at {halt[0].t:.3f}s: {halt[0].detail}")
    per_turn = [e for e in transcript.of(OutcomeEvent) if e.turn is not None]
    if len(per_turn) > 1:
        for o in per_turn:
            lines.append(f"outcome of turn {o.turn + 1}: {o.reason} {json.dumps(o.text[:60], ensure_ascii=False)}")
    elif isinstance(outcome, OutcomeEvent):
        text = outcome.exception or json.dumps(outcome.text[:60], ensure_ascii=False)
        lines.append(f"outcome: {outcome.reason} {text} at {outcome.t:.3f}s")
    for v in marks.get(None, []):
        lines.append(f"  <-- {v}")
    return "\n".join(lines)


def _reply(r: Response) -> str:
    msg = r.message or {}
    parts: list[str] = []
    for b in msg.get("content", []):
        kind = b.get("type")
        if kind == "tool_use":
            parts.append(f"{b.get('name')}({_args(b.get('input'))})")
        elif kind == "thinking":
            parts.append("thinking")
        elif kind == "text":
            parts.append(json.dumps(str(b.get("text", ""))[:30], ensure_ascii=False))
    stop = msg.get("stop_reason") or "cut"
    return f"{stop}: {' '.join(parts)}" if parts else str(stop)


def _fault(r: Response) -> str:
    if r.fault == "http":
        return str(r.status)
    return str(r.fault or r.status)


def _tool(start: ToolStart, end: ToolEnd) -> str:
    took = end.t - start.t
    timing = f" after {took:.1f}s" if took >= 0.05 else ""
    if end.status == "ok":
        what = "ok"
    elif end.status == "crashed":
        what = f"committed, then the PROCESS DIED ({end.error})"
    elif end.committed:
        what = f"committed, then raised {end.error}"
    else:
        what = f"{end.status} {end.error or ''}".strip()
    unmatched = "" if start.matched else "  (answers no tool_use)"
    return f"-> {start.tool}({_args(start.input)}) {what}{timing}{unmatched}"


def _args(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:24]}" for k, v in value.items())
    return json.dumps(value, ensure_ascii=False)[:40]


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."
