"""Defect: the person's yes for one call is reused for the next call of the same tool, whatever its input.

The loop remembers that the person approved ``send_email`` and stops asking: the second email, to someone
else, goes out on the yes given to the first.  A correct loop asks for each call (the reference loops:
``examples._common.gated_run_tool``).

Caught by: ``approval`` on ``scenarios/approval-two-emails.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import Denied, RunTool, converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent

if TYPE_CHECKING:
    from simloop import Outcome, Sim

__all__ = ["drive", "run_agent"]


def approved_once(sim: Sim, run_tool: RunTool) -> RunTool:
    """``run_tool`` behind a gate that asks once per tool and remembers the yes."""
    gated = frozenset(t.name for t in sim.scenario.tools if t.gated)
    approved: set[str] = set()

    def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        if name in gated and name not in approved:  # the bug: keyed by the tool, not the call
            if not sim.approve(name, input, tool_use_id=tool_use_id):
                raise Denied(f"the user did not approve {name}; it was not run")
            approved.add(name)
        return run_tool(name, input, tool_use_id=tool_use_id)

    return run


def drive(sim: Sim) -> list[Outcome]:
    """The reference loop (`examples.correct_sync`) with a yes remembered per tool."""
    run_tool = approved_once(sim, durable_run_tool(sim))
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))
