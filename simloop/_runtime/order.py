"""The order of a run's threads at the simulator: simultaneous actions go in a fixed order, not the OS's.

A sync loop that runs a reply's tool calls on a thread pool (LangGraph's ``ToolNode``, ``pool.map(run, calls)``)
had its jobs reach ``sim.run_tool`` in OS-scheduling order: the executions' numbers, their canned results and so
the next request's bytes differed between runs of one seed, and `simloop.verify` could not replay or shrink.

So during a Sim's sync run the drive's thread (ticket 0), each thread it starts and each ``ThreadPoolExecutor``
job submitted get a ticket, in start/submit order: the participants.  Before a participant acts on the simulator
(a model call, a tool execution, a person asked, a virtual sleep: `turn`) it waits at the gate until every other
participant is settled: at the gate too, or waiting where simloop sees it (a condition, an event, a queue, a
future, a join, and not already notified), or ended; a pool job not started yet holds them up too (unless its pool
is full).  Then the participants at the gate go one at a time, round-robin in ticket order from the last to go
(each runs until its next action, wait or end): the order of their actions is a function of the loop, not of the
OS.  Nobody starves: a background thread that sleeps in a loop takes its turns between the drive's calls.

The fallback: a participant that shows no sign of life (no action, no wait begun or ended) for `GRACE` real
seconds is blocked where simloop cannot see (``lock.acquire()``, a ``SimpleQueue``, a socket) or busy, and no
longer holds the others up (`Order.fallbacks` counts it; the order of that moment is the OS's again).  So a job
that waits on a later job never deadlocks: a wait simloop sees lets the later one go at once, any other wait after
the grace.

Only the order of simultaneous actions is fixed; what a thread's actions cost in virtual time (its own time,
`simloop._runtime.threadtime`) is as before.  Not ordered: an asyncio run (its tasks are one thread, already
deterministic; executor jobs of an event loop, and threads or jobs started from a coroutine, get no ticket), the
workers of a pool (their jobs are ordered instead), threads started with ``_thread`` directly, bare
`VirtualClock.patched` blocks outside a Sim (`Order.drive` turns the order on).  docs/design.md, Virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from simloop._runtime.realtime import REAL
from simloop._runtime.registry import get_ident, threads

__all__ = ["GRACE", "Order", "acting", "orderable", "turn"]

#: Real seconds a participant may show no sign of life (no simulator action, no wait begun or ended) and still
#: hold the others up: past it, it is taken as blocked where simloop cannot see (or busy), and they go.
GRACE = 0.5

_REAL_WAIT = threading.Condition.wait  # (the patched one, during a run, would mark the gate itself as a wait)
_allocate_lock = threading.Lock
# Pools whose workers get no ticket: an idle worker blocks where simloop cannot see (a SimpleQueue); its jobs
# (concurrent.futures') get theirs when submitted.
_POOLS = frozenset({"concurrent.futures.thread", "multiprocessing.pool", "multiprocessing.dummy"})


def orderable(what: Any) -> bool:
    """Whether a thread running ``what`` (its target, or its class), started now, takes its turn in the order: not
    from a coroutine (an asyncio run is not ordered) and not a pool's worker."""
    return asyncio._get_running_loop() is None and getattr(what, "__module__", None) not in _POOLS


class _Entry:
    """A participant: a thread started or a job submitted during the run (or the drive's own thread)."""

    __slots__ = ("acting", "begun", "gated", "holding", "on", "pool", "since", "ticket", "waiting")

    def __init__(self, ticket: int, pool: Any = None) -> None:
        self.ticket = ticket
        self.pool = pool  # the executor of a submitted job
        self.begun = pool is None  # a submitted job has begun running (a thread counts as begun when started)
        self.gated = False  # at the gate, for its turn
        self.acting = 0  # inside an action (`acting`): its own sleeps in it take no turn of their own
        self.waiting = False  # in a wait simloop sees: out of the others' way
        self.since = REAL.monotonic()  # its last sign of life (real time)
        self.on: Any = None  # what it waits on: a Condition's waiter lock, a Thread it joins (see `woken`)
        self.holding = False  # in a wait that ends without the others (`Thread.start`'s): not out of their way

    def woken(self, entries: dict[int, _Entry]) -> bool:
        """Whether the wait it is in is over already though it has not left it yet (notified, or the thread it joins
        has ended its turn): it is about to run again, so it still holds the others up."""
        on = self.on
        if on is None:
            return False
        if isinstance(on, threading.Thread):
            ticket = getattr(on, "_simloop_ticket", None)
            return (ticket is not None and ticket not in entries) or not on.is_alive()
        return not on.locked()  # (a waiter lock is released by the notify that wakes it)


class Order:
    """The participants of one run (a clock's) and the gate each of their simulator actions passes (`turn`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._entries: dict[int, _Entry] = {}  # ticket -> the participant, while it lives (submitted jobs too)
        self._of: dict[int, _Entry] = {}  # thread ident -> the participant it runs now
        self._next = 1
        self._last = -1  # the ticket that went last (the round-robin goes on from it)
        self.closed = False  # the run was let go (abandoned): no gate waits any more
        self.active = False  # a Sim's sync drive is running: threads and jobs get tickets
        self.fallbacks = 0  # turns taken while a participant that showed no sign of life for GRACE was left out

    @contextlib.contextmanager
    def drive(self) -> Iterator[None]:
        """The calling thread runs the drive: ticket 0, and the order is on (threads and jobs get tickets)."""
        tid = get_ident()
        with self._cond:
            entry = self._entries[0] = self._of[tid] = _Entry(0)
            self._last = 0  # (as if it had just acted: what it starts takes the next turn, as the OS mostly does)
            self.active = True
        try:
            yield
        finally:
            with self._cond:
                self.active = False
                self._drop(entry, tid)

    def ticket(self, pool: Any = None) -> int | None:
        """A ticket for a thread being started, or a job being submitted to ``pool``, now (None: the order is off).

        Starting or submitting is a turn of its own: participants that submit at once (LangGraph's tasks, each
        running a ToolNode on its thread) get their jobs' tickets in a fixed order too."""
        if not self.active:
            return None
        self.turn()
        with self._cond:
            ticket = self._next
            self._next += 1
            self._entries[ticket] = _Entry(ticket, pool)
        return ticket

    def begin(self, ticket: int) -> _Entry | None:
        """The calling thread starts running ``ticket``'s thread or job; returns what it ran before (for `end`)."""
        tid = get_ident()
        with self._cond:
            entry = self._entries.get(ticket)
            before = self._of.get(tid)
            if entry is not None:
                entry.since = REAL.monotonic()
                entry.begun = True
                self._of[tid] = entry
        return before

    def end(self, ticket: int, before: _Entry | None = None, *, here: bool = True, keep: bool = False) -> None:
        """``ticket``'s thread or job is over (or was never run: a start that failed, a job cancelled).  ``keep``:
        the calling thread leaves it, but it holds its turn until ended again (a pool job, until its future has
        woken its waiters: then they hold up the later tickets, see `_Entry.woken`)."""
        tid = get_ident()
        with self._cond:
            entry = self._entries.get(ticket)
            if entry is not None and not keep:
                self._drop(entry, tid if here else None)
            elif entry is not None and here and self._of.get(tid) is entry:
                del self._of[tid]
            if here and before is not None and before.ticket in self._entries:
                self._of[tid] = before

    def _drop(self, entry: _Entry, tid: int | None) -> None:  # with self._cond held
        if self._entries.get(entry.ticket) is entry:
            del self._entries[entry.ticket]
        if tid is not None and self._of.get(tid) is entry:
            del self._of[tid]
        self._cond.notify_all()

    def wait_begins(self) -> _Entry | None:
        """The calling thread starts a wait simloop sees: the higher tickets may act meanwhile.  Returns the entry
        to give `wait_ends` (None: not a participant)."""
        entry = self._of.get(get_ident()) if self._of else None
        if entry is None or entry.waiting or entry.holding:
            return None
        entry.waiting = True
        if len(self._entries) > 1:  # (else no gate can be waiting for it: a new ticket's gate reads the flag)
            with self._cond:
                self._cond.notify_all()
        return entry

    def wait_ends(self, entry: _Entry | None) -> None:
        """The wait `wait_begins` marked is over (a sign of life)."""
        if entry is not None:
            entry.waiting = False
            entry.on = None
            entry.since = REAL.monotonic()

    def cond_wait(self, cond: threading.Condition, timeout: float | None) -> bool | None:
        """``cond.wait(timeout)`` for a participant, as CPython's ``Condition.wait`` does it, keeping its waiter
        lock where `turn` sees whether a notify released it; None: the caller is not a participant (wait as usual).
        """
        entry = self._of.get(get_ident()) if self._of else None
        if entry is None or entry.holding:
            return None
        if not cond._is_owned():  # type: ignore[attr-defined]
            raise RuntimeError("cannot wait on un-acquired lock")
        waiter = _allocate_lock()
        waiter.acquire()
        cond._waiters.append(waiter)  # type: ignore[attr-defined]
        was, entry.on = entry.on, waiter  # (before it is marked waiting: a notify may come at once)
        outer = self.wait_begins()
        saved_state = cond._release_save()  # type: ignore[attr-defined]
        gotit = False
        try:
            if timeout is None:
                waiter.acquire()
                gotit = True
            elif timeout > 0:
                gotit = waiter.acquire(True, timeout)
            else:
                gotit = waiter.acquire(False)
            return gotit
        finally:
            cond._acquire_restore(saved_state)  # type: ignore[attr-defined]
            if not gotit:
                with contextlib.suppress(ValueError):
                    cond._waiters.remove(waiter)  # type: ignore[attr-defined]
            entry.on = was
            self.wait_ends(outer)

    def holds(self) -> _Entry | None:
        """The calling thread's waits until `unholds` end without the others (``Thread.start`` waits for the thread
        to begin): it stays in their way meanwhile, as if running."""
        entry = self._of.get(get_ident()) if self._of else None
        if entry is None or entry.holding:
            return None
        entry.holding = True
        return entry

    @staticmethod
    def unholds(entry: _Entry | None) -> None:
        if entry is not None:
            entry.holding = False
            entry.since = REAL.monotonic()

    def joins(self, thread: Any) -> _Entry | None:
        """The calling thread starts joining ``thread`` (a wait simloop sees; `turn` sees when it is over)."""
        entry = self.wait_begins()
        if entry is not None and isinstance(thread, threading.Thread):
            entry.on = thread
        return entry

    def turn(self) -> None:
        """Before the calling thread acts on the simulator: its turn among the participants (see the module)."""
        entries = self._entries
        entry = self._of.get(get_ident())
        if entry is None or entry.acting:
            return
        if len(entries) < 2:  # alone: its turn at once (the round-robin goes on from it)
            self._last = entry.ticket
            return
        with self._cond:
            entry.gated = True
            self._cond.notify_all()  # (its arrival may settle the others)
            try:
                while not self.closed:
                    now = REAL.monotonic()
                    due, stale = self._unsettled(entry, now)
                    if due is None:
                        if self._up() is entry:
                            self.fallbacks += stale
                            break
                        due = now + GRACE  # (someone else's turn: woken when it acts, waits or ends)
                    _REAL_WAIT(self._cond, due - now)
            finally:
                entry.gated = False
            self._last = entry.ticket
            entry.since = REAL.monotonic()

    def _unsettled(self, entry: _Entry, now: float) -> tuple[float | None, bool]:  # with self._cond held
        """When the next participant that is not settled (running) would turn stale (None: all are settled), and
        whether one is left out as stale."""
        due: float | None = None
        stale = False
        for other in self._entries.values():
            if other is entry or other.gated:
                continue
            if other.waiting and other.woken(self._entries):  # notified: about to run, a sign of life
                other.waiting, other.on, other.since = False, None, now
            if other.waiting or (not other.begun and self._full(other.pool)):
                continue
            until = other.since + GRACE
            if until <= now:
                stale = True
            elif due is None or until < due:
                due = until
        return due, stale

    def _up(self) -> _Entry | None:  # with self._cond held
        """Whose turn it is among those at the gate: the next ticket after the last to go, round-robin."""
        gated = sorted((e for e in self._entries.values() if e.gated), key=lambda e: e.ticket)
        for e in gated:
            if e.ticket > self._last:
                return e
        return gated[0] if gated else None

    def _full(self, pool: Any) -> bool:  # with self._cond held
        """Whether every worker of ``pool`` runs one of the run's jobs (a job still queued there cannot begin)."""
        workers = getattr(pool, "_max_workers", None)
        if not isinstance(workers, int):
            return False
        return sum(1 for e in self._entries.values() if e.pool is pool and e.begun) >= workers

    def close(self) -> None:
        """The run was let go: no participant waits at the gate any more."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def turn() -> None:
    """Before the calling thread acts on the simulator (a model call, a tool execution): its turn (`Order.turn`)
    when it is a participant of an ordered run; otherwise nothing."""
    clock = threads.get(get_ident())
    order = getattr(clock, "order", None) if clock is not None else None
    if order is not None and order._of:
        order.turn()


class acting:
    """An action on the simulator as one turn (a tool execution with its latency, a model call with its latency, a
    person asked and waited for): its turn first (`turn`), and the sleeps inside it take none of their own, so no
    other thread's action comes between its start and its end."""

    __slots__ = ("entry",)

    def __init__(self) -> None:
        clock = threads.get(get_ident())
        order = getattr(clock, "order", None) if clock is not None else None
        self.entry = order._of.get(get_ident()) if order is not None and order._of else None
        if self.entry is not None:
            order.turn()  # type: ignore[union-attr]

    def __enter__(self) -> None:
        if self.entry is not None:
            self.entry.acting += 1

    def __exit__(self, *exc: object) -> None:
        if self.entry is not None:
            self.entry.acting -= 1
