"""Which thread made each model call (`Request.thread`): the drive's own, or one of the loop's own threads.

Several loops at once on one Sim (a thread pool running a loop each) are told apart by it (docs/design.md,
Conversations, "Several conversations at once"): the drive's thread is None, as every transcript wrote it; the
loop's other threads are 1, 2, ... in the order they first called.  A loop in another process (the loopback
server) has none.
"""

from __future__ import annotations

__all__ = ["Callers"]


class Callers:
    """The calling threads of one run's model calls: ``drive`` is the drive's thread (set by the Sim), ``current``
    the thread of the request being handled (given by the in-process transports, None for the loopback server)."""

    __slots__ = ("_numbers", "current", "drive")

    def __init__(self) -> None:
        self.drive: int | None = None
        self.current: int | None = None
        self._numbers: dict[int, int] = {}  # thread ident -> its number, in the order of first call

    def number(self) -> int | None:
        """The current request's thread as `Request.thread` records it."""
        caller = self.current
        if caller is None or caller == self.drive:
            return None
        return self._numbers.setdefault(caller, len(self._numbers) + 1)
