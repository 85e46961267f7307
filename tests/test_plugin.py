"""The pytest plugin, tested from the outside: temporary projects run with ``pytester``.

Each test writes a small project (test files, a conftest, scenario files copied from
scenarios/, an ini file) and runs pytest on it, in process, except two runs in a
subprocess: the import-hygiene check (a fresh interpreter is the only honest place to
look at ``sys.modules``) and the xdist parity run.

The reference loops come from examples/ (``examples.correct_sync:drive`` and its
one-bug twins); budgets stay small (at most a few dozen examples a test) so the whole
file runs in seconds.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

# The SDK is imported here although no test here uses it: pytester's in-process runs drop the modules a run
# imports, so without this every run would import the SDK again (seconds each).
import anthropic  # noqa: F401
import pytest
from hypothesis import settings

from simloop._pytest_support import derive_seed, load_drive, looks_like_scenario, profile_settings, resolve_options
from simloop.errors import UsageError

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
HEADER = "simloop: seed={seed} (reproduce with --simloop-seed={seed})"

RECORD_CONFTEST = """
import json
import pytest

@pytest.fixture
def record(request, simloop):
    def write(**data):
        with open("results.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": request.node.nodeid, "seed": simloop.seed, **data}) + "\\n")
    return write
"""

QUICKSTART_CONFTEST = '''\
import pytest


@pytest.fixture
def simloop_config():
    # Defaults for the simloop fixture in this folder: the loop under test (a bundled
    # example with a classic bug: it sends the tool results without first appending the
    # model's reply that asked for them) and 50 generated runs a test.
    return {"drive": "examples.assistant_not_appended:drive", "max_examples": 50}
'''

QUICKSTART_TEST = '''\
def test_reference_loop_keeps_every_invariant(simloop):
    # The bug-free twin: 50 generated runs (API errors, tool faults, refusals, cut-off
    # replies, slow tools...) and all seventeen invariants hold.
    simloop.verify("examples.correct_sync:drive")


def test_loop_under_test(simloop):
    # Fails: the first run with a tool call breaks tool_use/tool_result pairing (the real
    # API would answer 400). The report shows the violation, the timeline, the minimal
    # scenario (saved as a file) and the command that replays it.
    simloop.verify()
'''


def _project(pytester: pytest.Pytester, *scenarios: str, **files: str) -> Path:
    """A temporary project that can import examples/, with some of scenarios/ copied into ./scenarios."""
    pytester.syspathinsert(ROOT)
    folder = pytester.path / "scenarios"
    folder.mkdir(exist_ok=True)
    for name in scenarios:
        shutil.copy(SCENARIOS / name, folder / name)
    if files:
        pytester.makepyfile(**files)
    return folder


def _results(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    path = pytester.path / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    path.unlink(missing_ok=True)
    return {row.pop("test"): row for row in rows}


def _header_seed(result: pytest.RunResult) -> int:
    for line in result.outlines:
        m = re.fullmatch(r"simloop: seed=(\d+) \(reproduce with --simloop-seed=(\d+)\)", line)
        if m:
            assert m[1] == m[2]
            return int(m[1])
    raise AssertionError("no simloop seed header in:\n" + "\n".join(result.outlines[:12]))


# -- registration ------------------------------------------------------------------------------------------------


def test_loading_the_plugin_imports_neither_simloop_nor_the_sdk(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_modules="""
        import sys

        HEAVY = ("simloop", "anthropic", "httpx2", "hypothesis", "rich", "vcr", "pydantic", "ruamel")

        def test_nothing_heavy_was_imported():
            assert "pytest_simloop.plugin" in sys.modules
            loaded = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
            assert loaded == []
    """)
    # Only this plugin: other installed plugins may import what they like (langsmith's imports pydantic).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess(
        "-p", "pytest_simloop.plugin", "--simloop-drive=examples.correct_sync:drive", "--simloop-profile=ci",
        "--simloop-seed=17", timeout=120)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([HEADER.format(seed=17), "simloop: drive=examples.correct_sync:drive, profile=ci"])


def test_the_plugin_can_be_switched_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_off="""
        def test_plain():
            pass

        def test_wants_the_fixture(simloop):
            pass
    """)
    result = pytester.runpytest("-p", "no:simloop")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'simloop' not found*"])
    result.stdout.no_fnmatch_line("simloop: seed=*")


# -- scenario files as tests -------------------------------------------------------------------------------------


def test_scenario_files_are_collected_and_replayed_with_a_drive(pytester: pytest.Pytester) -> None:
    folder = _project(pytester, "happy-path.yaml", "stuck-search.yaml", "refusal.yaml")
    (folder / "nested").mkdir()
    shutil.copy(SCENARIOS / "tool-raises.yaml", folder / "nested" / "tool-raises.yaml")
    (folder / "notes.yaml").write_text("owner: support-team\nreviewed: 2025-03-01\n", encoding="utf-8")
    (folder / "cassette.yaml").write_text("version: 1\ninteractions: []\n", encoding="utf-8")
    shutil.copy(SCENARIOS / "outage.yaml", pytester.path / "outside.yaml")  # not under the scenarios folder

    result = pytester.runpytest("-v", "--simloop-drive=examples.correct_sync:drive", "--simloop-seed=5")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines_random([
        "scenarios/happy-path.yaml::happy-path PASSED*",
        "scenarios/refusal.yaml::refusal PASSED*",
        "scenarios/stuck-search.yaml::stuck-search PASSED*",
        "scenarios/nested/tool-raises.yaml::tool-raises PASSED*",
        "simloop: 0 generated runs and 4 scenario replays in 4 tests, 17 invariants checked, seed=5",
    ])

    without_drive = pytester.runpytest("-v")
    assert without_drive.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_a_file_only_the_messages_api_can_play_is_skipped_for_a_loop_on_the_openai_wire(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")
    _project(pytester, "pause-turn.yaml", "happy-path.yaml")
    result = pytester.runpytest("-rs", "--simloop-drive=examples.openai_loop:drive", "--simloop-seed=5")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*pause-turn.yaml*scripts a pause_turn, which only the Messages API has*"])


def test_scenario_folder_and_drive_come_from_the_ini_file(pytester: pytest.Pytester) -> None:
    _project(pytester)
    (pytester.path / "regressions").mkdir()
    shutil.copy(SCENARIOS / "happy-path.yaml", pytester.path / "regressions" / "happy-path.yaml")
    pytester.makeini("""
        [pytest]
        simloop_drive = examples.correct_sync:drive
        simloop_scenarios = regressions
    """)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["regressions/happy-path.yaml::happy-path PASSED*"])


def test_a_scenario_file_checks_its_expect_block(pytester: pytest.Pytester) -> None:
    folder = _project(pytester)
    stuck = (SCENARIOS / "stuck-search.yaml").read_text(encoding="utf-8")
    (folder / "known-bug.yaml").write_text(
        stuck.replace("expect: {violations: [], reason: [max_steps, repetition]}", "expect: {violations: [stops]}"), encoding="utf-8")
    (folder / "wrong-reason.yaml").write_text(
        stuck.replace("reason: [max_steps, repetition]", "reason: final"), encoding="utf-8")
    (folder / "stuck-search.yaml").write_text(stuck, encoding="utf-8")

    result = pytester.runpytest("-v", "--simloop-drive=examples.no_step_cap:drive", "--simloop-seed=5")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random([
        "scenarios/known-bug.yaml::stuck-search PASSED*",  # the documented violation happened: that passes
        "*replaying scenarios/stuck-search.yaml: the loop broke 1 invariant(s)",
        "*[[]stops[]] step 52: the loop made 52 model calls without stopping*",
        "*timeline of the failing run:*",
        "*scenario: scenarios/stuck-search.yaml",
        (f"replay it:       simloop run scenarios/stuck-search.yaml --drive examples.no_step_cap:drive "
        f"--seed {derive_seed(5, 'scenarios/stuck-search.yaml::stuck-search')}"),
        "re-run the test: pytest 'scenarios/stuck-search.yaml::stuck-search' --simloop-seed=5",
    ])
    fixed = pytester.runpytest("--simloop-drive=examples.correct_sync:drive", "scenarios/wrong-reason.yaml",
                               "scenarios/known-bug.yaml")
    fixed.assert_outcomes(failed=2)
    fixed.stdout.fnmatch_lines_random([
        "replaying scenarios/wrong-reason.yaml:",
        "  the loop stopped with reason 'max_steps'; the file expects 'final' (if this reason is honest here too, *",
        "replaying scenarios/known-bug.yaml:",
        "what went wrong:",
        "  expected but did not happen: stops (update the file's expect: block)",
    ])


def test_a_malformed_scenario_file_is_a_collection_error_with_file_and_line(pytester: pytest.Pytester) -> None:
    folder = _project(pytester, "happy-path.yaml")
    (folder / "typo.yaml").write_text(
        "version: 1\nname: typo\ntask: Say hello.\nmodel:\n  - end_turn: Hello.\n    latencyy: 2\n", encoding="utf-8")
    (folder / "broken.yaml").write_text("name: broken\ntask: [unclosed\nmodel: []\n", encoding="utf-8")

    result = pytester.runpytest("--simloop-drive=examples.correct_sync:drive")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines_random([
        "*ERROR collecting scenarios/typo.yaml*",
        "  scenarios/typo.yaml:6: model[[]0[]].latencyy: unknown key 'latencyy'; check the spelling*",
        "*ERROR collecting scenarios/broken.yaml*",
        "  scenarios/broken.yaml:*: not valid YAML:*",
    ])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*ruamel*")


# -- the fixture, the marker and the layering --------------------------------------------------------------------


def test_marker_over_command_line_over_ini_over_config_fixture(pytester: pytest.Pytester) -> None:
    _project(pytester, "happy-path.yaml", test_layers="""
        import pytest

        def test_plain(record, simloop):
            report = simloop.verify()
            record(max_examples=simloop.options.max_examples, examples=report.examples,
                   profile=simloop.options.profile)

        @pytest.mark.simloop(max_examples=4, seed=7, profile="dev")
        def test_marked(record, simloop):
            report = simloop.verify()
            record(max_examples=simloop.options.max_examples, examples=report.examples,
                   profile=simloop.options.profile)

        def test_call_arguments_win(record, simloop):
            record(examples=simloop.verify(max_examples=2).examples)
    """)
    pytester.makeconftest(RECORD_CONFTEST + """
@pytest.fixture
def simloop_config():
    return {"drive": "examples.correct_sync:drive", "max_examples": 3, "profile": "ci", "seed": 99}
""")
    ids = {name: f"test_layers.py::{name}" for name in ("test_plain", "test_marked", "test_call_arguments_win")}

    config_only = pytester.runpytest()
    config_only.assert_outcomes(passed=3)
    got = _results(pytester)
    assert got[ids["test_plain"]] == {"seed": 99, "max_examples": 3, "examples": 3, "profile": "ci"}
    assert got[ids["test_marked"]] == {"seed": 7, "max_examples": 4, "examples": 4, "profile": "dev"}
    assert got[ids["test_call_arguments_win"]] == {"seed": 99, "examples": 2}
    config_only.stdout.fnmatch_lines(["simloop: 9 generated runs in 3 tests, 17 invariants checked, seed=*"])

    pytester.makeini("""
        [pytest]
        simloop_max_examples = 5
        simloop_seed = 11
        simloop_profile = nightly
    """)
    pytester.runpytest().assert_outcomes(passed=3)
    got = _results(pytester)
    assert got[ids["test_plain"]] == {
        "seed": derive_seed(11, ids["test_plain"]), "max_examples": 5, "examples": 5, "profile": "nightly"}
    assert got[ids["test_marked"]]["examples"] == 4 and got[ids["test_marked"]]["seed"] == 7

    cli = pytester.runpytest("--simloop-max-examples=6", "--simloop-seed=12", "--simloop-profile=dev")
    cli.assert_outcomes(passed=3)
    cli.stdout.fnmatch_lines([HEADER.format(seed=12)])
    got = _results(pytester)
    assert got[ids["test_plain"]] == {
        "seed": derive_seed(12, ids["test_plain"]), "max_examples": 6, "examples": 6, "profile": "dev"}
    assert got[ids["test_marked"]] == {"seed": 7, "max_examples": 4, "examples": 4, "profile": "dev"}
    assert got[ids["test_call_arguments_win"]]["examples"] == 2


def test_marker_scenario_feeds_sim_and_replay(pytester: pytest.Pytester) -> None:
    _project(pytester, "happy-path.yaml", "refusal.yaml", test_sims="""
        import pytest
        from examples.correct_sync import drive

        pytestmark = pytest.mark.simloop(drive="examples.correct_sync:drive")

        @pytest.mark.simloop(scenario="happy-path.yaml", seed=3)
        def test_sim_from_marker(simloop):
            sim = simloop.sim()
            outcome = sim.run(drive)
            sim.check(outcome).raise_for_violations()
            assert (sim.seed, outcome.reason) == (3, "final")

        @pytest.mark.simloop("scenarios/refusal.yaml")
        def test_replay_from_marker(simloop):
            report = simloop.replay()
            assert report.ok and report.transcript.outcome.reason == "refusal"

        def test_an_explicit_scenario_and_seed(simloop):
            sim = simloop.sim({"task": "Hi", "model": [{"end_turn": "Hello."}]}, seed=42)
            assert sim.run(drive).reason == "final" and sim.seed == 42

        def test_missing_scenario(simloop):
            simloop.sim("nope.yaml")

        @pytest.mark.simloop(max_example=3)
        def test_misspelt_marker(simloop):
            pass
    """)
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=3, failed=1, errors=1)
    result.stdout.fnmatch_lines_random([
        "*UsageError: scenario file 'nope.yaml' not found; looked in: *",
        "*@pytest.mark.simloop(...): unknown option 'max_example' (did you mean 'max_examples'?); the options are:*",
    ])


def test_no_drive_configured_says_how_to_configure_one(pytester: pytest.Pytester) -> None:
    _project(pytester, test_nodrive="""
        def test_it(simloop):
            simloop.verify()
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no drive: pass one (simloop.verify(drive)), or configure a default with*"])


# -- seeds -------------------------------------------------------------------------------------------------------


def test_the_seed_header_and_last(pytester: pytest.Pytester) -> None:
    _project(pytester, test_seeds="""
        def test_one(record):
            record()
    """)
    pytester.makeconftest(RECORD_CONFTEST)
    nodeid = "test_seeds.py::test_one"

    given = pytester.runpytest("--simloop-seed=123")
    given.stdout.fnmatch_lines([HEADER.format(seed=123)])
    assert _results(pytester)[nodeid]["seed"] == derive_seed(123, nodeid)
    again = pytester.runpytest("--simloop-seed=last")
    again.stdout.fnmatch_lines([HEADER.format(seed=123)])
    assert _results(pytester)[nodeid]["seed"] == derive_seed(123, nodeid)

    fresh = pytester.runpytest()
    seed = _header_seed(fresh)
    first = _results(pytester)[nodeid]["seed"]
    assert first == derive_seed(seed, nodeid)
    last = pytester.runpytest("--simloop-seed=last")
    assert _header_seed(last) == seed and _results(pytester)[nodeid]["seed"] == first

    no_cache = pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=last")
    assert no_cache.ret == pytest.ExitCode.USAGE_ERROR
    no_cache.stderr.fnmatch_lines([("*--simloop-seed=last reads the previous run's seed from pytest's cache, which is "
                                   "disabled (-p no:cacheprovider); pass the number from the previous run's header*")])
    bad = pytester.runpytest("--simloop-seed=abc")
    bad.stderr.fnmatch_lines(["*--simloop-seed takes a whole number or 'last', got 'abc'"])


def test_derived_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(5, "t.py::a") == derive_seed(5, "t.py::a")
    assert len({derive_seed(5, f"t.py::test[{i}]") for i in range(50)}) == 50
    assert derive_seed(5, "t.py::a") != derive_seed(6, "t.py::a")
    assert 0 <= derive_seed(2**32 - 1, "t.py::a") < 2**32


# -- strict teardown -----------------------------------------------------------------------------------------------


def test_strict_mode_fails_on_unused_replies_and_unfired_faults(pytester: pytest.Pytester) -> None:
    folder = _project(pytester, "happy-path.yaml")
    happy = (SCENARIOS / "happy-path.yaml").read_text(encoding="utf-8")
    (folder / "fault-too-late.yaml").write_text(
        happy.replace("expect:", "faults: [{tool: get_order, call: 2, kind: raise}]\nexpect:"), encoding="utf-8")
    pytester.makepyfile(test_strict="""
        import pytest
        from examples.correct_sync import drive

        def gives_up(sim):
            return ("final", "I did not even ask the model.")

        def test_replies_never_served(simloop):
            sim = simloop.sim("happy-path.yaml")
            sim.run(gives_up)

        def test_fault_never_fired(simloop):
            sim = simloop.sim("fault-too-late.yaml")
            sim.check(sim.run(drive)).raise_for_violations()

        @pytest.mark.simloop(strict=False)
        def test_opted_out(simloop):
            simloop.sim("happy-path.yaml").run(gives_up)

        def test_everything_used(simloop):
            sim = simloop.sim("happy-path.yaml")
            sim.check(sim.run(drive)).raise_for_violations()
    """)
    result = pytester.runpytest("--simloop-seed=1")
    result.assert_outcomes(passed=2, failed=2)  # failures of the test itself, not teardown errors
    result.stdout.fnmatch_lines([
        "*_ test_replies_never_served _*",
        "simloop (strict): test_strict.py::test_replies_never_served left scripted behaviour unused:",
        "  Sim('happy-path', seed=*): model[[]0[]] (tool_use) was never served",
        "  Sim('happy-path', seed=*): model[[]1[]] (end_turn) was never served",
        "The loop stopped before the scenario expected, or the scenario scripts more than this test needs.",
        "Trim the scenario, or opt out for this test with @pytest.mark.simloop(strict=False)*",
        "*_ test_fault_never_fired _*",
        "simloop (strict): test_strict.py::test_fault_never_fired left scripted behaviour unused:",
        "  Sim('happy-path', seed=*): faults[[]0[]] (raise on get_order call 2) never fired: get_order ran 1 time(s)",
    ])


# -- failure reports, junit ----------------------------------------------------------------------------------------


def test_a_failing_loop_reports_violations_timeline_minimal_scenario_and_replay(pytester: pytest.Pytester) -> None:
    _project(pytester, test_agent="""
        from examples.no_step_cap import drive
        from simloop.strategies import plans

        def test_loop_stops(simloop):
            # Only stuck models: the report is then the same for every seed (the search itself is verify's
            # business and tested there).
            simloop.verify(drive, max_examples=30, plan=plans(personas=[("stuck", 1)]))
    """)
    result = pytester.runpytest("--simloop-seed=5", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    seed = derive_seed(5, "test_agent.py::test_loop_stops")
    result.stdout.fnmatch_lines([
        ("E   *InvariantViolation: simloop: [[]stops[]] step 52: the loop made 52 model calls without stopping;*"
        " -- see the 'simloop' section of this report"),
        "*- simloop -*",
        "violations (1):",
        "  [[]stops[]] step 52: the loop made 52 model calls without stopping*",
        "timeline of the failing run:",
        "  step       time       in    out  reply",
        "     1     0.000s    * tool_use: *search*",
        "    52     0.000s        0      0  (no reply)  <-- stops",
        "minimal scenario (1 reply), written to .simloop/failures/no_step_cap-stops-????????.yaml:",
        "  version: 1",
        "  then: repeat_last",
        (f"replay it:       simloop run .simloop/failures/no_step_cap-stops-????????.yaml --drive examples.no_step_cap:drive"
        f" --seed {seed}"),
        "re-run the test: pytest 'test_agent.py::test_loop_stops' --simloop-seed=5",
        "(two seeds: * is this test's own, derived from the session seed 5 and the test's id; *",
        "simloop: [1-9]* generated runs (shrinking included) in 1 test, 17 invariants checked; 1 failed: reproduce with --simloop-seed=5",
        "FAILED test_agent.py::test_loop_stops - *InvariantViolation*",
    ])
    [saved] = (pytester.path / ".simloop" / "failures").glob("no_step_cap-stops-*.yaml")
    assert "then: repeat_last" in saved.read_text(encoding="utf-8")
    assert f"written to .simloop/failures/{saved.name}:" in result.stdout.str()

    case = ET.parse(pytester.path / "junit.xml").getroot().find(".//testcase")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and "[stops] step 52" in (failure.get("message") or "")
    assert "minimal scenario (1 reply)" in (failure.text or "")
    assert "--simloop-seed=5" in (failure.text or "")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"simloop_seed": str(seed)}


# -- async drives and async tests ----------------------------------------------------------------------------------


def test_async_drives_in_sync_and_async_tests(pytester: pytest.Pytester) -> None:
    _project(pytester, "happy-path.yaml", test_async="""
        import pytest
        from examples.correct_async import drive

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        def test_sync_test_async_drive(simloop):
            assert simloop.verify(drive, max_examples=5).examples == 5

        @pytest.mark.anyio
        async def test_async_test(simloop):
            assert simloop.verify(drive, max_examples=5).examples == 5
            assert simloop.replay(drive, "happy-path.yaml").ok
    """)
    result = pytester.runpytest("-p", "anyio")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["simloop: 10 generated runs and 1 scenario replay in 2 tests, 17 invariants checked*"])


# -- xdist -----------------------------------------------------------------------------------------------------------


def test_xdist_workers_get_the_same_seeds_and_results_as_a_serial_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist", reason="pytest-xdist is not installed (it is in the test extras)")
    _project(pytester, "happy-path.yaml", "refusal.yaml", test_parity="""
        import pytest
        from simloop import InvariantViolation

        @pytest.mark.parametrize("n", range(4))
        def test_seed(record, n):
            record()

        def test_verify_passes(record, simloop):
            record(examples=simloop.verify("examples.correct_sync:drive", max_examples=8).examples)

        def test_verify_finds_the_bug(record, simloop):
            with pytest.raises(InvariantViolation) as found:
                simloop.verify("examples.made_up_ids:drive", max_examples=30)
            record(violations=sorted({v.invariant for v in found.value.violations}),
                   scenario=found.value.scenario.to_yaml())
    """)
    pytester.makeconftest(RECORD_CONFTEST)
    args = ("--simloop-seed=4242", "--simloop-profile=ci", "--simloop-drive=examples.correct_sync:drive",
            "--junitxml=junit.xml")

    def run_seeds() -> dict[str | None, str | None]:
        root = ET.parse(pytester.path / "junit.xml").getroot()
        return {f"{c.get('classname')}::{c.get('name')}": p.get("value")
                for c in root.iter("testcase") for p in c.iter("property")}

    serial = pytester.runpytest(*args)
    serial.assert_outcomes(passed=8)
    serial_results, serial_seeds = _results(pytester), run_seeds()
    summary = next(line for line in serial.outlines if line.startswith("simloop: ") and " generated runs " in line)

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the subprocess imports examples/ too
    # Only xdist and this plugin in the workers: unrelated installed plugins cost each worker seconds.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    parallel = pytester.runpytest_subprocess(
        "-p", "xdist.plugin", "-p", "pytest_simloop.plugin", "-n", "2", *args, timeout=300)
    parallel.assert_outcomes(passed=8)
    parallel.stdout.fnmatch_lines([HEADER.format(seed=4242), "*2 workers*", summary])

    assert _results(pytester) == serial_results
    assert run_seeds() == serial_seeds and len(serial_seeds) == 8
    assert serial_results["test_parity.py::test_verify_finds_the_bug"]["violations"] == ["pairing"]


# -- the README's quick start ----------------------------------------------------------------------------------------


def test_the_readme_quick_start_catches_the_bug(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)  # as when the two files sit in a simloop checkout
    pytester.makeconftest(QUICKSTART_CONFTEST)
    pytester.makepyfile(test_agent=QUICKSTART_TEST)
    result = pytester.runpytest("--simloop-seed=2")  # a user's run has a random seed; a test pins one
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        HEADER.format(seed=2),
        "test_agent.py .F*",
        "*[[]pairing[]] step 2, messages[[]1[]].content[[]0[]]: a tool_result answers toolu_*",
        "*minimal scenario (1 reply), written to .simloop/failures/assistant_not_appended-pairing-????????.yaml:",
        ("replay it:       simloop run .simloop/failures/assistant_not_appended-pairing-????????.yaml "
        "--drive examples.assistant_not_appended:drive --seed *"),
        "re-run the test: pytest 'test_agent.py::test_loop_under_test' --simloop-seed=2",
        "simloop: [5-9][0-9]* generated runs (shrinking included) in 2 tests, 17 invariants checked; 1 failed: reproduce with --simloop-seed=2",
    ])


# -- the plain-Python half ---------------------------------------------------------------------------------------------


def test_the_profiles_are_hypothesis_profiles() -> None:
    ci, dev, nightly = (profile_settings(name) for name in ("ci", "dev", "nightly"))
    assert (ci.max_examples, dev.max_examples, nightly.max_examples) == (200, 50, 5000)
    assert ci.database is None and ci.deadline is None  # from Hypothesis's own ci profile
    assert settings.get_profile("simloop-nightly").max_examples == 5000
    with pytest.raises(UsageError, match="unknown simloop profile 'fast'; the profiles are: dev, ci, nightly"):
        profile_settings("fast")


def test_what_counts_as_a_scenario_file() -> None:
    assert looks_like_scenario((SCENARIOS / "happy-path.yaml").read_text(encoding="utf-8"))
    assert looks_like_scenario("# a comment\ntask: x\nmodle: []\n")  # misspelt: collected, then reported
    assert not looks_like_scenario("version: 1\ninteractions:\n- request: {}\n")  # a vcrpy cassette
    assert not looks_like_scenario("services:\n  web:\n    task: build\n")  # 'task' nested, not top-level
    assert not looks_like_scenario("")


def test_a_drive_spec_is_imported_from_the_search_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", sys.path[:])  # load_drive appends the folder it imported from
    monkeypatch.delitem(sys.modules, "simloop_plugin_probe_pkg", raising=False)
    package = tmp_path / "simloop_plugin_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("def drive(sim):\n    return ('final', 'ok')\n", encoding="utf-8")
    assert load_drive("simloop_plugin_probe_pkg:drive", search=[tmp_path]).__name__ == "drive"
    with pytest.raises(UsageError, match=r"a drive spec is 'package.module:function' or 'path/to/file.py:function', got 'nocolon'"):
        load_drive("nocolon")
    with pytest.raises(UsageError, match=r"module 'simloop_plugin_probe_pkg' has no 'nope'"):
        load_drive("simloop_plugin_probe_pkg:nope", search=[tmp_path])


@pytest.mark.parametrize(("marker", "message"), [
    ({"seed": -1}, "seed must be a non-negative int, got -1"),
    ({"max_examples": 0}, "max_examples must be a positive int, got 0"),
    ({"strict": "no"}, "strict must be True or False, got 'no'"),
    ({"profile": "fast"}, "profile must be one of dev, ci, nightly, got 'fast'"),
    ({"drive": 3}, "drive must be a function or 'package.module:function', got 3"),
    ({"workers": 0}, "workers must be a positive int, got 0"),
])
def test_option_values_are_checked(marker: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as error:
        resolve_options(nodeid="t.py::a", session_seed=1, session_seed_explicit=False, marker=marker, cli={}, ini={},
                        config={})
    assert str(error.value) == f"@pytest.mark.simloop(...): {message}"


def test_workers_and_database_layer_into_verify_like_the_other_defaults() -> None:
    options = resolve_options(nodeid="t.py::a", session_seed=1, session_seed_explicit=False, marker={},
                              cli={"workers": 2}, ini={"workers": 4, "database": "redis://ci:6379/0"}, config={})
    assert options.verify_defaults == {"workers": 2, "database": "redis://ci:6379/0"}
