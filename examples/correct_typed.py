"""A correct agent loop with typed tools and one cache breakpoint, for wide, schema-checked worlds.

The twin of the defect loops `typed_write_retried`, `cut_calls_run`, `cut_retried_once` and
`cache_control_every_block`.  Per step it:

* validates each tool input against the tool's pydantic model before running it
  (`examples._typed`): a bad input becomes an ``is_error`` result, like any tool
  error, and a failed call (a write included) is reported, never retried;
* sends all of a turn's results in one user message, with one ``cache_control``
  breakpoint on its last block (the previous one removed: the API takes at most 4);
* on ``max_tokens`` runs nothing from the reply (its last call may be cut, and
  the complete ones before it belong to a turn the model did not finish) and
  stops with ``truncated``;
* continues ``pause_turn`` however often it comes (within the step cap), returns
  ``refusal`` on a refusal, and checks its step cap, deadline and token budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import (
    CUT_STOPS,
    DEFAULT_MODEL,
    MAX_TOKENS,
    THINKING,
    CostMeter,
    RunTool,
    StopPolicies,
    budgets,
    converse,
    durable_run_tool,
    gated_run_tool,
    start_turn,
    text_of,
    tokens_used,
    tool_calls,
    with_web_search,
    writes_of,
)
from ._typed import typed, typed_tool_params
from .correct_sync import run_tools_within

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]

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
    writes: frozenset[str] = frozenset(),
    history: list[MessageParam] | None = None,
    stop: Callable[[], bool] = lambda: False,
    prices: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run the task to an honest stop; returns why it stopped and the last text.

    ``writes`` names the tools with side effects (for a declared ``max_writes``).
    """
    max_steps, deadline_s, token_budget = budgets(limits)
    policies = StopPolicies(limits, writes)
    started = time.monotonic()
    messages = start_turn(history, task)  # a new conversation, or the next turn of one
    for message in messages:  # an earlier turn's breakpoint goes: one at a time (the API rejects more than 4)
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict):
                block.pop("cache_control", None)
    used = 0
    cost = CostMeter(limits, prices)  # the declared max_cost_usd, if any (prices: the scenario's, sim.prices)
    marked: dict[str, Any] | None = None  # the block that carries the cache breakpoint
    for step in range(max_steps):
        if stop():  # the user pressed Stop: no further model call
            return Outcome(reason="aborted", text="stopped by the user")
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached after {step} model calls")
        if used >= token_budget:
            return Outcome(reason="token_budget", text=f"{used} tokens used of a budget of {token_budget}")
        if (spent := cost.stop()) is not None:
            return spent
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
        cost.add(reply)
        if stop():  # Stop pressed while the model answered: nothing of the reply runs
            return Outcome(reason="aborted", text="stopped by the user")
        if reply.stop_reason in CUT_STOPS:
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
        results, halt = run_tools_within(tool_calls(reply), run_tool, policies, stop=stop)
        if halt is not None:  # an error budget spent, the write that was the job, a call repeated too often, Stop
            if results:  # what ran goes back with the next turn
                messages.append({"role": "user", "content": results})
            return halt
        if marked is not None:
            del marked["cache_control"]  # one breakpoint at a time: the API rejects more than 4
        marked = dict(results[-1])
        marked["cache_control"] = _BREAKPOINT
        results[-1] = marked  # type: ignore[call-overload]
        messages.append({"role": "user", "content": results})
    if stop():  # Stop pressed during the last step's tools
        return Outcome(reason="aborted", text="stopped by the user")
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: this loop with typed tools, against the simulated API and tools, turn after turn of the
    conversation through one history; Stop wired to ``sim.abort``, a write run once across a crash."""
    run_tool = typed(gated_run_tool(sim, durable_run_tool(sim)))  # once, and only on the person's yes
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(typed_tool_params(sim.tool_schemas)), run_tool, text, sim.limits, model=sim.model,
        system=sim.system, writes=writes_of(sim), history=history, stop=sim.abort.is_set, prices=sim.prices,
    ))
