"""Defect: no step cap; the loop runs until the model says it is done.

``while True`` trusts the model to stop.  A model that repeats the same search
forever (a stuck sample, a tool result it cannot use) keeps the loop calling
and billing with nothing to end it: the deadline and token checks are there,
but cheap, fast calls stay under both for a very long time.

Caught by: ``stops`` (simloop has to unwind the runaway loop) on
``scenarios/stuck-search.yaml``.
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
    _, deadline_s, token_budget = budgets(limits)  # BUG: the step cap is never used
    started = time.monotonic()
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    while True:  # BUG: only the model (or a slow clock, or a huge bill) ends this
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
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
