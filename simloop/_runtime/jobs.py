"""The executor jobs of a virtual-time event loop: which run real code (virtual time stands still for them), which
sleep virtually (timers of the loop), and anyio's worker threads counted as such jobs.

`JobLoop` is the asyncio loop that keeps this account, the base of `simloop._runtime.eventloop.VirtualTimeEventLoop`
(which decides from it what its selector does); `VirtualClock.sleep` (`simloop._runtime.clock`) makes a sleeping job
a timer of its loop.  Both read and write it under the clock's lock.  docs/design.md, Virtual time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any, ClassVar, ParamSpec, Protocol, TypeVar, TypeVarTuple

from simloop._runtime.registry import TLS

__all__ = ["AnyioJobs", "Clock", "Job", "JobLoop"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
P = ParamSpec("P")


class Clock(Protocol):
    """What a virtual loop reads and drives of its `simloop._runtime.clock.VirtualClock` (given to it as a value:
    the clock makes its loops, so the loop's modules do not import it)."""

    _cond: threading.Condition
    _ns: int
    _seq: int
    _sleepers: list[Job]
    _loops: list[Any]
    own_servers: list[Any]

    def monotonic(self) -> float: ...
    def _caught_up(self) -> None: ...
    def _jump_to(self, target: int) -> None: ...
    def _next_wake(self, loop: Any) -> int | None: ...
    def _deadlock(self, loop: Any) -> BaseException: ...


class Job:
    """One executor job of a virtual loop; ``wake`` (ns) is set while it waits in `VirtualClock.sleep`.

    ``started``: its thread took it up (a job queued behind a pool whose every thread sleeps virtually runs
    no real code, and must not hold virtual time still); ``pool``: the thread pool it was queued on."""

    __slots__ = ("loop", "pool", "started", "wake")

    def __init__(self, loop: JobLoop) -> None:
        self.loop: JobLoop = loop
        self.wake: int | None = None
        self.started = True
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None


class JobLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock that keeps account of its executor jobs (``run_in_executor``,
    ``asyncio.to_thread``, ``anyio.to_thread``, the joining of the default pool at the end of ``asyncio.run``)."""

    simloop_clock: Clock
    _selecting: bool  # read by sleeping jobs: the loop is idle and will handle their wake time

    def _init_jobs(self) -> None:
        self._jobs: set[Job] = set()  # executor jobs whose result is awaited (under the clock's lock)
        self._unfinished: set[Job] = set()  # executor jobs whose thread has not returned, awaited or not
        self._draining = False  # in shutdown_default_executor

    def run_in_executor(self, executor: concurrent.futures.Executor | None, func: Callable[[*Ts], T],
                        *args: *Ts) -> asyncio.Future[T]:
        job = Job(self)
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

    def _job_done(self, job: Job, *, add: bool = False) -> None:
        with self.simloop_clock._cond:
            if add:
                self._jobs.add(job)
            else:
                self._jobs.discard(job)

    @contextmanager
    def _counting_job(self) -> Iterator[Job]:
        job = Job(self)
        self._job_done(job, add=True)
        try:
            yield job
        finally:
            self._job_done(job)

    def _as_job(self, func: Callable[P, T], job: Job) -> Callable[P, T]:
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

    def _running_jobs(self) -> int:  # with the clock's lock held
        """How many jobs run real code now: awaited ones neither sleeping virtually nor queued behind a pool of
        sleepers, and while `shutdown_default_executor` waits, what it waits for (`_draining_jobs`)."""
        running = sum(job.wake is None and (job.started or not self._full(job.pool)) for job in self._jobs)
        if self._draining:
            running += self._draining_jobs()
        return running

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


class AnyioJobs:
    """Counts ``anyio.to_thread.run_sync`` calls as loop jobs while any virtual loop runs (refcounted).

    It patches ``AsyncIOBackend.run_sync_in_worker_thread`` in anyio's asyncio backend, but never imports that
    backend itself (some 10 ms of CPU, a third of simloop's part of an async drive's first run, for a drive that
    never uses anyio's threads): a loop that starts with the backend loaded patches it at once; else a
    `sys.meta_path` hook (`_BackendHook`) patches it as soon as anyio has imported it, mid-run included.  The
    patch is put back when the last virtual loop stops; the hook, a finder that answers None for every other
    module, stays from the first virtual loop of the process until the backend is imported (installing it at
    every loop's start, three a run, and taking it out at its end cost more than it saves)."""

    users = 0
    saved: ClassVar[dict[str, Any]] = {}  # "method": the backend's classmethod object (a dict: no binding); "backend"
    lock = threading.Lock()
    hook: ClassVar[list[_BackendHook]] = []  # the installed import hook, if any

    @classmethod
    def acquire(cls) -> None:
        with cls.lock:
            cls.users += 1
            if cls.users == 1:
                module = sys.modules.get(_BACKEND)
                if module is not None:
                    cls._patch(module)
                elif not cls.hook or cls.hook[0] not in sys.meta_path:
                    cls.hook[:] = [_BackendHook()]
                    sys.meta_path.insert(0, cls.hook[0])

    @classmethod
    def release(cls) -> None:
        with cls.lock:
            cls.users -= 1
            if cls.users == 0 and "method" in cls.saved:
                cls.saved.pop("backend").run_sync_in_worker_thread = cls.saved.pop("method")

    @classmethod
    def loaded(cls, module: ModuleType) -> None:
        """anyio has just imported its asyncio backend (`_BackendHook`): patch it if a virtual loop runs."""
        with cls.lock:
            if cls.hook:
                with contextlib.suppress(ValueError):  # (someone else took it out of sys.meta_path)
                    sys.meta_path.remove(cls.hook[0])
                cls.hook.clear()
            if cls.users > 0 and "method" not in cls.saved:
                cls._patch(module)

    @classmethod
    def _patch(cls, module: ModuleType) -> None:  # with the lock held
        backend = getattr(module, "AsyncIOBackend", None)  # (None: a module still being imported by another thread)
        if backend is not None:
            cls.saved["method"] = backend.__dict__["run_sync_in_worker_thread"]
            cls.saved["backend"] = backend
            backend.run_sync_in_worker_thread = classmethod(cls._counted)

    @staticmethod
    async def _counted(backend: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        original = AnyioJobs.saved["method"].__func__
        loop = asyncio.get_running_loop()
        if not isinstance(loop, JobLoop):
            return await original(backend, func, *args, **kwargs)
        with loop._counting_job() as job:
            return await original(backend, loop._as_job(func, job), *args, **kwargs)


_BACKEND = "anyio._backends._asyncio"


class _BackendHook(importlib.abc.MetaPathFinder):
    """Finds anyio's asyncio backend as the other finders do, with a loader that tells `AnyioJobs` once it has run."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _BACKEND:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TellingLoader(spec.loader)
                return spec  # type: ignore[no-any-return]
        return None


class _TellingLoader(importlib.abc.Loader):
    """The backend's own loader, then `AnyioJobs.loaded`; the module keeps its own loader (put back after)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        AnyioJobs.loaded(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
