"""`LoopHalted`: the exception that unwinds a loop under test that ran out of a budget.

Raised by whichever part of the run noticed: the Sim (model calls, restarts), the clock (virtual time, a
deadlocked event loop), the `Watchdog` (a spin in real time), the network guard, a forked child.  Its own
module, below all of them, so that the clock can raise it without importing the watchdog (which runs on
the clock's real time).

`LoopHalted` is a `BaseException`: the SDK and user loops catch ``Exception``, and must not swallow it.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["HaltReason", "LoopHalted"]

HaltReason = Literal["model_calls", "virtual_time", "watchdog", "deadlock", "network", "restarts", "subagents", "abandoned"]


class LoopHalted(BaseException):
    """simloop unwound the loop under test: a runaway budget ran out.

    ``reason`` is one of `HaltReason` (``"model_calls"``, ``"virtual_time"``, ``"watchdog"``, ``"network"``, ...);
    ``detail`` says what happened and ``where`` (``FILE:LINE in function``, when known) where the loop was.
    """

    def __init__(self, reason: str, detail: str, where: str | None = None, target: str | None = None) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail
        self.where = where
        self.target = target  # what a blocked network connection was for (host:port)

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"

    def __reduce__(self) -> tuple[Any, ...]:
        # also for the argument-less subclasses the watchdog delivers (`simloop._runtime.watchdog._halt_type`)
        return (LoopHalted, (self.reason, self.detail, self.where, self.target))
