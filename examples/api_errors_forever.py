"""Defect: every API error is caught and the call retried forever.

The loop switches the SDK's retries off ("we retry ourselves") and then
retries any ``APIError`` in an unbounded loop with a fixed pause.  A transient
blip is survived; a long outage (529 after 529), a bad request or a revoked key
is retried until someone kills the process, and the step cap never sees it
because the retries happen inside one step.

Caught by: ``stops`` (simloop has to unwind the runaway retries) on
``scenarios/outage.yaml``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import Message, MessageParam, ToolParam

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

RETRY_PAUSE_S = 2.0


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
    client = client.with_options(max_retries=0)  # "we retry ourselves"
    max_steps, deadline_s, token_budget = budgets(limits)
    started = time.monotonic()
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    for _ in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text="deadline reached")
        if used >= token_budget:
            return Outcome(reason="token_budget", text="token budget spent")
        reply: Message | None = None
        while reply is None:  # BUG: no attempt limit, no deadline check, every error retried
            try:
                reply = client.messages.create(
                    model=model,
                    max_tokens=MAX_TOKENS,
                    thinking=THINKING,
                    system=system or anthropic.omit,
                    tools=tools,
                    messages=messages,
                )
            except anthropic.APIError:
                time.sleep(RETRY_PAUSE_S)
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
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
