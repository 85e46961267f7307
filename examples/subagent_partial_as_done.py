"""Defect: the delegate tool hands the parent whatever text its sub-agent left, finished or not.

``correct_delegate`` with one bug: the tool returns the sub-agent's last text
whatever the sub-run's outcome.  A sub-agent cut off at ``max_tokens`` (or
stopped by its step cap) leaves a confident-looking partial summary, and the
parent takes it as the finished result.

Caught by: ``subagent_honest`` (the tool_result for a sub-run that stopped
with ``truncated`` reads as complete) on ``scenarios/subagent-truncated.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from simloop import Outcome

from . import correct_sync
from .correct_delegate import DELEGATE, SUB_LIMITS, TOOLS, run_subagent

if TYPE_CHECKING:
    from simloop import Sim

__all__ = ["TOOLS", "drive", "run_agent"]

run_agent = correct_sync.run_agent


def delegate_tool(sim: Sim) -> Callable[..., str]:
    def delegate(task: str = "", **_: object) -> str:
        if not isinstance(task, str) or not task.strip():
            raise ValueError("delegate needs a non-empty task")
        outcome = sim.subagent(task, limits=SUB_LIMITS).run(run_subagent)
        return outcome.text or "Done."  # BUG: a cut or capped sub-run reported as finished

    return delegate


def drive(sim: Sim) -> list[Outcome]:
    if any(t["name"] == DELEGATE.name for t in sim.tool_schemas):
        sim.bind_tool(DELEGATE.name, delegate_tool(sim))
    return correct_sync.drive(sim)
