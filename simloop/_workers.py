"""`verify(..., workers=N)`: one search over N processes (a campaign over the cores of one machine).

Each worker process runs `simloop.verify` on its share of the budget with a seed of its own (derived from
the campaign's seed, or Hypothesis's own randomness when there is none) and the same example database
(the settings' database: by default Hypothesis's ``.hypothesis/examples`` in the current directory, or
the one ``database=`` names), so what one worker finds, every later run replays first.  The first worker
whose run breaks an invariant sets a shared stop flag: the others end at their next run, and that worker
alone shrinks its failure.  The parent raises its `InvariantViolation` (or returns the summed `Report`).

Workers are forked where the platform forks (Linux, macOS with fork): they inherit the imported drive and
its arguments, so any drive works, closures and ``command_drive`` included.  Elsewhere they are spawned,
which needs a drive importable by name.
"""

from __future__ import annotations

import gc
import multiprocessing
import queue
import sys
import traceback
from typing import Any

from simloop.errors import InvariantViolation, SimloopInternalError, UsageError
from simloop.invariants import Report

__all__ = ["Stopped", "on_failure", "on_run", "run_workers"]


class Stopped(BaseException):
    """Another worker found a failure: this one ends its search (a BaseException, so Hypothesis lets it through)."""


class _Campaign:
    """This process's part in a campaign (set in a worker only)."""

    stop: Any = None  # the shared multiprocessing.Event
    mine = False  # this worker found the failure it is shrinking: it never stops for the flag
    runs = 0


def on_run() -> None:
    """Called by `verify` at the start of every run: end this worker's search once another one failed."""
    if _Campaign.stop is None:
        return
    _Campaign.runs += 1
    if not _Campaign.mine and _Campaign.stop.is_set():
        raise Stopped()


def on_failure() -> None:
    """Called by `verify` when a run breaks an invariant: stop the other workers; this one shrinks."""
    if _Campaign.stop is not None and not _Campaign.mine:
        _Campaign.mine = True
        _Campaign.stop.set()


def run_workers(verify: Any, drive: Any, kwargs: dict[str, Any], *, workers: int) -> Report:
    """Run ``verify(drive, **kwargs)`` as ``workers`` processes sharing the budget; the first failure wins."""
    from simloop._prepare import before_run
    from simloop.verify import _derived_seed

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "win32" else "spawn"
    ctx: Any = multiprocessing.get_context(method)
    stop = ctx.Event()
    results = ctx.Queue()
    budget = int(kwargs.get("max_examples", 200))
    seed = kwargs.get("seed")
    procs = []
    # Forked workers share the parent's heap page by page until one of them writes to a page.  A collection, or
    # the gc.freeze() each worker's search would do, writes to every tracked object; frozen here, before the fork,
    # the heap stays shared (CPython's advice for forking servers) and the workers keep it frozen.
    froze = method == "fork" and gc.get_freeze_count() == 0
    if method == "fork":  # the SDK's import and first calls, once here for every worker (simloop._prepare)
        before_run(drive)
    if froze:
        gc.freeze()
    try:
        for i in range(workers):
            share = budget // workers + (1 if i < budget % workers else 0)
            if share < 1:
                continue
            mine = {**kwargs, "max_examples": share}
            if seed is not None:
                mine["seed"] = _derived_seed(seed, "worker", i)
            proc = ctx.Process(target=_worker, args=(i, verify, drive, mine, stop, results), name=f"simloop-worker-{i}")
            proc.start()
            procs.append(proc)
    finally:
        if froze:
            gc.unfreeze()
    failure: InvariantViolation | None = None
    error: str | None = None
    examples = 0
    checked: tuple[str, ...] = ()
    try:
        pending = len(procs)
        while pending:
            try:
                kind, payload = results.get(timeout=1.0)
            except queue.Empty:  # no result yet: go on waiting while a worker still runs
                if any(proc.is_alive() for proc in procs):
                    continue
                codes = ", ".join(str(proc.exitcode) for proc in procs)
                error = error or f"a worker exited without a result (exit codes {codes}); re-run with workers=1 to see why"
                break
            pending -= 1
            if kind == "ok":
                examples += payload["examples"]
                checked = payload["checked"]
            elif kind == "stopped":
                examples += payload["examples"]
            elif kind == "fail" and failure is None:
                failure = _unpack(payload)
                stop.set()
            elif kind == "usage" or kind == "error":
                error = error or payload
                stop.set()
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    if failure is not None:
        failure.examples = (failure.examples or 0) + examples
        raise failure
    if error is not None:
        if error.startswith("UsageError: "):
            raise UsageError(error.removeprefix("UsageError: "))
        raise SimloopInternalError(f"a verify worker failed: {error}")
    return Report(violations=[], checked=checked, examples=examples)


def _worker(i: int, verify: Any, drive: Any, kwargs: dict[str, Any], stop: Any, results: Any) -> None:
    _Campaign.stop = stop
    try:
        report = verify(drive, **kwargs)
        results.put(("ok", {"examples": report.examples, "checked": tuple(report.checked)}))
    except Stopped:
        results.put(("stopped", {"examples": _Campaign.runs}))
    except InvariantViolation as e:
        results.put(("fail", _pack(e)))
    except UsageError as e:
        results.put(("usage", f"UsageError: {e}"))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", f"worker {i}: {type(e).__name__}: {e}\n{traceback.format_exc()}"))


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
