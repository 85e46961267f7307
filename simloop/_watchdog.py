"""Runaway protection: `LoopHalted`, and the real-time `Watchdog` that unwinds a spinning drive.

The simulator stops a loop that runs away in one of three ways.  Too many model calls and too much
virtual time are noticed by the simulator itself, at a model or tool call or a clock advance.  The third
is a drive that spins without calling anything (``while True: pass``, or a retry loop that swallows every
error).  That one is stopped by the `Watchdog`: a `RealTimeThread` that waits on real time and raises
`LoopHalted` inside the drive's thread, through ``PyThreadState_SetAsyncExc``.

`LoopHalted` is a `BaseException`: the SDK and user loops catch ``Exception``, and must not swallow it.

Limit: an asynchronous exception is delivered only when the thread next runs Python bytecode.  A spin
inside one C call that never returns (a catastrophic regex, a C extension's loop, ``lock.acquire()``
without a timeout) cannot be interrupted.  The watchdog then fires again every ``seconds`` until the
thread comes back to bytecode.  Another limit is a race: if the drive returns at the very moment the
budget runs out, the halt may surface from ``watching()``'s exit instead of from inside the drive.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from simloop.clock import REAL, RealTimeThread

__all__ = ["HaltReason", "LoopHalted", "Watchdog"]

HaltReason = Literal["model_calls", "virtual_time", "watchdog"]

# Our own prototype: setting argtypes on the shared ctypes.pythonapi function would change it for everyone.
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))


class LoopHalted(BaseException):
    """simloop unwound the loop under test: a runaway budget ran out.

    ``reason`` is ``"model_calls"``, ``"virtual_time"`` or ``"watchdog"``; ``detail`` says what happened.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (LoopHalted, (self.reason, self.detail))  # also for the argument-less subclass below


def _halt_type(reason: str, detail: str) -> type[LoopHalted]:
    # PyThreadState_SetAsyncExc takes a class, which the thread instantiates without arguments.
    def __init__(self: LoopHalted) -> None:
        LoopHalted.__init__(self, reason, detail)

    return type("LoopHalted", (LoopHalted,), {"__init__": __init__, "__module__": __name__})


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> int:
    """Schedule ``exc_type`` in the thread; returns how many threads matched."""
    n: int = _set_async_exc(thread_id, ctypes.py_object(exc_type))
    if n > 1:  # never for a valid id; the C API asks to undo it
        _set_async_exc(thread_id, ctypes.py_object())
    return n


class _Dropped(BaseException):
    """Takes the place of a halt that was scheduled but not delivered; caught at once (see `_drop_pending`)."""


def _drop_pending() -> None:
    """Drop an asynchronous exception scheduled for the current thread and not delivered yet.

    Not with ``PyThreadState_SetAsyncExc(id, NULL)``: before CPython 3.13 that sets the interpreter's
    "asynchronous exception pending" flag and nothing clears it again (only delivering an exception
    does), so every later call of every thread takes the interpreter's slow path for good; a later
    ``hypothesis.find`` in the same process never finished.  The pending halt is replaced by an
    exception that is delivered here and caught, which clears the flag.
    """
    try:
        _raise_in(threading.get_ident(), _Dropped)  # delivered when the call returns, or at the loop's jump
        for _ in range(100_000):
            pass
    except _Dropped:
        pass


class Watchdog:
    """Stops a drive that spins without calling the model or a tool.

    It keeps a real-time budget, measured with the REAL monotonic clock.  `feed` resets the budget.  While
    `watching` its thread, ``seconds`` of real time without a feed raise `LoopHalted` ("watchdog") in that
    thread.  The budget is then re-armed, so a loop that catches even ``BaseException`` is hit again.

    One monitor thread (a `RealTimeThread`, started on first use) serves every Watchdog of the process,
    so watching costs a registration, not a thread start and join per run.

    Example::

        watchdog = Watchdog(seconds=10)
        with watchdog.watching():
            drive()          # the simulator calls watchdog.feed() on every model or tool call
    """

    def __init__(self, *, seconds: float = 10.0) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            from simloop.errors import UsageError

            raise UsageError(f"the watchdog budget must be a positive number of real seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self.halts = 0  # how many times it fired
        self._last = REAL.monotonic()
        self._thread_id: int | None = None
        self._fired = False  # during the current watching()

    def __repr__(self) -> str:
        return f"Watchdog(seconds={self.seconds!r})"

    def feed(self) -> None:
        """The drive made progress (a model or tool call): restart the idle budget."""
        self._last = REAL.monotonic()

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Watch the current thread until the block exits."""
        thread_id = threading.get_ident()
        if self._thread_id is not None:
            from simloop.errors import UsageError

            raise UsageError("this Watchdog is already watching a thread; use one Watchdog per drive")
        self._last = REAL.monotonic()
        self._fired = False
        _MONITOR.add(self, thread_id)
        try:
            yield
        finally:
            try:
                self._disarm()
            except LoopHalted:  # delivered in the middle of disarming: finish, then let it out
                self._disarm()
                raise

    def _disarm(self) -> None:
        with _MONITOR.cond:
            _MONITOR.remove(self)  # from here on the monitor never fires for us
            if self._fired:
                _drop_pending()  # a halt that was scheduled but not delivered yet

    def _due(self) -> float:
        return self._last + self.seconds

    def _fire(self, thread_id: int) -> bool:
        """Raise the halt in the watched thread (with the monitor's lock held); False if the thread is gone."""
        detail = (f"no model call or tool call for {self.seconds:g} s of real time; "
                  f"the drive was at {_where(thread_id)}")
        if _raise_in(thread_id, _halt_type("watchdog", detail)) == 0:
            return False
        self.halts += 1
        self._fired = True
        self._last = REAL.monotonic()  # re-arm: fire again if the halt is swallowed
        return True


class _Monitor:
    """The process's one watchdog thread: sleeps until the earliest budget runs out, then checks it."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.watched: dict[Watchdog, int] = {}
        self.thread: RealTimeThread | None = None
        self.wake = float("inf")  # when the thread wakes next (REAL.monotonic time)

    def add(self, dog: Watchdog, thread_id: int) -> None:
        with self.cond:
            dog._thread_id = thread_id
            self.watched[dog] = thread_id
            if self.thread is None or not self.thread.is_alive():
                self.thread = RealTimeThread(target=self._run, name="simloop-watchdog", daemon=True)
                self.thread.start()
            elif dog._due() < self.wake:  # only then: waking the thread costs the drive a switch per run
                self.cond.notify()

    def remove(self, dog: Watchdog) -> None:  # with cond held
        self.watched.pop(dog, None)
        dog._thread_id = None

    def _run(self) -> None:
        # Condition.wait blocks in C on the real clock; REAL.monotonic is the saved real function, so this
        # thread never reads virtual time even while time.monotonic is patched.
        with self.cond:
            while True:
                now = REAL.monotonic()
                due = [dog for dog in self.watched if dog._due() <= now]
                for dog in due:
                    if not dog._fire(self.watched[dog]):
                        self.remove(dog)
                # A dog removed since is not waited out: the thread wakes at its old due time, finds nothing.
                self.wake = min((dog._due() for dog in self.watched), default=float("inf"))
                self.cond.wait(None if self.wake == float("inf") else max(0.0, self.wake - REAL.monotonic()))


_MONITOR = _Monitor()


def _where(thread_id: int) -> str:
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return "an unknown place (the thread has no Python frame)"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
