"""Defect: a chat records each turn as the user's text and the answer's text, even an empty answer.

Each turn runs the reference loop on the chat so far; the loop then keeps the
exchange compactly, as many chat front ends do: the user's message and the
answer's text.  A model may end a turn with no text at all (``end_turn`` with
empty content, common right after a tool call that did the job), and the loop
appends ``{"role": "assistant", "content": ""}``.  The real API refuses the
next turn's request with a 400 (``all messages must have non-empty content
except for the optional final assistant message``).  A correct loop leaves an
empty answer out of the history (``examples._common.settle``).

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
    """Every user turn on the chat so far, kept as text; one outcome per turn."""
    chat: list[MessageParam] = []
    outcomes = []
    for text in turns:
        turn = list(chat)  # the turn works on a copy: only the exchange's text is kept
        outcome = run_turn(client, tools, run_tool, text, limits, model=model, system=system, writes=writes,
                           history=turn)
        settle(turn)
        chat.append({"role": "user", "content": text})
        chat.append({"role": "assistant", "content": outcome.text})  # BUG: "" when the turn ended with no text
        outcomes.append(outcome)
    return outcomes


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: run the conversation against the simulated API and tools."""
    return run_agent(
        sim.client, with_web_search(sim.tool_schemas), sim.run_tool, sim.user_turns, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim),
    )
