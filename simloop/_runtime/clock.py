"""Virtual time: one clock drives sync sleeps, asyncio timers and the wall clock of a simulated run.

A loop under test sleeps for backoff, waits on timeouts and checks deadlines.  In a Sim all of that runs
on a `VirtualClock`, so minutes of simulated latency, retries and backoff take milliseconds and every run
with the same seed reads the same times.

Where each piece lives: this module holds the `VirtualClock` and the `VirtualTimeEventLoop`; each thread's own
time is `simloop._runtime.threadtime`'s (the clock's base class), the real clocks and `RealTimeThread` are `simloop._runtime.realtime`'s, which thread runs on
which clock and what was replaced `simloop._runtime.registry`'s, the ``datetime`` substitutes
`simloop._runtime.datetimes`'s, and what a run patches, installed and put back, `simloop._runtime.patches`'s.

Why our own clock (research: ``shared/research/libs.md`` §1)
    No library makes both ``time.sleep`` and asyncio sleeps instant and deterministic.  freezegun does not
    patch ``time.sleep`` at all, and it freezes ``time.monotonic``/``perf_counter``, so ``asyncio.sleep``
    hangs forever (E1).  time-machine fakes only the wall clock.  looptime and async-solipsism make asyncio
    sleeps instant, but not ``time.sleep`` (the sync SDK's retries).

Why the core clock is never freezegun's frozen monotonic
    Freezing ``time.monotonic`` for the whole process stops every asyncio timer, makes Hypothesis report a
    false ``DeadlineExceeded``, and breaks pytest-timeout and xdist's threads.  freezegun's enter scans
    every loaded module (20-30 ms each time once anthropic is imported, E3), and its scan even rewrites
    module globals that hold the real functions (E9).  So our real clocks live in a container (`simloop._runtime.realtime.REAL`).
    freezegun stays supported as a user's choice: a ``freeze_time`` around or inside a Sim keeps working.
    Every virtual advance ``tick()``s the active freezegun factories.  While we are patched,
    ``freezegun.api.real_*`` point at our functions, so freezegun's exit restores ours and not the C ones.

How threads are scoped
    `VirtualClock.patched` replaces module attributes (``time.sleep``, ``time.monotonic``, ...,
    ``datetime.datetime``, ``asyncio.events.new_event_loop``, ``threading.Thread.start``).  Code looks
    them up at call time, as ``anthropic._base_client`` does with ``time.sleep``.  Each replacement first
    looks up the calling thread.  The thread that entered ``patched()`` reads the virtual clock, and so do
    the threads it starts (``Thread.start`` marks them; executor workers included).  Any other thread falls
    through to the saved original, at a cost of about 0.2 µs.  So Hypothesis's engine, pytest and xdist
    keep real time.  `RealTimeThread` (the watchdog) never inherits virtual time.

Why the patches come and go with each run, not once per process
    time-machine and freezegun keep hooks installed; here that would save some 35 µs of a run (in situ,
    bench/README.md, Fifth pass) and change what code outside a run sees: ``datetime.datetime`` would stay
    our subclass, so ``type(datetime.datetime(2020, 1, 1)) is datetime.datetime`` would be False and pickling
    any datetime would fail in every thread ("not the same object as datetime.datetime"); ``time.sleep``
    would stay a Python function (in tracebacks, profiles, ``pickle.dumps(time.sleep)``), ``Condition.wait``
    a Python call in every thread; and the loop's aliases and ``freezegun.api.real_*`` would stay ours.
    docs/design.md (Virtual time) promises them put back after the run, and ``tests/test_clock.py`` pins it.

Wall clock: our own ``datetime`` subclasses, not time-machine
    time-machine swaps the C functions.  That catches ``from datetime import datetime`` aliases, but it
    acts on every thread at once and refuses to start under freezegun.  Thread scoping matters more here,
    so while patched ``datetime.datetime``/``date`` are thread-checked subclasses whose ``now``/``utcnow``/
    ``today`` read the virtual wall clock and which construct real ``datetime`` objects.  Their metaclass would
    make ``class D(date, metaclass=M)`` in a module first imported during a run fail ("metaclass conflict"):
    ``builtins.__build_class__`` is patched with them, and a class statement naming ours subclasses the real one.

Aliases bound before the patch (``from time import monotonic``, ``from datetime import datetime``)
    At the first ``patched()`` the module globals that hold the real functions (and, in the user's own
    modules, the real classes) are pointed at ours, and put back at the last exit: `simloop._runtime.aliases`
    finds them, scanning each module once per process (docs/design.md, Virtual time, says which modules
    and what stays out of reach).  ``patched(modules=[...])`` rebinds the named modules' aliases too,
    the standard library's included.

asyncio
    `VirtualTimeEventLoop` reads the clock in ``time()``.  When nothing is ready and only a timer is
    pending, it jumps to that timer, like trio's ``MockClock(autojump_threshold=0)``.  It never jumps
    while an executor job (``run_in_executor``, ``asyncio.to_thread``, ``anyio.to_thread``) runs real
    code.  It waits for the job in real time, and only after ``thread_grace`` real seconds does virtual
    time flow at real speed, so a timeout around a stuck thread still fires.  A job that sleeps virtually
    becomes a timer of the loop, so ``wait_for(to_thread(time.sleep, 5), 1)`` times out at +1 as in
    production.  The end of ``asyncio.run`` joining the default pool counts as a job running real code (since
    3.13 asyncio bounds that join with a 300 s timer of the loop, which the loop would otherwise jump to).
    While a real fd other than the self-pipe is registered, time flows at real speed (E6),
    except connections to simloop's own servers of the run (``clock.own_servers``: ``sim.mcp_url``): while one
    of them has work in flight the loop waits for it with virtual time standing still, as for a job, and
    otherwise they count for nothing (Linux, where the socket queues can be read: ``SIOCOUTQ``).
    ``await loop.settled()`` waits until all of that is done at the current instant (nothing ready, no job running
    real code within the grace, no own-server work in flight), just before time would move on: ``sim.mcp_url``
    starts each tool call there, so a client's requests made ready together all arrive before any is answered.
    With nothing ready, no timer and no job, the loop waits ``deadlock_after`` real seconds for another
    thread, then raises `VirtualTimeDeadlock` naming the stuck tasks.

Blocking waits
    ``Condition.wait(timeout)`` (and what is built on it: ``Event.wait``, ``Queue.get``, ``Future.result``)
    in a thread that is the only one running on the clock, while every other thread of the process is
    simloop's own, can only time out: it spends its timeout on the virtual clock and returns at once (a
    loop that waits 30 s on an event each step costs no real time).  With any other thread alive (one of
    the run, a pool started before it, a test's helper), the wait is the real one: it might be notified.

Each thread's own time
    One clock serves every thread of a run, so a sleep in one thread moves it on for all.  The clock keeps, per
    thread of the run, how far it is behind (another thread of the run moved the clock on and this one has not
    waited since: `own_now`) and how many of the person's answers it has heard (`mark`, `heard`).  A thread
    catches up when it sleeps, waits on a condition (``Event.wait``, ``Queue.get``, ``Future.result``,
    ``concurrent.futures.wait``), joins a thread, or (an event loop) is woken by another thread; a thread starts
    where its starter was, a pool job where its submitter was.  The invariants read it (docs/design.md, Virtual
    time): a gated call is held to the answers its thread had heard, the drive's return to its own time.

Limits: sleeps in plain threads that are not loop jobs advance the clock at once (they add up rather than
overlap); ``threading.Timer``, ``lock.acquire(timeout=)`` and waits while other threads run are real time;
threads started through ``_thread`` directly do not inherit virtual time; one loop per clock is precise
(several loops on one clock each jump on their own).

Cost, measured on a busy 2-core machine with anthropic imported: ``patched()`` enter+exit 15-35 µs (freezegun:
20-30 ms); a virtual ``asyncio.sleep`` 15-60 µs (a real asyncio timer costs 20-40 µs there); ``run()`` with a
fresh loop about 0.6 ms; a patched clock read costs foreign threads about 0.2 µs.  ``tests/test_clock.py`` prints
the first two.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as _dt
import functools
import math
import os
import selectors
import socket
import struct
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar, ParamSpec, TypeVar, TypeVarTuple

from simloop._runtime.halt import LoopHalted
from simloop._runtime.patches import install, rebind, tick_freezegun, unbind, uninstall
from simloop._runtime.realtime import BYSTANDERS, EPOCH, MONOTONIC_ORIGIN, NS, REAL, RealTimeThread
from simloop._runtime.registry import LOCK, TLS, get_ident, saved, threads
from simloop._runtime.threadtime import ThreadTime
from simloop.errors import UsageError

__all__ = ["VirtualClock", "VirtualTimeDeadlock", "VirtualTimeEventLoop", "unsent"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
P = ParamSpec("P")

_SLICE = 0.25  # real seconds per wait while time flows at real speed, so the loop re-checks its state
_SETTLE_POLL = 0.0005  # real seconds per wait while a `settled` waiter waits for an own server's work in flight
_SLEEPER_POLL = 0.01  # real seconds between a sleeping job's checks that its loop is alive
_SLEEPER_PATIENCE = 0.1  # real seconds a sleeping job waits for a loop that is busy or blocked, then advances


class VirtualTimeDeadlock(RuntimeError):
    """A virtual-time event loop can never wake up again (nothing ready, no timer, no job, no fd)."""


_MAKING_COND = threading.Lock()  # makes a clock's Condition at its first use (see `VirtualClock.__getattr__`)


def _to_ns(seconds: float, what: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {seconds!r}; time only moves forward")
    return round(seconds * NS)


class _Job:
    """One executor job of a virtual loop; ``wake`` (ns) is set while it waits in `VirtualClock.sleep`.

    ``started``: its thread took it up (a job queued behind a pool whose every thread sleeps virtually runs
    no real code, and must not hold virtual time still); ``pool``: the thread pool it was queued on."""

    __slots__ = ("loop", "pool", "started", "wake")

    def __init__(self, loop: VirtualTimeEventLoop) -> None:
        self.loop: VirtualTimeEventLoop = loop
        self.wake: int | None = None
        self.started = True
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None


class VirtualClock(ThreadTime):
    """The virtual time of one simulated run: integer nanoseconds that only move forward.

    ``now()`` counts from 0.0, ``time()`` is the wall clock from ``start`` (default `EPOCH`), and
    ``monotonic()`` (what patched ``time.monotonic`` and ``loop.time()`` read) is ``MONOTONIC_ORIGIN +
    now()``.  That is large, like a real machine's uptime, so ``last = 0.0`` sentinels in user code
    behave as in production.  With ``end`` set, an advance past ``end`` virtual seconds raises
    ``LoopHalted("virtual_time")`` instead.

    Example::

        clock = VirtualClock()
        with clock.patched():
            time.sleep(30)               # returns at once
            clock.run(asyncio.sleep(60)) # so does this
        assert clock.now() == 90.0
    """

    def __init__(self, *, start: float = EPOCH, end: float | None = None) -> None:
        if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
            raise UsageError(f"start must be a wall-clock time in seconds since the Unix epoch, got {start!r}")
        self._start_ns = round(start * NS)
        self._end_ns = None if end is None else _to_ns(end, "end")
        super().__init__()
        # self._cond, a Condition on a Lock, is made at first use (`__getattr__`): many runs never wait on their clock
        self._sleepers: list[_Job] = []  # executor jobs sleeping until their wake time
        self._depth = 0  # active patched() contexts on this clock, all threads
        self._thread_ids: set[int] = set()
        self._released = False  # `release` took the threads off this clock; a late patched() exit undoes nothing
        self.halts = 0  # LoopHalted raised by this clock (virtual time ran out, a deadlock in a Sim)
        self.first_halt: BaseException | None = None  # the first of them (a loop may swallow it)
        # In a Sim a deadlock unwinds the loop as LoopHalted("deadlock"), which the loop cannot swallow
        # (`except Exception` catches VirtualTimeDeadlock, a RuntimeError), and the run records a Halt.
        self.halt_on_deadlock = False
        #: simloop's own loopback servers for this run's loops (``port``, ``busy()``): see `VirtualTimeEventLoop`.
        self.own_servers: list[Any] = []
        self._loops: list[VirtualTimeEventLoop] = []  # the loops running on this clock now

    _cond: threading.Condition  # (made by `__getattr__`)

    def __getattr__(self, name: str) -> Any:
        """Make ``_cond`` when first asked for (only a missing attribute comes here; then it is an ordinary one).

        A Sim makes a clock per run, and a Condition costs three caught AttributeErrors to make (a plain Lock
        has no ``_release_save``, ``_acquire_restore`` or ``_is_owned``)."""
        if name != "_cond":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with _MAKING_COND:
            cond = vars(self).get("_cond")
            if cond is None:
                cond = self._cond = threading.Condition(threading.Lock())
        return cond

    def running_loop(self) -> VirtualTimeEventLoop | None:
        """The virtual-time loop running on this clock, when there is exactly one (another thread may schedule on it)."""
        loops = self._loops
        return loops[0] if len(loops) == 1 else None

    def __repr__(self) -> str:
        return f"VirtualClock(start={self._start_ns / NS!r}, now={self.now()!r})"

    def end_at(self, end: float | None) -> None:
        """Move the end of the run to ``end`` virtual seconds (a conversation's next turn gets time of its own)."""
        with self._cond:
            self._end_ns = None if end is None else _to_ns(end, "end")

    def now(self) -> float:
        """Virtual seconds since the run started."""
        return self._ns / NS

    def time(self) -> float:
        """The virtual wall clock, in seconds since the Unix epoch."""
        return (self._start_ns + self._ns) / NS

    def monotonic(self) -> float:
        """``MONOTONIC_ORIGIN + now()``: what ``time.monotonic()`` and ``loop.time()`` read on this clock."""
        return MONOTONIC_ORIGIN + self._ns / NS

    def _mono_ns(self) -> int:
        return round(MONOTONIC_ORIGIN * NS) + self._ns

    def _wall(self, tz: _dt.tzinfo | None) -> _dt.datetime:
        seconds, rest = divmod(self._start_ns + self._ns, NS)
        return REAL.datetime.fromtimestamp(seconds, tz).replace(microsecond=rest // 1000)

    def advance(self, seconds: float) -> None:
        """Move the clock forward; raises ValueError for a negative or non-finite amount."""
        ns = _to_ns(seconds, "advance")
        with self._cond:
            self._advance_to(self._ns + ns)

    def sleep(self, seconds: float) -> None:
        """Spend ``seconds`` of virtual time and return at once (patched ``time.sleep`` calls this).

        In an executor job of a running virtual loop, the sleep is a timer of that loop instead, so it
        interleaves with the loop's own timeouts.
        """
        ns = _to_ns(seconds, "sleep length")
        if ns == 0:
            if self._behind or self._seq:
                self._caught_up()
            return
        job: _Job | None = getattr(TLS, "job", None)
        with self._cond:
            if job is not None and job.loop.simloop_clock is self and job.loop.is_running():
                self._sleep_for_loop(job, self._ns + ns)
            else:
                self._advance_to(self._ns + ns)
            if self._behind or self._seq:
                self._caught_up()  # a thread that slept has lived up to now

    def _advance_to(self, target: int) -> None:  # with self._cond held
        delta = target - self._ns
        if delta > 0:
            if self._end_ns is not None and target > self._end_ns:
                raise self._halted(LoopHalted(
                    "virtual_time", f"virtual time would pass the end of the run at {self._end_ns / NS:g} s (now "
                                    f"{self.now():g} s, asked {target / NS:g} s)"))
            self._ns = target
            tick_freezegun(delta)
            if len(threads) > 1:
                self._others_fall_behind(delta)
        due = [job for job in self._sleepers if job.wake is not None and job.wake <= self._ns]
        if due:
            for job in due:
                job.wake = None
                self._sleepers.remove(job)
            self._cond.notify_all()

    def _sleep_for_loop(self, job: _Job, wake: int) -> None:  # with self._cond held
        loop = job.loop
        job.wake = wake
        self._sleepers.append(job)
        try:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_noop)  # wake it to take our wake time as a timer
            stalled: float | None = None
            while job.wake is not None and loop.is_running():
                if loop._selecting:
                    stalled = None
                elif stalled is None:
                    stalled = REAL.monotonic()
                elif REAL.monotonic() - stalled > _SLEEPER_PATIENCE:
                    break  # the loop is blocked (maybe on this very thread): do not deadlock
                self._cond.wait(_SLEEPER_POLL)
        finally:
            released = job.wake is None
            if not released:
                self._sleepers.remove(job)
                job.wake = None
        if not released:  # nobody drives the loop's timers: spend the time ourselves
            self._advance_to(wake)

    def _next_wake(self, loop: VirtualTimeEventLoop) -> int | None:
        """The earliest wake time (ns) of the loop's sleeping jobs, also abandoned ones."""
        return min((job.wake for job in self._sleepers if job.loop is loop and job.wake is not None), default=None)

    def _jump_to(self, target: int) -> None:
        with self._cond:
            self._advance_to(target)

    def _deadlock(self, loop: VirtualTimeEventLoop) -> BaseException:
        """The exception a deadlocked loop on this clock raises (see ``halt_on_deadlock``)."""
        report = loop._deadlock_report()
        if not self.halt_on_deadlock:
            return VirtualTimeDeadlock(report)
        return self._halted(LoopHalted("deadlock", report, where=loop._stuck_at()))

    def _halted(self, halt: BaseException) -> BaseException:
        self.halts += 1
        if self.first_halt is None:
            self.first_halt = halt
        return halt

    def new_event_loop(self) -> VirtualTimeEventLoop:
        """A new `VirtualTimeEventLoop` on this clock."""
        return VirtualTimeEventLoop(self)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on a fresh virtual loop, like ``asyncio.run``: cancels leftover tasks, closes the loop."""
        with asyncio.Runner(loop_factory=self.new_event_loop) as runner:
            return runner.run(coro)

    def patched(self, *, modules: Iterable[ModuleType] = ()) -> _Patched:
        """Put the calling thread, and the threads it starts, on this clock until the block exits.

        Covers ``time.time/time_ns/monotonic(_ns)/perf_counter(_ns)/sleep``,
        ``datetime.datetime.now/utcnow/today``, ``datetime.date.today``, and ``asyncio.run``/
        ``asyncio.new_event_loop`` (they get a virtual loop), also where a loaded module bound them by name
        (``from time import monotonic``, see `simloop._runtime.aliases`).  Other threads keep real time.  ``modules``
        rebinds such aliases in those modules too, whatever they are (the standard library's included).  Re-entering on the
        same clock is fine; a different clock in the same thread raises `simloop.UsageError`.  A Sim that runs
        its drive in a worker thread enters ``patched()`` in that thread.
        """
        return _Patched(self, modules)

    def _enter(self, modules: Iterable[ModuleType]) -> tuple[int, bool, list[tuple[int, str]]]:
        tid = get_ident()
        with LOCK:
            other = threads.get(tid)
            if other is not None and other is not self:
                raise UsageError(
                    f"this thread already runs on {other!r}: nested Sims in one thread are not supported. "
                    "Run the inner Sim after the outer one exits, or in a simloop._runtime.clock.RealTimeThread "
                    "(a plain thread started inside a Sim inherits its clock).")
            install()
            self._depth += 1
            owner = other is None
            if owner:
                threads[tid] = self
                self._thread_ids.add(tid)
                self._heard[tid] = self._seq  # the run's own thread: it has heard every answer so far
            try:
                slots = rebind(modules) if modules else []
            except BaseException:
                self._leave(tid, owner, [])
                raise
        return tid, owner, slots

    def release(self) -> None:
        """Take every thread off this clock and undo its patches now.

        For a run abandoned on a parked thread: its ``patched()`` block never exits, and the process (the
        rest of a test session, say) must go on in real time with nothing of this clock left installed.
        """
        with LOCK:
            for t in list(self._thread_ids):
                self._unregister(t)
            while self._depth > 0:
                self._depth -= 1
                uninstall()
            self._released = True

    def _leave(self, tid: int, owner: bool, slots: list[tuple[int, str]]) -> None:  # with LOCK held
        if self._released:  # `release` already undid this block's share
            return
        unbind(slots)
        if owner:
            self._unregister(tid)
        self._depth -= 1
        if self._depth == 0:  # the last patched() of this clock: threads it started return to real time
            for t in list(self._thread_ids):
                self._unregister(t)
        uninstall()

    def _unregister(self, tid: int) -> None:
        if threads.get(tid) is self:
            del threads[tid]
        self._thread_ids.discard(tid)

    def _wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        """``Condition.wait`` (so ``Event.wait``, ``Queue.get``, ``Future.result``) in a thread on this clock.

        A wait with a timeout, in a thread that is the only one running on this clock while every other
        thread of the process is simloop's own (see `_nobody_else`), can only end by timing out: it
        spends its timeout in virtual time and returns at once.  Any other wait is the real one.
        """
        original = saved["threading.Condition.wait"]
        if (timeout is None or isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                or not 0 < timeout < math.inf or not self._nobody_else()):
            try:
                return original(cond, timeout)  # type: ignore[no-any-return]
            finally:
                if self._behind or self._seq:
                    self._caught_up()  # what it waited for happened before now
        if original(cond, 0):  # notified already (by a thread outside the run, say)
            return True
        self.sleep(timeout)
        return False

    def _received(self, key: str, *args: Any, **kwargs: Any) -> Any:
        """``Thread.join``, ``Event.wait``, ``Queue.get``, ``Future.result`` (`_SYNCS`) in a thread on this clock:
        the real one; what it waited for or received happened by now, so the thread has lived up to now."""
        try:
            return saved[key](*args, **kwargs)
        finally:
            if self._behind or self._seq:
                self._caught_up()

    def _nobody_else(self) -> bool:
        """Whether no thread but the caller could notify it: it is this clock's only thread, and every other
        thread is a `RealTimeThread` (simloop's watchdog, servers, parked runs) or waits for a run to end."""
        me = get_ident()
        if len(self._thread_ids) != 1 or me not in self._thread_ids:
            return False
        return all(t.ident == me or t.ident in BYSTANDERS or isinstance(t, RealTimeThread)
                   for t in threading.enumerate())

    def _start_thread(self, thread: threading.Thread) -> None:
        if not isinstance(thread, RealTimeThread):
            run, clock = thread.run, self
            began = self.own_ns()  # it lives from its starter's own time

            @functools.wraps(run)
            def run_on_clock() -> None:
                tid = get_ident()
                with LOCK:
                    adopted = clock._depth > 0 and tid not in threads
                    if adopted:
                        threads[tid] = clock
                        clock._thread_ids.add(tid)
                if adopted:
                    clock.begin_at(began)
                try:
                    run()
                finally:
                    if adopted:
                        with LOCK:
                            clock._unregister(tid)
                        clock._forget(tid)
                    # thread -> run_on_clock -> thread: a reference cycle that would keep the finished thread
                    # (and what its target holds) alive until the garbage collector finds it
                    if getattr(vars(thread).get("run"), "__wrapped__", None) is run:  # (still this wrapper)
                        del thread.run

            thread.run = run_on_clock  # type: ignore[method-assign]
            saved["threading.Thread.start"](thread)
            # start() waits for the thread to begin (an Event), not for what it does: the starter stays where it was
            self.begin_at(began)
            return
        saved["threading.Thread.start"](thread)


class _Patched:
    """`VirtualClock.patched`'s block: a plain context manager (no generator: it is entered at every run)."""

    __slots__ = ("clock", "entered", "modules")

    def __init__(self, clock: VirtualClock, modules: Iterable[ModuleType]) -> None:
        self.clock = clock
        self.modules = modules
        self.entered: tuple[int, bool, list[tuple[int, str]]] | None = None

    def __enter__(self) -> None:
        self.entered = self.clock._enter(self.modules)

    def __exit__(self, *exc: object) -> None:
        entered, self.entered = self.entered, None
        if entered is not None:
            with LOCK:
                self.clock._leave(*entered)


def _noop() -> None:
    pass


class _AnyioJobs:
    """Counts ``anyio.to_thread.run_sync`` calls as loop jobs while any virtual loop runs (refcounted)."""

    users = 0
    saved: ClassVar[dict[str, Any]] = {}  # "method": the backend's classmethod object (a dict: no binding)
    lock = threading.Lock()

    @classmethod
    def acquire(cls) -> None:
        with cls.lock:
            cls.users += 1
            backend = cls._backend() if cls.users == 1 else None
            if backend is not None:
                cls.saved["method"] = backend.__dict__["run_sync_in_worker_thread"]
                backend.run_sync_in_worker_thread = classmethod(cls._counted)

    @classmethod
    def release(cls) -> None:
        with cls.lock:
            cls.users -= 1
            if cls.users == 0 and "method" in cls.saved:
                cls._backend().run_sync_in_worker_thread = cls.saved.pop("method")

    @staticmethod
    def _backend() -> Any:
        if "anyio" not in sys.modules:
            return None
        from anyio._backends import _asyncio

        return _asyncio.AsyncIOBackend

    @staticmethod
    async def _counted(backend: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        original = _AnyioJobs.saved["method"].__func__
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualTimeEventLoop):
            return await original(backend, func, *args, **kwargs)
        with loop._counting_job() as job:
            return await original(backend, loop._as_job(func, job), *args, **kwargs)


class _VirtualSelector(selectors.BaseSelector):
    """The real selector, with ``select`` decided by the virtual loop."""

    def __init__(self, loop: VirtualTimeEventLoop) -> None:
        self._loop = loop
        self.real = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        return self._loop._select(self.real, timeout)

    def get_map(self) -> Any:
        return self.real.get_map()

    def close(self) -> None:
        self.real.close()


_Events = list[tuple[selectors.SelectorKey, int]]


class VirtualTimeEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose time is a `VirtualClock` and which jumps to the next timer when idle.

    Args:
        clock: the clock to read and drive (a fresh `VirtualClock` when omitted, for loop factories).
        deadlock_after: real seconds an idle loop (no callback, timer, job or fd) waits for another
            thread before raising `VirtualTimeDeadlock`.
        thread_grace: real seconds the loop waits for running executor jobs with virtual time standing
            still; after that, virtual time flows at real speed until they finish.

    ``loop.simloop_clock`` is the clock.  Use with ``asyncio.Runner(loop_factory=...)``, anyio's
    ``anyio_backend`` fixture ``("asyncio", {"loop_factory": ...})`` or `VirtualClock.run`.
    """

    def __init__(self, clock: VirtualClock | None = None, *, deadlock_after: float = 2.0,
                 thread_grace: float = 1.0) -> None:
        self.simloop_clock = clock if clock is not None else VirtualClock()
        self._deadlock_after = deadlock_after
        self._thread_grace = thread_grace
        self._jobs: set[_Job] = set()  # executor jobs whose result is awaited (under the clock's lock)
        self._unfinished: set[_Job] = set()  # executor jobs whose thread has not returned, awaited or not
        self._draining = False  # in shutdown_default_executor
        self._busy_since: float | None = None  # real time we began waiting for running jobs
        self._selecting = False  # read by sleeping jobs: the loop is idle and will handle their wake time
        self._settling: list[asyncio.Future[None]] = []  # `settled` waiters, released before time moves on
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        return self.simloop_clock.monotonic()

    def settled(self) -> asyncio.Future[None]:
        """A future (await it on this loop) done once the loop has run everything due at this virtual instant: no
        callback ready, no executor job running real code (for up to ``thread_grace`` real seconds), no work in
        flight with simloop's own servers (a request on its way to ``sim.mcp_url``, the server taking it in), just
        before virtual time would move on or the loop would block.

        Why: a client that makes two requests ready at one instant sends both before either is answered in
        production, where sending takes no time next to the work; here a zero-time answer to the first could
        otherwise be delivered before the client has run its code that sends the second (docs/design.md, Tools
        over MCP).  Virtual time does not move while it waits.
        """
        waiter: asyncio.Future[None] = self.create_future()
        self._settling.append(waiter)
        return waiter

    def _release_settled(self) -> bool:
        """Resolve the `settled` waiters (on the loop's thread, inside its select): whether any was waiting."""
        waiters, self._settling = self._settling, []
        released = False
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
                released = True
        return released

    def run_forever(self) -> None:
        _AnyioJobs.acquire()
        loops = self.simloop_clock._loops
        loops.append(self)
        try:
            super().run_forever()
        finally:
            loops.remove(self)
            _AnyioJobs.release()
            with self.simloop_clock._cond:
                self.simloop_clock._cond.notify_all()  # sleeping jobs: nobody drives your wake time now

    def run_in_executor(self, executor: concurrent.futures.Executor | None, func: Callable[[*Ts], T],
                        *args: *Ts) -> asyncio.Future[T]:
        job = _Job(self)
        if executor is None or isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            func = self._as_job(func, job)  # (a process pool must get the picklable original)
            with self.simloop_clock._cond:
                self._unfinished.add(job)
                job.started = False
        future = super().run_in_executor(executor, func, *args)
        pool = executor if executor is not None else getattr(self, "_default_executor", None)
        job.pool = pool if isinstance(pool, concurrent.futures.ThreadPoolExecutor) else None
        self._job_done(job, add=True)
        # Dropped on the loop thread once the result is delivered, never before: else the loop could jump
        # past a timeout while the result is on its way.
        future.add_done_callback(lambda _: self._job_done(job))
        return future

    async def shutdown_default_executor(self, *args: Any) -> None:
        # asyncio joins the executor from a plain thread; abandoned jobs still running real code are then
        # waited for like awaited ones (and ones sleeping virtually are timers, as always), and so is the
        # joining itself once no job is left (see `_draining_jobs`).
        self._draining = True
        try:
            await super().shutdown_default_executor(*args)
        finally:
            self._draining = False

    def _job_done(self, job: _Job, *, add: bool = False) -> None:
        with self.simloop_clock._cond:
            if add:
                self._jobs.add(job)
            else:
                self._jobs.discard(job)

    @contextmanager
    def _counting_job(self) -> Iterator[_Job]:
        job = _Job(self)
        self._job_done(job, add=True)
        try:
            yield job
        finally:
            self._job_done(job)

    def _as_job(self, func: Callable[P, T], job: _Job) -> Callable[P, T]:
        @functools.wraps(func)
        def run_as_job(*args: P.args, **kwargs: P.kwargs) -> T:
            previous = getattr(TLS, "job", None)
            TLS.job = job  # clock.sleep() in this thread becomes a timer of the job's loop
            job.started = True
            try:
                return func(*args, **kwargs)
            finally:
                TLS.job = previous
                with job.loop.simloop_clock._cond:
                    job.loop._unfinished.discard(job)

        return run_as_job

    def _select(self, sel: selectors.BaseSelector, timeout: float | None) -> _Events:
        events = sel.select(0)  # always look: a thread's call_soon_threadsafe, a real fd
        if not events and timeout != 0:
            self._selecting = True
            try:
                events = self._idle(sel, timeout)
            finally:
                self._selecting = False
        if events:
            self._busy_since = None
            clock = self.simloop_clock
            if clock._seq:
                clock._caught_up()  # woken by another thread (a job's result, a call_soon_threadsafe): it has heard
        return events

    def _idle(self, sel: selectors.BaseSelector, timeout: float | None) -> _Events:
        # Targets are integer nanoseconds of the clock: a sleeper's wake time must be hit exactly.
        clock = self.simloop_clock
        now = clock._ns
        wake: int | None = None
        running = 0
        if self._jobs or clock._sleepers or self._draining:
            with clock._cond:
                wake = clock._next_wake(self)
                running = sum(job.wake is None and (job.started or not self._full(job.pool)) for job in self._jobs)
                if self._draining:
                    running += self._draining_jobs()
        if timeout is not None:  # the next timer (asyncio caps the timeout at one day: we then jump twice)
            timer = now + round(timeout * NS)  # within a nanosecond, so the timer is due (clock resolution)
            wake = timer if wake is None else min(wake, timer)
        # (`settled` waiters are released at each point below where virtual time would move on or the loop block:
        # they run first, at this instant, with everything that was due at it done)
        own: bool | None = False
        if self._has_real_fd(sel):
            own = self._own_busy(sel)
            if own is None:  # a real fd: time flows at real speed
                if self._settling and self._release_settled():
                    return []
                return self._flow(sel, now, wake, None)
            if own:  # simloop's own server is at work: wait for it with virtual time standing still
                running += 1
            else:  # only idle connections to simloop's own servers: as if no fd were registered
                events = sel.select(0)
                if events:
                    return events
        if running > 0:
            real_now = REAL.monotonic()
            if self._busy_since is None:
                self._busy_since = real_now
            left = self._thread_grace - (real_now - self._busy_since)
            if left > 0:  # virtual time stands still while jobs run real code
                # (a `settled` waiter looks again soon at a busy server: its going back to waiting wakes nobody)
                return sel.select(min(left, _SETTLE_POLL if own and self._settling else _SLICE))
            if self._settling and self._release_settled():
                return []
            if wake is None:
                return sel.select(_SLICE)
            return self._flow(sel, now, wake, _SLICE)
        self._busy_since = None
        if self._settling and self._release_settled():
            return []
        if wake is None:
            events = sel.select(self._deadlock_after)
            if events:
                return events
            raise self.simloop_clock._deadlock(self)
        clock._jump_to(wake)
        return []

    def _draining_jobs(self) -> int:  # with the clock's lock held
        """What `shutdown_default_executor` waits for that runs real code: the unfinished jobs neither sleeping
        virtually nor queued behind a pool of sleepers, and, once the default pool has no job left, the joining
        thread itself (the pool's threads exiting).

        Why the joining counts: since Python 3.13 asyncio bounds the join with a timer of the loop
        (``asyncio.timeout(300)``, ``asyncio.run``'s ``THREAD_JOIN_TIMEOUT``), no longer a real-time
        ``thread.join(300)``; an idle loop would jump to that timer while the threads exit, and every
        ``asyncio.run`` that used ``to_thread`` would end 300 virtual seconds late."""
        default = getattr(self, "_default_executor", None)
        joining = not any(job.pool is default for job in self._unfinished)
        return joining + sum(job.wake is None and (job.started or not self._full(job.pool)) for job in self._unfinished)

    def _full(self, pool: concurrent.futures.ThreadPoolExecutor | None) -> bool:  # with the clock's lock held
        """Whether every thread of ``pool`` holds a job of this loop, so a job queued on it cannot start before
        one of them ends (one sleeping virtually ends only when the loop moves time on)."""
        if pool is None:
            return False
        taken = sum(job.started and job.pool is pool for job in self._unfinished)
        return taken >= getattr(pool, "_max_workers", taken + 1)

    def _flow(self, sel: selectors.BaseSelector, now: int, wake: int | None, cap: float | None) -> _Events:
        """Wait in real time and let virtual time follow it, up to ``wake`` (nanoseconds of the clock)."""
        left = None if wake is None else max(0, wake - now) / NS
        wait = left if cap is None else cap if left is None else min(left, cap)
        started = REAL.monotonic()
        events = sel.select(wait)
        elapsed = REAL.monotonic() - started
        reached = left is not None and (elapsed >= left or (not events and wait == left))
        self.simloop_clock._jump_to(wake if reached and wake is not None else now + round(elapsed * NS))
        return events

    def _has_real_fd(self, sel: selectors.BaseSelector) -> bool:
        registered = sel.get_map()
        if len(registered) != 1:
            return len(registered) > 1
        ssock = getattr(self, "_ssock", None)
        return ssock is None or ssock.fileno() not in registered

    def _own_busy(self, sel: selectors.BaseSelector) -> bool | None:
        """None when a registered fd is not a connection to one of simloop's own servers on this clock (``own_servers``,
        on loopback); else whether one of them has work in flight: bytes this loop sent that the server has not
        received, a connection being made, or the server busy (``busy()``, which looks at its side in the order
        work moves).  Linux only (elsewhere None: the fds are real)."""
        servers = self.simloop_clock.own_servers
        if not servers or not _LINUX:
            return None
        ports = {server.port for server in servers}
        ssock = getattr(self, "_ssock", None)
        skip = ssock.fileno() if ssock is not None else -1
        busy = False
        for fd in list(sel.get_map()):
            if fd == skip:
                continue
            state = _own_connection(fd, ports) if isinstance(fd, int) else None
            if state is None:
                return None
            busy = busy or state
        return busy or any(server.busy() for server in servers)

    def _stuck_at(self) -> str | None:
        """Where the first pending task (by name: the main one is ``Task-1`` or the like) waits; not simloop's own
        task that awaits a Sim's drive task."""
        own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the simloop package
        for task in sorted(asyncio.all_tasks(self), key=lambda t: t.get_name()):
            where = _innermost(task)
            if where is not None and not where.startswith(own + os.sep):
                return where
        return None

    def _deadlock_report(self) -> str:
        tasks = [f"  {task.get_name()}: {_where(task)}" for task in asyncio.all_tasks(self)]
        return (
            "the virtual-time event loop can never wake up: no callback is ready, no timer is scheduled, no "
            "executor job is running and no real file descriptor is registered, and no other thread woke it "
            f"within {self._deadlock_after:g} s of real time.  Something awaits a future, event, lock or queue "
            "that nothing will ever set.\nPending tasks:\n" + ("\n".join(tasks) or "  (none)"))


_LINUX = sys.platform.startswith("linux")
_SYN_SENT = 2  # tcp_states.h


def unsent(fd: int) -> bool:
    """Whether a TCP socket holds bytes its peer has not yet received (Linux ``SIOCOUTQ``); False when unknown."""
    import fcntl  # (Unix only)
    import termios

    try:
        queued: int = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except OSError:
        return False
    return queued > 0


def _own_connection(fd: int, ports: set[int]) -> bool | None:
    """For a TCP socket connected (or connecting) to one of ``ports`` on loopback: whether bytes or a handshake are in
    flight; None for any other fd."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            return None
        try:
            host, port = sock.getpeername()[:2]
        except OSError:  # not connected yet: a handshake in flight counts as work (else the fd is nobody's)
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
            return True if info[0] == _SYN_SENT else None
        if port not in ports or not (host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1")):
            return None
        return unsent(fd)
    except OSError:
        return None
    finally:
        sock.detach()


def _innermost(task: asyncio.Task[Any]) -> str | None:
    """``FILE:LINE in function`` of the innermost coroutine frame a suspended task waits in."""
    coro: Any = task.get_coro()
    found = None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        found = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return found


def _where(task: asyncio.Task[Any]) -> str:
    """Where a suspended task waits: its chain of coroutine frames, outermost first, and what it awaits."""
    coro: Any = task.get_coro()
    chain = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            kind = type(coro).__name__
            chain.append(f"awaiting {'a Future' if kind == 'FutureIter' else kind}")
            break
        chain.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " -> ".join(chain) or "(not started)"
