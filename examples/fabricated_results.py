"""Defect: every tool call is answered "ok", and no tool ever runs.

A stub left in from development (``run_tool`` replaced by ``lambda name, input: "ok"``), or a dispatch
table keyed wrongly, makes this bug: the loop answers each tool_use with a result that reads as a
success although nothing ran.  The requests are valid and the pairing is perfect; the model is told
that work was done which never was (an email "sent", an order "looked up").

Caught by: ``results_real`` (a tool_result reporting a success that no execution produced) on
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
    budgets,
    text_of,
    tokens_used,
    tool_calls,
    tool_params,
)

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]


def run_agent(
    client: anthropic.Anthropic,
    tools: list[ToolParam],
    task: str,
    limits: Limits | None = None,
    *,
    model: str = DEFAULT_MODEL,
    system: str | None = None,
) -> Outcome:
    """The reference loop with its tools stubbed out: it never receives a ``run_tool`` at all."""
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
        results: list[ToolResultBlockParam] = [
            {"type": "tool_result", "tool_use_id": call.id, "content": "ok"}  # BUG: nothing ran
            for call in tool_calls(reply)
        ]
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(sim.client, tool_params(sim.tool_schemas), sim.task, sim.limits, model=sim.model, system=sim.system)
