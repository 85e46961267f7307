"""Defect: a chat keeps a turn that stopped paused in its history as it is.

The turn itself is the reference loop's: it continues a ``pause_turn`` by
sending the paused content back, and stops honestly at its step cap.  Between
turns the loop settles the history as it knows to: it answers any tool_use
left open and drops an empty message.  But a turn can also stop in the middle
of a paused server tool call (the cap, a deadline or a token budget reached
just after the pause): the history then ends in an assistant message whose
``server_tool_use`` has no result yet, which the loop takes for an answer and
keeps.  It adds the next user message after it, and the real API refuses the
next turn's request with a 400 (```web_search` tool use with id ... was found
without a corresponding `web_search_tool_result` block``).  The correct loops
settle the history after each turn (``examples._common.settle``).

Caught by: ``request_valid`` (the next turn's rejected request) on
``scenarios/pause-then-followup.yaml``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import DEFAULT_MODEL, RunTool, settle, with_web_search, writes_of
from .correct_sync import run_agent as run_turn

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]


def run_agent(
    client: anthropic.Anthropic,
    tools: list[ToolParam],
    run_tool: RunTool,
    turns: Iterable[str],
    limits: Limits | None = None,
    *,
    model: str = DEFAULT_MODEL,
    system: str | None = None,
    writes: frozenset[str] = frozenset(),
) -> list[Outcome]:
    """Every user turn through one history, each run by the reference loop; one outcome per turn."""
    history: list[MessageParam] = []
    outcomes = []
    for text in turns:
        outcomes.append(
            run_turn(client, tools, run_tool, text, limits, model=model, system=system, writes=writes, history=history)
        )
        paused = history.pop() if history and _paused(history[-1]) else None
        settle(history)
        if paused is not None:
            history.append(paused)  # BUG: a message paused mid server call is kept, as if it were an answer
    return outcomes


def _paused(message: MessageParam) -> bool:
    """Is this an assistant message that ends in a server tool call (a turn stopped paused)?"""
    content = message["content"]
    last = content[-1] if isinstance(content, list) and content else None
    kind = last.get("type") if isinstance(last, dict) else getattr(last, "type", None)
    return message["role"] == "assistant" and kind == "server_tool_use"


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: run the conversation against the simulated API and tools."""
    return run_agent(
        sim.client, with_web_search(sim.tool_schemas), sim.run_tool, sim.user_turns, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim),
    )
