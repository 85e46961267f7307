"""The ``simloop`` command via ``main([...])``: output, files written, exit codes (0 clean, 1 violations, 2 usage)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Self

import click
import pytest

from simloop import cli
from simloop.cli import main
from simloop.cli import serve as cli_serve
from simloop.invariants import CATALOGUE, check
from simloop.scenario import LIMIT_NAMES
from simloop.timeline import render_timeline
from simloop.transcript import Transcript

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
CASSETTES = Path(__file__).resolve().parents[2] / "shared" / "data" / "cassettes"
COMMANDS = ["verify", "run", "show", "report", "serve", "mcp", "convert", "demo", "scenarios", "init"]


@pytest.fixture(autouse=True)
def _in_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # DRIVE specs like examples.correct_sync:drive import from the current directory
    monkeypatch.setenv("COLUMNS", "120")


def _trace(tmp_path: Path, scenario: str = "overload-after-write.yaml", loop: str = "rerun_after_api_error") -> Path:
    out = tmp_path / "trace.jsonl"
    assert main(["run", str(SCENARIOS / scenario), "--drive", f"examples.{loop}:drive", "--trace", str(out)]) in (0, 1)
    return out


# -- help ------------------------------------------------------------------------------------------------------------


def test_group_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Exit codes: 0 clean, 1 invariant violations, 2 usage errors." in out
    for name in COMMANDS:
        assert f"  {name} " in out


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_has_complete_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    command = cli.cli.commands[name]
    assert out.startswith(f"Usage: simloop {name} ")
    assert "Example: simloop " + name in out  # every command shows one complete invocation
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"simloop {name} {param.opts[0]} has no help text"
            for opt in param.opts:
                assert opt in out
        else:
            assert param.human_readable_name.upper() in out


def test_installed_console_script() -> None:
    script = Path(sys.executable).parent / "simloop"
    if not script.exists():
        pytest.skip(f"simloop is not installed next to {sys.executable} (pip install -e . creates it)")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Usage: simloop [OPTIONS] COMMAND [ARGS]..." in done.stdout
    assert all(f"  {name} " in done.stdout for name in COMMANDS)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "No such command 'frobnicate'" in capsys.readouterr().err
    assert main(["verify"]) == 2
    assert "Missing argument 'DRIVE'" in capsys.readouterr().err
    assert main(["verify", "examples.correct_sync:drive", "--max-examples", "0"]) == 2
    assert "--max-examples" in capsys.readouterr().err


# -- verify ----------------------------------------------------------------------------------------------------------


def test_a_drive_is_also_named_by_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``path/file.py:fn`` imports the file as python would: dotted through packages, else from its folder."""
    from simloop.cli import load_drive

    assert load_drive("examples/correct_sync.py:drive").__module__ == "examples.correct_sync"
    loops = tmp_path / "loops"
    loops.mkdir()
    (loops / "my_agent_loop_probe.py").write_text("def drive(sim):\n    return 'ran'\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    fn = load_drive(f"{loops / 'my_agent_loop_probe.py'}:drive")
    assert fn.__module__ == "my_agent_loop_probe" and fn(None) == "ran"
    assert str(loops) == sys.path[0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "examples.correct_sync",
            "DRIVE takes 'package.module:function' or 'path/to/file.py:function', got 'examples.correct_sync'",
        ),
        ("no/such/loop.py:drive", "cannot import 'no/such/loop.py' for drive no/such/loop.py:drive: ModuleNotFoundError"),
        (
            "no_such_pkg.loop:drive",
            "cannot import 'no_such_pkg.loop' for drive no_such_pkg.loop:drive: ModuleNotFoundError",
        ),
        (
            "examples.correct_sync:nope",
            "module 'examples.correct_sync' has no 'nope' (from drive examples.correct_sync:nope)",
        ),
        ("examples.catalogue:DEFECTS", "drive examples.catalogue:DEFECTS is dict, not a function taking a Sim"),
    ],
)
def test_verify_unusable_drive_exits_2(spec: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", spec]) == 2
    assert message in capsys.readouterr().err


def test_verify_bad_invariant_and_profile_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "examples.correct_sync:drive", "-i", "nope"]) == 2
    assert "unknown invariant id(s) nope" in capsys.readouterr().err
    assert main(["verify", "examples.correct_sync:drive", "--profile", "nope"]) == 2
    assert "--profile 'nope' is not a registered Hypothesis profile; registered: ci, default" in capsys.readouterr().err


def test_verify_clean_exits_0_with_a_summary_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "verify",
            "examples.correct_sync:drive",
            "--max-examples",
            "5",
            "--seed",
            "0",
            "--max-steps",
            "10",
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert err == ""  # no progress display asked for
    assert "simloop verify: " in out and " runs in " in out
    for inv in CATALOGUE:
        assert inv in out
    assert out.count("holds") == len(CATALOGUE) and "VIOLATED" not in out
    assert "ok: " in out and "runs of examples.correct_sync:drive, 17 invariants hold" in out


def test_verify_violation_exits_1_with_report_table_trace_and_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "failing.jsonl"
    code = main(
        [
            "verify",
            "examples.rerun_after_api_error:drive",
            "--seed",
            "0",
            "--out",
            str(tmp_path / "fails"),
            "--trace",
            str(trace),
            "--progress",
            "-i",
            "no_rerun",
            "-i",
            "pairing",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert out.startswith("simloop found ") and "timeline of the failing run:" in out
    assert "replay it: simloop run " in out
    # the table lists exactly the invariants checked
    assert (
        "no_rerun" in out and "VIOLATED" in out and "pairing" in out and "holds" in out and "honest_outcome" not in out
    )
    assert "FAILED: no_rerun broken;" in out
    # the progress display went to stderr: fuzzing, then shrinking
    assert "shrinking the failure found at run" in err
    # the failing run's transcript: readable, and it shows the same violations
    assert f"transcript of the failing run written to {trace}" in out
    transcript = Transcript.read(trace)
    assert {v.invariant for v in check(transcript, invariants=["no_rerun"]).violations} == {"no_rerun"}
    scenario = next((tmp_path / "fails").glob("*.yaml"))
    assert main(["run", str(scenario), "--drive", "examples.rerun_after_api_error:drive"]) == 1
    assert "FAIL  " in capsys.readouterr().out


# -- run -------------------------------------------------------------------------------------------------------------


#: Everything a loop can claim: the reference loops have a Stop button, restarts, follow-ups and every policy.
ALL_CLAIMS = ["--abort", "--restarts", "1", "--turns", "3", "--claims", ",".join(["approvals", *LIMIT_NAMES])]


def test_run_correct_loop_passes_every_file_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    files = [p for p in SCENARIOS.rglob("*") if p.suffix in (".yaml", ".yml", ".json")]  # folders are searched too
    assert main(["run", str(SCENARIOS), "--drive", "examples.correct_sync:drive", *ALL_CLAIMS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(files) + 1
    assert all(line.startswith("ok    ") for line in lines[:-1])
    assert lines[-1] == f"{len(files)} passed, 0 failed"
    happy = next(line for line in lines if "happy-path.yaml" in line)
    assert happy.endswith("final, 2 model calls, 0.000s virtual")


def test_run_failing_file_exits_1_and_verbose_shows_the_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = SCENARIOS / "happy-path.yaml", SCENARIOS / "overload-after-write.yaml"
    assert main(["run", str(good), str(bad), "--drive", "examples.rerun_after_api_error:drive", "-v"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {bad}  no_rerun\n" in out  # its reason, final, is one of the file's honest reasons
    assert "        [no_rerun] step 2: issue_refund ran again with the same input" in out
    assert "[expect]" not in out
    assert "simloop run overload-after-write" in out and "◀ no_rerun" in out  # the rich timeline
    assert out.rstrip().endswith("1 passed, 1 failed")


def test_run_expected_violations_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (SCENARIOS / "stuck-search.yaml").read_text(encoding="utf-8")
    known = tmp_path / "known-bug.yaml"
    known.write_text(
        text.replace("expect: {violations: [], reason: [max_steps, repetition]}", "expect: {violations: [stops]}"), encoding="utf-8"
    )
    assert "expect: {violations: [stops]}" in known.read_text(encoding="utf-8")
    assert main(["run", str(known), "--drive", "examples.no_step_cap:drive"]) == 0
    assert ", 1 expected violation(s)" in capsys.readouterr().out
    assert main(["run", str(known), "--drive", "examples.correct_sync:drive"]) == 1
    assert "[expect] expected violation(s) did not happen: stops" in capsys.readouterr().out


def test_run_bad_file_exits_2_and_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "a-bad.yaml"
    bad.write_text("name: x\nmodel:\n  - wat: 1\n", encoding="utf-8")
    (tmp_path / "b-good.yaml").write_text((SCENARIOS / "happy-path.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["run", str(tmp_path), "--drive", "examples.correct_sync:drive"]) == 2
    out = capsys.readouterr().out
    assert re.search(rf"^ERROR {re.escape(str(bad))} +{re.escape(str(bad))}:3: ", out, re.MULTILINE), out
    assert "ok    " in out and out.rstrip().endswith("1 passed, 0 failed, 1 error(s)")
    assert main(["run", str(tmp_path / "nothing-here")]) == 2
    assert main(["run", str(SCENARIOS / "happy-path.yaml")]) == 2
    assert "Missing option '--drive'" in capsys.readouterr().err


def test_run_trace_to_a_file_and_to_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = tmp_path / "one.jsonl"
    assert (
        main(["run", str(SCENARIOS / "happy-path.yaml"), "--drive", "examples.correct_sync:drive", "--trace", str(one)])
        == 0
    )
    assert Transcript.read(one).header.scenario == "happy-path"
    folder = tmp_path / "traces"
    files = [SCENARIOS / "happy-path.yaml", SCENARIOS / "refusal.yaml"]
    assert main(["run", *map(str, files), "--drive", "examples.correct_sync:drive", "--trace", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["happy-path.jsonl", "refusal.jsonl"]
    capsys.readouterr()


# -- show, report ----------------------------------------------------------------------------------------------------


def test_show_prints_the_rich_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path)
    capsys.readouterr()
    assert main(["show", str(trace)]) == 1  # the run broke no_rerun: exit 1, as documented
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "simloop run overload-after-write  seed 0  limits: none declared"
    assert any("2 (529 ×3)" in x and x.rstrip().endswith("◀ no_rerun") for x in lines)
    assert "1 violation(s):" in out and "[no_rerun] step 2:" in out
    assert main(["show", str(trace), "--width", "90"]) == 1
    assert max(len(x) for x in capsys.readouterr().out.splitlines()) <= 90


def test_show_plain_is_the_stable_text_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path)
    capsys.readouterr()
    assert main(["show", str(trace), "--plain"]) == 1
    transcript = Transcript.read(trace)
    violations = check(transcript).violations
    verdict = "".join(f"  {v}\n" for v in violations)
    # the timeline, then the verdict in words (issue 31: --plain printed no violations)
    assert capsys.readouterr().out == (
        render_timeline(transcript, violations) + f"\n{len(violations)} violation(s):\n" + verdict)
    assert violations


def test_show_and_report_reject_a_bad_transcript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "scenario": "x", "seed": 0, "version": 1}\n{"oops": 1}\n', encoding="utf-8")
    assert main(["show", str(bad)]) == 2
    assert f"{bad}:2: expected an event whose type is one of " in capsys.readouterr().err
    assert main(["report", str(bad)]) == 2
    assert main(["show", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_report_writes_a_self_contained_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path)
    capsys.readouterr()
    out = tmp_path / "report.html"
    assert main(["report", str(trace), "-o", str(out)]) == 1  # written, and the run broke an invariant
    assert capsys.readouterr().out == f"wrote {out}: 3 model calls, 1 violation(s)\n"
    page = out.read_text(encoding="utf-8")
    assert '<svg id="chart"' in page and page.count('<li class="violation"') == 1 and "<script>" in page
    assert main(["report", str(trace)]) == 1  # default: next to the trace
    assert trace.with_suffix(".html").read_text(encoding="utf-8") == page
    capsys.readouterr()


# -- serve, convert --------------------------------------------------------------------------------------------------


def test_serve_prints_the_base_url_answers_and_writes_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: list[dict[str, object]] = []

    def one_call_then_ctrl_c() -> None:
        printed = capsys.readouterr()
        answers.append({"stdout": printed.out, "stderr": printed.err})
        base_url = printed.out.splitlines()[0]
        assert base_url.startswith("http://127.0.0.1:")
        body = {"model": "claude-sonnet-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        request = urllib.request.Request(
            f"{base_url}/v1/messages",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"content-type": "application/json", "x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # loopback only
            answers.append(json.loads(response.read()))
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_serve, "_wait_for_interrupt", one_call_then_ctrl_c)
    trace = tmp_path / "served.jsonl"
    assert main(["serve", "--scenario", str(SCENARIOS / "happy-path.yaml"), "--port", "0", "--trace", str(trace)]) == 0
    (printed, reply) = answers
    assert reply["type"] == "message" and reply["stop_reason"] == "tool_use"
    base_url = str(printed["stdout"]).strip()
    assert printed["stdout"] == base_url + "\n"  # the URL alone on stdout, for scripts to read
    assert printed["stderr"] == (
        f"simloop: serving scenario 'happy-path'; Ctrl-C stops\n  export ANTHROPIC_BASE_URL={base_url}\n"
        f"  export OPENAI_BASE_URL={base_url}/v1\n  export OPENAI_API_KEY=sk-simloop-{'0' * 48}\n"
    )
    assert capsys.readouterr().err == f"simloop: stopped after 1 request(s)\ntranscript written to {trace}\n"
    assert len(Transcript.read(trace).requests) == 1


def test_serve_tells_both_sdks_where_it_is(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The lines simloop serve prints to export are what the official SDKs read: each reaches the one world."""
    openai = pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")
    import anthropic

    said: list[str] = []

    def both_sdks_then_ctrl_c() -> None:
        exports = [line.split()[1] for line in capsys.readouterr().err.splitlines() if line.startswith("  export ")]
        env = dict(pair.split("=", 1) for pair in exports)
        assert sorted(env) == ["ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"]
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-anything")
        ask = [{"role": "user", "content": "Where is order 7?"}]
        reply = anthropic.Anthropic(max_retries=0).messages.create(model="claude-sonnet-5", max_tokens=64, messages=ask)
        said.append(str(reply.stop_reason))
        chat = openai.OpenAI(max_retries=0).chat.completions.create(model="gpt-4o", messages=ask)  # from the env alone
        said.append(str(chat.choices[0].finish_reason))
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_serve, "_wait_for_interrupt", both_sdks_then_ctrl_c)
    assert main(["serve", "--scenario", str(SCENARIOS / "happy-path.yaml"), "--port", "0"]) == 0
    assert said == ["tool_use", "stop"]  # the script's first two replies (a tool call, then its answer), one a wire
    assert capsys.readouterr().err.startswith("simloop: stopped after 2 request(s)")


def test_serve_with_a_stand_in_server(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The command's contract with `simloop.wire.loopback.serve`: called with the scenario, host, port and seed."""
    from simloop.wire import loopback

    calls: list[tuple[str, str, int, int]] = []

    class StandIn:
        base_url = "http://127.0.0.1:9"
        openai_base_url = "http://127.0.0.1:9/v1"
        mcp_url = None
        transcript = Transcript.from_jsonl('{"type": "header", "scenario": "s", "seed": 0, "version": 1}\n')
        errors = ()
        warning = None

        def __enter__(self) -> Self:
            return self

        def __exit__(self, *exc: object) -> None:
            calls.append(("closed", "", 0, 0))

    def serve(scenario: object, host: str, port: int, *, seed: int, mcp: bool, max_kept_text: int) -> StandIn:
        assert not mcp and max_kept_text == loopback.KEPT_TEXT  # a long session's memory is bounded
        calls.append((getattr(scenario, "name", ""), host, port, seed))
        return StandIn()

    monkeypatch.setattr(loopback, "serve", serve)
    monkeypatch.setattr(cli_serve, "_wait_for_interrupt", lambda: None)
    args = [
        "serve",
        "--scenario",
        str(SCENARIOS / "outage.yaml"),
        "--host",
        "127.0.0.2",
        "--port",
        "8123",
        "--seed",
        "4",
    ]
    assert main(args) == 0
    assert calls == [("outage", "127.0.0.2", 8123, 4), ("closed", "", 0, 0)]
    assert capsys.readouterr().out == "http://127.0.0.1:9\n"
    assert main(["serve", "--scenario", str(SCENARIOS / "outage.yaml"), "--port", "70000"]) == 2


def test_convert_a_cassette(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import simloop

    cassette = CASSETTES / "pydantic-ai" / "test_anthropic" / "test_anthropic_advisor_tool.yaml"
    if not cassette.exists():
        pytest.skip(f"the recorded cassettes are not here ({cassette})")
    assert main(["convert", str(cassette)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("version: 1\n")
    out = tmp_path / "scenario.yaml"
    assert main(["convert", str(cassette), "-o", str(out), "--kind", "search=read"]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    scenario = simloop.load_scenario(out)
    assert scenario.model and scenario.to_yaml() == printed


def test_convert_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_a_cassette = tmp_path / "x.yaml"
    not_a_cassette.write_text("hello: [1, 2]\n", encoding="utf-8")
    assert main(["convert", str(not_a_cassette)]) == 2
    assert f"simloop: error: {not_a_cassette}" in capsys.readouterr().err
    assert main(["convert", str(not_a_cassette), "--kind", "search=maybe"]) == 2
    assert "--kind takes TOOL=read or TOOL=write, got 'search=maybe'" in capsys.readouterr().err


def test_commands_do_not_leave_threads_behind() -> None:
    assert not [t for t in threading.enumerate() if t.name == "simloop-loopback" and t.is_alive()]
