"""The loops of examples/openai_loop.py under `simloop.verify`: the correct Chat Completions loop passes, each
one-bug twin is caught by the invariant named for it (the same world and verdicts as the Anthropic wire)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")

import simloop
from examples import correct_sync, openai_loop
from examples.catalogue import DECLARED

LIMITS = simloop.Limits(**DECLARED)


def test_the_correct_loop_passes(tmp_path: Path) -> None:
    report = simloop.verify(openai_loop.drive, limits=LIMITS, max_examples=40, seed=1, out_dir=tmp_path)
    assert report.ok and report.examples == 40


@pytest.mark.parametrize(("twin", "invariant"), [
    ("drive_partial_answers", "pairing"),
    ("drive_tools_from_length", "truncation"),
    ("drive_rerun_after_500", "no_rerun"),
    ("drive_refusal_from_finish_reason", "honest_outcome"),  # a refusal is finish_reason "stop" (issue 42)
])
def test_each_twin_is_caught(twin: str, invariant: str, tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(getattr(openai_loop, twin), limits=LIMITS, max_examples=60, seed=0, out_dir=tmp_path)
    assert {v.invariant for v in info.value.violations} == {invariant}
    if invariant == "truncation":  # in this wire's words
        assert 'cut off at finish_reason "length"' in info.value.violations[0].message
    saved = list(tmp_path.glob("*.yaml"))
    assert len(saved) == 1  # the minimal run, a scenario file of the one world: it replays on this wire
    with pytest.raises(simloop.InvariantViolation, match=invariant):
        simloop.replay(getattr(openai_loop, twin), saved[0])
    assert simloop.replay(openai_loop.drive, saved[0]).ok  # and the correct loop passes it
    assert simloop.replay(correct_sync.drive, saved[0]).ok  # as does the Anthropic one: one world, two wires


def test_the_400_reaches_the_loop_and_the_transcript() -> None:
    scenario = {"name": "parallel", "task": "Find a and b.", "tools": [{"name": "search"}],
                "model": [{"tool_use": [{"name": "search", "input": {"q": "a"}}, {"name": "search", "input": {"q": "b"}}]},
                          {"end_turn": "done"}], "strict": False}
    with simloop.Sim(scenario) as sim:
        outcome = sim.run(openai_loop.drive_partial_answers)
    assert outcome.reason == "error" and "did not have response messages" in outcome.text
    report = sim.check(outcome)
    assert [v.invariant for v in report.violations] == ["pairing"]  # request_valid leaves pairing's 400 to pairing
    assert report.violations[0].evidence["kind"] == "missing_result"
    assert "has no tool message answering it before the next request" in report.violations[0].message  # its words


def test_the_readme_loop_passes(tmp_path: Path) -> None:
    """The README's Chat Completions loop, as printed there, passes verify (no limits declared: its own cap)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Loops on the openai SDK", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "README.md", "exec"), namespace)  # noqa: S102 - the project's own README
    report = simloop.verify(namespace["drive"], max_examples=40, seed=2, out_dir=tmp_path)
    assert report.ok


def test_the_curated_library_passes_the_correct_loop_and_skips_what_only_the_messages_api_has(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The library's files replay on this wire; a scripted ``pause_turn`` has no form here, so its files say so."""
    from simloop.cli import main

    code = main(["run", "scenarios", "--drive", "examples.openai_loop:drive"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"skip  scenarios/pause-turn\.yaml +scripts a pause_turn, which only the Messages API has", out)
    assert not re.search(r"^ok +scenarios/pause-turn", out, flags=re.MULTILINE)
    library = Path(__file__).resolve().parents[1] / "scenarios"
    report = simloop.replay(openai_loop.drive, library / "pause-turn.yaml")
    assert report.skipped is not None and "/v1/chat/completions" in report.skipped
    assert simloop.replay(correct_sync.drive, library / "pause-turn.yaml").skipped is None  # the wire it is for
