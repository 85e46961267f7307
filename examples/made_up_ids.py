"""Defect: the tool_results carry ids the loop invented, not the model's tool_use ids.

Ported from code that numbered its own calls (``call_1``, ``call_2``, ...), the
loop answers each call under its own id.  The API matches a tool_result to its
tool_use by ``tool_use_id`` only, so none of the model's calls is answered and
the request is rejected (400).

Caught by: ``pairing`` (tool_results whose ids match no tool_use) on
``scenarios/happy-path.yaml``.
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
    error_text,
    text_of,
    tokens_used,
    tool_calls,
    tool_params,
)

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits


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
    max_steps, deadline_s, token_budget = budgets(limits)
    started = time.monotonic()
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    calls_made = 0
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
            calls_made += 1
            call_id = f"call_{calls_made}"  # BUG: must be call.id, the id the model gave this call
            try:
                results.append(
                    {"type": "tool_result", "tool_use_id": call_id, "content": run_tool(call.name, call.input)}
                )
            except Exception as exc:  # noqa: BLE001 - a failing tool is reported to the model
                results.append(
                    {"type": "tool_result", "tool_use_id": call_id, "content": error_text(exc), "is_error": True}
                )
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
