"""Defect: repetition is counted per tool_use id, which is new on every call, so no call ever repeats.

The loop declares ``max_repeats`` and counts how often it ran each call, but
keys the counter on ``call.id``: the model asking for the same search with the
same input gets a fresh id each time, the count never passes 1, and a stuck
model runs the same lookup until the step cap.  A repeat is the same tool with
the same input.

Caught by: ``limits`` (a tool run with the same input more than
``max_repeats`` times) on ``scenarios/repeated-call.yaml``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam

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
    tool_result,
)

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
    """Run the task; counts repeats per tool_use id."""
    max_steps, deadline_s, token_budget = budgets(limits)
    seen: dict[str, int] = {}
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
        results: list[ToolResultBlockParam] = []
        for call in tool_calls(reply):
            seen[call.id] = seen.get(call.id, 0) + 1  # BUG: keyed by the call's id, not by tool and input
            if limits is not None and limits.max_repeats is not None and seen[call.id] > limits.max_repeats:
                return Outcome(reason="repetition", text=f"{call.name} repeated {seen[call.id]} times")
            try:
                results.append(tool_result(call, run_tool(call.name, call.input, tool_use_id=call.id)))
            except Exception as exc:  # noqa: BLE001 - a tool failure is an observation
                results.append(tool_result(call, exc))
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    """simloop adapter: run this loop against the simulated API and tools."""
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
