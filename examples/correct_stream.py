"""A correct agent loop that streams each reply (``client.messages.stream``).

Same rules as `examples.correct_sync`; the difference is how a reply can
fail.  A stream can break after it started: an ``error`` event mid-stream
arrives as an ``anthropic.APIStatusError`` whose status is 200 (the HTTP
response had already begun), and a connection cut mid-body surfaces as an
``anthropic.APIConnectionError`` (anthropic 2.17 and later) or, on older SDKs,
as the ``httpx2`` transport error itself (``RemoteProtocolError``); the SDK
retries neither.  Both end the run as ``error``; nothing from the broken reply is
executed, so no tool runs twice when the caller retries the whole task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
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
    error_text,
    gated_run_tool,
    start_turn,
    text_of,
    tokens_used,
    tool_calls,
    with_web_search,
    writes_of,
)
from .correct_sync import run_tools_within

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]


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
    """Run the task to an honest stop, streaming every reply; returns why it stopped and the last text."""
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
        try:
            with client.messages.stream(
                model=model,
                max_tokens=MAX_TOKENS,
                thinking=THINKING,
                system=system or anthropic.omit,
                tools=tools,
                messages=messages,
            ) as stream:
                reply = stream.get_final_message()
        except (anthropic.APIError, httpx2.HTTPError) as exc:  # includes a stream cut mid-reply
            return Outcome(reason="error", text=error_text(exc))
        used += tokens_used(reply)
        cost.add(reply)
        messages.append({"role": "assistant", "content": reply.content})
        if stop():  # Stop pressed while the model answered: run none of its tool calls
            return Outcome(reason="aborted", text="stopped by the user")

        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason in CUT_STOPS:
            return Outcome(reason="truncated", text=text_of(reply.content))
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            # Also a stream that ended without message_stop: the reply is incomplete, so run nothing.
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
