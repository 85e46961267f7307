"""Run the loop under test on a worker thread that simloop can abandon.

The watchdog (`simloop._runtime.watchdog`) unwinds a drive that spins in Python, but nothing can interrupt a
thread blocked in one C call (``threading.Event().wait()``, ``lock.acquire()`` with no timeout), and a
loop that swallows even ``BaseException`` can spin on after every halt.  So the drive runs on a worker
thread while the caller waits: when the run cannot end (see `Sim`), the caller stops waiting, reports
the run, and leaves the worker behind.  An abandoned worker is a daemon and is parked (blocked in C,
using no CPU) as soon as it runs Python again or calls the simulator; it never holds the process.

Workers are reused: handing a run to an idle worker costs some 40 µs, starting a thread about 100 µs.
Workers are `RealTimeThread` s, so a Sim run from inside another Sim's drive gets a fresh thread that
does not inherit the outer run's virtual clock.  The caller's context variables are visible to the
drive (it runs in a copy of the caller's context), and so is Hypothesis's build context (a drive in a
Hypothesis test may draw); other thread-local state of the caller is not.
"""

from __future__ import annotations

import _thread
import contextvars
import functools
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from simloop._runtime.realtime import BYSTANDERS, RealTimeThread
from simloop._runtime.stack import hold_fresh_stack

__all__ = ["Abandoned", "run_on_worker"]

T = TypeVar("T")
_POLL = 0.05  # real seconds between the caller's checks of a run that has not finished


class Abandoned(Exception):
    """The caller gave up on the worker (``run_on_worker``'s ``give_up`` said so)."""

    def __init__(self, thread_id: int) -> None:
        super().__init__(thread_id)
        self.thread_id = thread_id


class _Job(Generic[T]):
    __slots__ = ("abandoned", "done", "error", "fn", "value")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn: Callable[[], T] | None = fn
        self.done = _thread.allocate_lock()  # held until the job finished: a C lock, never virtual time
        self.done.acquire()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.abandoned = False


class _Worker(RealTimeThread):
    def __init__(self) -> None:
        super().__init__(name="simloop-drive", daemon=True)
        self.jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()

    def run(self) -> None:
        # Run after run on one stack chunk of its own (a Sim calls its loop with `on_held_stack`).
        hold_fresh_stack(self._serve)

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                job.value = job.fn() if job.fn is not None else None
            except BaseException as e:  # noqa: BLE001 - handed to the caller as is
                job.error = e
            job.fn = None
            with _LOCK:  # (the caller abandons a job under this lock too: one or the other happens)
                if job.abandoned:  # the caller left: this thread is not reused
                    return
                _IDLE.append(self)
                job.done.release()


_IDLE: list[_Worker] = []
_LOCK = threading.Lock()


def _after_fork() -> None:
    """A forked child (multiprocessing's workers, `verify(workers=N)`) has none of the parent's threads."""
    global _LOCK
    _IDLE.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def run_on_worker(
    fn: Callable[[], T], *, give_up: Callable[[int], bool], on_abandon: Callable[[int], None] | None = None,
) -> T:
    """``fn()`` on a worker thread; returns its value or raises its exception.

    ``give_up(thread_id)`` is asked every few tens of milliseconds while ``fn`` runs; when it says
    True, the worker is abandoned and `Abandoned` is raised.  A KeyboardInterrupt in the caller (a
    real Ctrl-C) abandons the worker too and is re-raised at once.  ``on_abandon(thread_id)`` is
    called when the worker is given up on.
    """
    with _LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
        worker.start()
    context = contextvars.copy_context()
    carried = _hypothesis_context()
    if carried is None:
        job: _Job[T] = _Job(functools.partial(context.run, fn))
    else:
        variable, value = carried

        def in_context() -> T:
            with variable.with_value(value):
                return fn()

        job = _Job(functools.partial(context.run, in_context))
    caller = threading.get_ident()
    BYSTANDERS.add(caller)  # it only waits for the run: the run's waits need not wait for it to notify them
    worker.jobs.put(job)  # (after the caller's own work: it then blocks at once and leaves the worker the GIL)
    try:
        while not job.done.acquire(True, _POLL):
            thread_id = worker.ident or 0
            if give_up(thread_id):
                _abandon(job, worker)
                if not job.abandoned:  # it finished meanwhile after all
                    break
                if on_abandon is not None:
                    on_abandon(thread_id)
                raise Abandoned(thread_id)
    except KeyboardInterrupt:
        _abandon(job, worker)  # (on_abandon is not called: the process is being stopped, leave the thread be)
        raise
    finally:
        BYSTANDERS.discard(caller)
    if job.error is not None:
        error, job.error = job.error, None
        raise error
    return job.value  # type: ignore[return-value]


def _hypothesis_context() -> tuple[Any, Any] | None:
    """Hypothesis's build context of the calling thread (thread-local), for the worker to run in.

    A drive inside a Hypothesis test (`simloop.verify`'s, or a user's ``@given``) may draw, ``note`` or
    ``assume``: those need the test's build context, which Hypothesis keeps per thread.
    """
    control = sys.modules.get("hypothesis.control")
    variable = getattr(control, "_current_build_context", None)
    if variable is None:
        return None
    data = getattr(variable, "data", None)
    if type(data) is threading.local:  # read the thread's own dict: ``.value`` raises inside when it is unset
        value = vars(data).get("value", getattr(variable, "default", None))
    else:
        value = getattr(variable, "value", None)
    if value is None or not hasattr(variable, "with_value"):
        return None
    return variable, value


def _abandon(job: _Job[Any], worker: _Worker) -> None:
    with _LOCK:
        if job.done.acquire(False):  # it finished at the last moment: not abandoned
            return
        job.abandoned = True
        if worker in _IDLE:
            _IDLE.remove(worker)
