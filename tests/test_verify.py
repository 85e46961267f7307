"""`simloop.verify` and `simloop.replay`: bugs found, shrunk to minimal scenarios, replayable, deterministic."""

from __future__ import annotations

import gc
import importlib
import re
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.database import InMemoryExampleDatabase

import simloop
from simloop import Limits, Scenario
from simloop.strategies import scenarios

LIMITS = Limits(max_steps=10, deadline_s=300, max_total_tokens=200_000)


def drive_of(name: str) -> Any:
    return importlib.import_module(f"examples.{name}").drive


def caught(name: str, tmp_path: Path, *, limits: Limits | None = LIMITS, seed: int = 0, **kw: Any) -> simloop.InvariantViolation:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(drive_of(name), limits=limits, seed=seed, out_dir=tmp_path, max_examples=150, **kw)
    return info.value


@pytest.mark.parametrize("name", ["correct_sync", "correct_async", "correct_stream"])
def test_correct_loops_hold_every_invariant(name: str) -> None:
    report = simloop.verify(drive_of(name), limits=LIMITS, max_examples=40, seed=1)
    assert report.ok and report.violations == []
    assert report.examples is not None and report.examples >= 40
    assert set(report.checked) == set(simloop.invariants.CATALOGUE)


# (defect loop, declared limits, invariant, minimal replies, then: a runaway repeats its stuck tail, others end)
SHRINKS = [
    ("no_step_cap", Limits(), "stops", 1, "repeat_last"),
    ("assistant_not_appended", LIMITS, "pairing", 1, "end_turn"),
    ("made_up_ids", LIMITS, "pairing", 1, "end_turn"),
    ("cap_reported_final", LIMITS, "honest_outcome", 1, "end_turn"),  # one tool_use with repeat: 10
    ("pause_turn_final", LIMITS, "honest_outcome", 1, "end_turn"),
    ("refusal_carried_on", LIMITS, "refusal", 1, "end_turn"),  # the refusal (the nudge is answered by then:)
    ("thinking_dropped", LIMITS, "request_valid", 1, "end_turn"),
    ("api_errors_forever", Limits(), "stops", 1, "repeat_last"),
]


@pytest.mark.parametrize(("name", "limits", "invariant", "replies", "then"), SHRINKS, ids=[s[0] for s in SHRINKS])
def test_defects_shrink_to_a_minimal_replayable_scenario(
    name: str, limits: Limits, invariant: str, replies: int, then: str, tmp_path: Path
) -> None:
    err = caught(name, tmp_path, limits=limits)
    assert {v.invariant for v in err.violations} == {invariant}
    scenario = err.scenario
    assert isinstance(scenario, Scenario)
    assert len(scenario.model) == replies, scenario.to_yaml()
    assert scenario.then == then
    # the file on disk is the scenario, and replaying it shows the same bug
    path = Path(err.scenario_path or "")
    assert path.parent == tmp_path and simloop.load_scenario(path) == scenario
    with pytest.raises(simloop.InvariantViolation) as again:
        simloop.replay(drive_of(name), path)
    assert {v.invariant for v in again.value.violations} == {invariant}


def test_the_failure_report_is_actionable(tmp_path: Path) -> None:
    err = caught("rerun_after_api_error", tmp_path, limits=None)
    text = str(err)
    assert text.startswith("simloop found ")
    assert "[no_rerun] step " in text and "ran twice for tool_use toolu_" in text
    assert f"written to {err.scenario_path}:" in text
    assert "timeline of the failing run:" in text
    assert re.search(r"\(no reply\)  \[([45]\d\d), \1, \1\]  <-- no_rerun", text), text  # an outage outlasting SDK retries
    assert f"replay it: simloop run {err.scenario_path} --drive examples.rerun_after_api_error:drive" in text
    assert err.replay == f"simloop run {err.scenario_path} --drive examples.rerun_after_api_error:drive"
    assert err.timeline and "<-- no_rerun" in err.timeline
    assert isinstance(err, AssertionError)


def test_same_seed_same_minimal_scenario(tmp_path: Path) -> None:
    first = caught("tool_exception_escapes", tmp_path / "a", seed=7)
    second = caught("tool_exception_escapes", tmp_path / "b", seed=7)
    assert Path(first.scenario_path or "").read_text() == Path(second.scenario_path or "").read_text()


def test_the_example_database_replays_a_known_failure_first(tmp_path: Path) -> None:
    db = InMemoryExampleDatabase()
    runs: list[int] = []

    def counting(sim: simloop.Sim) -> Any:
        runs.append(1)
        return drive_of("token_budget_unchecked")(sim)

    with pytest.raises(simloop.InvariantViolation):
        simloop.verify(counting, limits=LIMITS, out_dir=tmp_path, settings=settings(database=db))
    first_search = len(runs)
    runs.clear()
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(counting, limits=LIMITS, out_dir=tmp_path, settings=settings(database=db))
    assert {v.invariant for v in info.value.violations} == {"limits"}
    assert len(runs) < first_search  # the saved failure was tried first



def test_verify_computes_each_database_key_once_and_it_is_hypothesis_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify runs a Hypothesis test per stage and chunk; Hypothesis would read and tokenize its function's source
    for the database key each time.  verify computes it once per world and stage, and it is the same key, so a
    failure saved by an earlier run (or another machine) still replays first."""
    from simloop._campaign import engine

    real_digest = engine.function_digest
    computed: list[bytes] = []
    monkeypatch.setattr(engine, "_DATABASE_KEYS", {})
    monkeypatch.setattr(engine, "function_digest", lambda f: computed.append(real_digest(f)) or computed[-1])
    db = InMemoryExampleDatabase()
    for _ in range(2):  # the second search replays the saved failure, under the same key
        with pytest.raises(simloop.InvariantViolation):
            simloop.verify(drive_of("token_budget_unchecked"), limits=LIMITS, out_dir=tmp_path, settings=settings(database=db))
    saved = {key for key in db.data if db.data[key] and not key.endswith((b".secondary", b".pareto"))}
    assert saved and saved <= set(computed)  # the failures went in under the keys computed here
    assert len(computed) == len(set(computed))  # each computed once in the process, however many chunks ran

def test_replay_honours_expected_violations(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[1] / "scenarios" / "stuck-search.yaml"
    scenario = simloop.load_scenario(src)
    known = tmp_path / "known.yaml"
    scenario.model_copy(update={"expect": simloop.scenario.Expect(violations=["stops"])}).dump(known)
    assert simloop.replay(drive_of("no_step_cap"), known).violations[0].invariant == "stops"  # expected: passes
    with pytest.raises(simloop.InvariantViolation, match="expected but did not happen: stops"):
        simloop.replay(drive_of("correct_sync"), known)


def test_usage_errors() -> None:
    with pytest.raises(simloop.UsageError, match="unknown invariant id"):
        simloop.verify(drive_of("correct_sync"), invariants=["nope"])
    with pytest.raises(simloop.UsageError, match="at least one tool"):
        simloop.verify(drive_of("correct_sync"), tools=[])
    with pytest.raises(simloop.UsageError, match="drive must be a function"):
        simloop.verify("examples.correct_sync:drive")  # type: ignore[arg-type]


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(scenarios())
def test_generated_scenarios_are_valid_v1_files(scenario: Scenario) -> None:
    assert Scenario.from_yaml(scenario.to_yaml()) == scenario
    for fault in scenario.faults:
        assert fault.tool in {t.name for t in scenario.tools}


# -- long budgets run as bounded chunks (memory stays flat) -----------------------------------------

VERIFY = importlib.import_module("simloop.verify")  # the module (simloop.verify is the function)


def test_a_budget_splits_into_even_chunks_of_at_most_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(VERIFY, "_CHUNK", 100)
    assert VERIFY._chunks(0) == [] and VERIFY._chunks(100) == [100] and VERIFY._chunks(37) == [37]
    assert VERIFY._chunks(101) == [51, 50]
    sizes = VERIFY._chunks(2500)
    assert sum(sizes) == 2500 and len(sizes) == 25 and set(sizes) == {100}


@pytest.mark.parametrize("seed", [3, None], ids=["seeded", "derandomized"])
def test_chunks_are_deterministic_and_do_not_repeat_each_other(seed: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(VERIFY, "_CHUNK", 4)

    def search() -> list[str]:
        runs: list[str] = []

        def drive(sim: simloop.Sim) -> Any:
            outcome = drive_of("correct_sync")(sim)
            runs.append(repr(sim.transcript.events))
            return outcome

        report = simloop.verify(drive, limits=LIMITS, plan=simloop.strategies.plans(), max_examples=20, seed=seed)
        assert report.examples == 20
        return runs

    first = search()
    assert search() == first  # the same seed (or the suite's derandomize) gives the same runs in the same order
    # five chunks of four: only each chunk's opening (Hypothesis's simplest example) repeats; chunks given the
    # same seed would repeat the first chunk, leaving at most eight distinct runs
    assert len(set(first)) > 8


def test_a_failure_found_in_a_later_chunk_is_replayed_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(VERIFY, "_CHUNK", 4)
    db = InMemoryExampleDatabase()
    calls: list[int] = []
    holds_for = [8]  # the first search only breaks after two chunks: the failure is found in a later one

    def drive(sim: simloop.Sim) -> Any:
        calls.append(1)
        return drive_of("correct_sync" if len(calls) <= holds_for[0] else "assistant_not_appended")(sim)

    def search() -> simloop.InvariantViolation:
        calls.clear()
        with pytest.raises(simloop.InvariantViolation) as info:
            simloop.verify(
                drive, limits=LIMITS, plan=simloop.strategies.plans(), max_examples=40, out_dir=tmp_path,
                settings=settings(database=db),
            )
        return info.value

    first = search()
    assert len(calls) > 8 and {v.invariant for v in first.violations} == {"pairing"}
    holds_for[0] = 0
    again = search()
    assert {v.invariant for v in again.violations} == {"pairing"}
    assert len(calls) <= 3  # the saved minimal failure, replayed by the first chunk (then once more to report it)
    assert again.scenario == first.scenario


def test_finished_hypothesis_runs_do_not_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypothesis.internal.conjecture.data import ConjectureResult

    monkeypatch.setattr(VERIFY, "_CHUNK", 5)
    gc.collect()

    def results() -> int:
        return sum(1 for o in gc.get_objects() if type(o) is ConjectureResult)

    before = results()  # what other tests in this process still hold (their runs are not ours to free)
    alive: list[int] = []

    def drive(sim: simloop.Sim) -> Any:
        alive.append(results() - before if len(alive) % 5 == 4 or not alive else -1)
        return drive_of("correct_sync")(sim)

    report = simloop.verify(drive, limits=LIMITS, plan=simloop.strategies.plans(), max_examples=60, seed=0)
    assert report.examples == 60
    # each run's engine keeps every example's result until a full collection frees the finished run: without
    # the collection between chunks they pile up (some 30 by the end of this search)
    assert max(alive) <= 15, alive


class _Cycle:
    """Cyclic garbage once dropped: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _dropped_in_a_run(inner: Any) -> tuple[Any, Callable[[], bool], list[bool]]:
    """A drive that drops, in its first run, a cycle made before the search and runs a full collection: whether the
    cycle outlived it (``seen``), and a probe saying whether it is alive now."""
    held = [_Cycle()]
    ref = weakref.ref(held[0])
    seen: list[bool] = []

    def drive(sim: simloop.Sim) -> Any:
        if held:
            held.clear()
            gc.collect()
            seen.append(ref() is not None)
        return inner(sim)

    return drive, lambda: ref() is not None, seen


def test_the_heap_is_frozen_during_a_search_and_handed_back_after(tmp_path: Path) -> None:
    """What the process held before a search is left out of the collections during it (a cycle made before and
    dropped in a run outlives a full collection there) and handed back after (the next collection frees it), a
    failing search's too.  On every Python: 3.12 keeps objects of its own in the permanent generation (375 immortal
    tuples of its built-in types, put back there by each full collection), which once made simloop leave the heap
    unfrozen there."""
    from simloop._runtime.heap import PYTHONS_OWN

    before = gc.get_freeze_count()
    frozen: list[int] = []
    drive, alive, seen = _dropped_in_a_run(drive_of("correct_sync"))

    def counted(sim: simloop.Sim) -> Any:
        frozen.append(gc.get_freeze_count())
        return drive(sim)

    simloop.verify(counted, limits=LIMITS, max_examples=5, seed=0)
    assert seen == [True] and frozen and all(n > before for n in frozen)
    assert alive()  # nothing has collected it since the search
    gc.collect()
    assert not alive() and gc.get_freeze_count() <= max(before, PYTHONS_OWN)  # the search's share handed back
    drive, alive, seen = _dropped_in_a_run(drive_of("no_step_cap"))
    with pytest.raises(simloop.InvariantViolation):
        simloop.verify(drive, max_examples=50, seed=0, out_dir=tmp_path)
    assert seen == [True]
    gc.collect()
    assert not alive() and gc.get_freeze_count() <= max(before, PYTHONS_OWN)


def test_the_young_garbage_is_collected_between_runs_not_during_them(tmp_path: Path) -> None:
    """While a search runs, the young generation is collected between runs (their garbage cannot pile up), not in
    the middle of one; the collector's thresholds are handed back after, a failing search's too."""
    from simloop._campaign.engine import YOUNG_THRESHOLD

    thresholds = gc.get_threshold()
    seen: list[tuple[int, int]] = []  # (the young threshold, cyclic garbage of earlier runs still alive) per run
    alive: set[int] = set()

    class Cycle:  # what a loop's run may leave to the cycle collector (an exception's traceback, a parent link)
        def __init__(self) -> None:
            self.me = self
            alive.add(id(self))

        def __del__(self) -> None:
            alive.discard(id(self))

    def drive(sim: simloop.Sim) -> Any:
        seen.append((gc.get_threshold()[0], len(alive)))
        Cycle()
        return drive_of("correct_sync")(sim)

    collections: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 0:
            collections.append(0)

    gc.callbacks.append(count)
    try:
        report = simloop.verify(drive, limits=LIMITS, max_examples=30, seed=0)
    finally:
        gc.callbacks.remove(count)
    assert report.examples == 30 and len(seen) >= 30
    assert all(young == YOUNG_THRESHOLD for young, _ in seen)
    assert max(left for _, left in seen) == 0  # the runs before were collected as this one began
    assert len(collections) >= 25  # one before each run (the young generation; every tenth, the middle one too)
    assert gc.get_threshold() == thresholds
    with pytest.raises(simloop.InvariantViolation):
        simloop.verify(drive_of("no_step_cap"), max_examples=50, seed=0, out_dir=tmp_path)
    assert gc.get_threshold() == thresholds


def test_a_process_that_tuned_its_collector_keeps_its_thresholds() -> None:
    thresholds = gc.get_threshold()
    seen: list[int] = []

    def drive(sim: simloop.Sim) -> Any:
        seen.append(gc.get_threshold()[0])
        return drive_of("correct_sync")(sim)

    gc.set_threshold(50_000, 20, 20)
    try:
        simloop.verify(drive, limits=LIMITS, max_examples=3, seed=0)
        assert seen and set(seen) == {50_000}
        assert gc.get_threshold() == (50_000, 20, 20)
    finally:
        gc.set_threshold(*thresholds)


def test_a_process_that_froze_its_heap_keeps_it_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        simloop.verify(drive_of("correct_sync"), limits=LIMITS, max_examples=3, seed=0)
        assert 0 < gc.get_freeze_count() <= frozen  # neither unfrozen nor frozen further (some objects died)
    finally:
        gc.unfreeze()
