"""Defect: every ``stop_reason`` other than ``tool_use`` is taken as "done".

The one-line stop rule of many hand-written loops (``if stop_reason !=
"tool_use": break``).  It is right for ``end_turn`` and wrong for everything
else: a reply cut off at ``max_tokens`` (thinking can spend the whole budget
before a word is written) is reported as a clean final answer.

Caught by: ``truncation`` (a ``max_tokens`` reply reported as final) on
``scenarios/max-tokens-thinking.yaml``.
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

        if reply.stop_reason != "tool_use":  # BUG: max_tokens, refusal, pause_turn all look "done" here
            return Outcome(reason="final", text=text_of(reply.content))
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, with_web_search(sim.tool_schemas), sim.run_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
