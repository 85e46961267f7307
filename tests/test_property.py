"""`simloop.property`: every verify is also a plain Hypothesis test that pytest runs, HypoFuzz fuzzes and a shared
example database feeds, and what it raises is simloop's report."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

# The SDK is imported here although the pytester runs need it only inside: pytester's in-process runs drop the
# modules a run imports, so without this every run would import the SDK again (seconds each).
import anthropic  # noqa: F401
import pytest
from hypothesis import Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase
from hypothesis.internal.reflection import function_digest

import simloop
from tests.loops.readme import LIMITS, plain
from tests.test_workers import redis_url  # noqa: F401 - the fixture: a redis-server on 127.0.0.1 (skips without one)

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
DEFECT = "assistant_not_appended"  # sends tool results without the assistant message that asked: pairing


def drive_of(name: str) -> Any:
    return importlib.import_module(f"examples.{name}").drive


def not_wired(sim: simloop.Sim) -> simloop.Outcome:
    return simloop.Outcome("error", "the loop talked to something else")


def _found_at(message: str) -> str:
    """The message without what differs between two searches that shrink to one run: where it was first found,
    and the folder the scenario was written to."""
    message = re.sub(r"first failing run: example \d+ of the search \(\d+ passed before it\)", "FOUND AT", message)
    return re.sub(r"/\S*/(assistant_not_appended-pairing-[0-9a-f]{8}\.yaml)", r"DIR/\1", message)


# -- a plain Hypothesis test -----------------------------------------------------------------------------------------


def test_it_is_a_plain_hypothesis_test_with_simloop_settings_and_no_arguments() -> None:
    test = simloop.property(plain, limits=LIMITS, max_examples=7)
    assert test.is_hypothesis_test  # type: ignore[attr-defined]
    assert inspect.signature(test).parameters == {}  # no fixtures: pytest and HypoFuzz call it as is
    inner = test.hypothesis.inner_test  # type: ignore[attr-defined]
    assert inspect.isfunction(inner) and list(inspect.signature(inner).parameters) == ["data"]
    own = test._hypothesis_internal_use_settings  # type: ignore[attr-defined]
    assert own.max_examples == 7 and own.deadline is None and Phase.explain not in own.phases
    assert own.database == settings.default.database  # the profile's: what `hypothesis fuzz` requires of a test
    assert test.__name__ == inner.__name__ == "plain"
    # set, not applied: a @settings on top is allowed, and wins
    assert settings(max_examples=3)(test)._hypothesis_internal_use_settings.max_examples == 3  # type: ignore[attr-defined]


def test_a_correct_loop_passes_and_max_examples_left_out_is_the_profile_s() -> None:
    test = simloop.property(plain, limits=LIMITS, settings=settings(max_examples=12, database=None))
    assert test._hypothesis_internal_use_settings.max_examples == 12  # type: ignore[attr-defined]
    assert test() is None


def test_a_defect_raises_verify_s_report(tmp_path: Path) -> None:
    """The same failure, raised by `verify` and by the plain test: the same report, line for line."""
    calm = settings(database=None, derandomize=True)
    with pytest.raises(simloop.InvariantViolation) as by_property:
        simloop.property(drive_of(DEFECT), limits=LIMITS, max_examples=60, settings=calm, out_dir=tmp_path / "p")()
    with pytest.raises(simloop.InvariantViolation) as by_verify:
        simloop.verify(drive_of(DEFECT), limits=LIMITS, max_examples=60, settings=calm, out_dir=tmp_path / "v")
    err = by_property.value
    assert {v.invariant for v in err.violations} == {"pairing"}
    assert err.scenario is not None and len(err.scenario.model) == 1
    assert err.scenario_path is not None and Path(err.scenario_path).parent == tmp_path / "p"
    assert Path(err.scenario_path).read_text(encoding="utf-8").startswith("# Found by simloop.verify")
    assert err.timeline is not None and "tool_use" in err.timeline
    assert err.replay == (f"simloop run {err.scenario_path} --drive examples.{DEFECT}:drive "
                          "--claims max_steps,deadline_s,max_total_tokens")
    message = str(err)
    assert message.startswith("simloop found 1 violation(s) of the loop's invariants:\n  [pairing] step 2, ")
    for line in ("minimal scenario (1 reply), written to ", "timeline of the failing run:", f"replay it: {err.replay}"):
        assert line in message
    assert _found_at(message) == _found_at(str(by_verify.value))
    assert err.examples is not None and err.examples_before_failure is not None
    assert err.examples > err.examples_before_failure >= 0
    simloop.replay(drive_of("correct_sync"), err.scenario_path)  # the file replays; the fixed loop passes it


def test_the_shared_database_replays_a_failure_found_elsewhere_first(tmp_path: Path) -> None:
    db = DirectoryBasedExampleDatabase(tmp_path / "db")
    options: dict[str, Any] = {"limits": LIMITS, "max_examples": 60, "out_dir": tmp_path}
    fresh = settings(derandomize=True)  # the same search every time, so only the database can make it shorter
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.property(drive_of(DEFECT), settings=fresh, database=db, **options)()
    searched = found.value.examples_before_failure
    assert searched is not None and searched >= 1  # the search ran passing examples before it found the failure
    assert list(db.fetch(function_digest(_inner(drive_of(DEFECT), options))))  # saved under the test's key
    with pytest.raises(simloop.InvariantViolation) as replayed:  # a new test (tomorrow's CI run), the same database
        simloop.property(drive_of(DEFECT), settings=fresh, database=str(tmp_path / "db"), **options)()
    assert replayed.value.examples_before_failure == 0  # the saved failure is the first example it ran
    assert replayed.value.scenario == found.value.scenario
    assert replayed.value.examples is not None and replayed.value.examples < found.value.examples  # type: ignore[operator]
    without = InMemoryExampleDatabase()  # and without the database the same search has to find it again
    with pytest.raises(simloop.InvariantViolation) as again:
        simloop.property(drive_of(DEFECT), settings=fresh, database=without, **options)()
    assert again.value.examples_before_failure == searched


def test_machines_sharing_a_redis_database_replay_what_one_found(
    redis_url: str, tmp_path: Path  # noqa: F811 - the fixture imported above
) -> None:
    options: dict[str, Any] = {"limits": LIMITS, "max_examples": 60, "out_dir": tmp_path, "database": redis_url}
    with pytest.raises(simloop.InvariantViolation) as found:  # one machine's run (overnight)
        simloop.property(drive_of(DEFECT), **options)()
    assert found.value.examples_before_failure is not None and found.value.examples_before_failure >= 1
    with pytest.raises(simloop.InvariantViolation) as replayed:  # another machine's (CI, in the morning)
        simloop.property(drive_of(DEFECT), **options)()
    assert replayed.value.examples_before_failure == 0
    assert replayed.value.scenario == found.value.scenario


def _inner(drive: Any, options: dict[str, Any]) -> Any:
    return simloop.property(drive, **options).hypothesis.inner_test  # type: ignore[attr-defined]


def test_the_decorator_form_makes_the_drive_a_test_and_replay_lines_find_the_drive() -> None:
    @simloop.property(limits=LIMITS, max_examples=5, settings=settings(database=None))
    def test_my_loop(sim: simloop.Sim) -> simloop.Outcome:
        return plain(sim)

    assert test_my_loop.is_hypothesis_test and test_my_loop.__name__ == "test_my_loop"  # type: ignore[attr-defined]
    assert test_my_loop() is None  # type: ignore[call-arg]
    from simloop._pytest_support import load_drive

    assert load_drive(test_my_loop).__name__ == "test_my_loop"  # the drive it decorated, not the test
    assert load_drive(test_my_loop) is test_my_loop.simloop_drive  # type: ignore[attr-defined]
    # a replay line names the module's attribute, which the decorator made the test: the CLI runs its drive
    from simloop.cli import load_drive as cli_load_drive

    assert cli_load_drive(f"{__name__}:decorated") is decorated.simloop_drive  # type: ignore[attr-defined]
    assert load_drive(f"{__name__}:decorated") is decorated.simloop_drive  # type: ignore[attr-defined]


@simloop.property(limits=LIMITS, max_examples=5)
def decorated(sim: simloop.Sim) -> simloop.Outcome:
    return plain(sim)  # type: ignore[no-any-return]


def test_a_seeded_test_finds_the_same_failure_every_time_and_names_no_verify_search(tmp_path: Path) -> None:
    found = []
    for _ in range(2):
        with pytest.raises(simloop.InvariantViolation) as info:
            simloop.property(drive_of(DEFECT), limits=LIMITS, max_examples=60, seed=3, out_dir=tmp_path)()
        found.append(info.value)
    assert found[0].examples_before_failure == found[1].examples_before_failure
    assert found[0].scenario == found[1].scenario
    assert "re-run the search" not in str(found[0])  # that line names verify's search, which is another one


def test_runs_that_prove_nothing_fail_the_test_after_ten_runs(tmp_path: Path) -> None:
    test = simloop.property(not_wired, max_examples=50, settings=settings(database=None), out_dir=tmp_path)
    with pytest.raises(simloop.UsageError) as info:
        test()
    assert str(info.value).startswith(
        "simloop.property ran 10 example(s) of test_property.not_wired and not one made a model call to the "
        "simulated API: the drive is probably not wired to the Sim"
    )
    small = simloop.property(not_wired, max_examples=3, settings=settings(database=None), out_dir=tmp_path)
    with pytest.raises(simloop.UsageError, match=r"^simloop.property ran 3 example\(s\)"):
        small()  # a budget under ten is checked at its end


def test_misuse_is_a_usage_error_with_the_way_out() -> None:
    with pytest.raises(simloop.UsageError) as info:
        simloop.property(plain, workers=4)
    assert str(info.value) == (
        "property(workers=4): a plain Hypothesis test runs in one process; run it on many machines with `hypothesis "
        "fuzz` sharing one database, or use simloop.verify(drive, workers=N) on one machine"
    )
    with pytest.raises(simloop.UsageError, match=r"^property\(drive, max_example=\.\.\.\): not an option; the "
                                                  r"options are verify's: tools, limits, max_examples, "):
        simloop.property(plain, max_example=5)
    with pytest.raises(simloop.UsageError, match=r"^property\(drive\): drive must be a function taking a Sim"):
        simloop.property("examples.correct_sync:drive")  # type: ignore[arg-type]
    with pytest.raises(simloop.UsageError, match="unknown invariant id"):
        simloop.property(plain, invariants=["stop"])


# -- under pytest, and under hypothesis fuzz --------------------------------------------------------------------------

USER_CONFTEST = """
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

# one database for every run of this project (a Redis one, on many machines: see the README)
settings.register_profile("shared", database=DirectoryBasedExampleDatabase("shared-db"))
settings.load_profile("shared")
"""

USER_TESTS = f"""
from hypothesis import settings

import simloop
from examples.{DEFECT} import drive as defect
from tests.loops.readme import LIMITS, plain

test_defect = simloop.property(defect, limits=LIMITS, max_examples=60)
test_correct = simloop.property(plain, limits=LIMITS, max_examples=10)


@settings(max_examples=4)
@simloop.property(limits=LIMITS)
def test_decorated(sim):
    return plain(sim)


def test_settings_on_top_keep_simloop_s_part():
    own = test_decorated._hypothesis_internal_use_settings
    assert own.max_examples == 4 and own.deadline is None  # (the profile's deadline is 200 ms)
    assert test_defect.hypothesis.inner_test._hypothesis_internal_add_digest == b"test_user.py::test_defect"
"""


def _user_project(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    # the user's conftest loads its Hypothesis profile in this process (an in-process run): put ours back after,
    # or every later test here would use its database, in the folder pytest was started from
    request.addfinalizer(functools.partial(settings.load_profile, settings.get_current_profile_name()))
    pytester.syspathinsert(ROOT)
    pytester.makeconftest(USER_CONFTEST)
    pytester.makepyfile(test_user=USER_TESTS)


def test_pytest_runs_property_tests_and_a_failure_replays_first_from_the_database(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    _user_project(pytester, request)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        "*test_defect*",
        "E*simloop.errors.InvariantViolation: simloop found 1 violation(s) of the loop's invariants:",
        "E*[[]pairing[]] step 2, messages[[]1[]].content[[]0[]]: a tool_result answers*",
        "E*minimal scenario (1 reply), written to *",
        "E*timeline of the failing run:",
        "E*replay it: simloop run *--drive examples.assistant_not_appended:drive*",
        "FAILED test_user.py::test_defect - simloop.errors.InvariantViolation: simloop*",
    ])
    assert "self._run(data, strategy)" not in result.stdout.str()  # the report, not simloop's frames
    first = _found_at_line(result)
    assert first > 1  # the first run searched for it
    # saved under the key HypoFuzz gives the test (its node id): what `hypothesis fuzz` finds, CI replays
    inner = _inner(drive_of(DEFECT), {"limits": LIMITS, "max_examples": 60})
    inner._hypothesis_internal_add_digest = b"test_user.py::test_defect"
    assert list(DirectoryBasedExampleDatabase(pytester.path / "shared-db").fetch(function_digest(inner)))
    again = pytester.runpytest("-p", "no:cacheprovider", "test_user.py::test_defect")
    again.assert_outcomes(failed=1)
    assert _found_at_line(again) == 1  # replayed first


def _found_at_line(result: pytest.RunResult) -> int:
    for line in result.outlines:
        m = re.search(r"first failing run: example (\d+) of the search", line)
        if m:
            return int(m[1])
    raise AssertionError("no 'first failing run' line in:\n" + "\n".join(result.outlines))


def test_hypothesis_fuzz_finds_the_failure_and_saves_it_where_pytest_replays_it(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    """``hypothesis fuzz`` (HypoFuzz: AGPL, so simloop does not depend on it) collects the property tests as pytest does,
    fuzzes them, and saves what it finds to the profile's database, where the next pytest run replays it first."""
    pytest.importorskip("hypofuzz", reason="HypoFuzz is not installed (simloop does not depend on it: it is AGPL); "
                                           "pip install hypofuzz to run this test")
    cli = Path(sys.executable).parent / "hypothesis"
    _user_project(pytester, request)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # with one test selected, it stops once it found a failing input for it (and exits 1, as it does then)
    fuzz = subprocess.run(
        [str(cli), "fuzz", "-n", "1", "--no-dashboard", "--", "test_user.py", "-k", "test_defect", "-p",
         "no:cacheprovider"], cwd=pytester.path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    # (HypoFuzz 25.11.1 under Hypothesis 6.170 crashes after shrinking, having saved the failure it found unshrunk:
    # pytest replays and shrinks it all the same)
    assert "Found a failing input for every test!" in fuzz.stderr, fuzz.stdout + fuzz.stderr
    again = pytester.runpytest("-p", "no:cacheprovider", "test_user.py::test_defect")
    again.assert_outcomes(failed=1)
    assert _found_at_line(again) == 1  # what the fuzzer found is the first example pytest runs
