"""Scenario files are data (issue 21, items 7-9): hostile files are refused at their line, before harm.

Each bad file below is one attack or malformation from the issue; each must be a `ScenarioError`
naming the file, the line and what is expected, quickly and without a traceback.  The valid edge
cases must keep loading: the loader accepts exactly the documented format (docs/security.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from simloop import Scenario, ScenarioError, Sim, UsageError, load_scenario
from simloop._loading.fileguard import (
    MAX_COUNT,
    MAX_DEADLINE_S,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    MAX_OUTPUT_CHARS,
    MAX_SECONDS,
    MAX_TOKENS,
)
from simloop.cli import main

ROOT = Path(__file__).resolve().parents[1]
TOOL = "tools:\n  - name: a\n"
ONE_REPLY = "model:\n  - end_turn: done\n"


def _billion_laughs() -> str:
    """The classic: nine levels of nine aliases each, 400 bytes that expand to 387 million strings."""
    lines = ['  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "task: x\nmodel:\n  - tool_use: [{name: a, input: {}}]\ntools:\n  - name: a\n    input_schema:\n" \
        "      type: object\n      properties:\n" + "\n".join("    " + line for line in lines) + "\n"


def _deep_input(levels: int) -> str:
    """A tool input nested ``levels`` lists deep (the document adds 6 levels around it)."""
    return TOOL + "model:\n  - tool_use: [{name: a, input: {x: " + "[" * levels + "]" * levels + "}}]\n"


# (id, file text, line the error names, what the message must say)
BAD: list[tuple[str, str, int | None, str]] = [
    # item 8: alias bombs and aliases that never end
    ("billion laughs", _billion_laughs(), 14, f"more than {MAX_NODES:,} values (an alias bomb?)"),
    ("recursive alias", "task: x\nmodel: &m\n  - end_turn: x\n  - *m\n", 4, "the alias *m refers to a value that contains it"),
    ("alias nests too deep", "task: x\nx: &a " + "[" * 40 + "]" * 40 + "\ny: " + "[" * 30 + "*a" + "]" * 30 + "\n", 3,
     f"with its aliases expanded, the document nests deeper than {MAX_DEPTH} levels"),
    # item 9: nesting (today a RecursionError after seconds)
    ("flow nesting", _deep_input(5000), 4, f"nest deeper than {MAX_DEPTH} levels"),
    ("block nesting", "tools:\n  - name: a\n    input_schema:\n" + "".join(
        "  " * (i + 3) + "k:\n" for i in range(100)), 65, f"nest deeper than {MAX_DEPTH} levels"),
    ("nesting just past the cap", _deep_input(MAX_DEPTH - 5), 4, f"nest deeper than {MAX_DEPTH} levels"),
    # item 9: YAML types JSON cannot carry
    ("!!set", TOOL + "    input_schema: {type: object, properties: !!set {x, y}}\n", 3,
     "the YAML tag !!set is not part of the scenario format"),
    ("!!binary", "task: !!binary aGVsbG8=\n", 1, "the YAML tag !!binary is not part of the scenario format"),
    ("!!omap", "task: x\nexpect: !!omap [{reason: final}]\n", 2, "the YAML tag !!omap"),
    ("custom tag", "task: !shell ls\n", 1, "the YAML tag !shell"),
    ("python tag", "task: !!python/object/apply:os.system [ls]\n", 1, "the YAML tag !!python/object/apply:os.system"),
    ("!!int on text", "task: !!int abc\n", 1, "the YAML tag !!int is not part of the scenario format"),
    ("!!float on text", "limits: {deadline_s: !!float abc}\n", 1, "the YAML tag !!float"),
    ("a number of 5,000 digits", "limits: {max_steps: " + "9" * 5000 + "}\n", 1,
     "a number of 5,000 digits; numbers in a scenario are far shorter"),
    ("a hex number of 5,000 digits", "limits: {max_steps: 0x" + "f" * 5000 + "}\n", 1, "a number of 5,002 digits"),
    ("date", "task: 2026-12-01\n", 1, "task: YAML read this as a date (2026-12-01), which JSON cannot carry; quote it"),
    ("timestamp in an input", TOOL + "model:\n  - tool_use: [{name: a, input: {at: 2026-12-01 10:00:00}}]\n", 4,
     "model[0].tool_use[0].input.at: YAML read this as a date"),
    ("int key", TOOL + "model:\n  - tool_use: [{name: a, input: {1: one}}]\n", 4,
     "model[0].tool_use[0].input: a mapping key must be a string (JSON has no other keys), got 1; quote it"),
    ("null key", "task: x\n~: y\n", 1, "a mapping key must be a string (JSON has no other keys), got None"),
    (".inf in an input", TOOL + "model:\n  - tool_use: [{name: a, input: {n: .inf}}]\n", 4,
     "model[0].tool_use[0].input.n: .inf is not a number JSON can carry"),
    ("lone surrogate", 'task: "\\ud800"\n', 1, "task: this text holds a lone surrogate"),
    # item 9: latencies, deadlines and retry_after: non-finite, negative, absurd
    (".inf latency", "model:\n  - end_turn: a\n    latency: .inf\n", 3, "model[0].latency: .inf is not a number"),
    (".nan latency", "model:\n  - end_turn: a\n    latency: .nan\n", 3, "model[0].latency: .nan is not a number"),
    ("negative latency", "model:\n  - end_turn: a\n    latency: -0.5\n", 3, "greater than or equal to 0"),
    ("absurd latency", "model:\n  - end_turn: a\n    latency: 1e30\n", 3,
     "model[0].latency: a number of seconds is a finite number up to 2,592,000 (30 days), got 1e+30"),
    ("latency as text", "model:\n  - end_turn: a\n    latency: '2'\n", 3, "input should be a valid number, got '2'"),
    ("latency as a boolean", "model:\n  - end_turn: a\n    latency: true\n", 3, "input should be a valid number"),
    (".inf deadline", ONE_REPLY + "limits: {deadline_s: .inf}\n", 3, "limits.deadline_s: .inf is not a number"),
    ("negative deadline", ONE_REPLY + "limits: {deadline_s: -1}\n", 3, "limits.deadline_s: input should be greater than 0"),
    ("absurd deadline", ONE_REPLY + "limits:\n  deadline_s: 1e12\n", 4,
     "limits.deadline_s: deadline_s is a finite number up to 604,800 (7 days)"),
    (".inf retry_after", "model:\n  - error: 429\n    retry_after: .inf\n", 3, "model[0].retry_after: .inf"),
    ("negative retry_after", "model:\n  - error: 429\n    retry_after: -3\n", 3, "retry_after: input should be greater than 0"),
    ("absurd retry_after", "model:\n  - error: 429\n    retry_after: 9e9\n", 3, "up to 2,592,000 (30 days)"),
    ("absurd fault latency", TOOL + "faults:\n  - {tool: a, kind: slow, latency: 1e20}\n" + ONE_REPLY, 4,
     "faults[0].latency: a number of seconds is a finite number up to 2,592,000"),
    # item 9: sizes and counts beyond the documented caps
    ("huge_output of 5 GB", TOOL + "faults:\n  - {tool: a, kind: huge_output, size: 5300000000}\n", 4,
     f"faults[0].size: a huge_output size (characters) is at most {MAX_OUTPUT_CHARS:,}"),
    ("repeat past the cap", "model:\n  - end_turn: a\n    repeat: 99999999999\n", 3,
     f"repeat is at most {MAX_COUNT:,}, got 99,999,999,999; use 'forever'"),
    ("max_steps past the cap", "limits: {max_steps: 1000000000000}\n", 1, f"max_steps is at most {MAX_COUNT:,}"),
    ("max_steps 1e400", "limits: {max_steps: 1e400}\n", 1, "limits.max_steps: .inf is not a number"),
    ("max_steps as a float", "limits: {max_steps: 2.0}\n", 1, "limits.max_steps: input should be a valid integer"),
    ("call as a boolean", TOOL + "faults:\n  - {tool: a, kind: raise, call: true}\n", 4, "faults[0].call: input should be a valid integer"),
    ("token count past the cap", "model:\n  - end_turn: a\n    usage: {input_tokens: 10000000000}\n", 3,
     f"a token count is at most {MAX_TOKENS:,}"),
    # item 9: tool names the API would reject
    ("tool name with a trailing newline", 'tools:\n  - name: "search\\n"\n', 2, "tools[0].name: a tool name is 1 to 128"),
    ("tool name too long", "tools:\n  - name: " + "a" * 129 + "\n", 2, "tools[0].name: a tool name is 1 to 128"),
    ("empty tool name", "tools:\n  - name: ''\n", 2, "tools[0].name: a tool name is 1 to 128"),
    # versions and texts the format does not have
    ("version true", "version: true\n", 1, "scenario format version True is not supported"),
    ("version 1.0", "version: 1.0\n", 1, "scenario format version 1.0 is not supported"),
    ("a number for text", "model:\n  - end_turn: 42\n", 2,
     'model[0].end_turn: expected text, got the int 42; quote it to make it text: "42"'),
    ("repeat true", "model:\n  - end_turn: a\n    repeat: true\n", 3, "model[0].repeat: input should be a valid integer"),
    # item 7: a file cannot name code to run
    ("function without the opt-in", TOOL + "    function: 'subprocess:getoutput'\n", 3,
     ("tools[0].function: a scenario file cannot name code to run ('subprocess:getoutput'). Bind the tool in Python "
      "instead: Sim(scenario, tools={'a': fn}); or, if you trust this file, opt in with allow_functions=True "
      "(simloop run --allow-functions)")),
]


@pytest.mark.parametrize(("text", "line", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_files_are_refused_at_their_line(tmp_path: Path, text: str, line: int | None, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    started = time.thread_time()  # this thread's CPU time: the parse's cost, not a loaded machine's waits
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    took = time.thread_time() - started
    err = info.value
    assert (err.path, err.line) == (str(path), line), str(err)
    assert str(err).startswith(f"{path}:{line}: ")
    assert expected in str(err)
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # no chained traceback
    assert took < 2.0, f"refused, but only after {took:.1f}s"


def test_the_billion_laughs_fails_fast_and_small() -> None:
    import tracemalloc

    text = _billion_laughs()
    assert len(text) < 600
    tracemalloc.start()
    started = time.thread_time()  # CPU time, as above
    try:
        with pytest.raises(ScenarioError, match="an alias bomb"):
            Scenario.from_yaml(text, path="laughs.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.thread_time() - started < 1.0
    assert peak < 20_000_000, f"{peak:,} bytes at peak"


def test_a_file_past_the_size_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.seek(MAX_FILE_BYTES)
        f.write(b"\n")  # sparse: nothing is written but the size
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == (
        f"{path}: the file is {MAX_FILE_BYTES + 1:,} bytes; a scenario file is at most {MAX_FILE_BYTES:,} bytes "
        "(4 MiB). Split it, or shorten its texts"
    )
    with pytest.raises(ScenarioError, match="a scenario file is at most"):
        Scenario.from_yaml("task: " + "x" * MAX_FILE_BYTES)


def test_a_device_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    import os

    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(ScenarioError, match=r"zero.yaml: not a regular file"):
        load_scenario(link)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match=r"pipe.yaml: not a regular file"):
        load_scenario(fifo)
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(ScenarioError, match=r"folder.yaml: not a regular file"):
        load_scenario(folder)


def test_many_values_without_aliases_are_refused_too() -> None:
    text = "task: x\nexpect: {violations: [" + ",".join(["stops"] * (MAX_NODES + 10)) + "]}\n"
    with pytest.raises(ScenarioError, match=f"the document holds more than {MAX_NODES:,} values; split the scenario"):
        Scenario.from_yaml(text)


def _nested_in_reply(levels: int) -> dict[str, Any]:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return {"x": value}


# Valid edge cases: the documented format at its edges, which must keep loading.
GOOD: list[tuple[str, str, Any]] = [
    ("json with tabs", '{\n\t"task": "x",\n\t"model": [{"end_turn": "ok", "latency": 1e3}]\n}\n',
     lambda s: s.model[0].latency == 1000.0),
    ("anchors and aliases in moderation",
     "tools:\n  - &t {name: a, kind: write}\nmodel:\n  - &r {end_turn: x}\n  - *r\n",
     lambda s: len(s.model) == 2 and s.model[0] == s.model[1]),
    ("merge keys", "tools:\n  - &t {name: a, kind: write}\n  - {<<: *t, name: b}\n",
     lambda s: [(t.name, t.kind) for t in s.tools] == [("a", "write"), ("b", "write")]),
    ("a quoted date is text", "task: '2026-12-01'\n", lambda s: s.task == "2026-12-01"),
    ("an explicit !!str", "task: !!str 2026-12-01\n", lambda s: s.task == "2026-12-01"),
    ("a byte order mark", "\ufefftask: x\n", lambda s: s.task == "x"),
    ("unicode and NUL in text", 'task: "caf\\u00e9 \\0 \\U0001F600"\n', lambda s: s.task == "café \0 \U0001F600"),
    ("an empty final text", "model:\n  - end_turn: ''\n", lambda s: s.model[0].end_turn == ""),
    ("an integer latency", "model:\n  - end_turn: a\n    latency: 2\n", lambda s: s.model[0].latency == 2.0),
    ("every cap at its edge",
     (f"tools:\n  - name: {'a' * 128}\nmodel:\n  - end_turn: a\n    latency: {MAX_SECONDS:.0f}\n    repeat: {MAX_COUNT}\n"
      f"  - error: 429\n    retry_after: {MAX_SECONDS:.0f}\n    usage: {{input_tokens: {MAX_TOKENS}}}\n"
      f"faults:\n  - {{tool: {'a' * 128}, kind: huge_output, size: {MAX_OUTPUT_CHARS}, call: {MAX_COUNT}}}\n"
      f"limits: {{max_steps: {MAX_COUNT}, deadline_s: {MAX_DEADLINE_S:.0f}, max_total_tokens: {MAX_TOKENS}}}\n"),
     lambda s: s.limits.deadline_s == MAX_DEADLINE_S and s.faults[0].size == MAX_OUTPUT_CHARS),
    ("nesting at the cap", _deep_input(MAX_DEPTH - 6),
     lambda s: s.model[0].calls[0].input == _nested_in_reply(MAX_DEPTH - 6)),
    ("a string key that looks like a number", TOOL + "model:\n  - tool_use: [{name: a, input: {'1': one}}]\n",
     lambda s: s.model[0].calls[0].input == {"1": "one"}),
]


@pytest.mark.parametrize(("text", "check"), [g[1:] for g in GOOD], ids=[g[0] for g in GOOD])
def test_valid_edge_cases_load(tmp_path: Path, text: str, check: Any) -> None:
    path = tmp_path / "edge.yaml"
    path.write_text(text, encoding="utf-8")
    scenario = load_scenario(path)
    assert check(scenario), scenario


def test_python_construction_has_the_same_caps() -> None:
    from pydantic import ValidationError

    from simloop import Fault, Limits, Reply, ToolSpec

    for build in (
        lambda: Reply(end_turn="a", latency=float("inf")),
        lambda: Reply(error=429, retry_after=float("inf")),
        lambda: Limits(deadline_s=float("inf")),
        lambda: Fault(tool="a", kind="huge_output", size=MAX_OUTPUT_CHARS + 1),
        lambda: ToolSpec(name="search\n"),
    ):
        with pytest.raises(ValidationError):
            build()


# -- item 7: function: paths ------------------------------------------------------------------------------------


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user module on sys.path: one own function, one re-export of the stdlib's os.system."""
    (tmp_path / "my_tools.py").write_text(
        "from os import system as run_it\n\nCALLS = []\n\n\ndef lookup(q):\n    CALLS.append(q)\n"
        "    return {'answer': q.upper()}\n\n\nNOT_A_FUNCTION = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_tools", raising=False)
    return tmp_path


def _file_with_function(tmp_path: Path, function: str) -> Path:
    path = tmp_path / "fn.yaml"
    path.write_text(f"task: x\ntools:\n  - name: lookup\n    function: {function!r}\nmodel:\n  - end_turn: ok\n")
    return path


def test_an_own_function_loads_with_the_opt_in_and_runs(helpers: Path) -> None:
    path = _file_with_function(helpers, "my_tools:lookup")
    with pytest.raises(ScenarioError, match="cannot name code to run"):
        load_scenario(path)
    assert "my_tools" not in sys.modules, "without the opt-in nothing is imported"
    scenario = load_scenario(path, allow_functions=True)
    with Sim(scenario) as sim:
        assert sim.run_tool("lookup", {"q": "hi"}) == '{"answer": "HI"}'
    with Sim(path, allow_functions=True) as sim:
        assert sim.run_tool("lookup", {"q": "yo"}) == '{"answer": "YO"}'


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ("subprocess:getoutput", "function 'subprocess:getoutput' is not in your own code"),
        ("os:system", "function 'os:system' is not in your own code"),
        ("pydantic:create_model", "function 'pydantic:create_model' is not in your own code"),  # site-packages
        ("simloop.cli:main", "function 'simloop.cli:main' is not in your own code"),
        ("my_tools:run_it", "function 'my_tools:run_it' (defined in posix) is not in your own code"),
        ("my_tools:lookup.__globals__", "names a dunder attribute"),
        ("my_tools:nope", "cannot import function 'my_tools:nope' (AttributeError"),
        ("my_tools:NOT_A_FUNCTION", "function 'my_tools:NOT_A_FUNCTION' is a int, not a function"),
        ("no_such_module_here:f", "no module named 'no_such_module_here'"),
        ("os.system", "is not of the form 'package.module:function'"),
        ("rm -rf /:x", "is not of the form 'package.module:function'"),
    ],
)
def test_even_with_the_opt_in_only_own_functions(helpers: Path, function: str, expected: str) -> None:
    path = _file_with_function(helpers, function)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, allow_functions=True)
    assert str(info.value).startswith(f"{path}:4: tools[0].function: tool 'lookup': "), str(info.value)
    assert expected in str(info.value)


def test_replay_takes_the_opt_in(helpers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from examples.correct_sync import drive
    from simloop import replay

    path = helpers / "uses-lookup.yaml"
    path.write_text(
        "task: x\ntools:\n  - name: lookup\n    function: my_tools:lookup\nmodel:\n"
        "  - tool_use: [{name: lookup, input: {q: refunds}}]\n  - end_turn: ok\n"
    )
    with pytest.raises(ScenarioError, match="cannot name code to run"):
        replay(drive, path)
    assert replay(drive, path, allow_functions=True).ok
    assert sys.modules["my_tools"].CALLS == ["refunds"]


def test_run_reports_bad_files_and_goes_on_with_a_summary(
    helpers: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    batch = helpers / "batch"
    batch.mkdir()
    (batch / "a-good.yaml").write_text((ROOT / "scenarios" / "happy-path.yaml").read_text())
    (batch / "b-set.yaml").write_text("task: x\nexpect: !!set {stops}\nmodel:\n  - end_turn: ok\n")
    (batch / "c-shell.yaml").write_text(
        "task: x\ntools:\n  - name: sh\n    function: 'subprocess:getoutput'\nmodel:\n  - end_turn: ok\n"
    )
    (batch / "d-bomb.yaml").write_text(_billion_laughs())
    (batch / "e-own.yaml").write_text(_file_with_function(helpers, "my_tools:lookup").read_text())
    assert main(["run", str(batch), "--drive", "examples.correct_sync:drive"]) == 2
    out = capsys.readouterr().out
    assert f"{batch / 'b-set.yaml'}:2: the YAML tag !!set" in out
    assert f"{batch / 'c-shell.yaml'}:4: tools[0].function: a scenario file cannot name code to run" in out
    assert f"{batch / 'd-bomb.yaml'}:14: with its aliases expanded" in out
    assert out.count("ERROR ") == 4 and out.startswith("ok    ")
    assert out.rstrip().endswith("1 passed, 0 failed, 4 error(s)")
    assert "Traceback" not in out
    # Opted in: the user's own function runs; the shell never does.
    assert main(["run", str(batch), "--drive", "examples.correct_sync:drive", "--allow-functions"]) == 2
    out = capsys.readouterr().out
    assert "function 'subprocess:getoutput' is not in your own code" in out
    assert out.rstrip().endswith("2 passed, 0 failed, 3 error(s)")


def test_cli_caps_agree_with_the_format(capsys: pytest.CaptureFixture[str]) -> None:
    from simloop import cli

    assert (cli._MAX_COUNT, cli._MAX_DEADLINE_S, cli._MAX_TOKENS) == (MAX_COUNT, MAX_DEADLINE_S, MAX_TOKENS)
    assert main(["verify", "examples.correct_sync:drive", "--deadline", "1e12"]) == 2
    assert "Invalid value for '--deadline': 1000000000000.0 is not in the range 0<x<=604800.0" in capsys.readouterr().err


def test_a_sim_from_a_dict_follows_the_file_rules() -> None:
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ScenarioError, match=f"nest deeper than {MAX_DEPTH} levels"):
        Sim({"tools": [{"name": "a"}], "model": [{"tool_use": [{"name": "a", "input": {"x": deep}}]}]})
    data = {"tools": [{"name": "a", "function": "subprocess:getoutput"}], "model": [{"end_turn": "x"}]}
    with pytest.raises(UsageError, match="a scenario file cannot name code to run"):
        Sim(data)
    with pytest.raises(UsageError, match="is not in your own code"):
        Sim(data, allow_functions=True)


def lookup_tool(**input: Any) -> str:
    """A tool implementation bound from Python (verify's reproduction file names it by import path)."""
    return f"found {sorted(input)}"


def test_a_reproduction_file_with_functions_says_how_to_replay_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import simloop
    from examples.tool_exception_escapes import drive
    from simloop import ToolSpec

    monkeypatch.chdir(ROOT)
    tools = [ToolSpec(name="search", function=lookup_tool), ToolSpec(name="send_email", kind="write")]
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(drive, tools=tools, max_examples=30, seed=0, out_dir=tmp_path, invariants=["tool_errors"])
    failure = info.value
    assert failure.scenario_path is not None
    written = Path(failure.scenario_path).read_text()
    assert f"function: {lookup_tool.__module__}:lookup_tool" in written
    assert "# fixed loop replays it cleanly: simloop.replay(drive, this_file, allow_functions=True);" in written
    assert failure.replay == (
        f"simloop run {failure.scenario_path} --drive examples.tool_exception_escapes:drive --allow-functions"
    )
    assert main(["run", failure.scenario_path, "--drive", "examples.tool_exception_escapes:drive"]) == 2
    assert main(failure.replay.split()[1:]) == 1  # replayed, opted in: the same violation
    assert "FAIL" in capsys.readouterr().out


_SEEDS = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "scenarios").glob("*.yaml"))]
_PIECES = [*"[]{}&*!:-,'\"\\|>#?%@` \n\t0123456789.eE+x", "!!set", "!!binary", "*a", "&a", "<<", ".inf", ".nan",
           "\u2028", "\ud800", "\x00", "\ufeff", "2026-01-01", "---", "..."]


def test_mangled_curated_files_are_loaded_or_refused_never_crash() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    edit = st.tuples(st.integers(0, 3000), st.integers(0, 20), st.lists(st.sampled_from(_PIECES), max_size=6))

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(_SEEDS), st.lists(edit, max_size=4))
    def mangled(seed: str, edits: list[tuple[int, int, list[str]]]) -> None:
        text = seed
        for at, cut, pieces in edits:
            at %= len(text) + 1
            text = text[:at] + "".join(pieces) + text[at + cut :]
        try:
            Scenario.from_yaml(text, path="mangled.yaml")
        except ScenarioError as e:
            assert str(e).startswith("mangled.yaml")

    mangled()
