"""A model and tool faults drawn by Hypothesis as the loop runs, and the scenario that replays them.

`GeneratedModel` answers each request with a reply drawn *then*, from the
run's `Plan` and what the request shows (the tools it defines, how many calls
it answered); `GeneratedFaults` draws each tool execution's fault when it
starts.  Both record what they served, so `to_scenario` can write the exact
run down as a v1 scenario file: the replies in the order served (identical
neighbours folded into ``repeat``; a stuck tail into ``then: repeat_last``)
and the faults by tool and execution number.  Replaying that file with
`simloop.replay` reproduces the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from simloop.models import ModelRequest
from simloop.scenario import Fault, Limits, Reply, Scenario, ToolCall, ToolSpec
from simloop.strategies import Plan, _faults_of, api_faults, latencies, slow_latencies, tool_calls, usages

__all__ = ["GeneratedFaults", "GeneratedModel", "to_scenario"]

Draw = Callable[[st.SearchStrategy[Any]], Any]

# Built once: a strategy is costly to build, and these are drawn on every request and tool execution.
_GATE = st.integers(0, 9)
_API_FAULTS = api_faults()
_SHORT = latencies(max_s=3.0)
_HEAVY = usages(chance=5)


class GeneratedModel:
    """The simulated model of one generated run (a `simloop.models.ModelPolicy`)."""

    def __init__(self, draw: Draw, plan: Plan) -> None:
        self.draw = draw
        self.plan = plan
        self.served: list[Reply] = []
        self._burst: list[Reply] = []
        self._tool_steps = 0
        self._stuck: Reply | None = None
        self._ended = False
        self._paused = False

    def reply(self, request: ModelRequest) -> Reply:
        reply = self._next(request)
        self.served.append(reply)
        return reply

    def leftovers(self) -> list[str]:
        return []

    def _next(self, request: ModelRequest) -> Reply:
        if self._burst:
            return self._burst.pop()
        if self.plan.outage is not None and self._tool_steps >= self.plan.steps:
            return self.plan.outage
        if self.plan.fault_rate and self.draw(_GATE) >= 10 - self.plan.fault_rate:
            fault = self.draw(_API_FAULTS)
            one: Reply = fault.model_copy(update={"repeat": 1})
            self._burst = [one] * (int(fault.repeat) - 1)
            return one
        if self._ended or (self.plan.persona == "finishes" and self._tool_steps >= self.plan.steps):
            return self._ending(request)
        self._tool_steps += 1
        if self.plan.persona == "stuck" and self._stuck is not None:
            return self._stuck  # the same reply forever: nothing new to draw (and to shrink)
        latency = self.draw(slow_latencies(self.plan.deadline_s) if self.plan.slow else _SHORT)
        usage = self.draw(_HEAVY) if self.plan.heavy else None
        reply = Reply(tool_use=self._calls(request), latency=latency, usage=usage)
        if self.plan.persona == "stuck":
            self._stuck = reply
        return reply

    def _calls(self, request: ModelRequest) -> list[ToolCall]:
        names = request.tools or ["search"]
        calls: list[ToolCall] = self.draw(tool_calls(names))
        if self.plan.persona == "wanders":  # new calls forever: each step asks something it never asked
            return [c.model_copy(update={"input": {**c.input, "attempt": self._tool_steps}}) for c in calls]
        return calls

    def _ending(self, request: ModelRequest) -> Reply:
        """The plan's ending once; a paused turn is finished on its continuation; then plain answers."""
        ending = self.plan.ending
        if self._ended:
            return Reply(end_turn="Done.")
        if ending.kind == "pause_turn" and not self._paused:
            self._paused = True
            return ending
        self._ended = True
        return Reply(end_turn="Done.") if ending.kind == "pause_turn" else ending


class GeneratedFaults:
    """Each tool execution's fault, drawn when it starts (a `simloop.tools.ToolBox` fault source)."""

    def __init__(self, draw: Draw, plan: Plan) -> None:
        self.draw = draw
        self.plan = plan
        self.fired: list[Fault] = []

    def __call__(self, spec: ToolSpec, nth: int) -> Fault | None:
        fault: Fault | None = None
        if self.plan.tool_fault_rate and self.draw(_GATE) >= 10 - self.plan.tool_fault_rate:
            fault = self.draw(_faults_of(spec.name, spec.kind)).model_copy(update={"call": nth})
        elif self.plan.slow:
            # in a slow run tools take minutes too, not only replies: a deadline passing while a tool
            # runs (one of a parallel turn's, say) is what deadline bugs need; 0.0 (no fault) is the simplest
            latency = self.draw(slow_latencies(self.plan.deadline_s))
            fault = Fault(tool=spec.name, kind="slow", call=nth, latency=latency) if latency > 0 else None
        if fault is not None:
            self.fired.append(fault)
        return fault


def to_scenario(
    *,
    name: str,
    task: str,
    tools: Sequence[ToolSpec],
    limits: Limits,
    served: Sequence[Reply],
    faults: Sequence[Fault],
    halted: bool,
) -> Scenario:
    """The run written down as a script that replays it."""
    replies = list(served)
    then = "fail"
    if halted and len(replies) >= 2 and replies[-1] == replies[-2]:
        while len(replies) >= 2 and replies[-1] == replies[-2]:
            replies.pop()
        then = "repeat_last"
    return Scenario(
        name=name,
        task=task,
        tools=list(tools),
        model=_fold(replies),
        then=then,  # type: ignore[arg-type]
        faults=list(faults),
        limits=limits,
    )


def _fold(replies: list[Reply]) -> list[Reply]:
    """Identical neighbours as one reply with ``repeat``."""
    out: list[Reply] = []
    for r in replies:
        if out and out[-1].model_copy(update={"repeat": 1}) == r and r.repeat == 1:
            prev = out[-1]
            out[-1] = prev.model_copy(update={"repeat": int(prev.repeat) + 1})
        else:
            out.append(r)
    return out
