"""Defect: puts a ``cache_control`` breakpoint on every block of the last message.

"Cache everything we just sent" marks each tool_result of the turn.  With one to
four results that works; a wide turn (five or more parallel calls) sends five or
more breakpoints, and the real API rejects a request with more than 4 (400
``invalid_request_error``).  `examples.correct_typed` marks only the last block.

Caught by: ``request_valid`` (the simulated API answers the real 400) on
``scenarios/wide-turn-cached.yaml``, once the validator has the rule for more than
4 ``cache_control`` breakpoints (it comes with the server-tools work).
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
        results: list[Any] = run_tools(tool_calls(reply), run_tool)
        if marked is not None:
            for block in marked["content"]:
                del block["cache_control"]
        for block in results:
            block["cache_control"] = _BREAKPOINT  # BUG: one breakpoint per result; the API takes at most 4
        marked = {"content": results}
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> Outcome:
    return run_agent(
        sim.client, typed_tool_params(sim.tool_schemas), typed(sim.run_tool), sim.task, sim.limits, model=sim.model,
        system=sim.system,
    )
