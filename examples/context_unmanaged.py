"""Defect: claims it manages its context, and never trims its history.

The loop is `examples.correct_sync` as it stands: it sends its whole history every time.  That is honest
for a loop that claims nothing (when the history outgrows the window, the API answers 400 "prompt is too
long" and the loop stops with ``error``), but this one is verified as a loop that keeps every request
inside the model's window (``simloop.verify(drive, context=True)``, ``requires: [context]``), and a long task
whose tools answer at length breaks the claim.  Trim old tool results, summarize the history, or use
compaction (`examples.context_trimmed`), or do not claim it.

Caught by: ``request_valid`` (a request refused as too long from a loop that claims context management)
under `simloop.verify` (its long-history stage); see ``examples/catalogue.py``, ``CONTEXT``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import correct_sync
from .correct_sync import run_agent

if TYPE_CHECKING:
    from simloop import Outcome, Sim

__all__ = ["drive", "run_agent"]


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: `examples.correct_sync`'s, unchanged (the defect is the claim it is verified with)."""
    return correct_sync.drive(sim)
