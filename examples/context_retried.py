"""Defect: retries a request the API refused as too long, unchanged.

The loop treats every API error as worth another try: when a call fails it sends the same request again, up
to `ATTEMPTS` times, before it gives up.  A 400 "prompt is too long" (the history outgrew the model's context
window) comes back for the same prompt every time: the retry cannot succeed and only spends calls.  Stop
(reason ``error``), or make the prompt fit: trim old tool results, summarize the history, or use compaction.

Caught by: ``request_valid`` (the refused prompt sent again unchanged) on ``scenarios/context-window.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic

from ._common import converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent as _run_agent

if TYPE_CHECKING:
    from simloop import Outcome, Sim

__all__ = ["ATTEMPTS", "drive", "run_agent"]

ATTEMPTS = 3


class _Retrying:
    """A client whose ``messages.create`` tries again after any API error, the same request (the bug)."""

    def __init__(self, client: anthropic.Anthropic) -> None:
        self._client = client
        self.messages = self

    def create(self, **params: Any) -> Any:
        for attempt in range(ATTEMPTS):
            try:
                return self._client.messages.create(**params)
            except anthropic.BadRequestError:  # BUG: a refused request is refused again
                if attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")


def run_agent(client: anthropic.Anthropic, *args: Any, **kwargs: Any) -> Outcome:
    """`examples.correct_sync`'s loop on a client that retries refused requests."""
    return _run_agent(_Retrying(client), *args, **kwargs)  # type: ignore[arg-type]


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter, as `examples.correct_sync`'s."""
    run_tool = durable_run_tool(sim)
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))
