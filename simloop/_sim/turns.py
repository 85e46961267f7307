"""The conversation's user turns (`UserTurns`, ``sim.user_turns``): the task, then each follow-up, taken in order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

from simloop.errors import UsageError
from simloop.transcript import Transcript, TurnStart

if TYPE_CHECKING:
    from simloop._abort import AbortSignal
    from simloop._runtime.clock import VirtualClock
    from simloop._sim.guard import Guard
    from simloop.wire.server import SimServer

__all__ = ["UserTurns"]


class UserTurns(Sequence[str]):
    """``sim.user_turns``: the task, then each follow-up; taking turn *n* records where it begins.

    Turns are taken in order: iterating, or indexing turn after turn.  A turn taken again (its text read
    twice) is not a new turn.
    """

    # What it needs of the Sim, not the Sim: Sim -> UserTurns -> Sim would be a reference cycle that keeps every
    # finished run alive until the garbage collector finds it (slow for runs made by the hundred).
    __slots__ = ("_abort", "_clock", "_guard", "_server", "_texts", "_transcript", "started")

    def __init__(self, texts: Sequence[str], *, transcript: Transcript, clock: VirtualClock, guard: Guard,
                 server: SimServer, abort: AbortSignal) -> None:
        self._texts: list[str] = list(texts)
        self._transcript, self._clock, self._guard, self._server, self._abort = transcript, clock, guard, server, abort
        self.started = 0  # how many turns the drive has taken

    def __len__(self) -> int:
        return len(self._texts)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            raise UsageError("sim.user_turns is taken one turn at a time: iterate it (for text in sim.user_turns)")
        texts = self._texts
        n = index + len(texts) if index < 0 else index
        if not 0 <= n < len(texts):
            raise IndexError(f"the conversation has {len(texts)} user turn(s); turn {index} does not exist")
        if n > self.started:
            raise UsageError(
                f"sim.user_turns[{index}] taken before turn {self.started}: take the turns in order "
                "(for text in sim.user_turns: ...)"
            )
        if n == self.started:
            self._begin(n, texts[n])
        return texts[n]

    def __iter__(self) -> Iterator[str]:
        for n in range(len(self)):
            yield self[n]

    def _begin(self, n: int, text: str) -> None:
        self.started = n + 1
        self._transcript.append(TurnStart(t=self._clock.now(), turn=n, text=text))
        self._guard.turn_began(self._server)
        self._abort.clear()  # Stop applies to the turn it was pressed in

    def __repr__(self) -> str:
        return f"UserTurns({self._texts!r})"

