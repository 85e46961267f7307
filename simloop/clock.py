"""The virtual clock's public face: `VirtualClock`, its event loop, and the real clocks (`REAL`).

Re-exported from the run's machinery (`simloop._runtime.clock`, docs/design.md, Virtual time), where it
lives with the watchdog and the worker thread it serves; import these names from here.
"""

from __future__ import annotations

from simloop._runtime.clock import (
    EPOCH,
    MONOTONIC_ORIGIN,
    REAL,
    RealTimeThread,
    VirtualClock,
    VirtualTimeDeadlock,
    VirtualTimeEventLoop,
)

__all__ = ["EPOCH", "MONOTONIC_ORIGIN", "REAL", "RealTimeThread", "VirtualClock", "VirtualTimeDeadlock",
           "VirtualTimeEventLoop"]
