"""Defect: the loop asks for approval after the write has run.

The gate is wired around the wrong side of the call: the tool runs first, then the loop asks the person, and
a "no" only changes what the model is told.  The email has already gone out.  A correct loop asks before the
call runs (the reference loops: ``examples._common.gated_run_tool``).

Caught by: ``approval`` on ``scenarios/approval-denied.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import Denied, RunTool, converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent

if TYPE_CHECKING:
    from simloop import Outcome, Sim

__all__ = ["drive", "run_agent"]


def asked_after(sim: Sim, run_tool: RunTool) -> RunTool:
    """``run_tool`` with the approval asked once the call has run."""
    gated = frozenset(t.name for t in sim.scenario.tools if t.gated)

    def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        output = run_tool(name, input, tool_use_id=tool_use_id)
        if name in gated and not sim.approve(name, input, tool_use_id=tool_use_id):  # the bug: too late
            raise Denied(f"the user did not approve {name}")
        return output

    return run


def drive(sim: Sim) -> list[Outcome]:
    """The reference loop (`examples.correct_sync`) with the approval asked after the call."""
    run_tool = asked_after(sim, durable_run_tool(sim))
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))
