"""`verify(..., workers=N)`: one search over N processes (a campaign over the cores of one machine).

Each worker process runs its `Share` of the campaign (`simloop._campaign.Campaign.shares`): a search of its
share of the budget with a seed of its own (derived from the campaign's seed, or Hypothesis's own randomness
when there is none) and the same example database (the settings' database: by default Hypothesis's
``.hypothesis/examples`` in the current directory, or the one ``database=`` names), so what one worker finds,
every later run replays first.  The campaign's runs call `on_run` and `on_failure`; this module imports
nothing of the campaign (it is given the shares).  The first worker
whose run breaks an invariant sets a shared stop flag: the others end at their next run, and that worker
alone shrinks its failure.  The parent raises its `InvariantViolation` (or returns the summed `Report`).
A worker that dies without a result (a signal, an exit of its own) stops the others the same way, and the
parent raises `simloop.errors.WorkerDied`: which worker, how, in which of its runs (each worker tells a
shared array, at the start of every run, which run it is in), and its seed.

Workers are forked where the platform forks (Linux, macOS with fork): they inherit the imported drive and
its arguments, so any drive works, closures and ``command_drive`` included.  Elsewhere they are spawned,
which needs a drive importable by name.
"""

from __future__ import annotations

import gc
import multiprocessing
import queue
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simloop._runtime.heap import ours_to_freeze
from simloop.errors import InvariantViolation, SimloopInternalError, UsageError, WorkerDied
from simloop.invariants import Report

__all__ = ["Share", "Stopped", "on_failure", "on_run", "run_workers"]


class Stopped(BaseException):
    """Another worker found a failure: this one ends its search (a BaseException, so Hypothesis lets it through)."""


@dataclass(frozen=True)
class Share:
    """One worker's part of a campaign: its number, its share of the budget, its seed, and the search it runs.

    ``search`` runs in the worker process (forked, or spawned: then it must pickle, as a bound method of a
    campaign does) and returns the worker's `Report` or raises its `InvariantViolation`.
    """

    index: int
    examples: int
    seed: int | None
    search: Callable[[], Report]


class _Campaign:
    """This process's part in a campaign (set in a worker only)."""

    stop: Any = None  # the shared multiprocessing.Event
    mine = False  # this worker found the failure it is shrinking: it never stops for the flag
    runs = 0
    index = 0
    progress: Any = None  # the shared array of each worker's runs started (negative once it found a failure)


def on_run() -> None:
    """Called by `verify` at the start of every run: end this worker's search once another one failed."""
    if _Campaign.stop is None:
        return
    _Campaign.runs += 1
    if _Campaign.progress is not None:  # for the parent, should this process die: which run it was in
        _Campaign.progress[_Campaign.index] = -_Campaign.runs if _Campaign.mine else _Campaign.runs
    if not _Campaign.mine and _Campaign.stop.is_set():
        raise Stopped()


def on_failure() -> None:
    """Called by `verify` when a run breaks an invariant: stop the other workers; this one shrinks."""
    if _Campaign.stop is not None and not _Campaign.mine:
        _Campaign.mine = True
        _Campaign.stop.set()


def run_workers(drive: Any, shares: Sequence[Share]) -> Report:
    """Run each share of a campaign of ``drive`` in a process of its own; the first failure wins."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "win32" else "spawn"
    ctx: Any = multiprocessing.get_context(method)
    stop = ctx.Event()
    results = ctx.Queue()
    procs: list[tuple[int, Any]] = []  # (worker number, process)
    progress = ctx.Array("l", max((s.index for s in shares), default=0) + 1, lock=False)  # each worker's run (on_run)
    told = _Told(stop)
    try:
        _start(ctx, method, drive, shares, procs, stop=stop, results=results, progress=progress)
        _collect(results, procs, told)
    except BaseException:  # a Ctrl-C or a SIGTERM in the parent: the workers end now, not at their next run
        stop.set()
        for _, proc in procs:
            proc.terminate()
        raise
    finally:
        for _, proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    ending = told.ending(shares, progress, workers=len(procs))
    if ending is not None:
        raise ending
    return Report(violations=[], checked=told.checked, examples=told.examples)


class _Told:
    """What the workers told the parent (and which died telling nothing): the runs summed, the first failure."""

    def __init__(self, stop: Any) -> None:
        self.stop = stop  # the shared flag: set, every other worker ends at its next run
        self.failure: InvariantViolation | None = None
        self.error: str | None = None
        self.died: list[tuple[int, int | None]] = []  # (worker, exit code) of those that died without a result
        self.examples = 0
        self.checked: tuple[str, ...] = ()
        self.reported: set[int] = set()

    def take(self, i: int, kind: str, payload: Any) -> None:
        """Worker ``i``'s result: its runs counted; a failure (the first one wins) or an error stops the others."""
        self.reported.add(i)
        if kind == "ok":
            self.examples += payload["examples"]
            self.checked = payload["checked"]
        elif kind == "stopped":
            self.examples += payload["examples"]
        elif kind == "fail" and self.failure is None:
            self.failure = _unpack(payload)
            self.stop.set()
        elif kind == "usage" or kind == "error":
            self.error = self.error or payload
            self.stop.set()

    def dead(self, n: int, code: int | None) -> None:
        """Worker ``n`` died without a result: the others end at their next run, the campaign's verdict is this."""
        self.died.append((n, code))
        self.stop.set()

    def ending(self, shares: Sequence[Share], progress: Any, *, workers: int) -> Exception | None:
        """What the campaign raises: the failure (with every worker's runs), a death, or a worker's error."""
        if self.failure is not None:
            self.failure.examples = (self.failure.examples or 0) + self.examples
            return self.failure
        if self.died:
            n, code = self.died[0]
            share = {s.index: s for s in shares}[n]
            return _died(n, code, progress[n], workers=workers, seed=share.seed, share=share.examples,
                         examples=self.examples)
        if self.error is not None:
            if self.error.startswith("UsageError: "):
                return UsageError(self.error.removeprefix("UsageError: "))
            return SimloopInternalError(f"a verify worker failed: {self.error}")
        return None


def _start(
    ctx: Any, method: str, drive: Any, shares: Sequence[Share], procs: list[tuple[int, Any]], *, stop: Any,
    results: Any, progress: Any,
) -> None:
    """Start a worker process per share (each appended to ``procs`` as it starts), the heap frozen for a fork."""
    from simloop._runtime.prepare import before_run
    from simloop.sim import warm_up_sdk

    # Forked workers share the parent's heap page by page until one of them writes to a page.  A collection, or
    # the gc.freeze() each worker's search would do, writes to every tracked object; frozen here, before the fork,
    # the heap stays shared (CPython's advice for forking servers) and the workers keep it frozen.
    froze = method == "fork" and ours_to_freeze()
    if method == "fork":  # the SDK's import and first calls, once here for every worker (simloop._runtime.prepare)
        before_run(drive, warm_up_sdk)
    if froze:
        gc.freeze()
    try:
        for share in shares:
            proc = ctx.Process(target=_worker, args=(share, stop, results, progress),
                               name=f"simloop-worker-{share.index}")
            proc.start()
            procs.append((share.index, proc))
    finally:
        if froze:
            gc.unfreeze()


def _collect(results: Any, procs: list[tuple[int, Any]], told: _Told) -> None:
    """Wait until every worker told its result or died; a dead one's result, sent before it exited, still counts."""
    while len(told.reported) + len(told.died) < len(procs):
        try:
            told.take(*results.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        gone = [i for i, (n, proc) in enumerate(procs) if n not in told.reported and not proc.is_alive()]
        if not gone:
            continue
        # A worker puts its result before it exits, so what a dead one sent is in the queue by now.
        while True:
            try:
                told.take(*results.get(timeout=0.2))
            except queue.Empty:
                break
        for i in gone:
            n, proc = procs[i]
            if n not in told.reported:
                told.dead(n, proc.exitcode)


def _died(n: int, code: int | None, progress: int, *, workers: int, seed: int | None, share: int,
          examples: int) -> WorkerDied:
    """The verdict on a worker that died: how, in which of its runs, and how to see that run in one process."""
    name = None
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
    how = f"was killed by {name}" if name else f"exited with code {code} without a result"
    run = abs(progress) or None
    when = "before its first run" if run is None else f"during its run {run}"
    if progress < 0:
        when += " (it had found a failure and was shrinking it; its report was lost)"
    again = f"workers=1, seed={seed}, max_examples={share}" if seed is not None else "workers=1"
    flags = f"--workers 1 --seed {seed} --max-examples {share}" if seed is not None else "--workers 1"
    return WorkerDied(
        f"worker {n + 1} of {workers} {how} {when}; the other workers ran {examples} runs, none of which broke an "
        "invariant. A worker dies like this when its process is killed: by the loop under test (os.kill, os._exit, "
        "a crash in C code), by the out-of-memory killer, or by hand. To see what that worker's runs do, search in "
        f"one process: {again} ({flags} on the command line).",
        worker=n, workers=workers, signal=name, exitcode=code, run=run, seed=seed, examples=examples,
    )


def _worker(share: Share, stop: Any, results: Any, progress: Any) -> None:
    i = share.index
    _Campaign.stop, _Campaign.index, _Campaign.progress = stop, i, progress
    try:
        report = share.search()
        results.put((i, "ok", {"examples": report.examples, "checked": tuple(report.checked)}))
    except Stopped:
        results.put((i, "stopped", {"examples": _Campaign.runs}))
    except InvariantViolation as e:
        results.put((i, "fail", _pack(e)))
    except UsageError as e:
        results.put((i, "usage", f"UsageError: {e}"))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        results.put((i, "error", f"worker {i}: {type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:  # multiprocessing ends a worker with os._exit (no atexit): what its runs started goes now
        tree = sys.modules.get("simloop._runtime.proctree")
        if tree is not None:
            tree.end_all(final=True)


def _pack(e: InvariantViolation) -> dict[str, Any]:
    transcript = e.transcript.to_jsonl() if e.transcript is not None and hasattr(e.transcript, "to_jsonl") else None
    return {
        "message": str(e), "violations": e.violations, "scenario": e.scenario, "scenario_path": e.scenario_path,
        "timeline": e.timeline, "replay": e.replay, "transcript": transcript, "examples": e.examples,
    }


def _unpack(payload: dict[str, Any]) -> InvariantViolation:
    from simloop.transcript import Transcript

    text = payload.pop("transcript")
    message = payload.pop("message")
    return InvariantViolation(
        message, transcript=Transcript.from_jsonl(text) if text is not None else None, **payload
    )
