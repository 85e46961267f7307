"""Virtual time end to end: a long simulated day runs in milliseconds, and runs are reproducible."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import _alias_loops
import pytest

import simloop
from examples import correct_async, correct_stream, correct_sync
from simloop._runtime.realtime import REAL

LONG_DAY = Path(__file__).resolve().parents[1] / "scenarios" / "long-virtual-day.yaml"


@pytest.mark.parametrize("loop", [correct_sync, correct_async, correct_stream], ids=lambda m: m.__name__.split(".")[-1])
def test_ten_minutes_of_latency_retries_and_slowness_take_no_real_time(loop: object) -> None:
    started = REAL.perf_counter()
    with simloop.Sim(LONG_DAY, seed=0) as sim:
        outcome = sim.run(loop.drive)  # type: ignore[attr-defined]
    real = REAL.perf_counter() - started
    assert outcome.reason == "final"
    assert sim.clock.now() >= 120 + 90 + 300 + 120 + 120  # replies, the 429's retry-after, the slow tool
    # the waits took no real time: were a tenth of the virtual minutes slept for real, the run would take over a
    # minute (a bound of a few seconds is within what a busy machine adds; the ratio is bench/clock.py's)
    assert real < sim.clock.now() / 10
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


# -- names bound at import: ``from time import monotonic, sleep`` in the loop's own modules ------------------

SLOW_TOOL_DEADLINE = LONG_DAY.parent / "slow-tool-deadline.yaml"


@pytest.fixture
def aliased_reference_loop() -> Iterator[ModuleType]:
    """examples/correct_sync.py with its deadline read through ``from time import monotonic``, imported as
    a user's module is: before any run, into ``sys.modules``."""
    source = Path(correct_sync.__file__).read_text(encoding="utf-8")
    assert source.count("time.monotonic()") >= 2 and "\nimport time\n" in source  # (what the test rewrites)
    source = source.replace("\nimport time\n", "\nfrom time import monotonic\n").replace("time.monotonic()", "monotonic()")
    name = "examples.correct_sync_aliased"
    module = ModuleType(name)
    module.__package__ = "examples"
    module.__file__ = correct_sync.__file__
    sys.modules[name] = module
    try:
        exec(compile(source, correct_sync.__file__, "exec"), module.__dict__)  # noqa: S102 - our own example
        assert module.monotonic is REAL.monotonic
        yield module
    finally:
        del sys.modules[name]


def test_the_reference_loop_with_its_deadline_read_through_an_alias_keeps_it(aliased_reference_loop: ModuleType) -> None:
    report = simloop.replay(aliased_reference_loop.drive, SLOW_TOOL_DEADLINE)
    assert report.ok, report.violations  # was: [limits] model call 3 started at t=92s, at or after deadline_s=60
    assert aliased_reference_loop.monotonic is REAL.monotonic  # put back after the run


def test_a_60_s_backoff_through_from_time_import_sleep_takes_no_real_time() -> None:
    scenario = {"task": "Look it up, slowly.", "tools": [{"name": "search"}],
                "model": [{"tool_use": [{"name": "search", "input": {"q": str(n)}}]} for n in range(3)]
                + [{"end_turn": "done"}]}
    # a real 60 s sleep (blocked in C, no model call for watchdog_s) would have the run abandoned: "stops"
    with simloop.Sim(scenario) as sim:
        outcome = sim.run(_alias_loops.polite_drive)
    assert (outcome.reason, outcome.text) == ("final", "done"), outcome
    assert sim.clock.now() >= 3 * _alias_loops.BACKOFF_S
    stamps = sim.store["stamps"]
    assert [m - stamps[0][0] for m, _, _ in stamps] == [0.0, 60.0, 120.0, 180.0]  # monotonic, as bound
    assert [p - stamps[0][1] for _, p, _ in stamps] == [0.0, 60.0, 120.0, 180.0]  # perf_counter, as bound
    assert [(w - stamps[0][2]).total_seconds() for _, _, w in stamps] == [0.0, 60.0, 120.0, 180.0]  # datetime
    assert sim.check(outcome).ok
    assert _alias_loops.sleep is REAL.sleep and _alias_loops.datetime is REAL.datetime


def test_a_loop_ignoring_its_deadline_through_the_alias_is_still_caught() -> None:
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.replay(_alias_loops.checks_after_the_call_drive, SLOW_TOOL_DEADLINE)
    violations = caught.value.violations
    assert [v.invariant for v in violations] == ["limits"], violations
    assert "model call 3 started at t=92" in violations[0].message


def test_a_pydantic_model_with_date_fields_built_during_a_run_validates_real_values() -> None:
    """A model defined before the run whose schema is built inside it (pydantic builds lazily: the SDKs' and
    pydantic-ai's models do).  pydantic before 2.14 matched the field's type against ``datetime.datetime`` read
    at that moment (simloop's class during a run) and failed: a correct loop reported as a crash."""
    import datetime as dt

    import pydantic

    class Record(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(defer_build=True)
        at: dt.datetime
        on: dt.date
        maybe: dt.datetime | None = None

    def drive(sim: simloop.Sim) -> simloop.Outcome:
        record = Record.model_validate({"at": "2026-01-02T03:04:05", "on": "2026-01-02"})
        assert type(record.at) is REAL.datetime and type(record.on) is REAL.date
        return simloop.Outcome("final", record.model_dump_json())

    with simloop.Sim({"name": "pydantic", "model": [{"end_turn": "ok"}]}) as sim:
        outcome = sim.run(drive)
    assert outcome == simloop.Outcome("final", '{"at":"2026-01-02T03:04:05","on":"2026-01-02","maybe":null}')
