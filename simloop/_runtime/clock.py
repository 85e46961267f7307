"""Virtual time: one clock drives sync sleeps, asyncio timers and the wall clock of a simulated run.

A loop under test sleeps for backoff, waits on timeouts and checks deadlines.  In a Sim all of that runs
on a `VirtualClock`, so minutes of simulated latency, retries and backoff take milliseconds and every run
with the same seed reads the same times.

Where each piece lives: this module holds the `VirtualClock` (it makes the run's event loops and sleeps for their
jobs); the event loop is `simloop._runtime.eventloop`'s (`VirtualTimeEventLoop`, imported here and handed the
clock as a value, so it never imports this module), its executor jobs `simloop._runtime.jobs`'s, the connections
to simloop's own servers it tells apart `simloop._runtime.sockets`'s; each thread's own time is
`simloop._runtime.threadtime`'s (the clock's base class), the real clocks and `RealTimeThread` are
`simloop._runtime.realtime`'s, which thread runs on which clock and what was replaced `simloop._runtime.registry`'s,
the ``datetime`` substitutes `simloop._runtime.datetimes`'s, and what a run patches, installed and put back,
`simloop._runtime.patches`'s.

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
    `VirtualTimeEventLoop` (`simloop._runtime.eventloop`) reads the clock in ``time()``.  When nothing is ready and only a timer is
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

Threads in turn
    In a Sim's sync run, the drive's thread, the threads it starts and the pool jobs it submits act on the
    simulator (a model call, a tool, a virtual sleep) one at a time, in a fixed round-robin order, once all of
    them are at such an action or in a wait simloop sees: ``Order`` (`simloop._runtime.order`, ``self.order``);
    the waits below tell it when a thread waits (``Order.cond_wait``, ``Order.joins``).

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
import contextlib
import datetime as _dt
import functools
import math
import threading
from collections.abc import Coroutine, Iterable
from types import ModuleType
from typing import Any, TypeVar

from simloop._runtime.eventloop import VirtualTimeDeadlock, VirtualTimeEventLoop, default_clock
from simloop._runtime.halt import LoopHalted
from simloop._runtime.jobs import Job
from simloop._runtime.order import Order, orderable
from simloop._runtime.patches import install, rebind, tick_freezegun, unbind, uninstall
from simloop._runtime.realtime import BYSTANDERS, EPOCH, MONOTONIC_ORIGIN, NS, REAL, RealTimeThread
from simloop._runtime.registry import LOCK, TLS, get_ident, saved, threads
from simloop._runtime.sockets import unsent
from simloop._runtime.threadtime import ThreadTime
from simloop.errors import UsageError

__all__ = ["VirtualClock", "VirtualTimeDeadlock", "VirtualTimeEventLoop", "unsent"]

T = TypeVar("T")

_SLEEPER_POLL = 0.01  # real seconds between a sleeping job's checks that its loop is alive
_SLEEPER_PATIENCE = 0.1  # real seconds a sleeping job waits for a loop that is busy or blocked, then advances
_MONOTONIC_ORIGIN_NS = round(MONOTONIC_ORIGIN * NS)  # what `_mono_ns` adds (worked out once: read per clock read)
_MAKING_COND = threading.Lock()  # makes a clock's Condition at its first use (see `VirtualClock.__getattr__`)


def _to_ns(seconds: float, what: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {seconds!r}; time only moves forward")
    return round(seconds * NS)


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
        self._sleepers: list[Job] = []  # executor jobs sleeping until their wake time
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
        #: The order of the run's threads at the simulator (a Sim's sync run makes it: `ordered`); None: unordered.
        self.order: Order | None = None

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

    def ordered(self) -> Order:
        """The run's `Order` (made at the first call): a Sim's sync drive runs inside its ``drive()`` block, and
        the threads and pool jobs it starts act on the simulator in start/submit order."""
        order = self.order
        if order is None:
            order = self.order = Order()
        return order

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
        return _MONOTONIC_ORIGIN_NS + self._ns

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
        order = self.order
        if order is not None and order._of:
            order.turn()  # (a thread started in the run sleeps in its turn: docs/design.md, Virtual time)
        job: Job | None = getattr(TLS, "job", None)
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

    def _sleep_for_loop(self, job: Job, wake: int) -> None:  # with self._cond held
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
            if self.order is not None:
                self.order.close()  # (its threads, parked or left, wait at no gate)

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
            order = self.order
            try:
                got = order.cond_wait(cond, timeout) if order is not None else None  # (a participant's, seen)
                return original(cond, timeout) if got is None else got
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
        order = self.order
        # (the others wait in a Condition.wait, which `_wait` marks for the order, with its waiter lock: no earlier)
        entry = order.joins(args[0]) if order is not None and key == "threading.Thread.join" else None
        try:
            return saved[key](*args, **kwargs)
        finally:
            if entry is not None:
                order.wait_ends(entry)  # type: ignore[union-attr]
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
            run, clock, order = thread.run, self, self.order
            began = self.own_ns()  # it lives from its starter's own time
            # its turn at the simulator among the run's threads (None: not ordered, a pool's worker, say)
            ticket = order.ticket() if order is not None and orderable(getattr(thread, "_target", None) or type(thread)) else None

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
                before = order.begin(ticket) if ticket is not None else None  # type: ignore[union-attr]
                try:
                    run()
                finally:
                    if ticket is not None:
                        order.end(ticket, before)  # type: ignore[union-attr]
                    if adopted:
                        with LOCK:
                            clock._unregister(tid)
                        clock._forget(tid)
                    # thread -> run_on_clock -> thread: a reference cycle that would keep the finished thread
                    # (and what its target holds) alive until the garbage collector finds it
                    if getattr(vars(thread).get("run"), "__wrapped__", None) is run:  # (still this wrapper)
                        del thread.run

            thread.run = run_on_clock  # type: ignore[method-assign]
            thread._simloop_ticket = ticket  # type: ignore[attr-defined]  # (`Order.joins`: when its turn ends)
            held = order.holds() if order is not None else None  # (its wait for the thread to begin is no turn)
            try:
                saved["threading.Thread.start"](thread)
            except BaseException:
                if ticket is not None:
                    order.end(ticket, here=False)  # type: ignore[union-attr]
                raise
            finally:
                Order.unholds(held)
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


default_clock(VirtualClock)  # a loop made without a clock (a loop factory) gets a fresh one
