"""Time compression: virtual seconds simulated per real second.

Runs ``scenarios/long-virtual-day.yaml`` (two-minute replies, a 429 with a
90 s retry-after, a five-minute tool: over 12 virtual minutes per run) through
the correct sync and async reference loops, and divides the virtual time the
runs covered by the real time they took.  Target: at least 1,000x.

    python bench/clock.py [--runs 20]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simloop
from examples import correct_async, correct_sync
from simloop._runtime.realtime import REAL

SCENARIO = simloop.load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "long-virtual-day.yaml")


def measure(drive: object, runs: int) -> tuple[float, float]:
    virtual = 0.0
    started = REAL.perf_counter()
    for seed in range(runs):
        with simloop.Sim(SCENARIO, seed=seed) as sim:
            outcome = sim.run(drive)  # type: ignore[arg-type]
        assert outcome.reason == "final", outcome
        virtual += sim.clock.now()
    return virtual, REAL.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    measure(correct_sync.drive, 2)  # warm up
    for name, drive in (("sync", correct_sync.drive), ("async", correct_async.drive)):
        virtual, real = measure(drive, args.runs)
        print(f"{name:5}: {virtual:9.0f} virtual s in {real:6.3f} real s over {args.runs} runs "
              f"({virtual / args.runs / 60:.1f} virtual min a run): {virtual / real:,.0f}x (target >= 1,000x)")


if __name__ == "__main__":
    main()
