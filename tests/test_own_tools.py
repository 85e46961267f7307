"""The loop's own tools and the server tools, declared from every surface (issue 31 items 3 and 6), and the
plugin's ``abort`` and ``restarts`` options reaching `simloop.verify` (item 8).

A loop that sends tools of its own (``tests/loops/own_tools.py``) verified without declaring them has every
``sim.run_tool`` answer ``UnknownToolError``: `verify` says so (a `UsageError` naming the tools and how to
declare them) instead of passing without one real tool call, or blaming the loop with ``tool_errors``.
Declared (``verify(tools=...)``, ``simloop verify --tools FILE``, ``--simloop-tools=FILE``), the calls run and
the one-bug twin is caught for its own bug.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anthropic  # noqa: F401 - imported once here, not by each in-process pytester run
import pytest

import simloop
from simloop.cli import main
from simloop.errors import ScenarioError
from simloop.scenario import load_tools
from simloop.transcript import ToolEnd, ToolStart
from tests.loops import own_tools

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
DRIVE = "tests.loops.own_tools:drive"
UNDECLARED = (
    "every tool the loop ran (issue_refund, lookup_order) is one verify does not declare (it declares search, "
    "send_email), so each run_tool answered UnknownToolError and not one of the loop's tool calls was tested"
)


@pytest.fixture(autouse=True)
def _in_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "120")


def _ok_tool_runs(drive: Any, counts: Counter[str]) -> Any:
    """``drive``, counting its runs' tool executions that answered (by tool)."""

    def counted(sim: simloop.Sim) -> Any:
        try:
            return drive(sim)
        finally:
            starts = {s.exec: s.tool for s in sim.transcript.of(ToolStart)}
            counts.update(starts[e.exec] for e in sim.transcript.of(ToolEnd) if e.status == "ok" and e.exec in starts)

    return counted


# -- the tools file ---------------------------------------------------------------------------------------------


def test_a_tools_file_is_a_list_a_tools_mapping_or_a_scenario(tmp_path: Path) -> None:
    listed = load_tools(own_tools.TOOLS_FILE)
    assert [(t.name, t.kind) for t in listed] == [("lookup_order", "read"), ("issue_refund", "write")]
    scenario = tmp_path / "s.yaml"
    scenario.write_text("task: t\ntools:\n  - {name: lookup_order}\nmodel:\n  - end_turn: done\n", encoding="utf-8")
    assert [t.name for t in load_tools(scenario)] == ["lookup_order"]
    as_json = tmp_path / "t.json"
    as_json.write_text(json.dumps({"tools": [{"name": "a", "kind": "write"}]}), encoding="utf-8")
    assert [(t.name, t.kind) for t in load_tools(as_json)] == [("a", "write")]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: a\n  kind: wrte\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"bad.yaml:2: tools\[0\].kind: expected one of read, write, got 'wrte'"):
        load_tools(bad)
    bad.write_text("task: no tools here\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="a tools file is a list of tools .* got a mapping with no tools: key"):
        load_tools(bad)


# -- verify: undeclared tools are said, declared ones run -----------------------------------------------------


def test_a_correct_loop_with_undeclared_tools_is_told_to_declare_them() -> None:
    with pytest.raises(simloop.UsageError) as caught:
        simloop.verify(own_tools.drive, max_examples=20, seed=0)
    message = str(caught.value)
    assert UNDECLARED in message
    assert "verify(drive, tools=[...])" in message and "simloop verify --tools tools.yaml" in message
    assert "--simloop-tools=tools.yaml" in message


def test_declared_the_correct_loop_passes_with_real_tool_calls() -> None:
    counts: Counter[str] = Counter()
    report = simloop.verify(_ok_tool_runs(own_tools.drive, counts), max_examples=20, seed=0,
                            tools=load_tools(own_tools.TOOLS_FILE))
    assert report.ok
    assert counts["lookup_order"] > 0 and counts["issue_refund"] > 0


def test_the_defect_is_not_blamed_for_undeclared_tools_and_is_caught_once_they_are() -> None:
    with pytest.raises(simloop.UsageError) as caught:
        simloop.verify(own_tools.escapes, max_examples=20, seed=0)
    assert UNDECLARED in str(caught.value)
    assert "(The run that failed broke tool_errors; declare the tools, then verify again.)" in str(caught.value)
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(own_tools.escapes, max_examples=20, seed=0, tools=load_tools(own_tools.TOOLS_FILE))
    assert [v.invariant for v in found.value.violations] == ["tool_errors"]
    assert "UnknownToolError" not in str(found.value)  # a real fault of a declared tool, not an unknown one


# -- the command line ------------------------------------------------------------------------------------------


def test_cli_verify_tools_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["verify", DRIVE, "--max-examples", "20", "--seed", "0", "--out", str(tmp_path), "--no-progress"]
    assert main(base) == 2
    assert UNDECLARED in capsys.readouterr().err.replace("\n", " ")
    assert main([*base, "--tools", str(own_tools.TOOLS_FILE)]) == 0
    assert "ok: 20 runs of tests.loops.own_tools:drive" in capsys.readouterr().out
    escapes = ["verify", "tests.loops.own_tools:escapes", "--max-examples", "20", "--seed", "0", "--out",
               str(tmp_path), "--no-progress", "--tools", str(own_tools.TOOLS_FILE)]
    assert main(escapes) == 1
    assert "FAILED: tool_errors broken" in capsys.readouterr().out


def test_cli_tools_file_errors_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "tools.yaml"
    bad.write_text("[]\n", encoding="utf-8")
    assert main(["verify", DRIVE, "--tools", str(bad), "--no-progress"]) == 2
    assert "--tools: " in capsys.readouterr().err
    assert main(["verify", DRIVE, "--tools", str(tmp_path / "missing.yaml"), "--no-progress"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_run_gives_the_tools_to_files_that_declare_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "refund.yaml"
    scenario.write_text(
        "task: Refund order 1234.\nthen: end_turn\nmodel:\n"
        "  - tool_use: [{name: lookup_order, input: {order_id: '1234'}}]\n  - end_turn: Refunded.\n", encoding="utf-8")
    trace = tmp_path / "t.jsonl"
    assert main(["run", str(scenario), "--drive", DRIVE, "--trace", str(trace)]) == 0
    unknown = simloop.Transcript.read(trace).of(ToolEnd)
    assert [e.status for e in unknown] == ["raised"] and "UnknownToolError" in (unknown[0].error or "")
    assert main(["run", str(scenario), "--drive", DRIVE, "--tools", str(own_tools.TOOLS_FILE), "--trace",
                 str(trace)]) == 0
    assert [e.status for e in simloop.Transcript.read(trace).of(ToolEnd)] == ["ok"]
    capsys.readouterr()


def test_cli_verify_server_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["verify", "examples.pause_turn_final:drive", "--max-examples", "60", "--seed", "0", "--max-steps", "10",
            "--deadline", "300", "--out", str(tmp_path), "--no-progress"]
    assert main([*base, "--server-tools", "off"]) == 0  # never paused, so its pause bug cannot show
    assert main(base) == 1  # by request: it declares web search, pauses come, and it returns one as its answer
    assert "FAILED: honest_outcome broken" in capsys.readouterr().out
    assert main([*base, "--server-tools", "maybe"]) == 2
    assert "'maybe' is not one of 'request', 'on', 'off'" in capsys.readouterr().err


# -- a loop in any language: --command with --tools -------------------------------------------------------------

COMMAND_LOOP = r'''
import json, os, urllib.request
TOOLS = json.loads(os.environ["SIMLOOP_TOOLS"]) if os.environ.get("OWN") is None else [
    {"name": "lookup_order", "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
    {"name": "issue_refund", "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}]
def post(url, body, headers=()):
    request = urllib.request.Request(url, json.dumps(body).encode(), dict(headers, **{"content-type": "application/json"}))
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
messages = [{"role": "user", "content": os.environ["SIMLOOP_TASK"]}]
for _ in range(8):
    status, reply = post(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
                         {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS, "messages": messages},
                         {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"})
    if status != 200:
        print(json.dumps({"reason": "error", "text": str(status)})); break
    messages.append({"role": "assistant", "content": reply["content"]})
    calls = [b for b in reply["content"] if b["type"] == "tool_use"]
    if reply["stop_reason"] == "pause_turn":
        continue
    if reply["stop_reason"] != "tool_use" or not calls:
        reason = {"max_tokens": "truncated", "refusal": "refusal"}.get(reply["stop_reason"], "final")
        print(json.dumps({"reason": reason, "text": ""})); break
    results = []
    for b in calls:
        _, out = post(os.environ["SIMLOOP_TOOLS_URL"] + "/" + b["name"], b["input"])
        results.append({"type": "tool_result", "tool_use_id": b["id"], "content": out.get("content", ""),
                        "is_error": bool(out.get("is_error", True))})
    messages.append({"role": "user", "content": results})
else:
    print(json.dumps({"reason": "max_steps", "text": ""}))
'''


def test_cli_verify_command_with_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = tmp_path / "loop.py"
    loop.write_text(COMMAND_LOOP, encoding="utf-8")
    base = ["verify", "--command", f"env OWN=1 {sys.executable} {loop}", "--max-examples", "6", "--seed", "1",
            "--out", str(tmp_path), "--no-progress", "--network", "loopback"]
    assert main(base) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is one verify does not declare (it declares search, send_email)" in err and "--tools tools.yaml" in err
    assert main([*base, "--tools", str(own_tools.TOOLS_FILE)]) == 0
    assert "ok: 6 runs of --command" in capsys.readouterr().out


# -- the pytest plugin ----------------------------------------------------------------------------------------------

PLUGIN_TEST = """
def test_own_tools(simloop):
    simloop.verify("tests.loops.own_tools:drive", max_examples=8)
"""


def test_plugin_declares_the_loops_tools(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(test_own=PLUGIN_TEST)
    (pytester.path / "tools.yaml").write_text(own_tools.TOOLS_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    undeclared = pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=1")
    undeclared.assert_outcomes(failed=1)
    undeclared.stdout.fnmatch_lines(["*is one verify does not declare (it declares search, send_email)*"])
    pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=1", "--simloop-tools=tools.yaml").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=1", "-o", "simloop_tools=tools.yaml").assert_outcomes(
        passed=1)
    pytester.makeconftest("""
import pytest

@pytest.fixture
def simloop_config():
    return {"tools": "tools.yaml"}  # a tools file's path, looked up as scenario paths are
""")
    pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=1").assert_outcomes(passed=1)
    missing = pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=1", "--simloop-tools=nope.yaml")
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*tools file 'nope.yaml' not found; looked in: *"])


def test_plugin_server_tools(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(test_pause="""
def test_pause(simloop):
    simloop.verify("examples.pause_turn_final:drive", max_examples=60, limits={"max_steps": 10, "deadline_s": 300})
""")
    by_request = pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=0")
    by_request.assert_outcomes(failed=1)
    by_request.stdout.fnmatch_lines(["*[[]honest_outcome[]]*"])
    off = pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=0", "--simloop-server-tools=off")
    off.assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=0", "-o", "simloop_server_tools=off").assert_outcomes(
        passed=1)
    bad = pytester.runpytest("-p", "no:cacheprovider", "-o", "simloop_server_tools=maybe")
    bad.stderr.fnmatch_lines(["*ini simloop_server_tools is one of request, on, off, got 'maybe'"])


@pytest.mark.parametrize(("loop", "flag", "invariant"), [
    ("abort_ignored", "--simloop-abort", "abort"),
    ("durable_resend", "--simloop-restarts=1", "no_rerun"),
])
def test_plugin_abort_and_restarts_reach_verify(pytester: pytest.Pytester, loop: str, flag: str, invariant: str) -> None:
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(test_loop=f"""
def test_loop(simloop):
    simloop.verify("examples.{loop}:drive", max_examples=60)
""")
    pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=0").assert_outcomes(passed=1)  # never stopped/killed
    caught = pytester.runpytest("-p", "no:cacheprovider", "--simloop-seed=0", flag)
    caught.assert_outcomes(failed=1)
    caught.stdout.fnmatch_lines([f"*[[]{invariant}[]]*"])


def test_init_shows_where_the_loops_tools_go(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)
    folder = pytester.path / "t"
    assert main(["init", str(folder)]) == 0
    assert 'return {"drive": "simloop_drive:drive", "tools": "tools.yaml", "max_examples": 50}' in \
        (folder / "conftest.py").read_text(encoding="utf-8")
    # the user points the drive at a loop with tools of its own, and has not listed them yet
    (folder / "simloop_drive.py").write_text("from tests.loops.own_tools import drive  # noqa: F401\n", encoding="utf-8")
    args = ["t", "-p", "no:cacheprovider", "-k", "keeps_every_invariant", "--simloop-seed=1", "--simloop-max-examples=8"]
    told = pytester.runpytest(*args)
    told.assert_outcomes(failed=1)
    told.stdout.fnmatch_lines(["*is one verify does not declare (it declares search, send_email)*"])
    (folder / "tools.yaml").write_text(own_tools.TOOLS_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    pytester.runpytest(*args).assert_outcomes(passed=1)


def test_the_plugin_and_the_library_agree_on_server_tools() -> None:
    from pytest_plugin.plugin import SERVER_TOOLS_CHOICES
    from simloop._offer import SERVER_TOOLS

    assert tuple(SERVER_TOOLS_CHOICES) == SERVER_TOOLS
