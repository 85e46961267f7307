"""What the adapters share: the declared limits a harness has no native form of, and reply text.

A harness that cannot stop on a deadline or a token budget by itself is
stopped by its drive, between turns, the way a careful application would: the
drive keeps a `Guard`, feeds it each reply's usage, and asks it before the
harness may go on.  The clock is ``time.monotonic()``, which simloop's virtual
clock drives during a run, so the same code works against the real API.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from simloop.outcome import Outcome
from simloop.scenario import Limits

__all__ = ["Guard", "missing_extra", "text_of"]


def missing_extra(error: ModuleNotFoundError, *, adapter: str, extra: str) -> ModuleNotFoundError:
    """The error an adapter raises when its harness is not installed: which extra to install."""
    message = (
        f"{adapter} needs {error.name or 'its harness'}, which is not installed: "
        f"pip install 'simloop[{extra}]' (in a checkout, make test installs every extra)"
    )
    return ModuleNotFoundError(message, name=error.name)


class Guard:
    """Checks ``deadline_s`` and ``max_total_tokens`` of the declared limits (each only when declared).

    ``used`` sums ``usage.input_tokens + usage.output_tokens`` of every reply, as
    the ``limits`` invariant counts them.
    """

    def __init__(self, limits: Limits | None) -> None:
        self.deadline_s = limits.deadline_s if limits is not None else None
        self.token_budget = limits.max_total_tokens if limits is not None else None
        self.started = time.monotonic()
        self.used = 0

    def add(self, usage: Any) -> None:
        """Count one reply's usage (an object with ``input_tokens``/``output_tokens``, or None)."""
        if usage is None:
            return
        self.used += int(getattr(usage, "input_tokens", 0) or 0) + int(getattr(usage, "output_tokens", 0) or 0)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spent(self) -> Outcome | None:
        """The outcome to stop with when a declared budget is spent, else None (go on)."""
        if self.deadline_s is not None and self.elapsed() >= self.deadline_s:
            return Outcome("deadline", f"deadline of {self.deadline_s:g}s reached after {self.elapsed():g}s")
        if self.token_budget is not None and self.used >= self.token_budget:
            return Outcome("token_budget", f"{self.used} tokens used of a budget of {self.token_budget}")
        return None


def text_of(content: Iterable[Any]) -> str:
    """The visible text of a reply's content blocks (thinking and tool calls left out)."""
    return "".join(getattr(block, "text", "") for block in content if getattr(block, "type", None) == "text")
