"""What a run does to its process: exits, forks, child processes, threads started by hand and pool jobs.

The loop under test runs in simloop's own process, so what it does to the process is simloop's to see:

* **Exits.** ``os._exit``, ``os.abort``, and a kill of this process (``os.kill(os.getpid(), SIGKILL)``, its
  group, ``signal.raise_signal``) called from a thread of a run end nothing: they raise `ProcessExit` in the
  loop (a `BaseException`) and the run's outcome is that exit, which ``crash`` reports.  A kill from outside
  (the OOM killer, a C extension's own ``abort()``) cannot be seen from inside: the command then dies by the
  signal (a non-zero exit), and a ``--workers`` campaign reports the worker's death.
* **Forks.** A child forked during a run has a copy of the simulator that records nothing the run sees.  A
  model call or a tool execution in such a child is refused there (`LoopHalted` "fork") and reported back to
  the parent over a pipe, which fails the run with a message saying how to expose tools to other processes.
* **Child processes.** A child the loop started (``subprocess``, ``multiprocessing``, ``os.fork``, ...) and left
  running when the loop returned is reported (``no_work_after_return``) and killed.  Children are found
  through ``/proc`` (Linux), looked at only when the run started one (the audit events ``os.fork``,
  ``subprocess.Popen``, ``os.posix_spawn``, ``os.system``, ``os.spawn``).  While a run lasts, the process's
  environment carries fake keys for both wires and none of the other credentials the SDKs read (`CREDENTIALS`):
  a child inherits them, so its stray request to the real API is refused, not billed.
* **Threads however started, and pool jobs.** A thread started with ``_thread.start_new_thread``, and a job
  submitted to a ``ThreadPoolExecutor`` that existed before the run, run on the run's clock and under its
  network guard (the pool's thread only while it runs the job); the run waits a short grace for them when the
  loop returns, and reports what is still running.

The patches are installed once, on the first run, and act only in the threads of a run (like the network
guard's audit hook); everything else calls the originals.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import contextlib
import faulthandler
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

from simloop._runtime import netguard as _netguard
from simloop._runtime.audit import on_events
from simloop._runtime.clock import VirtualClock
from simloop._runtime.halt import LoopHalted
from simloop._runtime.netguard import _OWN
from simloop._runtime.order import orderable
from simloop._runtime.realtime import REAL
from simloop._runtime.registry import LOCK as _CLOCK_LOCK
from simloop._runtime.registry import threads as _threads
from simloop._runtime.watchdog import where_in, where_of
from simloop.invariants.stopping import FORK_FIX

__all__ = ["CREDENTIALS", "FAKE_KEY", "FAKE_OPENAI_KEY", "FINAL_CODE", "LAST_RESORT_S", "REAL_EXIT", "ProcessExit", "Run", "bounded", "forked_call", "install",
           "release", "running"]

REAL_EXIT = os._exit
_REAL_ABORT = os.abort
_REAL_KILL = os.kill
_REAL_KILLPG = os.killpg
_REAL_RAISE_SIGNAL = signal.raise_signal
_REAL_START_NEW_THREAD = _thread.start_new_thread
_REAL_SUBMIT = concurrent.futures.ThreadPoolExecutor.submit
_get_ident = _thread.get_ident

_SPAWNS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen"})
FAKE_KEY = "sk-ant-simloop-0000000000000000000000000000000000000000"
FAKE_OPENAI_KEY = "sk-simloop-000000000000000000000000000000000000000000000000"  # the simulator takes any
#: The credentials the ``anthropic`` and ``openai`` SDKs read from the environment, as a run's children see
#: them (docs/security.md, Credentials): each wire's key is a fake one (an SDK will not start without it), every
#: other credential or account id is removed (None), and so is each wire's base URL until the run serves its
#: world on loopback (`Run.set_env`): a child's stray call goes to the real API with a fake key, refused, not billed.
CREDENTIALS: dict[str, str | None] = {
    "ANTHROPIC_API_KEY": FAKE_KEY,
    "OPENAI_API_KEY": FAKE_OPENAI_KEY,
    **dict.fromkeys((
        "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_FOUNDRY_API_KEY",
        "AWS_BEARER_TOKEN_BEDROCK", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_ADMIN_KEY",
        "OPENAI_CUSTOM_HEADERS", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN",
    )),
}


class ProcessExit(BaseException):
    """The loop called ``os._exit`` (or killed its own process) during a run: simloop's process goes on, and the
    run's outcome is this exit (a `BaseException`, so ``except Exception`` cannot swallow it)."""


class Run:
    """One run's share of the process: its clock, the exit it took, what it started."""

    __slots__ = ("children_before", "clock", "closers", "env", "exited", "fork_reads", "futures", "on_spawn", "pid",
                 "threads")

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.pid = os.getpid()
        self.exited: ProcessExit | None = None  # the first exit the loop took (kept: it may swallow the raise)
        self.children_before: set[int] | None = None  # this process's children when the run first spawned one
        self.fork_reads: list[int] = []  # read ends of the pipes children forked in the run report on
        self.futures: list[tuple[concurrent.futures.Future[Any], str]] = []  # pool jobs submitted by the run
        self.threads: list[tuple[int, Any, str]] = []  # (ident, done lock, name): _thread.start_new_thread's
        #: Called once, just before the run first starts a child process (the Sim serves itself to children).
        self.on_spawn: Callable[[], None] | None = None
        self.env: dict[str, str | None] = {}  # variables this run set in the environment -> their values before
        self.closers: list[Callable[[], None]] = []  # what to close when the run ends

    def set_env(self, values: dict[str, str]) -> None:
        """Put ``values`` in the process's environment until the run ends (children started from now inherit them)."""
        for name, value in values.items():
            self.env.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def exit(self, what: str) -> ProcessExit:
        """The exception a ``what`` (``os._exit(0)``) of the loop raises; the first one is kept."""
        where = where_of(sys._getframe(2))
        error = ProcessExit(
            f"the loop called {what} at {where}, which would have ended the process at once (no answer, no "
            "cleanup, no report)")
        if self.exited is None:
            self.exited = error
        return error

    def left(self, grace: float) -> list[tuple[str, str, int | None]]:
        """What the run started and is still running, after waiting up to ``grace`` real seconds for it: (name,
        where, pid) of pool jobs, threads started by hand and child processes (the children are killed)."""
        deadline = REAL.monotonic() + grace
        out: list[tuple[str, str, int | None]] = []
        for future, name in self.futures:
            with contextlib.suppress(Exception, concurrent.futures.CancelledError):
                future.exception(max(0.0, deadline - REAL.monotonic()))
            if not future.done():
                out.append((f"a thread-pool job ({name})", "(queued or running in a pool made outside the run)",
                            None))
        for ident, done, name in self.threads:
            if done.acquire(True, max(0.0, deadline - REAL.monotonic())):
                done.release()
            else:
                out.append((name, where_in(ident), None))
        for pid, command in self._children():
            out.append((f"process {pid} ({command})", "(killed by simloop)", pid))
            _kill(pid)
        return out

    def _children(self) -> list[tuple[int, str]]:
        """This process's children started in the run and still running (not zombies): (pid, command line)."""
        if self.children_before is None:
            return []
        return [(pid, cmd) for pid, cmd in _children(self.pid) if pid not in self.children_before]

    def fork_reports(self) -> list[str]:
        """What children forked in the run refused to do (each a line), read without blocking."""
        lines: list[str] = []
        for fd in self.fork_reads:
            chunks = []
            with contextlib.suppress(OSError):
                os.set_blocking(fd, False)
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
            with contextlib.suppress(OSError):
                os.close(fd)
            lines += [line for line in b"".join(chunks).decode("utf-8", "replace").splitlines() if line]
        self.fork_reads = []
        return lines


_RUNS: dict[VirtualClock, Run] = {}
_installed: list[bool] = []
_ENV: dict[str, str | None] = {}  # the environment's values before the first active run, to restore
#: In a child forked during a run: the write end of the pipe to the parent (see `forked_call`).
_FORKED: list[int] = []
_PENDING: dict[int, tuple[int, int]] = {}  # forking thread -> (read, write) of the pipe being handed over


def running(clock: VirtualClock) -> _Running:
    """The run on ``clock`` lasts for the block: its exits, forks, children and jobs are tracked."""
    return _Running(clock)


class _Running:
    """`running`'s block, which gives the `Run`: a plain context manager (no generator: entered at every run)."""

    __slots__ = ("clock",)

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def __enter__(self) -> Run:
        install()
        run = Run(self.clock)
        if not _RUNS:
            for name, value in CREDENTIALS.items():
                if value is None and name not in os.environ:
                    continue  # (most are not set: nothing to take away, nothing to give back)
                _ENV[name] = os.environ.get(name)
                _put(name, value)
        _RUNS[self.clock] = run
        return run

    def __exit__(self, *exc: object) -> None:
        release(self.clock)


def release(clock: VirtualClock) -> None:
    """End the run on ``clock`` now (idempotent): close what it opened, restore the environment.  The Sim calls it
    for a run it abandons, whose thread never leaves `running`."""
    run = _RUNS.pop(clock, None)
    if run is None:
        return
    for name, old in run.env.items():  # first what the run set, then (the last run) what every run replaced
        _put(name, old)
    run.env = {}
    if not _RUNS:
        for name, old in _ENV.items():
            _put(name, old)
        _ENV.clear()
    for fd in run.fork_reads:
        with contextlib.suppress(OSError):
            os.close(fd)
    run.fork_reads = []
    for close in run.closers:
        with contextlib.suppress(Exception):
            close()
    # The run is over: let go of its callbacks (bound methods of the Sim, whose run holds this Run: a reference
    # cycle that would keep the whole finished run alive until the garbage collector finds it)
    run.closers = []
    run.on_spawn = None


def _put(name: str, value: str | None) -> None:
    """Set an environment variable, or remove it (None)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


#: Real seconds one run may last before the process ends itself, needing nothing of the loop (set by the
#: ``simloop`` command's ``--hard-timeout``; empty: no bound).  See `bounded`.
LAST_RESORT_S: list[float] = []


def bounded() -> contextlib.AbstractContextManager[None]:
    """The last-resort bound around one run: past `LAST_RESORT_S`, the process prints where every thread is and
    exits with status 1 (``faulthandler.dump_traceback_later``: a C thread that needs no GIL, so a loop stuck in
    one C call that holds it, such as a catastrophic regex, is stopped too, where the watchdog cannot run).
    Without a bound (a Sim, `verify` and the plugin called from Python), a block that does nothing: no generator
    is made at every run."""
    return _last_resort() if LAST_RESORT_S else _UNBOUNDED


_UNBOUNDED = contextlib.nullcontext()


@contextlib.contextmanager
def _last_resort() -> Iterator[None]:
    seconds = LAST_RESORT_S[0]
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__ or sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def forked_call(what: str) -> BaseException:
    """In a child forked during a run (``_FORKED``): report ``what`` (a model call, a tool execution) to the
    parent and return the halt that refuses it."""
    where = where_of(sys._getframe(2), skip_libraries=True)
    line = f"{what} in child process {os.getpid()} at {where}\n"
    with contextlib.suppress(OSError):
        os.write(_FORKED[0] if _FORKED else 2, line.encode("utf-8", "replace"))
    detail = (f"{what} in a child process forked during the run (pid {os.getpid()}, at {where}); its copy of the "
              f"simulator records nothing the run sees, so simloop refused it; {FORK_FIX}")
    return LoopHalted("fork", detail, where)


def _run_of_caller() -> Run | None:
    clock = _threads.get(_get_ident())
    if clock is None:
        return None
    run = _RUNS.get(clock)
    return run if run is not None and run.pid == os.getpid() else None


# -- the patches ----------------------------------------------------------------------------------------------


def install() -> None:
    """Install the patches (once; they act only in the threads of a run, or after the command's verdict)."""
    if _installed:
        return
    _installed.append(True)
    os._exit = _exit  # type: ignore[assignment]  # (NoReturn: it raises instead, in a run's threads)
    os.abort = _abort  # type: ignore[assignment]
    os.kill = _kill_checked
    os.killpg = _killpg_checked
    signal.raise_signal = _raise_signal
    _thread.start_new_thread = _start_new_thread  # (threading.Thread holds the original: its threads are the clock's)
    concurrent.futures.ThreadPoolExecutor.submit = _submit  # type: ignore[method-assign,assignment]
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child)
    on_events(_SPAWNS, _audit)


#: Set by the ``simloop`` command once its verdict is given: any later exit ends the process with this code.
FINAL_CODE: list[int] = []


def _exit(code: int) -> None:
    if FINAL_CODE:
        REAL_EXIT(FINAL_CODE[0])
    run = _run_of_caller()
    if run is None:
        REAL_EXIT(code)
    else:
        raise run.exit(f"os._exit({code})")


def _abort() -> None:
    run = _run_of_caller()
    if run is None:
        _REAL_ABORT()
    else:
        raise run.exit("os.abort()")


def _fatal(sig: int) -> bool:
    """Whether ``sig`` ends this process as things stand (its default action is to terminate, or SIGKILL)."""
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        return True
    try:
        handler = signal.getsignal(sig)
    except (ValueError, OSError):
        return False
    harmless = {getattr(signal, n) for n in ("SIGCHLD", "SIGWINCH", "SIGURG", "SIGCONT") if hasattr(signal, n)}
    return handler == signal.SIG_DFL and sig not in harmless and sig != 0


def _name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _kill_checked(pid: int, sig: int) -> None:
    run = _run_of_caller()
    if run is not None and _fatal(sig) and (pid in (os.getpid(), 0) or (pid < 0 and -pid == os.getpgrp())):
        raise run.exit(f"os.kill({pid}, {_name(sig)})")
    _REAL_KILL(pid, sig)


def _killpg_checked(pgid: int, sig: int) -> None:
    run = _run_of_caller()
    if run is not None and _fatal(sig) and pgid in (0, os.getpgrp()):
        raise run.exit(f"os.killpg({pgid}, {_name(sig)})")
    _REAL_KILLPG(pgid, sig)


def _raise_signal(sig: int) -> None:
    run = _run_of_caller()
    if run is not None and _fatal(sig):
        raise run.exit(f"signal.raise_signal({_name(sig)})")
    _REAL_RAISE_SIGNAL(sig)


def _adopted(run: Run, fn: Callable[..., Any], ticket: int | None = None) -> Callable[..., Any]:
    """``fn`` run on ``run``'s clock (virtual time, the network guard) by whatever thread calls it; ``ticket``: its
    turn at the simulator among the run's threads (`simloop._runtime.order`)."""
    clock = run.clock
    order = clock.order
    began = clock.own_ns() if _threads.get(_get_ident()) is clock else None  # the job lives from its submitter's time

    def on_the_run(*args: Any, **kwargs: Any) -> Any:
        # On the clock, but not among the threads the loop started (`clock._thread_ids`): `Run.left` reports
        # these jobs and threads, the Sim's own check of threads left would report them twice.
        tid = _get_ident()
        with _CLOCK_LOCK:
            adopted = clock._depth > 0 and tid not in _threads
            if adopted:
                _threads[tid] = clock
        if began is not None and _threads.get(tid) is clock:
            clock.begin_at(began)
        before = order.begin(ticket) if ticket is not None and order is not None else None
        try:
            return fn(*args, **kwargs)
        finally:
            if ticket is not None and order is not None:
                order.end(ticket, before, keep=True)  # (its future's callback ends it, once its waiters are woken)
            if adopted:
                with _CLOCK_LOCK:
                    if _threads.get(tid) is clock:
                        del _threads[tid]
                clock._forget(tid)

    return on_the_run


def _start_new_thread(function: Callable[..., Any], args: tuple[Any, ...], kwargs: Any = None) -> int:
    run = _run_of_caller()
    if run is None:
        return _REAL_START_NEW_THREAD(function, args, *(() if kwargs is None else (kwargs,)))
    done = _thread.allocate_lock()
    done.acquire()
    on_clock = _adopted(run, function)

    def tracked(*a: Any, **k: Any) -> Any:
        try:
            return on_clock(*a, **k)
        finally:
            done.release()

    ident: int = _REAL_START_NEW_THREAD(tracked, args, kwargs or {})
    run.threads.append((ident, done, f"_thread {getattr(function, '__qualname__', repr(function))}"))
    return ident


def _submit(self: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any,
            **kwargs: Any) -> concurrent.futures.Future[Any]:
    run = _run_of_caller()
    if run is None:
        return _REAL_SUBMIT(self, fn, *args, **kwargs)
    threads = list(getattr(self, "_threads", ()))
    outside = bool(threads) and not any(t.ident in run.clock._thread_ids for t in threads)
    order = run.clock.order
    ticket = order.ticket(self) if order is not None and orderable(fn) else None  # its turn, in submit order
    try:
        future = _REAL_SUBMIT(self, _adopted(run, fn, ticket), *args, **kwargs)
    except BaseException:
        if ticket is not None and order is not None:
            order.end(ticket, here=False)
        raise
    if ticket is not None and order is not None:  # (a job cancelled before it ran ends there)
        future.add_done_callback(lambda _: order.end(ticket, here=False))
    if outside:  # a pool made outside the run (its threads are not the run's: `Sim` does not see them left busy)
        run.futures.append((future, getattr(fn, "__qualname__", repr(fn))))
    return future


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # (simloop._runtime.audit's hook calls this for the events in _SPAWNS only)
    if not _RUNS:
        return
    run = _run_of_caller()
    if run is None or _get_ident() in _OWN:  # (a command drive's own command: simloop's, not the loop's)
        return
    if run.children_before is None:
        run.children_before = {pid for pid, _ in _children(run.pid)}
    env = args[3] if event == "subprocess.Popen" and len(args) > 3 else None
    if isinstance(env, dict) and "SIMLOOP_TOOLS_URL" in env:  # pointed at a simulator already (a command drive's)
        return
    serve, run.on_spawn = run.on_spawn, None
    if serve is not None:
        with contextlib.suppress(Exception):  # (the child then has the fake key, and no simulator to reach)
            serve()


def _before_fork() -> None:
    if _run_of_caller() is None:
        return
    with contextlib.suppress(OSError):
        _PENDING[_get_ident()] = os.pipe()


def _after_fork_parent() -> None:
    pipe = _PENDING.pop(_get_ident(), None)
    if pipe is None:
        return
    os.close(pipe[1])
    run = _run_of_caller()
    if run is None:
        os.close(pipe[0])
    else:
        run.fork_reads.append(pipe[0])


def _after_fork_child() -> None:
    pipe = _PENDING.pop(_get_ident(), None)
    _PENDING.clear()
    _RUNS.clear()  # the child's exits, kills and threads are its own
    if pipe is None:
        return
    os.close(pipe[0])
    _FORKED[:] = [pipe[1]]
    # The child may reach the run's loopback server (its environment names it); any other connection is blocked
    # there, and reported to the parent like a forbidden call
    for clock, (policy, on_blocked) in list(_netguard._GUARDS.items()):
        _netguard._GUARDS[clock] = ("loopback" if policy == "block" else policy, _reporting(on_blocked))


def _reporting(on_blocked: _netguard.OnBlocked) -> _netguard.OnBlocked:
    def blocked(target: str, where: str) -> BaseException:
        with contextlib.suppress(OSError):
            os.write(_FORKED[0], f"a real network connection to {target} in child process {os.getpid()} at {where}, "
                                 "which simloop blocked\n".encode("utf-8", "replace"))
        return on_blocked(target, where)

    return blocked


# -- child processes (Linux: /proc) ---------------------------------------------------------------------------


def _children(parent: int) -> list[tuple[int, str]]:
    """(pid, command line) of ``parent``'s running children (zombies left out); none where there is no /proc."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) < 2 or fields[1] != str(parent) or fields[0] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            command = ""
        out.append((int(name), command[:200] or stat[stat.find("(") + 1:stat.rfind(")")]))
    return out


def _kill(pid: int) -> None:
    """Kill a child the run left running (its process group too, when it leads one of its own)."""
    with contextlib.suppress(OSError):
        if os.getpgid(pid) == pid and pid != os.getpgrp():
            _REAL_KILLPG(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        _REAL_KILL(pid, signal.SIGKILL)

