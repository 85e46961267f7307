"""Runaway protection: the real-time `Watchdog` that unwinds a spinning drive with a `LoopHalted`.

The simulator stops a loop that runs away in one of three ways.  Too many model calls and too much
virtual time are noticed by the simulator itself, at a model or tool call or a clock advance.  The third
is a drive that spins without calling anything (``while True: pass``, or a retry loop that swallows every
error).  That one is stopped by the `Watchdog`: a `RealTimeThread` that waits on real time and raises
`LoopHalted` inside the drive's thread, through ``PyThreadState_SetAsyncExc``.

What is never a spin: simloop's own work inside a run (`Watchdog.paused`), and an import in progress
(the first ``import anthropic`` took 8.7 s on a loaded CI machine): a halt due while the watched
thread, or one of its ``companions`` (the loop's other threads), is importing is put off, the budget
starting afresh, until the import has taken ``import_grace`` (``max(60 s, 6 budgets)``); only then is
it a spin at import time.

Limit: an asynchronous exception is delivered only when the thread next runs Python bytecode.  A spin
inside one C call that never returns (a catastrophic regex, a C extension's loop, ``lock.acquire()``
without a timeout) cannot be interrupted.  The watchdog then fires again every ``seconds`` until the
thread comes back to bytecode.  Another limit is a race: if the drive returns at the very moment the
budget runs out, the halt may surface from ``watching()``'s exit instead of from inside the drive.
"""

from __future__ import annotations

import _thread
import ctypes
import os
import sys
import sysconfig
import threading
from collections.abc import Collection
from pathlib import Path
from types import FrameType

from simloop._runtime.halt import LoopHalted
from simloop._runtime.realtime import REAL, RealTimeThread

__all__ = ["Watchdog", "park", "where_in", "where_of"]

#: The least real time an import may take before the watchdog halts it (it then counts as a spin).
IMPORT_GRACE = 60.0

# Our own prototype: setting argtypes on the shared ctypes.pythonapi function would change it for everyone.
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))


def park() -> None:
    """Block the calling thread for good, in C and without using the CPU (a thread simloop abandoned)."""
    while True:
        threading.Event().wait()


def _halt_type(reason: str, detail: str, where: str | None, dog: Watchdog | None = None) -> type[LoopHalted]:
    # PyThreadState_SetAsyncExc takes a class, which the thread instantiates without arguments, in that
    # thread, when the exception is delivered: a thread whose run was abandoned parks there for good.
    def __init__(self: LoopHalted) -> None:
        if dog is not None and dog.abandoned and _may_park(sys._getframe(1)):
            park()
        LoopHalted.__init__(self, reason, detail, where)

    return type("LoopHalted", (LoopHalted,), {"__init__": __init__, "__module__": __name__})


def _may_park(frame: FrameType | None) -> bool:
    """Whether a thread may be parked here: in the loop's own code, and not in an import.

    simloop's, the standard library's and installed packages' code may hold locks the rest of the process
    needs (the clock's, ``threading``'s list of threads, logging's, the import lock); parked there, the
    thread would hold them for good.  There the halt is raised as usual instead: unwinding releases them.
    """
    if frame is None or _skipped(frame.f_code.co_filename, True):
        return False
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return False
        frame = frame.f_back
    return True


def _importing(frame: FrameType | None) -> bool:
    """Whether the thread whose innermost frame this is is executing an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> int:
    """Schedule ``exc_type`` in the thread; returns how many threads matched."""
    n: int = _set_async_exc(thread_id, ctypes.py_object(exc_type))
    if n > 1:  # never for a valid id; the C API asks to undo it
        _set_async_exc(thread_id, ctypes.py_object())
    return n


class _Dropped(BaseException):
    """Takes the place of a halt that was scheduled but not delivered; caught at once (see `_drop_pending`)."""


def _drop_pending() -> None:
    """Drop an asynchronous exception scheduled for the current thread, and clear the interpreter's flag.

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

    def __init__(self, *, seconds: float = 10.0, import_grace: float | None = None) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            from simloop.errors import UsageError

            raise UsageError(f"the watchdog budget must be a positive number of real seconds, got {seconds!r}")
        self.seconds = float(seconds)
        #: Real seconds in a row a halt is put off while the watched thread is importing a module.
        self.import_grace = max(IMPORT_GRACE, 6 * self.seconds) if import_grace is None else float(import_grace)
        self.halts = 0  # how many times it fired
        self.deferred = 0  # how many times it was due and did not fire (an import, or simloop's own work)
        self._paused = 0  # simloop's own work in progress (`paused`)
        self._importing_since: float | None = None  # when the import a halt was put off for began (at the latest)
        self._deferred_at: float | None = None
        #: More threads of the loop whose imports are not spins either (a Sim passes its clock's threads:
        #: an async drive's executor jobs), as a live collection of thread idents.
        self.companions: Collection[int] = ()
        self.abandoned = False  # the run gave up on the watched thread: a halt delivered now parks it
        self._last = REAL.monotonic()
        self._thread_id: int | None = None
        self._fired = False  # during the current watching()

    def __repr__(self) -> str:
        return f"Watchdog(seconds={self.seconds!r})"

    def feed(self) -> None:
        """The drive made progress (a model or tool call): restart the idle budget."""
        self._last = REAL.monotonic()

    def paused(self) -> _Paused:
        """simloop's own work (setting up a client, an MCP server): the real time it takes is not the loop's.

        The budget does not run out inside the block, and starts afresh when it ends.
        """
        return _Paused(self)

    def watching(self) -> _Watching:
        """Watch the current thread until the block exits."""
        return _Watching(self)

    def _watch(self) -> None:
        thread_id = threading.get_ident()
        if self._thread_id is not None:
            from simloop.errors import UsageError

            raise UsageError("this Watchdog is already watching a thread; use one Watchdog per drive")
        self._last = REAL.monotonic()
        self._fired = False
        _MONITOR.add(self, thread_id)

    def _disarm(self) -> None:
        with _MONITOR.lock:
            _MONITOR.remove(self)  # from here on the monitor never fires for us
            if self._fired:
                _drop_pending()  # a halt that was scheduled but not delivered yet

    def abandon(self, thread_id: int, *, interrupt: bool = True) -> None:
        """The run gave up on the watched thread: park it now if it runs Python, or when it comes back from C.

        The watchdog stops watching it: a parked thread needs no more halts (and one that called into the
        simulator is parked there).
        """
        with _MONITOR.cond:
            self.abandoned = True
            if self._thread_id == thread_id:
                if interrupt:
                    _raise_in(thread_id, _halt_type("abandoned", "the run was abandoned", None, self))
                    # The halt stays pending while the thread is blocked in C; before CPython 3.13 that keeps
                    # the interpreter's flag set for every thread.  Clear it (the thread still gets its halt at
                    # its next switch with another thread).
                    _drop_pending()
                _MONITOR.remove(self)

    def _due(self) -> float:
        return self._last + self.seconds

    def _defer(self, thread_id: int) -> bool:
        """Whether a halt now due is put off (with the monitor's lock held), the budget starting afresh.

        It is while simloop's own work runs (`paused`), and while the thread imports a module (for up to
        ``import_grace`` real seconds in a row): an import is not a spin, and a first import can take
        seconds on a loaded machine, whether simloop or the loop asked for it.
        """
        now = REAL.monotonic()
        if self._paused:
            self._last = now
            self.deferred += 1
            return True
        frames = sys._current_frames()
        if not any(_importing(frames.get(t)) for t in (thread_id, *tuple(self.companions))):
            self._importing_since = None
            return False
        if self._importing_since is None or self._deferred_at != self._last:  # a new import, or fed since
            self._importing_since = self._last
        if now - self._importing_since >= self.import_grace:
            return False
        self._last = self._deferred_at = now
        self.deferred += 1
        return True

    def _fire(self, thread_id: int) -> bool:
        """Raise the halt in the watched thread (with the monitor's lock held); False if the thread is gone."""
        if self._defer(thread_id):
            return True
        where = where_in(thread_id)
        detail = f"no model call or tool call for {self.seconds:g} s of real time; the drive was at {where}"
        if self._importing_since is not None:  # still in the import it was let off for
            detail += (f", importing a module for {REAL.monotonic() - self._importing_since:.1f} s (an import may take "
                       f"{self.import_grace:g} s; one that takes longer spins at import time)")
        if _raise_in(thread_id, _halt_type("watchdog", detail, where, self)) == 0:
            return False
        self.halts += 1
        self._fired = True
        self._last = REAL.monotonic()  # re-arm: fire again if the halt is swallowed
        return True


class _Paused:
    """`Watchdog.paused`'s block: a plain context manager (no generator: a run enters it for each client)."""

    __slots__ = ("dog",)

    def __init__(self, dog: Watchdog) -> None:
        self.dog = dog

    def __enter__(self) -> None:
        with _MONITOR.cond:
            self.dog._paused += 1

    def __exit__(self, *exc: object) -> None:
        with _MONITOR.cond:
            self.dog._paused -= 1
            self.dog._last = REAL.monotonic()


class _Watching:
    """`Watchdog.watching`'s block: a plain context manager (no generator: it is entered at every run)."""

    __slots__ = ("dog",)

    def __init__(self, dog: Watchdog) -> None:
        self.dog = dog

    def __enter__(self) -> None:
        self.dog._watch()

    def __exit__(self, *exc: object) -> None:
        try:
            self.dog._disarm()
        except LoopHalted:  # delivered in the middle of disarming: finish, then let it out
            self.dog._disarm()
            raise


class _Monitor:
    """The process's one watchdog thread: sleeps until the earliest budget runs out, then checks it."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No thread and nothing watched (also in a forked child: it has none of the parent's threads)."""
        # (the runs take `lock`, the condition's own, directly: a C lock's `with`, not the condition's Python one)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.alive = False  # the thread runs (set when started, cleared when it ends: `is_alive` costs four calls)
        self.watched: dict[Watchdog, int] = {}
        self.thread: RealTimeThread | None = None
        self.wake = float("inf")  # when the thread wakes next (REAL.monotonic time)
        # With nothing to watch, the thread still wakes after the budget it served last, not never: a run with
        # that budget that starts meanwhile is due no sooner, so adding it needs no notify (a short run paid a
        # thread switch for it).
        self.idle = float("inf")
        self.rounds = 0  # how many times the thread looked at what it watches

    def add(self, dog: Watchdog, thread_id: int) -> None:
        with self.lock:
            dog._thread_id = thread_id
            self.watched[dog] = thread_id
            self.idle = dog.seconds
            if not self.alive:
                self.thread = RealTimeThread(target=self._run, name="simloop-watchdog", daemon=True)
                self.thread.start()
                self.alive = True
            elif dog._due() < self.wake:  # only then: waking the thread costs the drive a switch per run
                self.cond.notify()

    def remove(self, dog: Watchdog) -> None:  # with cond held
        self.watched.pop(dog, None)
        dog._thread_id = None

    def _run(self) -> None:
        # Condition.wait blocks in C on the real clock; REAL.monotonic is the saved real function, so this
        # thread never reads virtual time even while time.monotonic is patched.
        try:
            self._serve()
        finally:
            with self.lock:
                self.alive = False

    def _serve(self) -> None:
        with self.cond:
            while True:
                self.rounds += 1
                self.cond.notify_all()  # (a waiter on `rounds`: none but a test; no one else waits on this lock)
                now = REAL.monotonic()
                due = [dog for dog in self.watched if dog._due() <= now]
                for dog in due:
                    if not dog._fire(self.watched[dog]):
                        self.remove(dog)
                # A dog removed since is not waited out: the thread wakes at its old due time, finds nothing.
                self.wake = min((dog._due() for dog in self.watched), default=now + self.idle)
                # (at most TIMEOUT_MAX: a longer timeout raises OverflowError, which would end this thread)
                self.cond.wait(None if self.wake == float("inf")
                               else min(max(0.0, self.wake - REAL.monotonic()), _thread.TIMEOUT_MAX))


_MONITOR = _Monitor()
os.register_at_fork(after_in_child=_MONITOR.reset)  # (the lock may have been held at the fork, too)


def where_in(thread_id: int) -> str:
    """`where_of` the thread's current frame: where the loop's own code is, in that thread, now."""
    return where_of(sys._current_frames().get(thread_id))


_PATHS = sysconfig.get_paths()
_STDLIB = _PATHS["stdlib"] + "/"
_SIMLOOP = str(Path(__file__).resolve().parents[1]) + "/"  # the simloop package (this is simloop/_runtime/)
_LIBRARIES = tuple({_PATHS["purelib"] + "/", _PATHS["platlib"] + "/"})


def _skipped(filename: str, skip_libraries: bool) -> bool:
    if filename.startswith(_SIMLOOP):
        return True
    if filename.startswith(_LIBRARIES):  # (site-packages may lie under the standard library's folder)
        return skip_libraries
    return filename.startswith(_STDLIB)


def where_of(frame: FrameType | None, *, skip_libraries: bool = False) -> str:
    """``FILE:LINE in function`` of the innermost frame that is the loop's own code.

    simloop's and the standard library's frames are skipped (a thread blocked in ``Event().wait()`` is
    "at" the line that waits, not in threading.py), and with ``skip_libraries`` installed packages too (a
    connection is "opened" by the loop's line, not by socket.py or httpx).  With no such frame, the
    innermost one.
    """
    first = frame
    while frame is not None and _skipped(frame.f_code.co_filename, skip_libraries):
        frame = frame.f_back
    frame = frame or first
    if frame is None:
        return "an unknown place (no Python frame)"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
