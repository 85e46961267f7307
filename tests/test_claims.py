"""The library tests only what a loop claims (issue 25, item 7).

Each scenario file says what it needs of the loop (``requires:``, plus what ``followups:``, ``abort:``, a
``crash`` fault and ``limits:`` imply); a run says what the loop has (``simloop run --abort --restarts N
--turns N --claims NAMES``, the plugin's ``--simloop-...`` options, ``replay(abort=, restarts=, turns=,
limits=)``).  A file needing what was not claimed is skipped with its reason, never failed; claimed and
missing, it fails.  The loop under test here is ``tests/loops/plain_loop.py``, written from the README alone.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# Imported here although no test uses them directly: pytester's in-process runs drop the modules a run imports,
# and a second run would import the SDK and httpx2 again under the simloop already loaded (see test_plugin.py).
import anthropic  # noqa: F401
import httpx2  # noqa: F401
import pytest

import simloop
from examples import tool_exception_escapes
from examples.catalogue import DEFECTS
from simloop._claims import Claims, claim_flags
from simloop.cli import main
from simloop.scenario import CAPABILITIES, LIMIT_NAMES, Scenario, load_scenario
from simloop.transcript import Transcript

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
LIBRARY = sorted(p for p in SCENARIOS.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
PLAIN = "tests.loops.plain_loop:drive"

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _in_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # drive specs import from the current directory


def _lines(out: str) -> dict[str, str]:
    """``simloop run`` output: file name -> its line."""
    found: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"^(ok|skip|FAIL|ERROR) +(\S+)", line)
        if m:
            found[Path(m[2]).name] = line
    return found


# -- the scenario format: requires: and what a file needs --------------------------------------------------------


def test_needs_add_what_the_file_implies_to_its_requires() -> None:
    scenario = Scenario.model_validate({
        "task": "x", "followups": ["and?"], "abort": {"after_call": 1},
        "tools": [{"name": "send", "kind": "write"}], "faults": [{"tool": "send", "kind": "crash", "call": 1}],
        "limits": {"max_writes": 1, "deadline_s": 60}, "requires": ["max_steps"],
    })
    assert scenario.needs == ("abort", "restarts", "turns", "max_steps", "deadline_s", "max_writes")
    assert Scenario(task="x").needs == ()


def test_an_unknown_requirement_is_reported_with_its_line() -> None:
    with pytest.raises(simloop.ScenarioError) as info:
        Scenario.from_yaml("version: 1\ntask: x\nrequires: [abort, stop_button]\n", path="s.yaml")
    assert str(info.value) == (
        "s.yaml:3: requires[1]: expected one of abort, restarts, turns, context, approvals, max_steps, deadline_s, max_total_tokens, "
        "max_tool_errors, max_writes, max_repeats, max_cost_usd, got 'stop_button'"
    )


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(SCENARIOS)))
def test_every_curated_file_writes_down_what_it_needs(path: Path) -> None:
    scenario = load_scenario(path)
    assert tuple(scenario.requires) == scenario.needs, (
        f"{path.name}: needs {list(scenario.needs)}; write requires: [{', '.join(scenario.needs)}] into the file so "
        "the list is readable where the file is"
    )


def test_claims_count_restarts_and_turns_as_verify_does() -> None:
    assert Claims().names() == ()
    assert Claims(abort=True, restarts=1, turns=2, limits=frozenset({"max_steps"})).names() == (
        "abort", "restarts", "turns", "max_steps"
    )
    assert not Claims(turns=1).has("turns") and not Claims(restarts=0).has("restarts")
    everything = Claims(abort=True, restarts=1, turns=2, context=True, limits=frozenset(LIMIT_NAMES), approvals=True)
    assert everything.names() == CAPABILITIES


# -- simloop run: the done-when of the issue ----------------------------------------------------------------------


def test_a_plain_loop_runs_the_library_and_is_told_what_was_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SCENARIOS), "--drive", PLAIN]) == 0
    out = capsys.readouterr().out
    lines = _lines(out)
    # the plain loop declares no server tool: a paused turn is one the API never sends it (issue 40, item 8)
    paused = {"pause-turn.yaml", "pause-turn-server-tool.yaml", "langgraph-pause-turn-not-continued.yaml"}
    needing = [p for p in LIBRARY if load_scenario(p).needs or p.name in paused]
    assert len(lines) == len(LIBRARY)
    assert {name for name, line in lines.items() if line.startswith("skip")} == {p.name for p in needing}
    for name in paused:
        assert lines[name].endswith(
            "scripts a pause_turn, which the API sends only to a request that declares a server tool (web_search, "
            "web_fetch, code_execution): the loop's requests declared none (the file is for loops that give the model "
            "a server tool)"), lines[name]
    assert all(line.startswith(("ok", "skip")) for line in lines.values())
    assert lines["stop-button-during-tool.yaml"].endswith(
        "needs a Stop button (abort:) and follow-up user turns (followups:): pass --abort --turns 2 if your loop has them"
    )
    assert lines["crash-after-email.yaml"].endswith(
        "needs a durable store that survives a crash (a crash fault): pass --restarts 1 if your loop has one"
    )
    assert lines["one-write.yaml"].endswith(
        "needs a write budget (max_writes: 1): pass --claims max_writes if your loop has one"
    )
    assert lines["error-budget.yaml"].endswith(
        "needs an error budget (max_tool_errors: 2): pass --claims max_tool_errors if your loop has one"
    )
    assert out.rstrip().endswith(
        f"{len(LIBRARY) - len(needing)} passed, 0 failed, {len(needing)} skipped (they need what the loop does not claim)"
    )


def test_the_plain_loop_claiming_its_caps_runs_the_files_that_declare_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SCENARIOS), "--drive", PLAIN, "--claims", "max_steps,deadline_s", "--claims",
                 "max_total_tokens"]) == 0
    lines = _lines(capsys.readouterr().out)
    for name in ("cap-before-done.yaml", "slow-tool-deadline.yaml", "token-budget-huge-output.yaml",
                 "long-virtual-day.yaml", "pydantic-ai-token-limit-off-by-one.yaml"):
        assert lines[name].startswith("ok"), lines[name]
    assert lines["cap-before-done.yaml"].endswith("max_steps, 4 model calls, 0.000s virtual")
    assert lines["token-budget-huge-output.yaml"].split()[2] == "token_budget,"
    assert lines["pause-then-followup.yaml"].endswith("needs follow-up user turns (followups:): pass --turns 3 if your loop has them")


def test_claimed_and_missing_fails_as_today(capsys: pytest.CaptureFixture[str]) -> None:
    path = SCENARIOS / "stop-button-during-tool.yaml"
    assert main(["run", str(path), "--drive", PLAIN, "--abort", "--turns", "2"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {path}  abort" in out
    assert main(["run", str(SCENARIOS / "one-write.yaml"), "--drive", PLAIN, "--claims", "max_writes"]) == 1
    assert "[limits] step 2: the scenario declares max_writes=1 (its limits:) and 1 write(s) had succeeded" in (
        capsys.readouterr().out
    )


GATED = {name: row for name, row in DEFECTS.items() if load_scenario(SCENARIOS / row[0]).needs}


@pytest.mark.parametrize(("defect", "row"), GATED.items(), ids=list(GATED))
def test_each_defect_is_still_caught_by_its_file_under_the_claims_it_needs(
    defect: str, row: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    file, invariant = row
    flags = claim_flags(load_scenario(SCENARIOS / file)).split()
    assert flags  # these files are skipped without the claims
    assert main(["run", str(SCENARIOS / file), "--drive", f"examples.{defect}:drive", *flags]) == 1
    fail = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL"))
    assert invariant in fail.split("  ")[-1].split(", "), fail


def test_run_refuses_a_claim_it_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(SCENARIOS / "happy-path.yaml"), "--drive", PLAIN, "--claims", "max_step"]) == 2
    assert (
        "--claims: 'max_step' is not something a loop can claim; give any of abort, restarts, turns, context, approvals, max_steps, "
        "deadline_s, max_total_tokens, max_tool_errors, max_writes, max_repeats, max_cost_usd (e.g. max_steps,deadline_s)"
    ) in capsys.readouterr().err


def test_run_takes_the_capability_names_in_claims_too(capsys: pytest.CaptureFixture[str]) -> None:
    path = SCENARIOS / "stop-button-during-tool.yaml"
    assert main(["run", str(path), "--drive", "examples.correct_sync:drive", "--claims", "abort,turns"]) == 0
    assert capsys.readouterr().out.startswith(f"ok    {path}  final")


def test_cli_limit_names_agree_with_the_format() -> None:
    from simloop import cli

    assert cli._LIMIT_NAMES == LIMIT_NAMES


def test_scenarios_lists_what_each_file_needs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if "stop-button-during-tool.yaml" in line)
    assert out[at + 1].strip() == "needs: abort, turns"
    happy = next(i for i, line in enumerate(out) if "happy-path.yaml" in line)
    assert "needs:" not in out[happy + 1]
    assert out[-1].startswith("a file that needs what your loop does not claim is skipped by 'simloop run'")


# -- replay ----------------------------------------------------------------------------------------------------


def test_replay_skips_a_file_the_loop_cannot_run_and_says_what_to_pass() -> None:
    ran: list[Any] = []

    def drive(sim: simloop.Sim) -> simloop.Outcome:
        ran.append(sim)
        return simloop.Outcome("final")

    report = simloop.replay(drive, SCENARIOS / "one-write.yaml", limits=["max_steps"])
    assert ran == [] and report.ok and report.violations == []
    assert report.skipped == "needs a write budget (max_writes: 1): pass replay(..., limits=['max_writes']) if your loop has one"
    assert str(report).startswith("simloop: skipped: needs a write budget")
    report = simloop.replay(drive, SCENARIOS / "stop-button-during-tool.yaml", abort=False, turns=1)
    assert report.skipped == (
        "needs a Stop button (abort:) and follow-up user turns (followups:): pass replay(..., abort=True, turns=2) "
        "if your loop has them"
    )


def test_replay_without_claims_runs_every_file_it_is_given() -> None:
    drive = _example("write_not_terminal")
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.replay(drive, SCENARIOS / "one-write.yaml")
    assert info.value.replay.endswith("--claims max_writes")  # the command line replays it, not skips it
    with pytest.raises(simloop.InvariantViolation):
        simloop.replay(drive, SCENARIOS / "one-write.yaml", limits=simloop.Limits(max_writes=3))  # declared fields count


def test_replay_refuses_a_limit_it_does_not_know() -> None:
    with pytest.raises(simloop.UsageError) as info:
        simloop.replay(_example("correct_sync"), SCENARIOS / "happy-path.yaml", limits=["steps"])
    assert str(info.value) == (
        "replay(limits=...): 'steps' is not a limit; the limits a loop may claim are max_steps, deadline_s, "
        "max_total_tokens, max_tool_errors, max_writes, max_repeats, max_cost_usd"
    )


# -- who declared a limit ----------------------------------------------------------------------------------------


def _example(name: str) -> Any:
    import importlib

    return importlib.import_module(f"examples.{name}").drive


def test_a_limit_the_file_declared_is_reported_as_the_files(tmp_path: Path) -> None:
    with simloop.Sim(SCENARIOS / "one-write.yaml") as sim:
        sim.run(_example("write_not_terminal"))
    [v] = [v for v in sim.check().violations if v.invariant == "limits"]
    assert v.message.startswith(
        "the scenario declares max_writes=1 (its limits:) and 1 write(s) had succeeded (the last: issue_refund, "
        "exec 1), but the loop made model call 2;"
    )
    again = Transcript.read(sim.transcript.write(tmp_path / "run.jsonl"))
    assert again.header.limits_from == {"max_writes": "scenario"}


def test_a_limit_the_loop_declared_is_reported_as_the_loops() -> None:
    with simloop.Sim(SCENARIOS / "one-write.yaml", limits=simloop.Limits(max_writes=1)) as sim:
        sim.run(_example("write_not_terminal"))
    assert sim.transcript.header.limits_from == {"max_writes": "loop"}
    [v] = [v for v in sim.check().violations if v.invariant == "limits"]
    assert v.message.startswith("the loop declared max_writes=1 and 1 write(s) had succeeded")


def test_a_deadline_the_file_declared_is_named_as_the_files() -> None:
    with simloop.Sim(SCENARIOS / "slow-tool-deadline.yaml") as sim:
        sim.run(_example("deadline_unchecked"))
    messages = [v.message for v in sim.check().violations if v.invariant == "limits"]
    assert any("at or after the deadline_s=60 the scenario declares (its limits:)" in m for m in messages), messages


# -- simloop init ---------------------------------------------------------------------------------------------------


def test_init_declares_nothing_on_the_users_behalf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "mine"]) == 0
    conftest = (tmp_path / "mine" / "conftest.py").read_text(encoding="utf-8")
    assert 'return {"drive": "simloop_drive:drive", "tools": "tools.yaml", "max_examples": 50}' in conftest
    assert '"limits":' not in conftest.split("return", 1)[1]


# -- the plugin ----------------------------------------------------------------------------------------------------


def _project(pytester: pytest.Pytester, *names: str) -> None:
    for name in names:
        (pytester.path / "scenarios").mkdir(exist_ok=True)
        (pytester.path / "scenarios" / name).write_text((SCENARIOS / name).read_text(encoding="utf-8"), encoding="utf-8")
    pytester.makeini("[pytest]\nsimloop_drive = examples.correct_sync:drive\n")


def test_plugin_skips_a_scenario_item_the_loop_does_not_claim(pytester: pytest.Pytester) -> None:
    _project(pytester, "happy-path.yaml", "stop-button-during-tool.yaml", "one-write.yaml")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["simloop: 0 generated runs and 1 scenario replay in 1 test, 17 invariants checked, *"])
    result.stdout.fnmatch_lines([
        ("SKIPPED [[]1[]] scenarios/one-write.yaml:1: needs a write budget (max_writes: 1): pass "
        "--simloop-claims=max_writes if your loop has one"),
        ("SKIPPED [[]1[]] scenarios/stop-button-during-tool.yaml:1: needs a Stop button (abort:) and follow-up user "
        "turns (followups:): pass --simloop-abort --simloop-turns=2 if your loop has them"),
    ])
    claimed = pytester.runpytest("-p", "no:cacheprovider", "--simloop-abort", "--simloop-turns=2",
                                 "--simloop-claims=max_writes")
    claimed.assert_outcomes(passed=3)


def test_plugin_takes_claims_from_the_ini_file(pytester: pytest.Pytester) -> None:
    _project(pytester, "stop-button-during-tool.yaml", "one-write.yaml", "cap-before-done.yaml")
    ini = pytester.runpytest("-p", "no:cacheprovider", "-o", "simloop_abort=true", "-o", "simloop_turns=2",
                             "-o", "simloop_claims=max_writes,max_steps")
    ini.assert_outcomes(passed=3)
    bad = pytester.runpytest("-p", "no:cacheprovider", "-o", "simloop_abort=maybe")
    bad.stderr.fnmatch_lines(["*ini simloop_abort is true or false, got 'maybe'"])


def test_the_fixtures_options_claim_with_the_same_keys() -> None:
    from simloop._pytest_support import resolve_options, unclaimed

    def options(**config: Any) -> Any:
        return resolve_options(nodeid="t", session_seed=0, session_seed_explicit=False, marker={}, cli={}, ini={},
                               config=config)

    one_write, stop = SCENARIOS / "one-write.yaml", SCENARIOS / "stop-button-during-tool.yaml"
    assert unclaimed(one_write, options()) == (
        "needs a write budget (max_writes: 1): pass --simloop-claims=max_writes if your loop has one"
    )
    assert unclaimed(one_write, options(claims=["max_writes"])) is None
    assert unclaimed(one_write, options(limits={"max_writes": 1})) is None  # a limit declared to verify is claimed
    assert unclaimed(stop, options(abort=True)) == (
        "needs follow-up user turns (followups:): pass --simloop-turns=2 if your loop has them"
    )
    assert unclaimed(stop, options(abort=True, turns=2)) is None
    assert unclaimed(stop, options(claims="abort,turns")) is None  # the names work in claims too
    assert (options(abort=True, restarts=1).abort, options(restarts=1).restarts) == (True, 1)
    with pytest.raises(simloop.UsageError, match="the simloop_config fixture: abort must be True or False, got 1"):
        options(abort=1)


def test_plugin_refuses_an_unknown_claim(pytester: pytest.Pytester) -> None:
    _project(pytester, "happy-path.yaml")
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.simloop(claims=['max_step'])\ndef test_x(simloop):\n    pass\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([("@pytest.mark.simloop(...): claims: 'max_step' is not something a loop can claim; "
                                 "give any of abort, restarts, turns, context, approvals, max_steps, *")])
    cli = pytester.runpytest("-p", "no:cacheprovider", "--simloop-claims=abort,bogus", "scenarios")
    cli.stdout.fnmatch_lines([("simloop: claims (--simloop-claims, simloop_claims, simloop_config): 'bogus' is not "
                              "something a loop can claim; *")])


def test_the_fixtures_replay_skips_what_the_options_do_not_claim(pytester: pytest.Pytester) -> None:
    _project(pytester, "one-write.yaml")
    pytester.makeini("[pytest]\n")  # no drive for the session: the files are not items here
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef simloop_config():\n"
        "    return {'drive': 'examples.correct_sync:drive', 'limits': {'max_steps': 10}}\n"
    )
    pytester.makepyfile(
        "def test_not_claimed(simloop):\n    simloop.replay(path='scenarios/one-write.yaml')\n\n"
        "def test_claimed(simloop):\n    assert simloop.replay(path='scenarios/one-write.yaml', limits=['max_writes']).ok\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        ("SKIPPED * scenarios/one-write.yaml needs a write budget (max_writes: 1): pass replay(..., "
        "limits=[[]'max_writes'[]]) if your loop has one")
    ])


_REPLAY = re.compile(r"^# Replay: (simloop run .*)$", re.MULTILINE)
REPLAY_LINES = {p.name: m[1] for p in LIBRARY if (m := _REPLAY.search(p.read_text(encoding="utf-8")))}


def test_the_findings_say_how_to_replay_them() -> None:
    assert len(REPLAY_LINES) >= 15


@pytest.mark.parametrize(("name", "line"), REPLAY_LINES.items(), ids=list(REPLAY_LINES))
def test_a_files_replay_line_claims_what_the_file_needs(name: str, line: str) -> None:
    path = next(p for p in LIBRARY if p.name == name)
    assert line.endswith(claim_flags(load_scenario(path))), f"{name}: add the claims it needs to its replay line"


# -- a user's own files: their limits: are the run's declaration; a run that tests nothing does not pass (issue 40) --

OWN_FILE = (SCENARIOS / "tool-raises.yaml").read_text(encoding="utf-8")


def _own_folder(root: Path, **extra: str) -> Path:
    """A user's own folder: the tool-raises story, one file declaring a step cap, one a deadline (no requires:)."""
    folder = root / "my-scenarios"
    folder.mkdir()
    (folder / "capped.yaml").write_text(OWN_FILE.replace("name: tool-raises", "name: capped") + "limits: {max_steps: 10}\n")
    (folder / "timed.yaml").write_text(OWN_FILE.replace("name: tool-raises", "name: timed") + "limits: {deadline_s: 600}\n")
    for name, text in extra.items():
        (folder / name).write_text(text)
    return folder


def test_a_users_own_files_declaring_limits_are_run_not_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _own_folder(tmp_path)
    assert main(["run", str(folder), "--drive", "examples.tool_exception_escapes:drive"]) == 1
    lines = _lines(capsys.readouterr().out)
    assert lines["capped.yaml"].startswith("FAIL") and "tool_errors" in lines["capped.yaml"].split("  ")[-1]
    assert lines["timed.yaml"].startswith("FAIL")
    assert main(["run", str(folder), "--drive", PLAIN]) == 0  # the correct loop passes them, under the file's limits
    assert all(line.startswith("ok") for line in _lines(capsys.readouterr().out).values())


def test_a_users_own_file_is_skipped_by_what_its_requires_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gated = OWN_FILE.replace("name: tool-raises", "name: gated") + "limits: {max_steps: 10}\nrequires: [max_writes]\n"
    path = tmp_path / "gated.yaml"
    path.write_text(gated)
    assert main(["run", str(path), "--drive", "examples.tool_exception_escapes:drive"]) == 5
    out = capsys.readouterr().out
    assert _lines(out)["gated.yaml"].endswith(
        "needs a write budget (max_writes): pass --claims max_writes if your loop has one")
    assert out.rstrip().endswith(
        "simloop: nothing was tested: the 1 file selected was skipped (see the reasons above); claim what your loop "
        "has, or choose files it can run")


def test_a_run_of_the_library_that_skips_every_file_tested_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(SCENARIOS / name) for name in ("one-write.yaml", "error-budget.yaml")]
    assert main(["run", *files, "--drive", PLAIN]) == 5
    assert "simloop: nothing was tested: all 2 files selected were skipped" in capsys.readouterr().out


def test_replay_runs_a_users_own_file_under_its_limits_whatever_is_claimed(tmp_path: Path) -> None:
    folder = _own_folder(tmp_path)
    with pytest.raises(simloop.InvariantViolation, match="tool_errors"):
        simloop.replay(tool_exception_escapes.drive, folder / "capped.yaml", limits=["deadline_s"])


def test_plugin_runs_a_users_own_files_and_fails_a_session_that_tested_nothing(pytester: pytest.Pytester) -> None:
    _own_folder(pytester.path)
    pytester.makeini("[pytest]\nsimloop_scenarios = my-scenarios\n")
    broken = pytester.runpytest("-p", "no:cacheprovider", "--simloop-drive=examples.tool_exception_escapes:drive")
    broken.assert_outcomes(failed=2)
    (pytester.path / "gated").mkdir()
    for name in ("one-write.yaml", "error-budget.yaml"):
        (pytester.path / "gated" / name).write_text((SCENARIOS / name).read_text(encoding="utf-8"))
    skipped = pytester.runpytest("-p", "no:cacheprovider", "--simloop-drive=examples.correct_sync:drive",
                                 "--simloop-scenarios=gated")
    skipped.assert_outcomes(skipped=2)
    assert skipped.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    skipped.stdout.fnmatch_lines(["simloop: nothing was tested: all 2 files selected were skipped *"])
    claimed = pytester.runpytest("-p", "no:cacheprovider", "--simloop-drive=examples.correct_sync:drive",
                                 "--simloop-scenarios=gated", "--simloop-claims=max_writes,max_tool_errors")
    claimed.assert_outcomes(passed=2)
    assert claimed.ret == pytest.ExitCode.OK


# -- a paused turn needs a server tool in the request (issue 40, item 8) ------------------------------------------

PAUSED = [SCENARIOS / "pause-turn.yaml", SCENARIOS / "pause-turn-server-tool.yaml",
          SCENARIOS / "findings" / "langgraph-pause-turn-not-continued.yaml"]


def _no_server_tool_loop(sim: simloop.Sim) -> simloop.Outcome:
    """A README loop with no server tool: the API never pauses it, so it treats every non-tool stop as done."""
    import anthropic as sdk

    client = sdk.Anthropic(api_key="k", http_client=sim.http_client)
    messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
    for _ in range(10):
        reply = client.messages.create(model=sim.model, max_tokens=1024, messages=messages, tools=sim.tool_schemas)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason == "max_tokens":
            return simloop.Outcome("truncated")
        if reply.stop_reason != "tool_use":
            return simloop.Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        results = []
        for block in reply.content:
            if block.type == "tool_use":
                try:
                    out = sim.run_tool(block.name, block.input, tool_use_id=block.id)
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": out})
                except Exception as e:  # noqa: BLE001
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": str(e), "is_error": True})
        messages.append({"role": "user", "content": results})
    return simloop.Outcome("max_steps")


@pytest.mark.parametrize("path", PAUSED, ids=lambda p: p.name)
def test_a_paused_turn_is_not_held_against_a_loop_that_declares_no_server_tool(path: Path) -> None:
    with simloop.Sim(load_scenario(path)) as sim:
        assert not any(t.get("type") for t in sim.tool_schemas)  # (the loop gives the model no server tool)
    report = simloop.replay(_no_server_tool_loop, path)
    assert report.skipped == (
        "scripts a pause_turn, which the API sends only to a request that declares a server tool (web_search, "
        "web_fetch, code_execution): the loop's requests declared none (the file is for loops that give the model "
        "a server tool)")
