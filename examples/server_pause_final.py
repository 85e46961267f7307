"""Defect: a pause in the middle of a server tool call is taken as the final answer.

The loop continues a ``pause_turn`` only when the paused turn ends in text (a
model "still writing"), and takes a turn that ends in a ``server_tool_use``
as finished ("the search is the server's business").  But a turn paused mid
server call is the common case: the call is still running and the paused
content must go back to be continued; the "answer" returned is a progress note.

Caught by: ``honest_outcome`` (``pause_turn`` reported as final) on
``scenarios/pause-turn-server-tool.yaml``.
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
    with_web_search,
)
from .correct_sync import run_tools

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
    """The reference loop, except for how it reads a ``pause_turn``."""
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
            if reply.content and reply.content[-1].type == "text":
                continue
            return Outcome(reason="final", text=text_of(reply.content))  # BUG: the server call is still running
        if reply.stop_reason == "max_tokens":
            return Outcome(reason="truncated", text=text_of(reply.content))
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    """simloop adapter: run this loop against the simulated API and tools."""
    tools = with_web_search(sim.tool_schemas)
    return run_agent(sim.client, tools, sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system)
