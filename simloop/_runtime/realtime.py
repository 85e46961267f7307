"""The real clocks, the virtual clock's units, and the threads that keep real time inside a run.

Why a container (`REAL`) and not module globals: freezegun's scan rewrites module globals that hold the real
functions (research E9), and simloop must read the real clocks whatever freezegun or a run has patched
(docs/design.md, Virtual time).
"""

from __future__ import annotations

import datetime as _dt
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["BYSTANDERS", "EPOCH", "MONOTONIC_ORIGIN", "NS", "REAL", "RealClocks", "RealTimeThread"]

EPOCH: float = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the wall clock every virtual run starts at
MONOTONIC_ORIGIN: float = 100_000.0  # what time.monotonic()/loop.time() read at now() == 0 (see VirtualClock)
NS = 1_000_000_000


def _unfaked(owner: ModuleType, name: str) -> Any:
    value = getattr(owner, name)
    api = sys.modules.get("freezegun.api")
    if api is not None and getattr(value, "__module__", "") == "freezegun.api":  # freezegun active at import
        return getattr(api, "real_" + name)
    return value


@dataclass(frozen=True)
class RealClocks:
    """The process's real clocks.  An instance, not module globals: freezegun's scan rewrites those (E9)."""

    time: Callable[[], float]
    time_ns: Callable[[], int]
    monotonic: Callable[[], float]
    monotonic_ns: Callable[[], int]
    perf_counter: Callable[[], float]
    perf_counter_ns: Callable[[], int]
    sleep: Callable[[float], None]
    datetime: type[_dt.datetime]
    date: type[_dt.date]


REAL = RealClocks(
    **{n: _unfaked(time, n) for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                                      "perf_counter_ns", "sleep")},
    datetime=_unfaked(_dt, "datetime"), date=_unfaked(_dt, "date"),
)


class RealTimeThread(threading.Thread):
    """A thread that never inherits virtual time, even when started inside ``patched()`` (the watchdog)."""


#: Threads that only wait for a run to finish (`simloop.Sim.run`'s callers): they notify none of its waits.
BYSTANDERS: set[int] = set()


