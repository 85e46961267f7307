"""Virtual time end to end: a long simulated day runs in milliseconds, and runs are reproducible."""

from __future__ import annotations

from pathlib import Path

import pytest

import simloop
from examples import correct_async, correct_stream, correct_sync
from simloop.clock import REAL

LONG_DAY = Path(__file__).resolve().parents[1] / "scenarios" / "long-virtual-day.yaml"


@pytest.mark.parametrize("loop", [correct_sync, correct_async, correct_stream], ids=lambda m: m.__name__.split(".")[-1])
def test_ten_minutes_of_latency_retries_and_slowness_take_no_real_time(loop: object) -> None:
    started = REAL.perf_counter()
    with simloop.Sim(LONG_DAY, seed=0) as sim:
        outcome = sim.run(loop.drive)  # type: ignore[attr-defined]
    real = REAL.perf_counter() - started
    assert outcome.reason == "final"
    assert sim.clock.now() >= 120 + 90 + 300 + 120 + 120  # replies, the 429's retry-after, the slow tool
    assert real < 5.0  # generous: the ratio itself is measured by bench/clock.py, not here
    assert sim.check(outcome).ok


def test_same_scenario_and_seed_give_the_same_transcript_and_violations_20_times() -> None:
    from examples import rerun_after_api_error

    path = Path(__file__).resolve().parents[1] / "scenarios" / "overload-after-write.yaml"
    runs = set()
    for _ in range(20):
        with simloop.Sim(path, seed=5) as sim:
            sim.run(rerun_after_api_error.drive)
        report = sim.check()
        runs.add((sim.transcript.to_jsonl(), tuple(str(v) for v in report.violations)))
    assert len(runs) == 1
    [(jsonl, violations)] = runs
    assert any(v.startswith("[no_rerun]") for v in violations)
    assert jsonl.count("\n") > 5
