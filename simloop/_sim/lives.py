"""The drive's lives (`Lives`): after a simulated process death, the drive runs again (a restart).

Only ``sim.store`` and the world survive a death; each restart is a `Restart` event, and a run stops after
`MAX_LIVES` lives.  A death a framework swallowed or turned into an error of its own is a death all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simloop._runtime.halt import LoopHalted
from simloop.errors import SimulatedCrash
from simloop.outcome import Outcome
from simloop.transcript import Response, Restart, ToolEnd, Transcript

if TYPE_CHECKING:
    from simloop._abort import AbortSignal
    from simloop._runtime.clock import VirtualClock
    from simloop._sim.turns import UserTurns

__all__ = ["MAX_LIVES", "Lives"]

#: Lives of one run (the first, plus a restart after each simulated process death): past them, `stops` reports it.
MAX_LIVES = 10


class _Escaped:
    """An exception that escaped an async drive (kept apart from what a drive may return)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Lives:
    """The drive's runs in one Sim: the first, plus one per restart after a crash (``count``, ``sim.lives``)."""

    __slots__ = ("_abort", "_clock", "_transcript", "_turns", "began", "count")

    def __init__(self, transcript: Transcript, clock: VirtualClock, turns: UserTurns, abort: AbortSignal) -> None:
        self._transcript, self._clock, self._turns, self._abort = transcript, clock, turns, abort
        self.count = 1
        self.began = 0  # where this life's events begin in the transcript

    def sync(self, drive: Callable[[Any], Any], sim: Any) -> Any:
        """Run ``drive(sim)``; after a simulated process death, run it again (the restart), up to `MAX_LIVES`."""
        while True:
            try:
                returned = drive(sim)
            except SimulatedCrash as crash:
                self.restart(crash)
                continue
            except Exception:
                if not self.died_unseen():
                    raise
                continue
            if not self.died_unseen():
                return returned

    async def arun(self, drive: Any, sim: Any, record: Callable[[Any], Outcome], *,
                   stop_at: float | None = None, on_time: Callable[[], None] | None = None) -> Outcome:
        """The async drive's lives, as a task of its own, and ``record`` of what it returned; with ``stop_at`` the
        user's Stop (``on_time``) lands then, in the middle of an awaited call."""
        timer = None
        if stop_at is not None and on_time is not None:
            timer = asyncio.get_running_loop().call_later(max(stop_at - self._clock.now(), 0.0), on_time)
        kept: list[Any] = []  # what the drive returned, and the CancelledError that escaped it
        # The drive runs as a task of its own: the README's Stop recipe cancels ``asyncio.current_task()``, and a
        # Stop that fires after the loop's last ``await`` cancels that task once its coroutine has returned.  The
        # cancellation is then the drive task's, and the returned value is still in ``kept``: never a
        # CancelledError out of simloop's own event loop.
        task = asyncio.get_running_loop().create_task(self._alives(drive, sim, kept))
        try:
            await task
        except asyncio.CancelledError:
            own = asyncio.current_task()
            if own is not None and own.cancelling():  # the drive cancelled simloop's task too: not a Stop of ours
                own.uncancel()
            if not kept:  # cancelled before the drive's coroutine ever ran
                kept.append(_Escaped(asyncio.CancelledError()))
        finally:
            if timer is not None:
                timer.cancel()  # the loop returned: no Stop after that
        returned = kept[0]
        if isinstance(returned, _Escaped):
            raise returned.error
        return record(returned)

    async def _alives(self, drive: Any, sim: Any, kept: list[Any]) -> None:
        while True:
            try:
                returned = await drive(sim)
            except SimulatedCrash as crash:
                self.restart(crash)
                continue
            except asyncio.CancelledError as e:
                kept.append(_Escaped(e))
                raise
            except Exception:
                if not self.died_unseen():
                    raise
                continue
            if not self.died_unseen():
                kept.append(returned)
                return

    def died_unseen(self) -> bool:
        """Did the process die in this life although no `SimulatedCrash` reached simloop?  A framework may turn it
        into an error of its own (langchain's ``agenerate`` gathers with ``return_exceptions=True`` and then reads
        the crash as a result) or swallow it; a process that died is dead all the same: then the next life begins
        (or the run halts), and this says so."""
        for e in self._transcript.events[self.began:]:
            if isinstance(e, ToolEnd) and e.status == "crashed" or isinstance(e, Response) and e.fault == "crash":
                self.restart(SimulatedCrash(str(e.error) if isinstance(e, ToolEnd) else
                                            f"the process died while model call {e.call} was in flight"))
                return True
        return False

    def restart(self, crash: SimulatedCrash) -> None:
        """The process died: only ``sim.store`` and the world remain; the next life begins (or the run halts)."""
        if self.count >= MAX_LIVES:
            raise LoopHalted("restarts",
                             f"the process died {self.count} times; simloop stops a run after {MAX_LIVES} lives")
        self.count += 1
        self._transcript.append(Restart(t=self._clock.now(), life=self.count, detail=str(crash)))
        self.began = len(self._transcript.events)
        self._turns.started = 0
        self._abort.clear(forget_callbacks=True)
