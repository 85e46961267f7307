"""Defect: a stop reason it does not know is taken for "done".

The loop is `examples.correct_sync`'s, on a client layer written before ``model_context_window_exceeded`` existed:
it maps any stop reason it does not know to ``end_turn``.  When a long history fills the model's context window
mid-answer, the cut text comes back as the final answer.  Anthropic's stop-reason table says to treat it as
truncated: report ``truncated`` (and trim or summarise before asking again).

Caught by: ``truncation`` (a cut reply reported as final) on ``scenarios/window-filled.yaml``; under `simloop.verify`
in the long-history stage (a budget past the window: `examples.catalogue.CONTEXT_DECLARED`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic

from ._common import converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent as _run_agent

if TYPE_CHECKING:
    from simloop import Outcome, Sim

__all__ = ["KNOWN_STOPS", "drive", "run_agent"]

#: The stop reasons the client layer knows (the SDK's table before model_context_window_exceeded).
KNOWN_STOPS = ("end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal")


class _OldStops:
    """A client whose ``messages.create`` reports a stop reason it does not know as ``end_turn`` (the bug)."""

    def __init__(self, client: anthropic.Anthropic) -> None:
        self._client = client
        self.messages = self

    def create(self, **params: Any) -> Any:
        reply = self._client.messages.create(**params)
        if reply.stop_reason not in KNOWN_STOPS:  # BUG: a cut reply taken for a finished one
            reply = reply.model_copy(update={"stop_reason": "end_turn"})
        return reply


def run_agent(client: anthropic.Anthropic, *args: Any, **kwargs: Any) -> Outcome:
    """`examples.correct_sync`'s loop on the client layer that knows only the old stop reasons."""
    return _run_agent(_OldStops(client), *args, **kwargs)  # type: ignore[arg-type]


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter, as `examples.correct_sync`'s."""
    run_tool = durable_run_tool(sim)
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))
