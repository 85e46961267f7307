"""The run's runaway budgets (`Guard`): checked on every request, tool call and virtual sleep.

What a loop that does not stop is unwound by: model calls and requests per user turn (and per sub-agent run, with a
run-wide bound across them), and virtual time beyond what the world itself took.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from simloop._runtime import process as _process
from simloop._runtime.clock import VirtualClock
from simloop._runtime.halt import LoopHalted
from simloop._runtime.process import forked_call
from simloop._runtime.watchdog import Watchdog, park, where_of
from simloop.scenario import Limits
from simloop.transcript import Halt, Transcript
from simloop.wire.server import Budget, SimServer

__all__ = ["RUNAWAY_MODEL_CALLS", "RUNAWAY_SUBRUNS", "RUNAWAY_TOTAL_CALLS", "Guard", "default_budget"]

#: Model calls after which a loop that declares no step cap is unwound as a runaway (`stops`): one more than
#: the largest cap a common agent framework applies by default, so that a framework's own cap is never taken
#: for a runaway.  pydantic-ai's ``UsageLimits.request_limit`` is 50 requests; LangGraph's ``recursion_limit``
#: was 25 supersteps (about 12 model calls) before 1.x and is 10007 since (no cap in practice); the SDK tool
#: runner's ``max_iterations`` is unset (no cap).  A runaway run of 51 calls takes well under a second, and a
#: loop declaring ``max_steps=N`` gets ``2N + 5`` when that is more.
RUNAWAY_MODEL_CALLS = 51
#: The run-wide bound across sub-agent runs (docs/design.md, Sub-agents), in one user turn: at most this many sub-runs,
#: and this many model calls in all (the run's and its sub-runs'), per model call of the run's own runaway budget.
#: Each sub-run has a fresh budget of its own, so a delegate tool that starts sub-agents for ever is halted here
#: (``stops``, budget ``subagents``).  A parent capped at 10 calls (budget 51) may start 204 sub-runs and make
#: 1,020 calls: three delegations a step to sub-agents capped at 10 (30 sub-runs, at most 310 calls) stay well under.
RUNAWAY_SUBRUNS = 4
RUNAWAY_TOTAL_CALLS = 20


def default_budget(limits: Limits) -> Budget:
    steps = limits.max_steps or 0
    calls = max(RUNAWAY_MODEL_CALLS, 2 * steps + 5)
    return Budget(model_calls=calls, requests=4 * calls + 8)


class Guard:
    """The run's runaway budgets, checked on every request, tool call and virtual sleep.

    The server, the tools and the transports hold its bound methods as callbacks.  Bound methods of
    the Sim would close reference cycles (Sim -> server -> Sim) that keep every finished run, its
    transcript included, alive until a full garbage collection: slow for runs made by the hundred.
    """

    __slots__ = (
        "abandoned", "abort_at", "budget", "calls_before", "clock", "halts", "max_virtual_s", "on_time",
        "requests_before", "sub_calls", "sub_requests", "subs", "subs_begun", "t_before", "transcript", "watchdog",
        "world_s",
    )

    def __init__(self, clock: VirtualClock, watchdog: Watchdog, budget: Budget, max_virtual_s: float) -> None:
        self.clock = clock
        self.watchdog = watchdog
        self.budget = budget
        self.max_virtual_s = max_virtual_s
        self.halts = 0  # LoopHalted raised here (the run's budgets, blocked connections)
        self.abandoned = False  # the run gave up on the loop's thread: a call from it now parks it
        self.transcript: Transcript | None = None  # where a blocked connection is recorded (set by the Sim)
        # the budgets are per user turn: what earlier turns of a conversation spent is left out
        self.calls_before = self.requests_before = 0
        # sub-agent runs (`Sim.subagent`) have runaway budgets of their own: each open one's [calls and requests
        # at its start, its budget, its nested runs' calls and requests]; the run's own count leaves theirs out
        self.subs: list[list[Any]] = []
        self.sub_calls = self.sub_requests = 0
        self.subs_begun = 0  # sub-agent runs started in this turn, nested ones included (the run-wide bound)
        self.t_before = 0.0
        self.world_s = 0.0  # virtual seconds the world took this turn (model and tool latencies): not the loop's own
        self.on_time: Callable[[], None] | None = None  # the abort trigger's clock check
        self.abort_at: float | None = None  # when it fires (virtual seconds), for a wait that spans it

    def turn_began(self, server: SimServer) -> None:
        if not server.requests:  # the first turn: the run's own budgets
            return
        self.calls_before, self.requests_before = server.calls, server.requests
        self.sub_calls = self.sub_requests = self.subs_begun = 0
        self.t_before = self.clock.now()
        self.world_s = 0.0
        self.clock.end_at(self.t_before + self.max_virtual_s)

    def forever(self) -> float:
        """Virtual seconds from the start of the turn past which a wait is unwound as a runaway (`Gate`: a person who
        never answers a loop that sets no bound)."""
        return self.max_virtual_s + self.world_s

    def world(self, seconds: float) -> None:
        """The simulated world is about to take ``seconds`` (a model call's latency, a timed-out call's read timeout, a
        tool's latency for the tool_use it answers): the runaway bound on virtual time moves on by as much.

        Why: the bound is for a loop that runs on in time of its own (sleeps, backoff, waits); a loop inside its
        declared step cap in a slow world (nine rounds of a 590 s model call and an 1,800 s tool) is not a runaway.
        The world's time stays bounded: by the model-call budget, and by the tool_use blocks the model issued.
        """
        if seconds > 0:
            self.world_s += seconds
            self.clock.end_at(self.t_before + self.max_virtual_s + self.world_s)

    def on_request(self, server: SimServer) -> None:
        if _process._FORKED:  # in a child forked during the run: its copy of the simulator is not the run's
            raise forked_call("a model call")
        if self.subs:
            began_calls, began_requests, budget, nested_calls, nested_requests = self.subs[-1]
            calls, requests = server.calls - began_calls - nested_calls, server.requests - began_requests - nested_requests
        else:
            budget = self.budget
            calls = server.calls - self.calls_before - self.sub_calls
            requests = server.requests - self.requests_before - self.sub_requests
        if self.halts or calls > budget.model_calls or requests > budget.requests:
            # a halted loop that calls again caught the halt: no feeding the watchdog, count it (MAX_HALTS)
            where = " in a sub-agent run" if self.subs else " in one user turn" if self.calls_before else ""
            raise self._halt(
                "model_calls",
                f"the loop made {calls} model calls ({requests} requests){where} without stopping; "
                f"simloop stops a {'turn' if where else 'run'} after {budget.model_calls}",
            )
        if self.subs_begun:
            total = server.calls - self.calls_before
            if total > RUNAWAY_TOTAL_CALLS * self.budget.model_calls:
                raise self._halt("subagents", self._bomb(server))
        self.watchdog.feed()
        self.check_time()

    def sub_began(self, server: SimServer, limits: Limits) -> None:
        """A sub-agent run began: its model calls count against a runaway budget of its own, and the run's sub-runs
        against the run-wide bound (`RUNAWAY_SUBRUNS` times the run's own budget, in one user turn)."""
        self.subs_begun += 1
        if self.halts or self.subs_begun > RUNAWAY_SUBRUNS * self.budget.model_calls:
            raise self._halt("subagents", self._bomb(server))
        self.subs.append([server.calls, server.requests, default_budget(limits), 0, 0])

    def _bomb(self, server: SimServer) -> str:
        """What ran away across the sub-runs, in words (a fresh budget each cannot see it)."""
        where = " in one user turn" if self.calls_before else ""
        return (f"the loop started {self.subs_begun} sub-agent runs and made {server.calls - self.calls_before} "
                f"model calls in all{where} without stopping; each sub-run has a runaway budget of its own, and "
                f"simloop stops a {'turn' if where else 'run'} after {RUNAWAY_SUBRUNS * self.budget.model_calls} "
                f"sub-agent runs or {RUNAWAY_TOTAL_CALLS * self.budget.model_calls} model calls across them")

    def sub_ended(self, server: SimServer) -> None:
        if not self.subs:
            return
        began_calls, began_requests = self.subs.pop()[:2]
        calls, requests = server.calls - began_calls, server.requests - began_requests
        if self.subs:
            self.subs[-1][3] += calls
            self.subs[-1][4] += requests
        else:
            self.sub_calls += calls
            self.sub_requests += requests

    def on_tool(self) -> None:
        if _process._FORKED:
            raise forked_call("a tool execution")
        if self.halts:
            raise self._halt("model_calls", "the loop called a tool after simloop halted it")
        self.watchdog.feed()
        self.check_time()

    def sleep(self, seconds: float) -> None:
        at = self.abort_at
        if at is not None and self.clock.now() < at < self.clock.now() + seconds:  # Stop lands mid-wait: then
            rest = self.clock.now() + seconds - at
            self.clock.sleep(at - self.clock.now())
            self.check_time()
            seconds = rest
        self.clock.sleep(seconds)
        self.check_time()

    def check_time(self) -> None:
        if self.on_time is not None:
            self.on_time()
        if self.clock.now() - self.t_before - self.world_s > self.max_virtual_s:
            world = f" beyond the {self.world_s:g} s the model and the tools took" if self.world_s else ""
            raise self._halt(
                "virtual_time",
                f"the run passed {self.max_virtual_s:g} virtual seconds of the loop's own time{world} without stopping",
            )

    def blocked(self, target: str, where: str) -> BaseException:
        """The network guard blocked a connection: halt the loop."""
        return self._halt(
            "network",
            f"the loop opened a real network connection to {target} at {where}; simloop blocked it",
            where=where, target=target,
        )

    def _halt(self, reason: str, detail: str, *, where: str | None = None, target: str | None = None) -> LoopHalted:
        """The halt to raise; the first one is recorded now, in case the loop swallows it."""
        if self.abandoned:
            park()  # the run is over and reported: this thread stops here for good
        self.halts += 1
        if self.transcript is not None and self.transcript.halt is None:
            if where is None:
                where = where_of(sys._getframe(2), skip_libraries=True)
            self.transcript.append(Halt(t=self.clock.now(), budget=reason, detail=detail, where=where, target=target))
        return LoopHalted(reason, detail, where, target)
