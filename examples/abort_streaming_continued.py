"""Defect: a streaming loop reads the reply to its end after Stop, then runs the tools it asked for.

The user presses Stop while the model is still streaming its reply.  The loop
checks the signal only before each model call: it keeps reading the stream to
the end, then runs every tool call in the reply (the email goes out) and only
then returns ``aborted``.  The seed: "Cancel the in-flight completion and
break the for."  A correct streaming loop checks the signal once the reply is
in (better: stops reading) and runs none of its tool calls.

Caught by: ``abort`` on ``scenarios/stop-button-while-streaming.yaml``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import (
    DEFAULT_MODEL,
    MAX_TOKENS,
    THINKING,
    RunTool,
    budgets,
    converse,
    start_turn,
    text_of,
    tokens_used,
    tool_calls,
)
from .correct_sync import run_tools

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
    history: list[MessageParam] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> Outcome:
    """The streaming reference loop, except that it looks at the Stop signal only before each model call."""
    max_steps, deadline_s, token_budget = budgets(limits)
    started = time.monotonic()
    messages = start_turn(history, task)
    used = 0
    for _ in range(max_steps):
        if stop():  # the only place the loop looks at Stop
            return Outcome(reason="aborted", text="stopped by the user")
        if time.monotonic() - started >= deadline_s:
            return Outcome(reason="deadline", text="deadline reached")
        if used >= token_budget:
            return Outcome(reason="token_budget", text="token budget spent")
        try:
            with client.messages.stream(
                model=model, max_tokens=MAX_TOKENS, thinking=THINKING, system=system or anthropic.omit, tools=tools,
                messages=messages,
            ) as stream:
                reply = stream.get_final_message()  # BUG: read to the end after Stop, and go on to the tools
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
        messages.append({"role": "user", "content": run_tools(tool_calls(reply), run_tool)})
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: every user turn through one history, Stop wired to ``sim.abort``."""
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, sim.tool_schemas, sim.run_tool, text, sim.limits, model=sim.model, system=sim.system,  # type: ignore[arg-type]
        history=history, stop=sim.abort.is_set,
    ))
