"""Defect: a tool call that raised is retried by the loop, writes included.

"Tools are flaky, so try three times" reads as robustness.  For a write whose
effect committed before the error came back (the email went out, the reply
timed out), every retry does the write again: three emails, three refunds.
Report the error to the model instead; it can check before acting again.

Caught by: ``no_rerun`` (a completed write executed again) on
``scenarios/commit-then-lost.yaml``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam, ToolUseBlock

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

TOOL_ATTEMPTS = 3


def run_with_retries(call: ToolUseBlock, run_tool: RunTool) -> ToolResultBlockParam:
    """Run one call, retrying when it raises; the last error is reported."""
    for _ in range(TOOL_ATTEMPTS):
        try:
            return tool_result(call, run_tool(call.name, call.input, tool_use_id=call.id))
        except Exception as exc:  # noqa: BLE001  BUG: retries a write whose effect may already have happened
            error = exc
    return tool_result(call, error)


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
        messages.append({"role": "user", "content": [run_with_retries(call, run_tool) for call in tool_calls(reply)]})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
