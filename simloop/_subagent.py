"""Sub-agents: a loop a tool runs, on the same simulated API, with a context of its own (``sim.subagent``).

The seeds: "a subagent is the same loop, started fresh", and "the main loop can't tell a complete summary
from a confident partial one".  A `SubAgent` marks where its run begins and ends in the transcript
(`SubagentStart` / `SubagentEnd`, with the reason its loop gave), so the invariants check it as a run of its
own (docs/design.md, Sub-agents) and the parent's tool_result can be held to what the sub-run did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import Token
from typing import Any, Self

from simloop.errors import UsageError
from simloop.outcome import Outcome
from simloop.scenario import Limits
from simloop.transcript import SUBRUN, SubagentEnd, SubagentStart

__all__ = ["SubAgent"]


class SubAgent:
    """One sub-agent run: the parent run's simulated API and tools, a fresh context (its own task, tools and limits).

    Use it as the drive of the sub-agent's loop: ``outcome = sim.subagent(task).run(drive)``, where ``drive(sub)``
    reads ``sub.client`` (or ``sub.openai_client``), ``sub.tool_schemas``, ``sub.run_tool``, ``sub.task``, ``sub.limits`` as a drive reads
    the Sim's, and returns the sub-agent's `Outcome`.  Or as a context: ``with sim.subagent(task) as sub: ...;
    sub.finish(outcome)``.  Every model call and tool execution between its start and its end is the sub-run's.

    Example (a delegate tool, bound with ``sim.bind_tool("delegate", delegate)``)::

        def delegate(task: str) -> str:
            outcome = sim.subagent(task, limits=simloop.Limits(max_steps=4)).run(my_drive)
            if outcome.reason != "final":   # a cut, capped or failed sub-run is not a result
                raise RuntimeError(f"the sub-agent stopped early ({outcome.reason}): {outcome.text}")
            return outcome.text
    """

    def __init__(self, sim: Any, run: int, task: str, *, tools: Sequence[str] | None, limits: Limits | None) -> None:
        self._sim = sim
        self.number = run
        self.task = task
        self.limits = limits if limits is not None else Limits()
        running = sim.tools.running()
        self._in = running
        names = [t.name for t in sim.scenario.tools]
        if tools is None:  # every tool but the one it runs in: no recursion unless asked for
            tools = [n for n in names if running is None or n != running.tool]
        unknown = [n for n in tools if n not in names]
        if unknown:
            raise UsageError(
                f"sim.subagent(tools=...): {unknown[0]!r} is not a tool of this run (its tools: {', '.join(names)})"
            )
        self.tools = list(tools)
        self.outcome: Outcome | None = None
        self._started = False
        self._ended = False
        self._token: Token[int | None] | None = None

    # -- what the sub-agent's loop uses (the Sim's names) --------------------------------------------------------

    @property
    def client(self) -> Any:
        """The SDK client on the run's simulated API (the parent's own: calls in the sub-run are the sub-run's)."""
        return self._sim.client

    @property
    def async_client(self) -> Any:
        return self._sim.async_client

    @property
    def openai_client(self) -> Any:
        """The ``openai`` client on the run's simulated API (the parent's own, as `client`): a sub-agent loop on the
        Chat Completions or Responses wire reads it as a drive reads ``sim.openai_client``."""
        return self._sim.openai_client

    @property
    def async_openai_client(self) -> Any:
        return self._sim.async_openai_client

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The sub-agent's tools as the API's ``tools`` parameter takes them."""
        return [t.schema_dict() for t in self._sim.scenario.tools if t.name in self.tools]

    @property
    def model(self) -> str:
        return str(self._sim.model)

    @property
    def system(self) -> str | None:
        return None

    @property
    def prices(self) -> dict[str, dict[str, float]]:
        return dict(self._sim.prices)

    @property
    def abort(self) -> Any:
        """The user's Stop button: the parent's (Stop stops the sub-agent too)."""
        return self._sim.abort

    def run_tool(self, name: str, input: Any, *, tool_use_id: str | None = None) -> str:
        """Run one of the sub-agent's tools (the run's `ToolBox`: faults, ledger, virtual time), as the sub-run's
        from whatever thread its loop runs it on."""
        token = SUBRUN.set(self.number)
        try:
            return str(self._sim.run_tool(name, input, tool_use_id=tool_use_id))
        finally:
            SUBRUN.reset(token)

    async def arun_tool(self, name: str, input: Any, *, tool_use_id: str | None = None) -> str:
        token = SUBRUN.set(self.number)
        try:
            return str(await self._sim.arun_tool(name, input, tool_use_id=tool_use_id))
        finally:
            SUBRUN.reset(token)

    # -- the run -------------------------------------------------------------------------------------------------

    def run(self, drive: Callable[[SubAgent], Any]) -> Outcome:
        """Run ``drive(self)`` as the sub-agent's loop; returns (and records) the `Outcome` it returned.  An
        exception escaping it is recorded as the sub-run's and raised on to the tool."""
        with self:
            outcome = Outcome.coerce(drive(self))
            self.finish(outcome)
        return outcome

    def finish(self, outcome: Outcome | tuple[str, str]) -> None:
        """Say how the sub-agent's loop stopped (recorded when the context ends)."""
        self.outcome = Outcome.coerce(outcome)

    def __enter__(self) -> Self:
        if self._started:
            raise UsageError("a sim.subagent(...) runs once; start another for another run")
        self._started = True
        self._sim._guard.sub_began(self._sim.server, self.limits)
        self._sim.transcript.append(SubagentStart(
            t=self._sim.clock.now(), run=self.number, task=self.task,
            exec=self._in.exec if self._in is not None else None, tool=self._in.tool if self._in is not None else None,
            limits=self.limits.model_dump(exclude_none=True), parent=SUBRUN.get() or 0,
        ))
        self._token = SUBRUN.set(self.number)  # what the loop does in this context from here is the sub-run's
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self._ended = True
        if self._token is not None:
            try:
                SUBRUN.reset(self._token)
            except ValueError:  # ended in another context than it began in: that one is left as it was
                pass
        self._sim._guard.sub_ended(self._sim.server)
        end = SubagentEnd(t=self._sim.clock.now(), run=self.number)
        if exc is not None and isinstance(exc, Exception):
            end.reason, end.exception = "error", f"{type(exc).__name__}: {exc}"
        elif exc is None and self.outcome is not None:
            end.reason, end.text = self.outcome.reason, self.outcome.text
        self._sim.transcript.append(end)

    def __repr__(self) -> str:
        return f"SubAgent({self.task!r}, run={self.number}, tools={self.tools!r}, limits={self.limits!r})"
