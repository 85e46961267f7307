"""Defect: with typed tools, a tool call that raised is retried by the loop, writes included.

`examples.correct_typed` with one change: a tool error is retried (three attempts)
instead of reported.  The tools are typed (each input is validated against the
tool's pydantic model first), as tools usually are: a world whose generated inputs
ignored the schemas never got a write past validation, so the retry was never seen
re-running one.  With inputs drawn from the schemas the write runs, its effect
commits before the error comes back, and the retry sends the email again.

Caught by: ``no_rerun`` (a completed write executed again) on
``scenarios/typed-write-lost.yaml``; under `simloop.verify` also ``tool_errors``
when the last attempt's exception is what the loop reports.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import DEFAULT_MODEL, MAX_TOKENS, THINKING, RunTool, budgets, text_of, tokens_used, tool_calls
from ._typed import typed, typed_tool_params
from .tool_retry_on_error import run_with_retries

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

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
    marked: dict[str, Any] | None = None  # the block that carries the cache breakpoint
    for step in range(max_steps):
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached after {step} model calls")
        if used >= token_budget:
            return Outcome(reason="token_budget", text=f"{used} tokens used of a budget of {token_budget}")
        try:
            reply = client.messages.create(
                model=model,
                max_tokens=MAX_TOKENS,
                thinking=THINKING,
                system=system or anthropic.omit,
                tools=tools,
                messages=messages,
            )
        except anthropic.APIError as exc:  # the SDK has already retried what is worth retrying
            return Outcome(reason="error", text=str(exc))
        used += tokens_used(reply)
        if reply.stop_reason == "max_tokens":
            # Cut off: not an answer, and nothing of it runs (its last call may be cut, and the ones before it
            # belong to a turn the model did not finish)
            return Outcome(reason="truncated", text=text_of(reply.content))
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue  # the paused turn goes back as the last message, and the model carries on
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        # BUG: a failed call is run again, a write whose effect already happened included
        results: list[Any] = [run_with_retries(call, run_tool) for call in tool_calls(reply)]
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
