"""Every `Sim` a block of code ran (a `verify` search's examples and shrinks), kept after its run: its transcript,
its server.  (`bench/fingerprint.py` collects the transcripts the same way, standing alone.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from simloop.sim import Sim


@contextmanager
def every_run() -> Iterator[list[Sim]]:
    """The Sims whose `Sim.run` was called inside the block, in order, each added once its run ended."""
    ran: list[Sim] = []
    run: Callable[..., Any] = Sim.run

    def recording(self: Sim, drive: Any) -> Any:
        try:
            return run(self, drive)
        finally:
            ran.append(self)

    Sim.run = recording  # type: ignore[method-assign]
    try:
        yield ran
    finally:
        Sim.run = run  # type: ignore[method-assign]
