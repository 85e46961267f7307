"""Every trace simloop writes, it reads back (issue 27 item 4).

Text a scenario can hold (U+2028, U+0085 and the other Unicode line boundaries) round-trips; a
malformed trace is refused naming the file, the line and what was expected, never a traceback; the
traces of a batch never overwrite each other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simloop.cli import main
from simloop.timeline import render_timeline
from simloop.transcript import Header, OutcomeEvent, Transcript, TurnStart

ROOT = Path(__file__).resolve().parents[1]
DRIVE = ["--drive", "examples.correct_sync:drive"]
ODD = "one\u2028two\x85three\u2029four\x1cfive\x0bsix\x0cseven\rend"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the drive examples.correct_sync:drive imports from here


def _scenario(path: Path, answer: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "name": path.stem, "task": "hi", "model": [{"end_turn": answer}]}),
                    encoding="utf-8")
    return path


def test_a_reply_with_unicode_line_separators_writes_a_trace_show_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = _scenario(tmp_path / "odd.json", ODD)
    trace = tmp_path / "odd.jsonl"
    assert main(["run", str(file), *DRIVE, "--trace", str(trace)]) == 0
    assert len(trace.read_bytes().splitlines()) == len(trace.read_text(encoding="utf-8").splitlines())
    assert main(["show", str(trace), "--plain"]) == 0
    assert Transcript.read(trace).outcome.text == ODD  # type: ignore[union-attr]
    capsys.readouterr()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",))))
def test_a_trace_round_trips_any_text_a_scenario_can_hold(tmp_path: Path, text: str) -> None:
    transcript = Transcript(Header(scenario=text, seed=0), [TurnStart(t=0.0, turn=0, text=text),
                                                             OutcomeEvent(t=1.5, reason="final", text=text)])
    path = transcript.write(tmp_path / "t.jsonl")
    back = Transcript.read(path)
    assert back == transcript
    render_timeline(back, [])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"type":"outcome","t":"1.5","reason":"final"}', 'outcome.t is "1.5", expected a number'),
        ('{"type":"turn","t":0,"turn":"0"}', 'turn.turn is "0", expected an integer'),
        ('{"type":"outcome","t":NaN,"reason":"final"}', "outcome.t is NaN, expected a number"),
        ('{"type":"outcome","t":1}', "the outcome event has no 'reason'"),
        ('{"oops": 1}', "expected an event whose type is one of"),
        ("[1, 2]", "expected an event whose type is one of"),
        ("{not json", "not a JSON object"),
    ],
    ids=["time-as-string", "int-as-string", "nan", "missing-field", "no-type", "a-list", "not-json"],
)
def test_a_malformed_trace_is_refused_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, expected: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"header","scenario":"x","seed":0,"version":1}\n' + line + "\n", encoding="utf-8")
    for command in ("show", "report"):
        assert main([command, str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"{bad}:2: " in err and expected in err and "Traceback" not in err
        assert "not a transcript this simloop wrote, or it was edited" in err


def test_traces_of_files_with_the_same_name_in_different_folders_do_not_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _scenario(tmp_path / "a" / "x.json", "first")
    second = _scenario(tmp_path / "b" / "x.json", "second")
    third = _scenario(tmp_path / "b" / "x.yaml", "third")  # JSON is YAML: same stem, same folder
    other = _scenario(tmp_path / "a" / "y.json", "other")
    traces = tmp_path / "traces"
    assert main(["run", str(tmp_path / "a"), str(tmp_path / "b"), *DRIVE, "--trace", str(traces)]) == 0
    written = sorted(str(p.relative_to(traces)) for p in traces.rglob("*.jsonl"))
    assert written == ["a/x.jsonl", "b/x.json.jsonl", "b/x.yaml.jsonl", "y.jsonl"]
    texts = {Transcript.read(p).outcome.text for p in traces.rglob("*.jsonl")}  # type: ignore[union-attr]
    assert texts == {"first", "second", "third", "other"}
    assert first.exists() and second.exists() and third.exists() and other.exists()
    capsys.readouterr()
