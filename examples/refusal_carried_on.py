"""Defect: a refusal is treated as one more step; the loop appends it, nudges the model and carries on.

The loop keeps the refused reply in its history, adds "Please carry on with the task." and calls the model
again, up to its step cap.  The model declined for a reason: the API's guidance is to stop and surface the
refusal, or reset the context first (remove or rephrase the refused turn) or retry on another model;
carrying on in the same conversation meets more refusals and burns the step budget digging for an answer.

Caught by: ``refusal`` (a further model call in the user turn, carrying on the refused conversation) on
``scenarios/refusal.yaml``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import (
    DEFAULT_MODEL,
    MAX_TOKENS,
    THINKING,
    RunTool,
    budgets,
    text_of,
    tokens_used,
    tool_calls,
    tool_params,
)
from .correct_sync import run_tools

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]

NUDGE = "Please carry on with the task."


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
    """The reference loop, except that a refusal is one more step of the task (the bug)."""
    max_steps, deadline_s, token_budget = budgets(limits)
    started = time.monotonic()
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    for _ in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text="deadline reached")
        if used >= token_budget:
            return Outcome(reason="token_budget", text="token budget spent")
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
        if reply.stop_reason == "refusal":
            if reply.content:
                messages.append({"role": "assistant", "content": reply.content})
            messages.append({"role": "user", "content": NUDGE})
            continue  # BUG: carries on in the refused conversation instead of stopping with 'refusal'
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason == "max_tokens":
            return Outcome(reason="truncated", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    """simloop adapter: run this loop against the simulated API and tools."""
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
