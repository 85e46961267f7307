"""Defect: a paused turn is resumed with a "Continue." user message after it.

On ``pause_turn`` the loop appends the paused content and then a user turn
asking the model to go on, as it would nudge a model cut off mid-text.  When
the turn paused in the middle of a server tool call, the paused content ends
in a ``server_tool_use`` with no result; the real API takes that only as the
final message (then it runs the call), and refuses anything after it with a
400 (``` `web_search` tool use with id ... was found without a corresponding
`web_search_tool_result` block```).  The loop then fails on a request a
correct loop never sends.

Caught by: ``request_valid`` (the rejected request) on
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
    """The reference loop, except for how it resumes a ``pause_turn``."""
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
            messages.append({"role": "user", "content": "Continue."})  # BUG: the paused content must stay last
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
    """simloop adapter: run this loop against the simulated API and tools."""
    tools = with_web_search(sim.tool_schemas)
    return run_agent(sim.client, tools, sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system)
