"""Loops in any language (`simloop.command`, ``simloop verify --command``): TypeScript loops on the official
``@anthropic-ai/sdk`` and ``openai`` packages, a Python loop on the ``openai`` SDK as a process of its own and
a bash/curl/jq loop, each passing and its one-bug twin caught: both wires of the one world.

Real processes on real time, on 127.0.0.1 only, so the budgets are a handful of runs.  The TypeScript tests
install the SDK and the compiler with npm into a temporary folder (skipped with its reason when node, npm
or the registry is unavailable); the bash test needs bash, curl and jq; the Python one the ``openai`` SDK.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import Phase
from hypothesis import settings as Settings

import simloop
from simloop import cli as cli_module
from simloop import command
from simloop.cli import main
from simloop.command import CommandFailed, _Capped, command_drive, outcome_of
from simloop.sim import OPENAI_API_KEY
from simloop.strategies import plans
from simloop.transcript import ToolStart

ROOT = Path(__file__).resolve().parents[1]
LOOPS = ROOT / "examples" / "any_language"
LIMITS = simloop.Limits(max_steps=6)
CALM = {"slow": ((False, 1),), "heavy": ((False, 1),), "personas": (("finishes", 1),)}
#: runs whose tools fail half the time (and nothing else goes wrong): where a loop that hides tool errors shows
TOOL_FAULTS = plans(min_steps=1, tool_fault_rates=((5, 1),), fault_rates=((0, 1),), outages=((None, 1),), **CALM)
#: runs that meet an API outage after their tool calls: where a loop that retries without limit runs away
OUTAGE = plans(outages=((simloop.Reply(error=529), 1),), fault_rates=((0, 1),), tool_fault_rates=((0, 1),), **CALM)
#: runs of two steps or more, without faults: where parallel tool calls come (and a loop answering one of them shows)
TOOL_CALLS = plans(min_steps=2, fault_rates=((0, 1),), tool_fault_rates=((0, 1),), outages=((None, 1),), **CALM)
NO_SHRINK = Settings(phases=[Phase.explicit, Phase.generate])  # caught is enough here; the bash test shrinks


def test_the_outcome_is_the_last_json_line_with_a_reason_else_the_exit_code() -> None:
    out = 'log line\n{"reason": "max_steps", "text": "capped"}\n{"not": "an outcome"}\n'
    assert outcome_of(out, 0) == simloop.Outcome("max_steps", "capped")
    assert outcome_of("all done\n", 0) == simloop.Outcome("final", "all done")
    with pytest.raises(CommandFailed, match=r"exited with code 3 and printed no outcome line; stderr ends: Traceback \| boom"):
        outcome_of("", 3, "Traceback\nboom\n")


def test_a_command_that_cannot_start_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(simloop.UsageError, match="cannot start the command 'no-such-program-simloop'"):
        simloop.verify(command_drive("no-such-program-simloop"), max_examples=1, out_dir=tmp_path)


def test_a_python_command_that_crashes_is_reported_by_crash(tmp_path: Path) -> None:
    crashing = [sys.executable, "-c", "import sys; sys.exit('no outcome, just a crash')"]
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(command_drive(crashing), max_examples=1, seed=7, out_dir=tmp_path, settings=NO_SHRINK)
    assert [v.invariant for v in caught.value.violations] == ["crash"]
    assert "no outcome, just a crash" in caught.value.violations[0].message
    # the search is re-run as it was started, on the command line, not as a Python call
    assert f"or re-run the search: simloop verify --command {shlex.quote(shlex.join(crashing))} --seed 7" in str(caught.value)


def _running(marker: str) -> list[str]:
    """The command lines of this machine's processes that mention ``marker`` (Linux /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text:
            found.append(text)
    return found


def _mark(n: int) -> str:
    """A ``sleep`` argument no other process on this machine has: this test process's pid in it."""
    return f"600.{os.getpid():07d}{n:02d}"


LINUX = pytest.mark.skipif(not Path("/proc/self/cmdline").exists() or shutil.which("sleep") is None,
                           reason="needs Linux /proc and sleep")
SETSID = pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid (util-linux)")
OUTCOME_LINE = '{"reason": "final", "text": "still read"}'
DONE = """echo '{"reason": "final", "text": "done"}'"""


def _timed_run(command: list[str], timeout_s: float) -> tuple[simloop.Outcome, float]:
    """One run of ``command``; its outcome and the real seconds simloop took to give it."""
    started = time.monotonic()
    with simloop.Sim({"task": "t", "then": "end_turn"}) as sim:
        outcome = sim.run(command_drive(command, timeout_s=timeout_s, mcp=False))
    return outcome, time.monotonic() - started


@LINUX
def test_a_helper_left_holding_stdout_costs_a_moment_not_the_timeout() -> None:
    # The loop answers and exits, but a process it started lives on and holds its stdout open: the verdict is
    # the loop's own, at once (not a spin at the timeout), and nothing the command started outlives the run.
    marker = _mark(17)
    outcome, took = _timed_run(["sh", "-c", f"sleep {marker} & {DONE}"], timeout_s=60)
    assert outcome == simloop.Outcome("final", "done")
    assert took < 15
    assert _running(marker) == []


@LINUX
@SETSID
def test_a_setsid_daemon_holding_stdout_cannot_hold_the_verdict() -> None:
    # The daemon leaves the command's process group and session and keeps the pipe: before, no verdict came
    # for as long as it lived.
    marker = _mark(18)
    outcome, took = _timed_run(["sh", "-c", f"setsid sleep {marker} & sleep {_mark(19)}"], timeout_s=2)
    assert outcome.reason == "error" and "ran for 2 real seconds without stopping; killed" in outcome.text
    assert took < 20
    assert _running(marker) == [] and _running(_mark(19)) == []


@LINUX
@SETSID
def test_detached_daemons_do_not_outlive_the_run() -> None:
    # Three ways out of the command's process group: setsid with the output elsewhere, a double fork, and a
    # setsid that also clears its environment (found as an orphan re-parented to simloop, a subreaper).
    markers = [_mark(21), _mark(22), _mark(23)]
    script = (f"setsid sleep {markers[0]} >/dev/null 2>&1 & "
              f"setsid sh -c 'sleep {markers[1]} >/dev/null 2>&1 &' & "
              f"setsid env -i sleep {markers[2]} >/dev/null 2>&1 & "
              f"{DONE}")
    outcome, took = _timed_run(["sh", "-c", script], timeout_s=60)
    assert outcome == simloop.Outcome("final", "done") and took < 15
    assert [m for m in markers if _running(m)] == []


def _zombie_children() -> set[int]:
    """The pids of this process's children that have ended and are not reaped (Linux /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


@LINUX
def test_orphans_adopted_by_simloop_are_reaped_not_left_as_zombies() -> None:
    # The double fork's first child exits at once: its own child, orphaned, is adopted by simloop (a subreaper
    # while the command runs), ends on its own or is killed, and must be reaped either way.
    before = _zombie_children()
    script = f"sh -c 'true & exit 0'; sh -c 'sleep {_mark(41)} >/dev/null 2>&1 & exit 0'; {DONE}"
    for _ in range(3):
        outcome, _ = _timed_run(["sh", "-c", script], timeout_s=60)
        assert outcome == simloop.Outcome("final", "done")
    assert _zombie_children() - before == set()
    assert _running(_mark(41)) == []


@LINUX
@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_to_simloop_ends_the_command_and_what_it_started(workers: int, tmp_path: Path) -> None:
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    ready = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # read end, and a writer of our own: no EOF before the command
    helper = f"setsid sleep {_mark(31)} >/dev/null 2>&1 &" if shutil.which("setsid") else f"sleep {_mark(31)} &"
    command = f"sh -c '{helper} echo up > {fifo}; sleep {_mark(32)}'"
    simloop_proc = subprocess.Popen(
        [sys.executable, "-m", "simloop.cli", "verify", "--command", command, "--timeout", "300", "--max-examples",
         str(workers), "--workers", str(workers), "--out", str(tmp_path / "out"), "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert select.select([ready], [], [], 60)[0], "the command never started"
        started = time.monotonic()
        simloop_proc.send_signal(signal.SIGTERM)
        _, err = simloop_proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        os.close(ready)
        if simloop_proc.poll() is None:
            simloop_proc.kill()
    assert simloop_proc.returncode == 143, err
    if workers == 1:  # (a campaign's parent runs no command: its workers, stopped in turn, end theirs)
        assert "simloop: stopped by SIGTERM; the processes of the command that was running were ended" in err
    else:
        assert "simloop: stopped by SIGTERM" in err
    assert took < 20
    assert _running(_mark(31)) == [] and _running(_mark(32)) == []


def test_a_flood_of_output_is_kept_head_and_tail(tmp_path: Path) -> None:
    size = 24 << 20  # 24 MB, and the outcome after it
    script = f"import sys; sys.stdout.write('x' * {size} + '\\n'); print({OUTCOME_LINE!r})"
    flood = [sys.executable, "-c", script]
    tracemalloc.start()
    try:
        outcome, _ = _timed_run(flood, timeout_s=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome == simloop.Outcome("final", "still read")
    assert peak < 8 << 20  # not the 24 MB the command wrote


def test_the_output_kept_is_its_first_and_last_half_megabyte_and_a_note() -> None:
    out = _Capped(limit=10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrst", b"uvwxyz"):
        out.add(chunk)
    assert out.text() == "abcde\n[simloop kept the first and last 5 bytes of this output; 16 bytes between them were not kept]\nvwxyz"
    small = _Capped(limit=10)
    small.add(b"ok\n")
    assert small.text() == "ok\n"


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e9", "soon"])
def test_the_timeout_must_be_a_finite_positive_number(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--command", "true", "--timeout", value, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--timeout'" in err
    assert "0<x<=604800" in err or "is not a number of seconds (e.g. 30 or 2.5)" in err


def test_a_failing_command_whose_text_holds_braces_is_reported_with_its_replay_line(tmp_path: Path) -> None:
    # a shell variable, a jq filter, a Python dict: the command text is the user's, never a format string
    text = "sh -c 'echo ${HOME} {\"a\": 1} {path} {}; exit 3'"
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(command_drive(text, mcp=False), max_examples=1, out_dir=tmp_path, settings=NO_SHRINK)
    error = caught.value
    assert [v.invariant for v in error.violations] == ["crash"]
    assert error.replay == f"simloop run {error.scenario_path} --command {shlex.quote(text)}"
    assert f"replay it: {error.replay}" in str(error)


def test_command_drive_refuses_a_timeout_no_wait_can_take() -> None:
    for value in (float("inf"), float("nan"), 0, 1e9):
        with pytest.raises(simloop.UsageError, match=r"command_drive\(timeout_s=...\): a finite number of seconds"):
            command_drive("true", timeout_s=value)
    assert command.MAX_TIMEOUT_S == cli_module._MAX_TIMEOUT_S


def test_a_task_with_a_nul_is_a_usage_error_not_the_loops_crash(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    started = tmp_path / "started"
    scenario = tmp_path / "nul.json"
    scenario.write_text(json.dumps({"version": 1, "task": "refund\u0000order 7", "then": "end_turn"}))
    assert main(["run", str(scenario), "--command", f"touch {started}"]) == 2
    out = capsys.readouterr().out
    assert "ERROR" in out and "the task holds a NUL character (at offset 6)" in out and "remove the NUL" in out
    assert not started.exists()  # refused before the command ran
    with pytest.raises(simloop.UsageError, match="the task holds a NUL character"):
        simloop.verify(command_drive(["touch", str(started)]), task="a\0b", max_examples=1, out_dir=tmp_path)
    with pytest.raises(simloop.UsageError, match="cannot start the command .*: embedded null byte"):
        simloop.verify(command_drive(["touch", f"{started}\0x"]), max_examples=1, out_dir=tmp_path)
    assert not started.exists()


_NODE_CRASH = """file:///app/agent.mjs:12
  const text = reply.content[0].text.trim();
                                     ^

TypeError: Cannot read properties of undefined (reading 'trim')
    at run (file:///app/agent.mjs:12:38)
    at async main (file:///app/agent.mjs:30:3)

Node.js v20.11.0
"""


def test_a_failure_shows_the_commands_own_error_line() -> None:
    with pytest.raises(CommandFailed) as caught:
        outcome_of("", 1, _NODE_CRASH)
    assert str(caught.value) == (
        "the command exited with code 1 and printed no outcome line; its error: TypeError: Cannot read properties "
        "of undefined (reading 'trim'); stderr ends: at run (file:///app/agent.mjs:12:38) | at async main "
        "(file:///app/agent.mjs:30:3) | Node.js v20.11.0"
    )


def test_a_crash_report_names_the_error_line_of_a_real_command(tmp_path: Path) -> None:
    crashing = ["sh", "-c", f"printf '%s' {shlex.quote(_NODE_CRASH)} >&2; exit 1"]
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(command_drive(crashing), max_examples=1, out_dir=tmp_path, settings=NO_SHRINK)
    message = caught.value.violations[0].message
    assert "its error: TypeError: Cannot read properties of undefined (reading 'trim')" in message
    assert "Node.js v20.11.0" in message


# -- TypeScript on @anthropic-ai/sdk -----------------------------------------------------------------------------------


def _compiled(tmp_path_factory: pytest.TempPathFactory, source: str, sdk: dict[str, str]) -> Path:
    """examples/any_language/SOURCE compiled against ``sdk`` (the official package), installed with npm into a
    temp folder; skips with the reason when node, npm or the registry is not there."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed: the TypeScript loop cannot run here")
    folder = tmp_path_factory.mktemp(Path(source).stem)
    (folder / "package.json").write_text(json.dumps({
        "type": "module", "private": True, "dependencies": {**sdk, "typescript": "^5", "@types/node": "^20"},
    }))
    npm = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=folder, capture_output=True, text=True,
        timeout=300, check=False,
    )
    if npm.returncode != 0:
        pytest.skip(f"npm install failed (is the npm registry reachable?): {npm.stderr.strip()[-300:]}")
    shutil.copy(LOOPS / source, folder / source)
    tsc = subprocess.run(
        ["node", "node_modules/typescript/bin/tsc", source, "--strict", "--module", "nodenext",
         "--moduleResolution", "nodenext", "--target", "es2022", "--skipLibCheck"],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False,
    )
    assert tsc.returncode == 0, tsc.stdout + tsc.stderr  # the example type-checks against the SDK's own types
    return folder / source.replace(".ts", ".js")


@pytest.fixture(scope="module")
def ts_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/any_language/agent.ts compiled against the official @anthropic-ai/sdk."""
    return _compiled(tmp_path_factory, "agent.ts", {"@anthropic-ai/sdk": "^1"})


def test_a_typescript_loop_on_the_official_sdk_passes(ts_agent: Path, tmp_path: Path) -> None:
    report = simloop.verify(command_drive(["node", str(ts_agent)]), limits=LIMITS, max_examples=6, seed=3,
                            out_dir=tmp_path)
    assert report.ok and report.examples == 6


def test_its_twin_that_drops_is_error_is_caught(ts_agent: Path, tmp_path: Path) -> None:
    twin = command_drive(["node", str(ts_agent), "--drop-tool-errors"])
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(twin, limits=LIMITS, max_examples=10, seed=3, plan=TOOL_FAULTS, out_dir=tmp_path,
                       settings=NO_SHRINK)
    assert {v.invariant for v in caught.value.violations} == {"tool_errors"}
    assert "reported as a success (no is_error)" in caught.value.violations[0].message
    assert "--command" in caught.value.replay and "--drop-tool-errors" in caught.value.replay


# -- the OpenAI wire: TypeScript and Python on the official openai SDKs ------------------------------------------------


@pytest.fixture(scope="module")
def ts_openai_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/any_language/openai_agent.ts compiled against the official `openai` package (6.x on Node 20;
    7.x needs Node 22)."""
    return _compiled(tmp_path_factory, "openai_agent.ts", {"openai": ">=6 <8"})


def test_a_typescript_loop_on_the_openai_package_passes(ts_openai_agent: Path, tmp_path: Path) -> None:
    # unmodified: `new OpenAI()` reads OPENAI_BASE_URL and OPENAI_API_KEY, and speaks Chat Completions
    report = simloop.verify(command_drive(["node", str(ts_openai_agent)]), limits=LIMITS, max_examples=6, seed=3,
                            out_dir=tmp_path)
    assert report.ok and report.examples == 6


def test_its_twin_that_answers_only_the_first_tool_call_is_caught(ts_openai_agent: Path, tmp_path: Path) -> None:
    twin = command_drive(["node", str(ts_openai_agent), "--answer-first-only"])
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(twin, limits=LIMITS, max_examples=10, seed=3, plan=TOOL_CALLS, out_dir=tmp_path,
                       settings=NO_SHRINK)
    assert {v.invariant for v in caught.value.violations} == {"pairing"}
    assert "has no tool message answering it before the next request" in caught.value.violations[0].message
    assert "--answer-first-only" in caught.value.replay
    sent = caught.value.transcript.requests if caught.value.transcript is not None else []
    assert sent and {r.path for r in sent} == {"/v1/chat/completions"}  # the SDK's own wire, at OPENAI_BASE_URL


@pytest.fixture
def python_openai() -> None:
    pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")


def test_simloop_verify_command_passes_a_python_loop_on_the_openai_sdk(
        python_openai: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["verify", "--command", shlex.join([sys.executable, str(LOOPS / "openai_agent.py")]), "--max-examples",
            "3", "--seed", "3", "--max-steps", "6", "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    assert "ok: 3 runs of --command" in capsys.readouterr().out


def test_the_python_twin_is_caught(python_openai: None, tmp_path: Path) -> None:
    twin = command_drive([sys.executable, str(LOOPS / "openai_agent.py"), "--answer-first-only"])
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(twin, limits=LIMITS, max_examples=10, seed=3, plan=TOOL_CALLS, out_dir=tmp_path,
                       settings=NO_SHRINK)
    assert {v.invariant for v in caught.value.violations} == {"pairing"}
    assert caught.value.violations[0].evidence["kind"] == "missing_result"


def test_the_command_finds_both_wires_in_its_environment(tmp_path: Path) -> None:
    script = ("import json, os; print(json.dumps({'reason': 'final', 'text': ' '.join(os.environ[n] for n in "
              "('ANTHROPIC_BASE_URL', 'OPENAI_BASE_URL', 'OPENAI_API_KEY'))}))")
    with simloop.Sim({"task": "t", "then": "end_turn"}) as sim:
        outcome = sim.run(command_drive([sys.executable, "-c", script], mcp=False))
    anthropic_url, openai_url, key = outcome.text.split()
    assert anthropic_url.startswith("http://127.0.0.1:") and openai_url == anthropic_url + "/v1"
    assert key == OPENAI_API_KEY  # a fake key: the SDK will not start without one


def test_a_command_gets_no_real_credential_of_either_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: ANTHROPIC_AUTH_TOKEN, OPENAI_ORG_ID and OPENAI_PROJECT_ID reached the command as the user had them
    real = {"ANTHROPIC_AUTH_TOKEN": "the-users-bearer-token-0002", "OPENAI_ORG_ID": "org-the-users-org-0004",
            "OPENAI_PROJECT_ID": "proj_the-users-project-0005", "ANTHROPIC_API_KEY": "sk-ant-api03-real-0001",
            "OPENAI_API_KEY": "sk-proj-the-users-real-key-0003"}
    for name, value in real.items():
        monkeypatch.setenv(name, value)
    dump = tmp_path / "env.json"
    script = f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    with simloop.Sim({"task": "t", "then": "end_turn"}) as sim:
        sim.run(command_drive([sys.executable, "-c", script], mcp=False))
    env = json.loads(dump.read_text())
    assert [name for name, value in real.items() if value in json.dumps(env)] == []
    assert {"ANTHROPIC_AUTH_TOKEN", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"}.isdisjoint(env)
    assert env["ANTHROPIC_API_KEY"].startswith("sk-ant-simloop-") and env["OPENAI_API_KEY"] == OPENAI_API_KEY


# -- bash, curl and jq, through the command line ----------------------------------------------------------------------


@pytest.fixture
def bash_tools() -> None:
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: the bash loop cannot run here")


def test_simloop_verify_command_passes_a_bash_loop(bash_tools: None, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    args = ["verify", "--command", f"bash {LOOPS / 'agent.sh'}", "--max-examples", "4", "--seed", "3",
            "--max-steps", "6", "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    assert "ok: 4 runs of --command" in capsys.readouterr().out


def test_a_bash_loop_that_retries_forever_is_stopped_and_shrunk(bash_tools: None, tmp_path: Path) -> None:
    twin = command_drive(["bash", str(LOOPS / "agent.sh"), "--retry-forever"])
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(twin, limits=LIMITS, max_examples=5, seed=3, plan=OUTAGE, out_dir=tmp_path)
    error = caught.value
    assert [v.invariant for v in error.violations] == ["stops"]
    assert error.transcript is not None and error.transcript.halt is not None  # killed at the runaway budget
    assert error.scenario.model[0].error == 529 and error.scenario.then == "repeat_last"  # shrunk to the outage
    assert error.replay.startswith(f"simloop run {error.scenario_path} --command ")


def test_the_bash_loop_runs_its_tools_over_mcp_and_each_call_is_matched(bash_tools: None) -> None:
    pytest.importorskip("mcp.server", reason="the MCP SDK is not installed (pip install 'simloop[mcp]')")
    scenario = {"task": "t", "tools": [{"name": "search", "input_schema": {"type": "object"}}], "then": "end_turn",
                "model": [{"tool_use": [{"name": "search", "input": {"q": "a"}}]}, {"end_turn": "Done."}],
                "faults": [{"tool": "search", "call": 1, "kind": "raise"}]}
    with simloop.Sim(scenario) as sim:
        outcome = sim.run(command_drive(["bash", str(LOOPS / "agent.sh")], mcp=True))
    assert outcome == simloop.Outcome("final", "Done.")
    start = next(e for e in sim.transcript.events if isinstance(e, ToolStart))
    assert start.matched == sim.transcript.responses[0].tool_uses[0]["id"]  # an MCP call carries no id: matched
    sent = sim.transcript.requests[1].conversation[-1]["content"][0]
    assert sent["is_error"] is True and sent["content"] == "ConnectionError: search: could not reach the backend"
    assert sim.check().ok
