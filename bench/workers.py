"""Campaigns over cores: examples per second of `simloop.verify` with 2 worker processes against 1, in one run.

The same search (the reference loop ``examples.correct_sync``, which holds, so every example runs to the
budget) is timed with ``workers=1`` and ``workers=2``, alternating, ``--rounds`` times each.  The figure is
the ratio of the median examples per second.  Wall clock, start-up of the workers included (they are
forked: they start with simloop already imported).  On a machine whose cores are busy with other work the
ratio says so: the load average is printed next to it.

    python bench/workers.py [--examples 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simloop
from examples import correct_sync

CPU: dict[int, list[float]] = {1: [], 2: []}  # CPU seconds per example (this process and its workers)


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rate(workers: int, examples: int, seed: int) -> float:
    """Examples per second of one search of ``examples`` runs with ``workers`` processes."""
    start, cpu = time.perf_counter(), _cpu()
    report = simloop.verify(correct_sync.drive, max_examples=examples, workers=workers, seed=seed,
                            out_dir="/tmp/simloop-bench-workers")
    CPU.setdefault(workers, []).append((_cpu() - cpu) / (report.examples or 1))
    return (report.examples or 0) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rate(1, 50, seed=0)  # warm: imports, caches
    one: list[float] = []
    two: list[float] = []
    for r in range(args.rounds):
        one.append(rate(1, args.examples, seed=r))
        two.append(rate(2, args.examples, seed=r))
    m1, m2 = statistics.median(one), statistics.median(two)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {os.cpu_count()}, load average (1 min) at the end: {load:.2f}")
    print(f"workers=1: {m1:.1f} examples/s (runs: {', '.join(f'{x:.1f}' for x in one)})")
    print(f"workers=2: {m2:.1f} examples/s (runs: {', '.join(f'{x:.1f}' for x in two)})")
    c1, c2 = statistics.median(CPU[1][1:]), statistics.median(CPU[2])
    print(f"CPU per example: {c1 * 1000:.1f} ms with 1 worker, {c2 * 1000:.1f} ms with 2 (all processes): on two idle "
          f"cores 2 workers would reach about {2 * c1 / c2:.2f}x")
    ratios = [b / a for a, b in zip(one, two, strict=True)]
    print(f"ratio 2 workers / 1: {statistics.median(ratios):.2f}x (median of the rounds' ratios: "
          f"{', '.join(f'{r:.2f}' for r in ratios)}; ratio of the medians {m2 / m1:.2f}x)")


if __name__ == "__main__":
    main()
