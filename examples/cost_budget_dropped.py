"""Defect: the loop declares a cost budget, but the limits it passes on leave it out.

The same loop as ``correct_sync``, behind a settings layer written before cost
budgets existed: it copies the step cap, the deadline and the token budget
into the loop's limits and drops ``max_cost_usd``.  The loop prices nothing,
so a run of a few expensive calls spends past the budget.

Caught by: ``limits`` (a model call after the replies had cost ``max_cost_usd``)
on ``scenarios/cost-budget.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simloop import Outcome
from simloop.scenario import Limits

from ._common import converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent

if TYPE_CHECKING:
    from simloop import Sim


def forwarded(limits: Limits) -> Limits:
    """The limits the loop is built with."""
    # BUG: a field list from before max_cost_usd; the cost budget never reaches the loop
    return Limits(
        max_steps=limits.max_steps, deadline_s=limits.deadline_s, max_total_tokens=limits.max_total_tokens,
        max_tool_errors=limits.max_tool_errors, max_writes=limits.max_writes, max_repeats=limits.max_repeats,
    )


def drive(sim: Sim) -> list[Outcome]:
    run_tool = durable_run_tool(sim)
    limits = forwarded(sim.limits)
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set, prices=sim.prices,
    ))
