"""Defect: the loop declares a deadline but never looks at the clock.

``deadline_s`` arrives with the limits and is kept, but nothing compares it
with elapsed time, so a slow tool (a search backend taking 45 s a call) pushes
the run far past the deadline while the loop keeps calling the model.

Caught by: ``limits`` (a model call started after ``deadline_s``) on
``scenarios/slow-tool-deadline.yaml``.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger(__name__)


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
    log.info("agent: up to %d steps, deadline %gs", max_steps, deadline_s)  # BUG: logged, never checked
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    for _ in range(max_steps):
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
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
