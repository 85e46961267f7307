"""A correct loop with a delegate tool: ``correct_sync``, whose ``delegate`` tool runs a sub-agent.

The seeds: "a subagent is the same loop, started fresh", and "the main loop
can't tell a complete summary from a confident partial one".  The delegate
tool starts a sub-agent on the same simulated API (``sim.subagent``): the same
loop (``correct_sync.run_agent``), a fresh history, its own task, tools and
step cap.  What the sub-run did decides what the parent is told:

* the sub-agent answered (``final``): its answer is the tool's result;
* it stopped short (``max_steps``, ``truncated``, ``error``, ...): the tool
  raises, so the parent's tool_result is ``is_error`` and says why, and the
  model never takes a partial answer for a finished one.

Bound from the drive (``sim.bind_tool``) when the run has a ``delegate`` tool;
otherwise it is ``correct_sync`` unchanged.  ``TOOLS`` is what it is verified
with (``verify(drive, tools=TOOLS)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from simloop import Limits, Outcome, ToolSpec
from simloop.strategies import DEFAULT_TOOLS

from . import correct_sync
from ._common import tool_params

if TYPE_CHECKING:
    from simloop import Sim
    from simloop._subagent import SubAgent

__all__ = ["DELEGATE", "SUB_LIMITS", "TOOLS", "delegate_tool", "drive", "run_agent", "run_subagent"]

run_agent = correct_sync.run_agent
#: The delegate tool: hand a self-contained task to a sub-agent.
DELEGATE = ToolSpec(
    name="delegate",
    kind="read",
    description="Hand a self-contained research task to a sub-agent; returns its findings.",
    input_schema={"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
)
#: The tools this loop is verified with: the default ones and the delegate.
TOOLS = [*DEFAULT_TOOLS, DELEGATE]
#: What the sub-agent's loop declares: a small step cap of its own.
SUB_LIMITS = Limits(max_steps=4)


def run_subagent(sub: SubAgent) -> Outcome:
    """The sub-agent: the same loop, started fresh on the sub-run's task and tools."""
    return run_agent(
        sub.client, tool_params(sub.tool_schemas), sub.run_tool, sub.task, sub.limits, model=sub.model,
        stop=sub.abort.is_set, prices=sub.prices,
    )


def delegate_tool(sim: Sim) -> Callable[..., str]:
    """The delegate tool's implementation in this run."""

    def delegate(task: str = "", **_: object) -> str:
        if not isinstance(task, str) or not task.strip():
            raise ValueError("delegate needs a non-empty task")
        outcome = sim.subagent(task, limits=SUB_LIMITS).run(run_subagent)
        if outcome.reason != "final":  # a capped, cut or failed sub-run is not a result: say so, as an error
            raise RuntimeError(f"the sub-agent stopped early ({outcome.reason}): {outcome.text[:200]}")
        return outcome.text or "The sub-agent finished with no text."

    return delegate


def drive(sim: Sim) -> list[Outcome]:
    if any(t["name"] == DELEGATE.name for t in sim.tool_schemas):
        sim.bind_tool(DELEGATE.name, delegate_tool(sim))
    return correct_sync.drive(sim)
