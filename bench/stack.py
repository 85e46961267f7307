"""What the depth of the call costs the SDK, and what `on_fresh_stack` (simloop._runtime.stack) takes back.

CPython keeps frames in stack chunks and maps a new chunk whenever a call does not fit in the current
one; a loop whose calls keep crossing a chunk's end maps and unmaps one on nearly every call.  This runs
the bare 10-call loop of ``bench/overhead.py`` (the SDK on `httpx2.MockTransport`) under ``depth``
extra frames, for every depth in a range, plain and through `on_fresh_stack`, alternating, and prints
each depth's run time as a ratio to the median plain run: the plain runs have unlucky depths, the
guarded runs should have none.

    python bench/stack.py [--max-depth 200] [--step 4] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import overhead

from simloop._runtime.realtime import REAL
from simloop._runtime.stack import on_fresh_stack


def at_depth(depth: int, fn: Callable[[], object]) -> object:
    """``fn()`` called ``depth`` frames deeper than here."""
    return fn() if depth == 0 else at_depth(depth - 1, fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-depth", type=int, default=200)
    parser.add_argument("--step", type=int, default=4)
    parser.add_argument("--runs", type=int, default=10, help="runs per depth and side")
    args = parser.parse_args()
    client = overhead.bare_client()
    sides: dict[str, Callable[[], object]] = {
        "plain": lambda: overhead.loop(client),
        "guarded": lambda: on_fresh_stack(overhead.loop, client),
    }
    for run in sides.values():  # warm up
        for _ in range(5):
            at_depth(0, run)
    times: dict[tuple[str, int], list[float]] = {}
    depths = range(0, args.max_depth + 1, args.step)
    for _ in range(args.runs):
        for depth in depths:
            for side, run in sides.items():
                start = REAL.perf_counter()
                at_depth(depth, run)
                times.setdefault((side, depth), []).append(REAL.perf_counter() - start)
    median = {key: statistics.median(v) for key, v in times.items()}
    base = statistics.median(median["plain", d] for d in depths)
    print(f"{'depth':>5} {'plain':>7} {'guarded':>8}   (run time / median plain run; {args.runs} runs each)")
    for depth in depths:
        print(f"{depth:>5} {median['plain', depth] / base:>7.2f} {median['guarded', depth] / base:>8.2f}")
    worst = {side: max(median[side, d] for d in depths) / base for side in sides}
    print(f"worst depth: plain {worst['plain']:.2f}x, guarded {worst['guarded']:.2f}x the median plain run")


if __name__ == "__main__":
    main()
