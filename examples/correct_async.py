"""A correct agent loop on the async client, running parallel tool calls concurrently.

Same rules as `examples.correct_sync`, with two async habits done right:

* the calls of one turn run together with ``asyncio.gather`` and every one of
  them is awaited (or cancelled and awaited) before the loop moves on or
  returns, so no tool is still running after the loop has said it is done;
* the deadline is measured on the event loop's clock (``loop.time()``) and
  also bounds the tool phase: ``asyncio.wait_for`` cancels the stragglers and
  waits for the cancellation to finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam, ToolUseBlock

from simloop import Outcome

from ._common import (
    CUT_STOPS,
    DEFAULT_MODEL,
    MAX_TOKENS,
    THINKING,
    ARunTool,
    CostMeter,
    StopPolicies,
    aconverse,
    budgets,
    durable_arun_tool,
    gated_arun_tool,
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
    from simloop._abort import AbortSignal
    from simloop.scenario import Limits

__all__ = ["ARunTool", "drive", "run_agent", "stoppable"]


async def run_agent(
    client: anthropic.AsyncAnthropic,
    tools: list[ToolParam],
    run_tool: ARunTool,
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
    """Run the task to an honest stop; returns why it stopped and the last text."""
    max_steps, deadline_s, token_budget = budgets(limits)
    policies = StopPolicies(limits, writes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    messages = start_turn(history, task)  # a new conversation, or the next turn of one
    used = 0
    cost = CostMeter(limits, prices)  # the declared max_cost_usd, if any (prices: the scenario's, sim.prices)
    for step in range(max_steps):
        if stop():  # the user pressed Stop: no further model call
            return Outcome(reason="aborted", text="stopped by the user")
        if loop.time() >= deadline:
            return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached after {step} model calls")
        if used >= token_budget:
            return Outcome(reason="token_budget", text=f"{used} tokens used of a budget of {token_budget}")
        if (spent := cost.stop()) is not None:
            return spent
        try:
            reply = await client.messages.create(
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
            continue
        if reply.stop_reason in CUT_STOPS:
            return Outcome(reason="truncated", text=text_of(reply.content))
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")

        calls = tool_calls(reply)
        ran: dict[str, ToolResultBlockParam] = {}  # each call's result as it returns: kept when Stop cancels the rest
        run_call = _recording(run_tool, ran)
        try:
            if policies.declared:
                # Under stop policies the calls run one at a time, so each is checked before it runs (serial
                # writes, as the seed has it: a parallel second write could not be taken back).
                results: list[ToolResultBlockParam] = []
                for call in calls:
                    halt = Outcome(reason="aborted", text="stopped by the user") if stop() else None
                    halt = halt or policies.before(call.name, call.input)
                    if halt is not None:
                        if results:  # what ran goes back with the next turn
                            messages.append({"role": "user", "content": results})
                        return halt
                    try:
                        got: str | Exception = await asyncio.wait_for(
                            run_call(call), timeout=max(deadline - loop.time(), 0.0)
                        )
                    except TimeoutError:
                        _keep(messages, calls, ran)
                        return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached while a tool ran")
                    except Exception as exc:  # noqa: BLE001 - any tool failure is an observation
                        got = exc
                    results.append(tool_result(call, got))
                    halt = policies.after(call.name, call.input, got)
                    if halt is not None:
                        messages.append({"role": "user", "content": results})
                        return halt
                messages.append({"role": "user", "content": results})
                continue
            running = asyncio.gather(
                *(run_call(call) for call in calls), return_exceptions=True
            )
            running.add_done_callback(_retrieved)  # cancelled by Stop: its CancelledError is expected, not lost
            try:
                # wait_for cancels the gather on timeout and waits until every tool has stopped.
                outputs = await asyncio.wait_for(running, timeout=max(deadline - loop.time(), 0.0))
            except TimeoutError:
                _keep(messages, calls, ran)
                return Outcome(reason="deadline", text=f"deadline of {deadline_s:g}s reached while tools were running")
            results = []
            for call, output in zip(calls, outputs):
                if not isinstance(output, (str, Exception)):
                    raise output  # cancellation, or simloop unwinding a runaway loop: not a tool error
                results.append(tool_result(call, output))
            messages.append({"role": "user", "content": results})
        except asyncio.CancelledError:  # Stop: what ran goes back with the next turn (settle marks the rest not run)
            _keep(messages, calls, ran)
            raise
    if stop():  # Stop pressed during the last step's tools
        return Outcome(reason="aborted", text="stopped by the user")
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


async def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: run this loop against the simulated API and tools, on virtual time, turn after turn
    of the conversation (``sim.user_turns``: the task, then any follow-ups) through one history.  The user's
    Stop (``sim.abort``) cancels the turn in flight: the model call or the tools it awaits."""
    arun_tool = durable_arun_tool(sim)  # a write runs once, also across a crash and restart
    arun_tool = gated_arun_tool(sim, arun_tool)  # a call that needs approval runs only on the person's yes
    return await aconverse(sim.user_turns, lambda text, history: stoppable(sim.abort, run_agent(
        sim.async_client, with_web_search(sim.tool_schemas), arun_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set, prices=sim.prices,
    )))


def _recording(run_tool: ARunTool, ran: dict[str, ToolResultBlockParam]) -> Callable[[ToolUseBlock], Coroutine[Any, Any, str]]:
    """``run_tool`` for one call, its result kept in ``ran`` the moment it returns: a Stop that cancels the turn
    right after a write committed must not lose that write's result (the model would be told it never ran)."""

    async def run_call(call: ToolUseBlock) -> str:
        try:
            output = await run_tool(call.name, call.input, tool_use_id=call.id)
        except Exception as exc:
            ran[call.id] = tool_result(call, exc)
            raise
        ran[call.id] = tool_result(call, output)
        return output

    return run_call


def _keep(messages: list[MessageParam], calls: list[ToolUseBlock], ran: dict[str, ToolResultBlockParam]) -> None:
    """A turn cut short while its tools ran (Stop, the deadline): the results of those that returned go back with
    the next turn, so the model is never told that a write which went out was not run."""
    if ran and messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": [ran[c.id] for c in calls if c.id in ran]})


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def stoppable(signal: AbortSignal, turn: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run ``turn`` as a task of its own; when Stop is pressed, cancel it (the model call or the tools it awaits)
    and return ``aborted``."""
    inner = asyncio.ensure_future(turn)
    signal.add_callback(inner.cancel)
    try:
        return await inner
    except asyncio.CancelledError:
        if not (signal.is_set() and inner.cancelled()):
            raise  # a cancellation from elsewhere: not ours to swallow
        return Outcome(reason="aborted", text="stopped by the user")
    finally:
        signal.remove_callback(inner.cancel)
