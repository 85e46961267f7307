"""A correct agent loop on the synchronous client (``client.messages.create``).

The reference every defect module is a one-bug variant of.  Per step it:

* stops before calling the model when the step cap, the deadline (checked with
  ``time.monotonic()``) or the token budget (summed from ``usage``) is spent;
* leaves transient API errors to the SDK's own retries, and when those give up
  returns ``error`` with the exception text, without re-running any tool;
* switches on ``stop_reason``: ``end_turn``/``stop_sequence`` -> ``final``,
  ``tool_use`` -> run every call and send ALL results back in ONE user message
  (results first, in tool_use order, ``is_error`` when a tool raised; a failed
  write is reported, never retried), ``max_tokens`` -> ``truncated`` without
  running the cut-off calls, ``refusal`` -> ``refusal`` (never resent),
  ``pause_turn`` -> send the paused content back and continue;
* honours the stop policies it is given (`StopPolicies`): after ``max_tool_errors``
  failed tool runs it stops with ``error_budget``; the ``max_writes``-th successful
  write is terminal (``final``: the write is the result); it never runs a tool
  with the same input more than ``max_repeats`` times (``repetition``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam, ToolUseBlock

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
    tool_result,
    with_web_search,
    writes_of,
)

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent", "run_tools", "run_tools_within"]


def run_tools(calls: list[ToolUseBlock], run_tool: RunTool) -> list[ToolResultBlockParam]:
    """Run each call once, in order; a tool that raises becomes an ``is_error`` result."""
    results: list[ToolResultBlockParam] = []
    for call in calls:
        try:
            output: str | Exception = run_tool(call.name, call.input, tool_use_id=call.id)
        except Exception as exc:  # noqa: BLE001 - any tool failure is an observation; a retry might repeat a write
            output = exc
        results.append(tool_result(call, output))
    return results


def run_tools_within(
    calls: list[ToolUseBlock], run_tool: RunTool, policies: StopPolicies, *, stop: Callable[[], bool] = lambda: False
) -> tuple[list[ToolResultBlockParam], Outcome | None]:
    """`run_tools` under the declared stop policies: the results, and the outcome to stop with (or None).

    A call the policies refuse (a repeat past ``max_repeats``) is not run; a failure that spends the error
    budget, or the write that spends the write budget, ends the turn: the loop stops instead of going on.
    ``stop()`` true (the user pressed Stop) ends it before the next call: reason ``aborted``.
    """
    results: list[ToolResultBlockParam] = []
    for call in calls:
        if stop():
            return results, Outcome(reason="aborted", text="stopped by the user")
        halt = policies.before(call.name, call.input)
        if halt is not None:
            return results, halt
        try:
            output: str | Exception = run_tool(call.name, call.input, tool_use_id=call.id)
        except Exception as exc:  # noqa: BLE001 - any tool failure is an observation; a retry might repeat a write
            output = exc
        results.append(tool_result(call, output))
        halt = policies.after(call.name, call.input, output)
        if halt is not None:
            return results, halt
    return results, None


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
    fit: Callable[[list[MessageParam]], None] | None = None,
    prices: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run the task to an honest stop; returns why it stopped and the last text.

    ``writes`` names the tools with side effects (for a declared ``max_writes``).  ``fit``, when given, is called
    with the history before each model call, to keep it inside the context window (`examples.context_trimmed`).
    """
    max_steps, deadline_s, token_budget = budgets(limits)
    policies = StopPolicies(limits, writes)
    started = time.monotonic()
    messages = start_turn(history, task)  # a new conversation, or the next turn of one
    used = 0
    cost = CostMeter(limits, prices)  # the declared max_cost_usd, if any (prices: the scenario's, sim.prices)
    for step in range(max_steps):
        if stop():  # the user pressed Stop: no further model call
            return Outcome(reason="aborted", text="stopped by the user")
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached after {step} model calls")
        if used >= token_budget:
            return Outcome(reason="token_budget", text=f"{used} tokens used of a budget of {token_budget}")
        if (spent := cost.stop()) is not None:
            return spent
        if fit is not None:
            fit(messages)
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
        messages.append({"role": "assistant", "content": reply.content})
        if stop():  # Stop pressed while the model answered: run none of its tool calls
            return Outcome(reason="aborted", text="stopped by the user")

        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue  # the paused turn goes back as the last message, and the model carries on
        if reply.stop_reason in CUT_STOPS:
            # Cut off: not an answer, and a cut tool call's input may be partial, so run nothing.
            return Outcome(reason="truncated", text=text_of(reply.content))
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        results, halt = run_tools_within(tool_calls(reply), run_tool, policies, stop=stop)
        if halt is not None:  # an error budget spent, the write that was the job, a call repeated too often
            if results:  # what ran goes back with the next turn
                messages.append({"role": "user", "content": results})
            return halt
        messages.append({"role": "user", "content": results})
    if stop():  # Stop pressed during the last step's tools
        return Outcome(reason="aborted", text="stopped by the user")
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: run this loop against the simulated API and tools, turn after turn of the conversation
    (``sim.user_turns``: the task, then any follow-ups) through one history."""
    run_tool = durable_run_tool(sim)  # a write runs once, also across a crash and restart
    run_tool = gated_run_tool(sim, run_tool)  # a call that needs approval runs only on the person's yes
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set, prices=sim.prices,
    ))
