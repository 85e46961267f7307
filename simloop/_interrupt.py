"""Tell a real Ctrl-C of the user from a `KeyboardInterrupt` the loop under test raised itself.

`SystemExit` and `KeyboardInterrupt` raised by the loop are its outcome (the
``crash`` invariant reports them with the run), never simloop's exit status.
Only the user's own Ctrl-C aborts simloop: while a run is on the main thread,
the SIGINT handler is wrapped to note that the signal arrived, then does what
it did before (Python's default raises `KeyboardInterrupt`).  Signals reach
the main thread only, so on any other thread a `KeyboardInterrupt` is the loop's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["user_interrupts"]


def _never() -> bool:
    return False


@contextmanager
def user_interrupts() -> Iterator[Callable[[], bool]]:
    """Yields ``pressed()``: True once the user pressed Ctrl-C during the block."""
    if threading.current_thread() is not threading.main_thread():
        yield _never
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # SIG_IGN or SIG_DFL: no KeyboardInterrupt comes from a Ctrl-C
        yield _never
        return
    pressed = [False]

    def handler(signum: int, frame: FrameType | None) -> None:
        pressed[0] = True
        previous(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: pressed[0]
    finally:
        signal.signal(signal.SIGINT, previous)
