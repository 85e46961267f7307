"""A correct agent loop with other policies than `examples.correct_sync`'s, equally honest.

The curated scenarios say what *every* correct loop shows, not what one loop's
policy does; this loop is there to keep them honest.  Per step it:

* stops before calling the model when the step cap, the deadline or the token
  budget is spent (each of its own attempts is a model call and counts);
* detects repetition: when the model asks for exactly the same tool calls
  (names and inputs) as on the previous two turns, it stops with
  ``repetition`` instead of running them a third time;
* retries a reply cut off at ``max_tokens`` once with twice the room (the cut
  reply is dropped, its tool calls never run), and reports ``truncated`` only
  when the retry is cut too;
* turns the SDK's retries off and keeps an error budget of its own: a failed
  call is retried after a backoff on the (virtual) clock, without re-running
  any tool, until ``ERROR_BUDGET`` calls have failed, then it stops with
  ``error_budget``; a request the API refused (400: malformed, or over the
  context window) is never resent: it stops with ``error``;
* otherwise does what `examples.correct_sync` does (all results in one user
  message, ``is_error`` for a tool that raised, a failed write reported and
  never retried, ``pause_turn`` continued, a refusal never resent, the stop
  policies it is given honoured: `StopPolicies`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam, ToolUseBlock

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
from .correct_sync import run_tools_within

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["ERROR_BUDGET", "REPEATS", "drive", "run_agent"]

#: Failed model calls the loop accepts in one run before it gives up with ``error_budget``.
ERROR_BUDGET = 4
#: The same tool calls on this many turns running is a model going round in circles.
REPEATS = 3
#: How many times a cut-off reply is retried with twice the room.
ROOMIER_RETRIES = 1


def _signature(calls: list[ToolUseBlock]) -> str:
    """What the model asked for, ids left out: the same calls on two turns give the same signature."""
    return json.dumps([(c.name, c.input) for c in calls], sort_keys=True, default=str)


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
    client = client.with_options(max_retries=0)  # this loop retries itself, against its own error budget
    started = time.monotonic()
    messages = start_turn(history, task)  # a new conversation, or the next turn of one
    used = errors = cut = 0
    cost = CostMeter(limits, prices)  # the declared max_cost_usd, if any (prices: the scenario's, sim.prices)
    max_tokens = MAX_TOKENS
    recent: list[str] = []
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
                max_tokens=max_tokens,
                thinking=THINKING,
                system=system or anthropic.omit,
                tools=tools,
                messages=messages,
            )
        except anthropic.BadRequestError as exc:  # the same request is refused again: never resent (a 400)
            return Outcome(reason="error", text=str(exc))
        except anthropic.APIError as exc:
            errors += 1
            if errors >= ERROR_BUDGET:
                return Outcome(reason="error_budget", text=f"{errors} failed model calls: {exc}")
            time.sleep(min(2.0**errors, 30.0))  # back off, then send the same request again
            continue
        used += tokens_used(reply)
        cost.add(reply)
        if stop():  # Stop pressed while the model answered: run none of its tool calls, retry nothing
            return Outcome(reason="aborted", text="stopped by the user")

        if reply.stop_reason in CUT_STOPS:
            # Cut off: not an answer, and a cut tool call's input may be partial, so run nothing; ask again
            # with more room (the cut reply is not kept), and give up when that is cut too.
            if cut >= ROOMIER_RETRIES:
                return Outcome(reason="truncated", text=text_of(reply.content))
            cut += 1
            max_tokens *= 2
            continue
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        calls = tool_calls(reply)
        recent = [*recent, _signature(calls)][-REPEATS:]
        if len(recent) == REPEATS and len(set(recent)) == 1:
            return Outcome(reason="repetition", text=f"the model asked for the same tool calls {REPEATS} times running")
        results, halt = run_tools_within(calls, run_tool, policies, stop=stop)
        if halt is not None:  # a declared error budget spent, the write that was the job, a call repeated too often
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
