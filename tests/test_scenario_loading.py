"""Scenario loading at the caps and on odd bytes (issue 27 item 5).

An unquoted hex string is text however long; a 0.7 MB file near the caps loads in well under a
second or two (libyaml's parser, `simloop._loading.fastyaml`, with ruamel's tree, lines and caps); a NUL
character or a byte that is not UTF-8 is refused at its line.  The fast path is checked against
ruamel's reading of the curated scenarios and of YAML's corner cases: same values, same lines.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from simloop import Scenario, ScenarioError, load_scenario
from simloop._loading.fastyaml import DEFER, load
from simloop._loading.fileguard import FileRefused, GuardedParser, to_plain

ROOT = Path(__file__).resolve().parents[1]
HEX = "9f3c" + "0123456789abcdef" * 64 + "beef" * 3  # 1,040 characters, not all digits


def test_an_unquoted_1040_character_hex_string_is_text() -> None:
    scenario = Scenario.from_yaml(f"version: 1\nname: s\ntask: {HEX}\nmodel: [{{end_turn: {HEX}}}]\n")
    assert len(HEX) == 1040 and scenario.task == HEX


def test_a_number_of_1040_digits_is_still_refused() -> None:
    with pytest.raises(ScenarioError) as exc:
        Scenario.from_yaml("version: 1\nname: s\ntask: " + "7" * 1040 + "\n")
    assert str(exc.value) == "<scenario>:3: a number of 1,040 digits; numbers in a scenario are far shorter"


def _near_the_caps(pairs: int) -> str:
    values = {f"field_{i}": (i if i % 3 else f"text value {i}") for i in range(pairs)}
    return (
        "version: 1\nname: big\ntask: hi\ntools:\n  - name: t\n    results: [ok]\nmodel:\n"
        f"  - tool_use: [{{name: t, input: {json.dumps(values, indent=1)}}}]\n  - end_turn: done\n"
    )


def test_a_file_near_the_caps_loads_fast_and_in_linear_time(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(_near_the_caps(27_000), encoding="utf-8")
    assert 0.65e6 < path.stat().st_size < 0.75e6  # 0.7 MB, 54,000 values (the cap is 100,000)
    started = time.thread_time()  # this thread's CPU time: the parse's cost, which a loaded machine leaves alone
    scenario = load_scenario(path)
    took = time.thread_time() - started
    assert len(scenario.model[0].tool_use[0].input) == 27_000  # type: ignore[index]
    assert took < 5.0, f"{took:.1f} s"  # tens of seconds with ruamel alone
    half = tmp_path / "half.yaml"
    half.write_text(_near_the_caps(13_500), encoding="utf-8")
    started = time.thread_time()
    load_scenario(half)
    assert took < 4 * max(time.thread_time() - started, 0.05)  # twice the file, not four times the time


def test_a_nul_character_is_refused_at_its_line() -> None:
    with pytest.raises(ScenarioError) as exc:
        Scenario.from_yaml('version: 1\nname: s\ntask: "a\x00b"\n', path="s.yaml")
    assert str(exc.value) == (
        's.yaml:3: not valid YAML: the character U+0000 at column 9 is not allowed in a YAML file (control '
        'characters are not); remove it, or write it as an escape inside a double-quoted string ("\\u0000")'
    )


def test_invalid_utf8_is_refused_at_its_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"version: 1\nname: s\ntask: caf\xe9 au lait\n")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert str(exc.value) == (
        f"{path}:3: not UTF-8: the byte 0xe9 at column 10 (byte offset 28) invalid continuation byte; "
        "save the file as UTF-8"
    )


def test_crlf_line_endings_still_load(tmp_path: Path) -> None:
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"version: 1\r\nname: s\r\ntask: |\r\n  two\r\n  lines\r\nmodel: [{end_turn: ok}]\r\n")
    assert load_scenario(path).task == "two\nlines\n"


# -- the fast path reads what ruamel reads ------------------------------------------------------------------------

CORNERS = [
    "a: 1\nb: -2\nc: +3\nd: 017\ne: 1.5\nf: .5\ng: 1e5\nh: 1.\ni: true\nj: False\nk: ~\nl: null\nm:\nn: yes\no: on\n",
    'a: "x\\ty\\u00e9\\n"\nb: \'it\'\'s\'\nc: |\n  lit\n   eral\nd: >\n  fol\n  ded\n\n  par\ne: |-\n  strip\n',
    "a: &x {k: [1, 2, {z: q}]}\nb: *x\nc: &s text\nd: *s\n",
    "a: !!str 2026-12-01\nb: ! 12\nc: !!str 1.5\nd: !!map {k: v}\ne: !!seq [1]\n",
    "- a\n- - b\n  - c\n-\n  k: v\n- {x: [y, {z: w}]}\n",
    '\ufeff{"json": [1, 2.5, "three", null, true], "tab":\t"ok"}\n',
    "k: v # a comment\n# another\nl: [1, # inside\n  2]\nlong: word word word\n  continued here\n",
    "k: caf\u00e9 \U0001f600\nl: 'a: b'\nm: a#b\nn: -x\no: .hidden\np: ~x\nq: t\nr: Nope\n",
    "1: one\n~: none\n",
    "true: yes\n2.5: x\n",
]
REFUSED_OR_DEFERRED = [
    "a: 0x1F\nb: 0o17\nc: 1_000\nd: .inf\ne: 2026-12-01\n",
    "base: &b {x: 1}\nm:\n  <<: *b\n  y: 2\n",
    "a: 1\na: 2\n",
    "%YAML 1.1\n---\na: yes\n",
    "a: [1, 2\n",
    "--- a\n--- b\n",
    "? [complex]\n: key\n",
    "a: *nowhere\n",
]


def _ruamel(text: str) -> Any:
    yaml = YAML(typ="rt")
    yaml.Parser = GuardedParser
    return yaml.load(text)


def _lines(node: Any, loc: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """Every value's (key line, key column, value line, value column) in a ruamel tree, by path."""
    out: dict[tuple[Any, ...], Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            # (an empty value's place: libyaml says where it would be, ruamel where the next token is)
            out[(*loc, key)] = tuple(node.lc.data.get(key, ()))[:2 if value is None else 4]
            out.update(_lines(value, (*loc, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out[(*loc, i)] = tuple(node.lc.data.get(i, ()))
            out.update(_lines(value, (*loc, i)))
    return out


def _same(text: str) -> None:
    fast, slow = load(text), _ruamel(text)
    assert fast is not DEFER
    assert json.dumps(to_plain(fast)) == json.dumps(to_plain(slow)) if _plain_ok(slow) else fast == slow
    assert _lines(fast) == _lines(slow)


def _plain_ok(data: Any) -> bool:
    try:
        to_plain(data)
    except FileRefused:
        return False
    return True


@pytest.mark.parametrize("text", CORNERS, ids=range(len(CORNERS)))
def test_the_fast_path_reads_yaml_corner_cases_as_ruamel_does(text: str) -> None:
    _same(text)


@pytest.mark.parametrize("text", REFUSED_OR_DEFERRED, ids=range(len(REFUSED_OR_DEFERRED)))
def test_what_the_fast_path_cannot_reproduce_is_left_to_ruamel(text: str) -> None:
    assert load(text) is DEFER


def test_the_fast_path_reads_every_curated_scenario_as_ruamel_does() -> None:
    files = sorted((ROOT / "scenarios").rglob("*.yaml"))
    assert len(files) > 10
    for path in files:
        _same(path.read_text(encoding="utf-8"))


# -- a scenario simloop writes (convert, dump), it reads back --------------------------------------------------------


@pytest.mark.parametrize("text", ["\x85", "a\u2028b", "\u2029", "?0", "- x", "#", "key: value", " lead", "trail "])
def test_a_scenario_written_as_yaml_reads_back_odd_texts(text: str) -> None:
    scenario = Scenario.model_validate({"name": "s", "task": text, "model": [{"end_turn": text}]})
    back = Scenario.from_yaml(scenario.to_yaml())
    assert back.task == text and back.model[0].end_turn == text


@settings(max_examples=150, deadline=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1))
def test_a_scenario_written_as_yaml_reads_back_any_text(text: str) -> None:
    scenario = Scenario.model_validate({
        "name": "s", "task": text,
        "tools": [{"name": "t", "results": [text]}],
        "model": [{"tool_use": [{"name": "t", "input": {text: text}}]}, {"end_turn": text}],
    })
    assert Scenario.from_yaml(scenario.to_yaml()) == scenario


def test_the_fast_path_survives_a_reimported_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytester's in-process runs restore sys.modules, so `yaml` is imported afresh while libyaml's C module keeps
    the first import's event and error classes: a scenario file then read as empty, and a syntax error escaped."""
    import yaml

    assert load("a: 1\n") == {"a": 1}  # the C module is loaded, with this import's classes
    for name in [n for n in sys.modules if n == "yaml" or n.startswith("yaml.")]:
        monkeypatch.delitem(sys.modules, name)
    import yaml as fresh

    assert fresh is not yaml
    assert load("a: 1\nb: [x, y]\n") == {"a": 1, "b": ["x", "y"]}
    assert load("a: [") is DEFER  # ruamel reads it and names the line
