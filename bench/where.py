"""Where the time of a simulated run goes: cProfile on the caller's thread AND the loop's worker thread.

A `Sim` runs the loop on a worker thread (`simloop._runtime.worker`), which a plain ``cProfile.run`` does not
see.  This script wraps `simloop._sim.runner.run_on_worker` so that a second profiler is enabled inside the
worker for the drive's whole run, and merges the two profiles.  It then prints the top functions by
own time and the own time summed by area (simulator, validator, renderer, transcript, ledger, clock,
generated model, invariants, Hypothesis, the SDK, httpx2, pydantic, ...), per model call and per example.

    python bench/where.py overhead [--runs 300]       # the bench/overhead.py 10-call run, a fresh Sim each
    python bench/where.py async-stream [--runs 300]   # the same run on the async streaming path (--async-stream)
    python bench/where.py pydantic-ai [--runs 300]    # the same run as a pydantic-ai Agent (--pydantic-ai)
    python bench/where.py verify [--examples 300]     # verify(examples.correct_sync:drive, seed=0)
    python bench/where.py throughput [--examples 300] # detect.py's throughput example: 10 calls, no faults

CPU profiles overstate the cost of many small calls (cProfile's own per-call cost); compare call
counts, and the areas' shares, not the absolute times, before and after a change.  Each thread's
profiler counts that thread's CPU time (``time.thread_time``), not the wall clock, so the caller's
wait for the worker is not in it and a loaded machine disturbs it much less.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import simloop
import simloop._sim.runner

# Each profiler times its own thread's CPU (time.thread_time): a wall-clock profile of a thread on a loaded
# machine charges the time it spent descheduled, or waiting for the GIL, to whatever it was running.
TIMER = time.thread_time
WORKER = cProfile.Profile(TIMER)  # the worker's profiler (a fresh one after the warm-up)
_real_run_on_worker = simloop._sim.runner.run_on_worker  # type: ignore[attr-defined]


def _profiled_run_on_worker(fn: Callable[[], Any], **kw: Any) -> Any:
    def inside() -> Any:
        WORKER.enable()
        try:
            return fn()
        finally:
            WORKER.disable()

    return _real_run_on_worker(inside, **kw)


simloop._sim.runner.run_on_worker = _profiled_run_on_worker  # type: ignore[attr-defined]

AREAS: list[tuple[str, str]] = [  # (substring of the file path, area); first match wins
    ("simloop/protocol/validate", "validator"),
    ("simloop/protocol/render", "renderer"),
    ("simloop/wire/server", "simulator"),
    ("simloop/wire/", "simulator"),
    ("simloop/protocol/", "simulator"),  # the wires' other rules and formats (errors, servertools, openai_*)
    ("simloop/transcript", "transcript"),
    ("simloop/tools", "ledger (tools)"),
    ("simloop/_runtime/clock", "clock"),
    ("simloop/_runtime/threadtime", "clock"),
    ("simloop/_runtime/registry", "clock"),
    ("simloop/_runtime/eventloop", "event loop (virtual time)"),
    ("simloop/_runtime/jobs", "event loop (virtual time)"),
    ("asyncio/", "asyncio"),
    ("anyio/", "anyio"),
    ("simloop/generated", "generated model"),
    ("simloop/_offer", "generated model"),
    ("simloop/strategies", "generated model"),
    ("simloop/models", "model policy"),
    ("simloop/invariants", "invariants"),
    ("simloop/verify", "verify"),
    ("simloop/_sim/", "sim"),
    ("simloop/_", "run machinery (simloop/_*)"),
    ("simloop/sim", "sim"),
    ("simloop/", "simloop other"),
    ("examples/", "the loop (examples)"),
    ("pydantic_ai/", "pydantic-ai"),
    ("pydantic_graph/", "pydantic-ai"),
    ("bench/", "the loop (bench)"),
    ("hypothesis/", "Hypothesis"),
    ("anthropic/", "SDK (anthropic)"),
    ("httpx2/", "httpx2"),
    ("httpx/", "httpx"),
    ("pydantic_core", "pydantic"),
    ("pydantic/", "pydantic"),
    ("json/", "json"),
    ("threading", "threading"),
    ("copy.py", "copy"),
]


def area(filename: str) -> str:
    for part, name in AREAS:
        if part in filename:
            return name
    if filename == "~":
        return "builtins (C)"
    return "stdlib/other"


def report(stats: pstats.Stats, *, per: int, unit: str, top: int) -> None:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    by_area: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in raw.items():
        by_area[area(filename)] += tt
    print(f"\nown time by area ({total:.2f} s profiled; per {unit}: {total / per * 1e3:.2f} ms)")
    for name, tt in sorted(by_area.items(), key=lambda kv: -kv[1]):
        print(f"  {name:30s} {tt / per * 1e6:9.0f} us/{unit} {tt / total:6.1%}")
    print(f"\ntop {top} functions by own time (per {unit})")
    rows = sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]
    for (filename, line, name), (_cc, nc, tt, ct, _callers) in rows:
        short = filename.split("site-packages/")[-1].split("/simloop/", 1)[-1]
        print(f"  {tt / per * 1e6:8.0f} us {ct / per * 1e6:9.0f} us cum {nc / per:9.1f} calls  {short}:{line}({name})")


def run_overhead(runs: int, *, drive: str = "overhead") -> tuple[pstats.Stats, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import overhead

    run: Callable[[], int] = overhead.sim_run
    if drive == "async-stream":
        run = overhead.sim_async_stream_run
    elif drive == "pydantic-ai":
        import overhead_pai

        run = overhead_pai.sides()[1]
    for _ in range(10):
        run()
    _reset()
    main = cProfile.Profile(TIMER)
    main.enable()
    for _ in range(runs):
        run()
    main.disable()
    return _merged(main), runs * overhead.STEPS


def run_verify(examples: int, seed: int) -> tuple[pstats.Stats, int]:
    from examples.correct_sync import drive

    with tempfile.TemporaryDirectory() as out:
        simloop.verify(drive, max_examples=5, seed=seed + 1, out_dir=out, database=None)  # warm-up
        _reset()
        main = cProfile.Profile(TIMER)
        main.enable()
        simloop.verify(drive, max_examples=examples, seed=seed, out_dir=out, database=None)
        main.disable()
    return _merged(main), examples


def run_throughput(examples: int, seed: int) -> tuple[pstats.Stats, int]:
    """The example of `detect.py`'s throughput line: a fixed 10-call plan, no faults, `examples.correct_sync`."""
    from examples.correct_sync import drive
    from simloop import strategies

    plan = strategies.plans(
        min_steps=9, max_steps=9, personas=(("finishes", 1),), faults=False, ending_kinds=("end_turn",),
        slow=((False, 1),), heavy=((False, 1),), ending_repeats=((1, 1),),
    )
    from examples.catalogue import DECLARED

    limits = simloop.Limits.model_validate(DECLARED)  # as detect.py's LIMITS
    chunk = 25  # detect.py's chunks: one verify of 25 examples each
    simloop.verify(drive, limits=limits, plan=plan, max_examples=chunk, seed=seed + 1000)  # warm-up
    _reset()
    main = cProfile.Profile(TIMER)
    main.enable()
    for i in range(max(1, examples // chunk)):
        simloop.verify(drive, limits=limits, plan=plan, max_examples=chunk, seed=seed + i)
    main.disable()
    return _merged(main), max(1, examples // chunk) * chunk


def _reset() -> None:
    global WORKER
    WORKER = cProfile.Profile(TIMER)


def _merged(main: cProfile.Profile) -> pstats.Stats:
    stats = pstats.Stats(main)
    stats.add(WORKER)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["overhead", "async-stream", "pydantic-ai", "verify", "throughput"])
    parser.add_argument("--runs", type=int, default=300, help="overhead: 10-call runs")
    parser.add_argument("--examples", type=int, default=300, help="verify: examples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--dump", help="write the merged pstats here")
    args = parser.parse_args()
    if args.what in ("overhead", "async-stream", "pydantic-ai"):
        stats, calls = run_overhead(args.runs, drive=args.what)
        report(stats, per=calls, unit="call", top=args.top)
    elif args.what == "throughput":
        stats, examples = run_throughput(args.examples, args.seed)
        report(stats, per=examples, unit="example", top=args.top)
    else:
        stats, examples = run_verify(args.examples, args.seed)
        report(stats, per=examples, unit="example", top=args.top)
    if args.dump:
        stats.dump_stats(args.dump)


if __name__ == "__main__":
    main()
