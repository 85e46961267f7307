"""Defect: a denied call is answered as if it had succeeded.

On a "no" the loop skips the call but answers the model with a plain result ("ok"), so the model believes
the email went out and tells the user so.  A correct loop tells the model the call was denied (an
``is_error`` tool_result saying so: the reference loops raise ``examples._common.Denied``).

Caught by: ``approval`` on ``scenarios/approval-denied.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import RunTool, converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent

if TYPE_CHECKING:
    from simloop import Outcome, Sim

__all__ = ["drive", "run_agent"]


def swallowing(sim: Sim, run_tool: RunTool) -> RunTool:
    """``run_tool`` behind a gate that answers a denied call with a success."""
    gated = frozenset(t.name for t in sim.scenario.tools if t.gated)

    def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        if name in gated and not sim.approve(name, input, tool_use_id=tool_use_id):
            return "ok"  # the bug: the model is told it worked
        return run_tool(name, input, tool_use_id=tool_use_id)

    return run


def drive(sim: Sim) -> list[Outcome]:
    """The reference loop (`examples.correct_sync`) with denials answered "ok"."""
    run_tool = swallowing(sim, durable_run_tool(sim))
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))
