"""What a `verify` example costs on each wire: the reference correct loop of each, the same search.

Issue 42 measured 200 examples of one user's loops at 8.6 s on the Messages wire, 34 s on Chat Completions and
53 s on Responses.  This runs `simloop.verify` on `examples.correct_sync` (Messages), `examples.openai_loop`
(Chat Completions) and `examples.openai_responses_loop` (Responses), the same seed and budget each, in chunks
that alternate (each wire first in turn), and prints the median CPU time per example and each OpenAI wire's
ratio to the Messages wire (issue 42's bar: 1.5x).  Each loop is its wire's own reference loop, so the ratio
holds the wire's work and the loop's own differences together.

    python bench/wires.py [--chunks 6] [--examples 25]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import simloop
from examples import correct_sync, openai_loop, openai_responses_loop

CPU = time.process_time
LIMITS = simloop.Limits(max_steps=10)
WIRES: dict[str, Callable[[simloop.Sim], Any]] = {  # a drive returns an Outcome, or one per user turn
    "Messages": correct_sync.drive,
    "Chat Completions": openai_loop.drive,
    "Responses": openai_responses_loop.drive,
}


def per_example(chunks: int, examples: int) -> dict[str, float]:
    """Median CPU seconds per example of each wire's search, chunks alternating."""
    times: dict[str, list[float]] = {name: [] for name in WIRES}
    order = list(WIRES)
    for n in range(chunks + 1):  # the first round warms up and is not counted
        for name in order[n % len(order):] + order[: n % len(order)]:
            start = CPU()
            report = simloop.verify(WIRES[name], limits=LIMITS, max_examples=examples, seed=n,
                                    out_dir="/tmp/simloop-wires")
            if n:
                times[name].append((CPU() - start) / (report.examples or examples))
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--examples", type=int, default=25)
    args = parser.parse_args(argv)
    cost = per_example(args.chunks, args.examples)
    base = cost["Messages"]
    for name, seconds in cost.items():
        print(f"{name:17} {seconds * 1000:7.2f} ms CPU an example  {seconds / base:5.2f}x the Messages wire")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
