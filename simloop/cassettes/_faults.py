"""Fuzzing a recording: keep its replies, draw API errors, latencies, cut-offs and tool faults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from simloop.cassettes._convert import Source, load_recording, replies_by_turn
from simloop.models import ModelRequest
from simloop.scenario import MaxTokensBody, PauseTurnBody, Reply
from simloop.strategies import Plan, api_faults, latencies

# =========================================================================== fault mutation

Draw = Callable[[st.SearchStrategy[Any]], Any]
_GATE = st.integers(0, 9)
_API_FAULTS = api_faults()
_LATENCIES = latencies(max_s=120.0)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """How hard one fuzzed replay of a recording is hit: chances in ten, per recorded reply or tool run.

    ``api_fault_rate``: an API failure (one error or a burst, `simloop.strategies.api_faults`) before
    the reply; ``latency_rate``: the reply takes a drawn latency; ``cutoff_rate``: the reply is cut
    at ``max_tokens``; ``tool_fault_rate``: a tool execution fails (`tool_plan` feeds
    `simloop.generated.GeneratedFaults`).  All zero is the recording itself, what a failure shrinks to.
    """

    api_fault_rate: int = 0
    tool_fault_rate: int = 0
    latency_rate: int = 0
    cutoff_rate: int = 0

    @property
    def tool_plan(self) -> Plan:
        """The `Plan` `simloop.generated.GeneratedFaults` reads (only its ``tool_fault_rate`` matters)."""
        return Plan(
            persona="finishes", steps=0, ending=Reply(end_turn="Done."), fault_rate=0,
            tool_fault_rate=self.tool_fault_rate,
        )


def fault_plans(
    *, api_faults: bool = True, tool_faults: bool = True, latencies: bool = True, cutoffs: bool = True
) -> st.SearchStrategy[FaultPlan]:
    """Fault plans for fuzzing a recording; each kind of fault can be switched off.

    Shrinks towards the plan with no fault at all.  Use with `FaultedRecording`::

        plan = data.draw(fault_plans())
        model = FaultedRecording(recording, data.draw, plan)
        faults = GeneratedFaults(data.draw, plan.tool_plan)
    """
    def rate(on: bool) -> st.SearchStrategy[int]:
        return st.integers(0, 3) if on else st.just(0)

    return st.builds(
        FaultPlan, api_fault_rate=rate(api_faults), tool_fault_rate=rate(tool_faults),
        latency_rate=rate(latencies), cutoff_rate=rate(cutoffs),
    )


class FaultedRecording:
    """A recording's replies with faults drawn as the loop runs (a `simloop.models.ModelPolicy`).

    Before each recorded reply it may serve an API failure (a burst of them, which does not use the
    reply up: the reply comes once the API recovers); the reply itself may take a latency or be cut
    at ``max_tokens``.  Replies are served in the scenario form (`RecordedCall.reply`), so ``served``
    is exactly the script that replays the run (`simloop.generated.to_scenario`).  Past the end of
    the recording it answers ``end_turn: "Done."``; requests are not compared (faults change them).

    A recorded conversation (follow-up user turns) is served turn by turn: ``turn()`` (the Sim's turns begun)
    says which turn the loop is in, and each turn gets that turn's recorded replies in order, then
    ``end_turn: "Done."`` if it asks for more (a retry after a fault); a turn the loop begins before it used up
    the last one's replies starts at its own first reply, so a loop that stopped early is never answered with
    another turn's tool calls.
    """

    def __init__(self, source: Source, draw: Draw, plan: FaultPlan, *, turn: Callable[[], int] | None = None) -> None:
        self.recording = load_recording(source)
        self.turns = replies_by_turn(self.recording)
        self.draw = draw
        self.plan = plan
        self.turn = turn
        self.served: list[Reply] = []
        self._burst: list[Reply] = []
        self._turn = 0  # which of `turns` is being served (0-based)
        self._pos = 0  # the next reply of that turn

    @property
    def replies(self) -> list[Reply]:
        """Every recorded reply of the conversation, in order."""
        return [r for turn in self.turns for r in turn]

    def reply(self, request: ModelRequest) -> Reply:
        reply = self._next()
        self.served.append(reply)
        return reply

    def leftovers(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return f"FaultedRecording({self.recording.source!r}, {self.plan!r})"

    def _gate(self, rate: int) -> bool:
        return bool(rate) and self.draw(_GATE) >= 10 - rate

    def _next(self) -> Reply:
        begun = self.turn() - 1 if self.turn is not None else 0
        if begun > self._turn:  # a new user turn: its own replies, from its first (none owed from the last)
            self._turn, self._pos, self._burst = begun, 0, []
        if self._burst:
            return self._burst.pop()
        if self._gate(self.plan.api_fault_rate):
            fault: Reply = self.draw(_API_FAULTS)
            one = fault.model_copy(update={"repeat": 1})
            self._burst = [one] * (int(fault.repeat) - 1)
            return one
        replies = self.turns[self._turn] if self._turn < len(self.turns) else []
        if self._pos >= len(replies):
            return Reply(end_turn="Done.")
        reply = replies[self._pos]
        self._pos += 1
        if reply.kind == "error":
            return reply
        if self._gate(self.plan.cutoff_rate):
            reply = _cut(reply)
        if self._gate(self.plan.latency_rate):
            reply = reply.model_copy(update={"latency": self.draw(_LATENCIES)})
        return reply


def _cut(reply: Reply) -> Reply:
    """The reply cut off at max_tokens: its text, and its tool calls with the last one cut mid-input."""
    paused = reply.pause_turn.text if isinstance(reply.pause_turn, PauseTurnBody) else reply.pause_turn
    text = reply.text or reply.end_turn or reply.stop_sequence or reply.refusal or paused or ""
    if isinstance(reply.max_tokens, (str, MaxTokensBody)):
        return reply
    body: str | MaxTokensBody = MaxTokensBody(text=text, tool_use=reply.calls) if reply.calls else text[: len(text) // 2]
    return Reply(max_tokens=body, latency=reply.latency, usage=reply.usage, thinking=reply.thinking)
