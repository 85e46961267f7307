"""`make demo`: verify the bundled example loops and show the bug simloop catches.

1. The correct loop (`examples.correct_sync`) is property-tested: generated model
   behaviours, API outages, tool faults and latencies; every invariant holds.
2. The same loop with one classic bug (`examples.rerun_after_api_error`: when the
   next API call fails, it re-runs the previous turn's tools) is caught, shrunk to
   a minimal scenario, and reported with its timeline and the command that replays it.

    python -m examples.demo
"""

from __future__ import annotations

import sys
import time

import simloop

from . import correct_sync, rerun_after_api_error

RULE = "-" * 78


def main() -> int:
    print(RULE)
    print("1. simloop.verify(examples.correct_sync.drive): a correct agent loop")
    print(RULE)
    started = time.perf_counter()
    report = simloop.verify(correct_sync.drive, max_examples=100, seed=0)
    print(f"{report.examples} generated runs in {time.perf_counter() - started:.1f}s: {report}")
    print()
    print(RULE)
    print("2. simloop.verify(examples.rerun_after_api_error.drive): the same loop with one bug")
    print(RULE)
    started = time.perf_counter()
    try:
        simloop.verify(rerun_after_api_error.drive, max_examples=100, seed=0)
    except simloop.InvariantViolation as caught:
        print(caught)
        print()
        print(f"(found and shrunk in {time.perf_counter() - started:.1f}s)")
        return 0
    print("the bug was NOT caught: this is a regression in simloop")
    return 1


if __name__ == "__main__":
    sys.exit(main())
