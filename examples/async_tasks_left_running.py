"""Defect (async): at the deadline the loop returns while its tool tasks are still running.

The turn's tool calls start as ``asyncio.create_task`` and the loop waits for
them with ``asyncio.wait(..., timeout=...)`` to honour its deadline.  But
``asyncio.wait`` does not cancel anything on timeout: when the deadline comes
first, the loop returns ``deadline`` and the slow tool keeps running (and may
still write) after the caller was told the agent had stopped.  Cancel the
pending tasks and await them, or use ``asyncio.wait_for`` on a ``gather``.

Caught by: ``no_work_after_return`` (a tool still running when the loop
returned) on ``scenarios/slow-parallel-deadline.yaml``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam

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
    tool_result,
)
from .correct_async import ARunTool

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits


async def run_agent(
    client: anthropic.AsyncAnthropic,
    tools: list[ToolParam],
    run_tool: ARunTool,
    task: str,
    limits: Limits | None = None,
    *,
    model: str = DEFAULT_MODEL,
    system: str | None = None,
) -> Outcome:
    max_steps, deadline_s, token_budget = budgets(limits)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    messages: list[MessageParam] = [{"role": "user", "content": task}]
    used = 0
    for _ in range(max_steps):
        if loop.time() >= deadline:
            return Outcome(reason="deadline", text="deadline reached")
        if used >= token_budget:
            return Outcome(reason="token_budget", text="token budget spent")
        try:
            reply = await client.messages.create(
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
        calls = tool_calls(reply)
        tasks = [asyncio.create_task(run_tool(c.name, c.input, tool_use_id=c.id)) for c in calls]
        _, pending = await asyncio.wait(tasks, timeout=max(deadline - loop.time(), 0.0))
        if pending:  # BUG: asyncio.wait cancelled nothing; these tools keep running after we return
            return Outcome(reason="deadline", text="deadline reached while tools were running")
        results = []
        for call, job in zip(calls, tasks):
            error = job.exception()  # a BaseException that is no Exception (cancellation) re-raises from result()
            results.append(tool_result(call, error if isinstance(error, Exception) else job.result()))
        messages.append({"role": "user", "content": results})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


async def drive(sim: Sim) -> Outcome:
    return await run_agent(
        sim.async_client, tool_params(sim.tool_schemas), sim.arun_tool, sim.task, sim.limits, model=sim.model, system=sim.system
    )
