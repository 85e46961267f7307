"""Defect: the error budget is counted per turn, so failures spread over turns never spend it.

The loop declares ``max_tool_errors`` and counts failed tool runs, but the
counter lives inside the turn: a backend that fails once per turn, every
turn, never reaches the budget, and the loop keeps calling the model until
its step cap.  The budget counts failures over the whole run.

Caught by: ``limits`` (a model call after the error budget was spent) on
``scenarios/error-budget.yaml``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam

from examples._common import (
    DEFAULT_MODEL,
    MAX_TOKENS,
    THINKING,
    RunTool,
    budgets,
    text_of,
    tokens_used,
    tool_calls,
    tool_result,
)
from simloop import Outcome

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]


def run_agent(
    client: anthropic.Anthropic,
    tools: list[ToolParam],
    run_tool: RunTool,
    task: str,
    limits: Limits | None = None,
    *,
    model: str = DEFAULT_MODEL,
    system: str | None = None,
) -> Outcome:
    """Run the task; stops on ``max_tool_errors`` failures within one turn only."""
    max_steps, deadline_s, token_budget = budgets(limits)
    started = time.monotonic()
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    for step in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached after {step} model calls")
        if used >= token_budget:
            return Outcome(reason="token_budget", text=f"{used} tokens used of a budget of {token_budget}")
        try:
            reply = client.messages.create(
                model=model,
                max_tokens=MAX_TOKENS,
                thinking=THINKING,
                system=system or anthropic.omit,
                tools=tools,
                messages=messages,
            )
        except anthropic.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        used += tokens_used(reply)
        messages.append({"role": "assistant", "content": reply.content})

        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason == "max_tokens":
            return Outcome(reason="truncated", text=text_of(reply.content))
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        errors = 0  # BUG: reset every turn; the budget is for the run
        results: list[ToolResultBlockParam] = []
        for call in tool_calls(reply):
            try:
                results.append(tool_result(call, run_tool(call.name, call.input, tool_use_id=call.id)))
            except Exception as exc:  # noqa: BLE001 - a tool failure is an observation
                results.append(tool_result(call, exc))
                errors += 1
        if limits is not None and limits.max_tool_errors is not None and errors >= limits.max_tool_errors:
            return Outcome(reason="error_budget", text=f"{errors} tool errors in one turn")
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    """simloop adapter: run this loop against the simulated API and tools."""
    return run_agent(
        sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
