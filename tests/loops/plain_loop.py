"""A correct single-turn agent loop, written as a user would from the README alone.

A plain history list, tools run by name and input (no tool_use ids passed to simloop), a step cap, a
deadline and a token budget, and nothing else: no Stop button, no durable store, no follow-up turns, no
error or write budget, no repetition detection.  Its caps take the run's declared limits when there are
some (``sim.limits``), so the loop can claim those three policies (``--claims max_steps,deadline_s,
max_total_tokens``), and its own defaults otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic

import simloop

MAX_STEPS = 10
DEADLINE_S = 300.0
TOKEN_BUDGET = 200_000


def run_agent(
    client: anthropic.Anthropic,
    tools: list[Any],
    run_tool: Callable[[str, Any], str],
    task: str,
    *,
    max_steps: int = MAX_STEPS,
    deadline_s: float = DEADLINE_S,
    token_budget: int = TOKEN_BUDGET,
) -> tuple[str, str]:
    """Run ``task`` to a stop; returns (reason, last text)."""
    history: list[Any] = [{"role": "user", "content": task}]
    started = time.monotonic()
    used = 0
    text = ""
    for _ in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return "deadline", text
        if used >= token_budget:
            return "token_budget", text
        try:
            reply = client.messages.create(
                model="claude-sonnet-4-5", max_tokens=1024, tools=tools, messages=history
            )
        except anthropic.APIError as exc:
            return "error", str(exc)
        used += reply.usage.input_tokens + reply.usage.output_tokens
        text = "".join(block.text for block in reply.content if block.type == "text")
        history.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return "final", text
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason in ("max_tokens", "model_context_window_exceeded"):  # cut off: not an answer
            return "truncated", text
        if reply.stop_reason == "refusal":
            return "refusal", text
        results = []
        for block in reply.content:
            if block.type != "tool_use":
                continue
            try:
                output, failed = run_tool(block.name, block.input), False
            except Exception as exc:  # noqa: BLE001 - a tool's failure goes back to the model
                output, failed = f"{type(exc).__name__}: {exc}", True
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": failed})
        history.append({"role": "user", "content": results})
    return "max_steps", text


def drive(sim: simloop.Sim) -> simloop.Outcome:
    """The README's five-line adapter, with the run's declared limits passed to the loop's caps."""
    limits = sim.limits
    reason, text = run_agent(
        sim.client, sim.tool_schemas, sim.run_tool, sim.task,
        max_steps=limits.max_steps or MAX_STEPS,
        deadline_s=limits.deadline_s or DEADLINE_S,
        token_budget=limits.max_total_tokens or TOKEN_BUDGET,
    )
    return simloop.Outcome(reason=reason, text=text)
