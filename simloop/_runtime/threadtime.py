"""Each thread's own time on a `simloop._runtime.clock.VirtualClock`: how far each thread of a run is behind the
clock, and how many of the answers delivered to the run's threads (`ThreadTime.mark`) each has heard.

One clock serves every thread of a run, so a sleep in one thread moves it on for all.  A thread catches up when it
sleeps, waits on a condition, joins a thread, or (an event loop) is woken by another thread; a thread starts where its
starter was, a pool job where its submitter was.  The invariants read it (docs/design.md, Virtual time, Each thread's
own time): a gated call is held to the answers its thread had heard, the drive's return to its own time.
"""

from __future__ import annotations

import threading
from typing import Any

from simloop._runtime.realtime import NS
from simloop._runtime.registry import get_ident, threads

__all__ = ["ThreadTime"]


class ThreadTime:
    """The per-thread half of a `VirtualClock` (its base class): ``_ns`` is the clock's time, ``_loops`` its event
    loops running now (an event loop's thread lives the clock's time)."""

    _ns: int
    _loops: list[Any]

    def __init__(self) -> None:
        self._ns = 0
        # a thread of the run -> the virtual ns it has not lived through: another thread of the run moved the clock
        # on since this one last waited (slept, waited on a condition, joined a thread); see `own_now`
        self._behind: dict[int, int] = {}
        self._behind_lock = threading.Lock()  # (held for no more than an update of `_behind` or `_heard`)
        # answers delivered to one thread (`mark`: a person's answer at the permission gate), and how many of them each
        # thread of the run has heard: the count when it last waited or received (see `heard`)
        self._seq = 0
        self._heard: dict[int, int] = {}

    def _others_fall_behind(self, delta: int) -> None:  # with self._cond held
        """A thread of the run moved the clock on by ``delta``: the run's other threads did not live through it."""
        me = get_ident()
        if threads.get(me) is not self:
            return  # simloop's own thread (a server's model latency): the world's time, lived by every thread
        behind = self._behind
        with self._behind_lock:
            for tid, clock in list(threads.items()):
                if clock is self and tid != me:
                    behind[tid] = behind.get(tid, 0) + delta
            behind.pop(me, None)

    def _caught_up(self) -> None:
        """The calling thread has lived up to the clock's time (it waited for something that happened by now), and
        heard every answer delivered so far."""
        me = get_ident()
        with self._behind_lock:
            self._behind.pop(me, None)
            if self._seq:
                self._heard[me] = self._seq

    def _forget(self, tid: int) -> None:
        """A thread of the run ended: its own time and what it heard go with it (its ident may be reused)."""
        with self._behind_lock:
            self._behind.pop(tid, None)
            self._heard.pop(tid, None)

    def mark(self) -> int:
        """An answer was delivered to the calling thread (a person's, at the permission gate): its number, 1-based.
        Another thread hears of it only once it waits for or receives something from the others (see `heard`)."""
        with self._behind_lock:
            self._seq += 1
            self._heard[get_ident()] = self._seq
            return self._seq

    def heard(self) -> int | None:
        """How many of the answers delivered so far (`mark`) the calling thread can know of, when not all; else None.

        A thread hears what it was handed itself, and all of them each time it waits for or receives something from
        another thread (a sleep, ``Event.wait``, ``Future.result``, ``Queue.get``, ``Thread.join``, an event loop woken
        by another thread: a job's result); a thread starts with what its starter had heard, a pool job with what
        its submitter had.
        """
        if not self._seq:
            return None
        heard = self._heard.get(get_ident())
        if heard is None or heard >= self._seq:
            return None
        return heard

    def own_now(self) -> float | None:
        """The calling thread's own time, when it is behind the clock; None when it has lived up to now.

        One clock serves every thread of a run, and a sleep in one thread moves it on for all (a background
        thread's wait of 30 s is over at once).  A thread that has not waited since (slept, waited on a condition,
        an event, a queue or a future, joined a thread) has not lived through that time: a gated call it starts
        while the answer it needs is still coming, or the drive's return, happens at its own time.  A thread
        starts at its starter's own time, and a pool job at its submitter's; an event loop's thread lives the
        clock's time (its timers are the run's).
        """
        behind = self._behind.get(get_ident()) if self._behind else None
        if not behind:
            return None
        if any(getattr(loop, "_thread_id", None) == get_ident() for loop in self._loops):
            return None
        return (self._ns - behind) / NS

    def own_ns(self) -> tuple[int, int]:
        """The calling thread's own time in ns (see `own_now`) and the answers it has heard (see `heard`): where a
        thread or job it starts begins."""
        me = get_ident()
        return self._ns - (self._behind.get(me, 0) if self._behind else 0), self._heard.get(me, self._seq)

    def begin_at(self, where: tuple[int, int]) -> None:
        """The calling thread (a thread or pool job just started) lives from ``where`` (its starter's `own_ns`)."""
        own_ns, heard = where
        me = get_ident()
        with self._behind_lock:
            lag = self._ns - own_ns
            if lag > 0:
                self._behind[me] = lag
            else:
                self._behind.pop(me, None)
            if self._seq or self._heard:
                self._heard[me] = heard
