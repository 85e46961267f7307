"""The v1 scenario format: loading, round-tripping, and errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from simloop import Limits, Reply, Scenario, ScenarioError, ToolSpec, load_scenario

GOOD = """\
name: outage-after-write
task: Email the customer that the refund is done.
tools:
  - name: send_email
    kind: write                 # read | write
    description: Send an email
    input_schema: {type: object, properties: {to: {type: string}}, required: [to]}
    results: ["sent"]
model:
  - tool_use: [{name: send_email, input: {to: a@example.com}}]
    latency: 2.0
  - error: 529
    repeat: 3
  - end_turn: "Done."
then: end_turn
faults:
  - {tool: send_email, call: 1, kind: commit_then_raise}
limits: {max_steps: 12, deadline_s: 120}
expect: {violations: []}
"""


def test_the_design_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(GOOD)
    s = load_scenario(path)
    assert s.name == "outage-after-write"
    assert s.tools[0].kind == "write"
    assert [r.kind for r in s.model] == ["tool_use", "error", "end_turn"]
    assert s.model[1].repeat == 3
    assert s.model[0].latency == 2.0
    assert s.faults[0].kind == "commit_then_raise"
    assert s.limits == Limits(max_steps=12, deadline_s=120)
    assert s.expect is not None and s.expect.violations == []


def test_round_trip_through_yaml() -> None:
    s = Scenario.from_yaml(GOOD)
    again = Scenario.from_yaml(s.to_yaml())
    assert again == s
    assert again.to_yaml() == s.to_yaml()
    assert s.to_yaml().startswith("version: 1\n")


def test_python_construction_matches_the_file() -> None:
    s = Scenario(
        name="x",
        task="t",
        tools=[ToolSpec(name="search")],
        model=[Reply(tool_use=[{"name": "search", "input": {"q": "a"}}]), Reply(end_turn="ok")],
    )
    assert Scenario.from_yaml(s.to_yaml()) == s
    assert s.model[0].calls[0].name == "search"


def test_yaml_1_2_keeps_no_as_a_string() -> None:
    s = Scenario.from_yaml("task: 'x'\nmodel:\n  - end_turn: no\n")
    assert s.model[0].end_turn == "no"


BROKEN = [
    ("not yaml", "task: [unclosed\n", 2, "not valid YAML"),
    ("a list", "- a\n- b\n", 1, "a scenario is a mapping with keys task, tools, model, ...; got a list"),
    ("empty", "", 1, "got an empty file"),
    ("two kinds", "model:\n  - end_turn: hi\n    refusal: no\n", 2, "exactly one of"),
    ("no kind", "model:\n  - latency: 2\n", 2, "(found: none)"),
    ("bad error", "model:\n  - end_turn: a\n  - error: 418\n", 3, "model[1].error: expected one of 401, 404, 429, 500"),
    ("unknown key", "tools:\n  - name: a\n    knd: read\n", 3, "tools[0].knd: unknown key 'knd'"),
    ("bad kind", "tools:\n  - name: a\n    kind: delete\n", 3, "tools[0].kind"),
    ("bad tool name", "tools:\n  - name: 'has space'\n", 2, "tools[0].name: a tool name is 1 to 128"),
    ("fault on unknown tool", "tools:\n  - name: a\nfaults:\n  - {tool: b, kind: raise}\n", 4, "faults[0].tool: 'b' is not in tools (a)"),
    ("bad fault kind", "tools:\n  - name: a\nfaults:\n  - {tool: a, kind: explode}\n", 4, "faults[0].kind: expected one of raise"),
    ("commit on read", "tools:\n  - name: a\nfaults:\n  - {tool: a, kind: commit_then_raise}\n", 4, "needs a write tool"),
    ("negative latency", "model:\n  - end_turn: a\n    latency: -1\n", 3, "model[0].latency"),
    ("repeat zero", "model:\n  - end_turn: a\n    repeat: 0\n", 3, "repeat is a positive number or 'forever'"),
    ("text with end_turn", "model:\n  - end_turn: a\n    text: b\n", 2, "'text' goes with tool_use only"),
    ("bad then", "then: loop\n", 1, "then: expected one of end_turn, repeat_last, fail"),
    ("version 2", "version: 2\ntask: x\n", 1, "scenario format version 2 is not supported"),
    ("duplicate tools", "tools:\n  - name: a\n  - name: a\n", 3, "tools[1].name: tool names must be unique"),
    ("bad limits", "limits: {max_steps: 0}\n", 1, "limits.max_steps"),
    ("unknown invariant", "expect: {violations: [nope]}\n", 1, "expect.violations[0]"),
]


@pytest.mark.parametrize(("text", "line", "expected"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_files_name_file_line_and_expectation(tmp_path: Path, text: str, line: int, expected: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line, str(err)
    assert expected in str(err)
    assert str(err).startswith(f"{path}:{line}: ")
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # no chained traceback


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "nope.yaml")


def test_scenario_error_is_a_usage_error() -> None:
    from simloop import UsageError

    assert issubclass(ScenarioError, UsageError)
    assert issubclass(ScenarioError, ValueError)
