"""Loops in any language (`simloop.command`, ``simloop verify --command``): a TypeScript loop on the official
``@anthropic-ai/sdk`` and a bash/curl/jq loop, each passing and its one-bug twin caught.

Real processes on real time, on 127.0.0.1 only, so the budgets are a handful of runs.  The TypeScript test
installs the SDK and the compiler with npm into a temporary folder (skipped with its reason when node, npm
or the registry is unavailable); the bash test needs bash, curl and jq.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase
from hypothesis import settings as Settings

import simloop
from simloop.cli import main
from simloop.command import CommandFailed, command_drive, outcome_of
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
        simloop.verify(command_drive(crashing), max_examples=1, out_dir=tmp_path, settings=NO_SHRINK)
    assert [v.invariant for v in caught.value.violations] == ["crash"]
    assert "no outcome, just a crash" in caught.value.violations[0].message


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


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists() or shutil.which("sleep") is None,
                    reason="needs Linux /proc and sleep")
def test_what_the_command_leaves_running_is_killed_with_it() -> None:
    # The loop answers and exits, but a process it started lives on and holds its stdout open: the run
    # must still end (at the timeout), and nothing the command started may outlive it.
    marker = "600.0517"
    leaves = ["bash", "-c", f"sleep {marker} & echo '{{\"reason\": \"final\", \"text\": \"done\"}}'"]
    with simloop.Sim({"task": "t", "then": "end_turn"}) as sim:
        outcome = sim.run(command_drive(leaves, timeout_s=0.2, mcp=False))
    assert outcome.reason == "error" and "without stopping; killed" in outcome.text
    assert _running(marker) == []


# -- TypeScript on @anthropic-ai/sdk -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ts_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/any_language/agent.ts compiled against the official SDK, installed with npm into a temp folder."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are not installed: the TypeScript loop cannot run here")
    folder = tmp_path_factory.mktemp("ts-agent")
    (folder / "package.json").write_text(json.dumps({
        "type": "module", "private": True,
        "dependencies": {"@anthropic-ai/sdk": "^1", "typescript": "^5", "@types/node": "^20"},
    }))
    npm = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent"], cwd=folder, capture_output=True, text=True,
        timeout=300, check=False,
    )
    if npm.returncode != 0:
        pytest.skip(f"npm install failed (is the npm registry reachable?): {npm.stderr.strip()[-300:]}")
    shutil.copy(LOOPS / "agent.ts", folder / "agent.ts")
    tsc = subprocess.run(
        ["node", "node_modules/typescript/bin/tsc", "agent.ts", "--strict", "--module", "nodenext",
         "--moduleResolution", "nodenext", "--target", "es2022", "--skipLibCheck"],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False,
    )
    assert tsc.returncode == 0, tsc.stdout + tsc.stderr  # the example type-checks against the SDK's own types
    return folder / "agent.js"


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
