"""The virtual-time event loop: asyncio on a `simloop._runtime.clock.VirtualClock`, which jumps to the next timer
when nothing is ready.

The clock makes its loops (``clock.new_event_loop()``, ``clock.run(coro)``, and a patched ``asyncio.run`` /
``new_event_loop`` in a thread on the clock) and hands itself to them: this module reads the clock as a value
(`simloop._runtime.jobs.Clock`) and never imports it.  The loop's executor jobs are `simloop._runtime.jobs`'s, the
connections to simloop's own servers it tells apart from real fds `simloop._runtime.sockets`'s.

What it does (docs/design.md, Virtual time, and the clock's module docstring, asyncio): `_VirtualSelector` hands
every ``select`` to the loop, which looks without waiting and, with nothing ready, decides: wait in real time for
jobs running real code (virtual time standing still, up to ``thread_grace``), let virtual time flow at real speed
while a real fd is registered, release `settled` waiters, jump the clock to the next timer or sleeping job, or,
with nothing to wait for, raise `VirtualTimeDeadlock` after ``deadlock_after`` real seconds.
"""

from __future__ import annotations

import asyncio
import os
import selectors
from collections.abc import Callable
from typing import Any

from simloop._runtime.frames import innermost, where
from simloop._runtime.jobs import AnyioJobs, Clock, JobLoop
from simloop._runtime.realtime import MONOTONIC_ORIGIN, NS, REAL
from simloop._runtime.sockets import LINUX, own_connection

__all__ = ["VirtualTimeDeadlock", "VirtualTimeEventLoop", "default_clock"]

_SLICE = 0.25  # real seconds per wait while time flows at real speed, so the loop re-checks its state
_SETTLE_POLL = 0.0005  # real seconds per wait while a `settled` waiter waits for an own server's work in flight
_NEW_CLOCK: list[Callable[[], Clock]] = []  # what makes a loop's clock when none is given (`default_clock`)


class VirtualTimeDeadlock(RuntimeError):
    """A virtual-time event loop can never wake up again (nothing ready, no timer, no job, no fd)."""


def default_clock(make: Callable[[], Clock]) -> None:
    """Give loops made without a clock (``loop_factory=VirtualTimeEventLoop``) a fresh one made by ``make``.

    `simloop._runtime.clock` registers `VirtualClock` when it is imported (it imports this module, not the reverse)."""
    _NEW_CLOCK[:] = [make]


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
        """Look without waiting (a thread's ``call_soon_threadsafe``, a real fd); with nothing there and a wait
        asked for, the loop decides what to wait for (`VirtualTimeEventLoop._idle`)."""
        real, loop = self.real, self._loop
        events = real.select(0)
        if not events and timeout != 0:
            loop._selecting = True
            try:
                events = loop._idle(real, timeout)
            finally:
                loop._selecting = False
        if events:
            loop._busy_since = None
            clock = loop.simloop_clock
            if clock._seq:
                clock._caught_up()  # woken by another thread (a job's result, a call_soon_threadsafe): it has heard
        return events

    def get_map(self) -> Any:
        return self.real.get_map()

    def close(self) -> None:
        self.real.close()


_Events = list[tuple[selectors.SelectorKey, int]]


class VirtualTimeEventLoop(JobLoop):
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

    def __init__(self, clock: Clock | None = None, *, deadlock_after: float = 2.0,
                 thread_grace: float = 1.0) -> None:
        self.simloop_clock = clock if clock is not None else _NEW_CLOCK[0]()
        self._deadlock_after = deadlock_after
        self._thread_grace = thread_grace
        self._init_jobs()
        self._busy_since: float | None = None  # real time we began waiting for running jobs
        self._selecting = False  # read by sleeping jobs: the loop is idle and will handle their wake time
        self._settling: list[asyncio.Future[None]] = []  # `settled` waiters, released before time moves on
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        # `VirtualClock.monotonic`'s own arithmetic, read here (asyncio asks at every turn of the loop and timer)
        return MONOTONIC_ORIGIN + self.simloop_clock._ns / NS

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
        AnyioJobs.acquire()
        loops = self.simloop_clock._loops
        loops.append(self)
        try:
            super().run_forever()
        finally:
            loops.remove(self)
            AnyioJobs.release()
            with self.simloop_clock._cond:
                self.simloop_clock._cond.notify_all()  # sleeping jobs: nobody drives your wake time now

    def _idle(self, sel: selectors.BaseSelector, timeout: float | None) -> _Events:
        # Targets are integer nanoseconds of the clock: a sleeper's wake time must be hit exactly.
        clock = self.simloop_clock
        now = clock._ns
        wake: int | None = None
        running = 0
        if self._jobs or clock._sleepers or self._draining:
            with clock._cond:
                wake = clock._next_wake(self)
                running = self._running_jobs()
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
        if not servers or not LINUX:
            return None
        ports = {server.port for server in servers}
        ssock = getattr(self, "_ssock", None)
        skip = ssock.fileno() if ssock is not None else -1
        busy = False
        for fd in list(sel.get_map()):
            if fd == skip:
                continue
            state = own_connection(fd, ports) if isinstance(fd, int) else None
            if state is None:
                return None
            busy = busy or state
        return busy or any(server.busy() for server in servers)

    def _stuck_at(self) -> str | None:
        """Where the first pending task (by name: the main one is ``Task-1`` or the like) waits; not simloop's own
        task that awaits a Sim's drive task."""
        own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the simloop package
        for task in sorted(asyncio.all_tasks(self), key=lambda t: t.get_name()):
            where = innermost(task)
            if where is not None and not where.startswith(own + os.sep):
                return where
        return None

    def _deadlock_report(self) -> str:
        tasks = [f"  {task.get_name()}: {where(task)}" for task in asyncio.all_tasks(self)]
        return (
            "the virtual-time event loop can never wake up: no callback is ready, no timer is scheduled, no "
            "executor job is running and no real file descriptor is registered, and no other thread woke it "
            f"within {self._deadlock_after:g} s of real time.  Something awaits a future, event, lock or queue "
            "that nothing will ever set.\nPending tasks:\n" + ("\n".join(tasks) or "  (none)"))

