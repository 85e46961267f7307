"""Defect: when a model call fails, the retry re-executes the previous turn's tools.

The loop treats "run the pending tool calls, then ask the model" as one step
and retries the whole step when the API call fails (a 529 burst outlasting the
SDK's own retries).  The tools ran fine the first time; the retry runs them
again, and a write (an email, a payment) happens twice.  Retry the model call
alone, with the results already computed.

Caught by: ``no_rerun`` (a completed write executed again after an API error)
on ``scenarios/overload-after-write.yaml``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import Message, MessageParam, ToolParam, ToolUseBlock

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

STEP_ATTEMPTS = 3


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
    pending: list[ToolUseBlock] = []  # tool calls of the last reply, answered at the start of the next step
    used = 0
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "thinking": THINKING,
        "system": system or anthropic.omit,
    }

    def step() -> tuple[list[MessageParam], Message]:
        """Run the pending tools, then ask the model; returns the conversation sent and the reply."""
        sent = messages + ([{"role": "user", "content": run_tools(pending, run_tool)}] if pending else [])
        return sent, client.messages.create(tools=tools, messages=sent, **params)

    for _ in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text="deadline reached")
        if used >= token_budget:
            return Outcome(reason="token_budget", text="token budget spent")
        for attempt in range(STEP_ATTEMPTS):
            try:
                messages, reply = step()  # BUG: a retry of the step runs the pending tools again
                break
            except anthropic.APIError as exc:
                if attempt == STEP_ATTEMPTS - 1:
                    return Outcome(reason="error", text=str(exc))
        used += tokens_used(reply)
        messages.append({"role": "assistant", "content": reply.content})
        pending = []

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
        pending = tool_calls(reply)
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
