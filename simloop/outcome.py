"""`Outcome`: what the loop under test says it did when it returned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simloop.errors import UsageError

__all__ = ["REASONS", "Outcome"]

#: The reasons a loop may give for stopping (docs/design.md, Outcome reasons).
REASONS = (
    "final",
    "max_steps",
    "deadline",
    "aborted",
    "error_budget",
    "token_budget",
    "cost_budget",
    "refusal",
    "truncated",
    "repetition",
    "error",
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The loop's own account of how it stopped.

    ``reason`` is one of `REASONS`; ``text`` the final answer (or an error
    text); ``exception`` is set by simloop when an exception escaped the loop.

    Example::

        return simloop.Outcome(reason="final", text=reply_text)
    """

    reason: str
    text: str = ""
    exception: BaseException | None = None

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise UsageError(
                f"Outcome reason {self.reason!r} is not one simloop knows; use one of: {', '.join(REASONS)}"
            )

    @classmethod
    def coerce(cls, value: Any) -> Outcome:
        """An `Outcome` from what a drive returned: an Outcome or a ``(reason, text)`` tuple."""
        if isinstance(value, Outcome):
            return value
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            return cls(reason=value[0], text="" if value[1] is None else str(value[1]))
        raise UsageError(
            f"the drive returned {value!r}; return simloop.Outcome(reason=..., text=...) or a (reason, text) "
            f"tuple, with reason one of: {', '.join(REASONS)}"
        )
