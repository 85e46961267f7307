"""Defect: retries a cut-off reply once, then takes the second cut-off as the answer.

On ``max_tokens`` the loop retries the turn with a larger ``max_tokens``, which is
right; but it assumes the retry cannot be cut too, and returns whatever comes back
as final.  A model that runs long once usually runs long again: the second reply is
cut as well, and the user gets half an answer reported as done.  A loop that
retries must stop with ``truncated`` when the retry is cut again
(`examples.correct_typed` stops with it at the first cut-off).

Caught by: ``truncation`` (a ``max_tokens`` reply reported as final) on
``scenarios/max-tokens-again.yaml``, and by `simloop.verify` once its model is cut
off again on the retry (``ending_repeats`` in the plan).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import DEFAULT_MODEL, MAX_TOKENS, THINKING, RunTool, budgets, text_of, tokens_used, tool_calls
from ._typed import typed, typed_tool_params
from .correct_sync import run_tools

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

#: The output limit of the one retry after a cut-off.
RETRY_MAX_TOKENS = 4 * MAX_TOKENS
_BREAKPOINT = {"type": "ephemeral"}


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
    max_tokens = MAX_TOKENS
    marked: dict[str, Any] | None = None  # the block that carries the cache breakpoint
    for step in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached after {step} model calls")
        if used >= token_budget:
            return Outcome(reason="token_budget", text=f"{used} tokens used of a budget of {token_budget}")
        try:
            reply = client.messages.create(
                model=model,
                max_tokens=max_tokens,
                thinking=THINKING,
                system=system or anthropic.omit,
                tools=tools,
                messages=messages,
            )
        except anthropic.APIError as exc:  # the SDK has already retried what is worth retrying
            return Outcome(reason="error", text=str(exc))
        used += tokens_used(reply)
        if reply.stop_reason == "max_tokens":
            # Cut off: nothing of it runs; one retry of the same turn with more room (that much is right)
            if max_tokens < RETRY_MAX_TOKENS:
                max_tokens = RETRY_MAX_TOKENS
                continue
            return Outcome(reason="final", text=text_of(reply.content))  # BUG: the retry was cut off too
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue  # the paused turn goes back as the last message, and the model carries on
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        results: list[Any] = run_tools(tool_calls(reply), run_tool)
        if marked is not None:
            del marked["cache_control"]  # one breakpoint at a time: the API rejects more than 4
        marked = results[-1]
        marked["cache_control"] = _BREAKPOINT
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, typed_tool_params(sim.tool_schemas), typed(sim.run_tool), sim.task, sim.limits, model=sim.model,
        system=sim.system,
    )
