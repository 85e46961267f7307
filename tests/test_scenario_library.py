"""The curated scenario library holds for every correct loop, whatever its (honest) policies.

Each file's ``expect`` is what every correct loop must show (``reason`` may list several honest
reasons), and every script ends the way a model would (``then:``), so a correct loop that asks once
more than another (a retry with more room, its own retries of an API error) is answered, not cut off.
The whole library (scenarios/ and scenarios/findings/) runs against each correct loop in examples/,
`examples.correct_policies` included (repetition detection, a retry with a larger max_tokens, an error
budget of its own).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import simloop
from examples.catalogue import CORRECT
from simloop.scenario import LIMIT_NAMES, Expect, Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted(p for p in (ROOT / "scenarios").rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def _drive(name: str) -> simloop.sim.Drive:
    return importlib.import_module(f"examples.{name}").drive  # type: ignore[no-any-return]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT / "scenarios"))


def test_the_library_includes_the_findings() -> None:
    assert any(p.parent.name == "findings" for p in LIBRARY)
    assert "correct_policies" in CORRECT


@pytest.mark.parametrize("path", LIBRARY, ids=_id)
def test_every_script_ends_the_way_a_model_would(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.then in ("end_turn", "repeat_last"), (
        f"{_id(path)}: after its replies the script fails the run (then: fail); a correct loop that asks once "
        "more is then cut off. End it with then: end_turn (or then: repeat_last for a stuck model)"
    )


@pytest.mark.parametrize("loop", CORRECT)
@pytest.mark.parametrize("path", LIBRARY, ids=_id)
def test_every_correct_loop_passes_the_whole_library(path: Path, loop: str) -> None:
    # the reference loops have everything a file may need: a Stop button, restarts, follow-ups, every policy
    report = simloop.replay(_drive(loop), path, abort=True, restarts=1, turns=3, limits=LIMIT_NAMES)
    assert report.ok and report.skipped is None  # (replay raises on a violation, a wrong reason or a script run out)


@pytest.mark.parametrize(
    ("loop", "scenario", "reason"),
    [
        ("correct_policies", "stuck-search.yaml", "repetition"),
        ("correct_policies", "max-tokens-mid-tool.yaml", "final"),
        ("correct_policies", "outage.yaml", "error_budget"),
        ("correct_sync", "stuck-search.yaml", "max_steps"),
        ("correct_sync", "max-tokens-mid-tool.yaml", "truncated"),
        ("correct_sync", "outage.yaml", "error"),
    ],
)
def test_the_policies_differ_and_both_are_accepted(loop: str, scenario: str, reason: str) -> None:
    with simloop.Sim(ROOT / "scenarios" / scenario, seed=0) as sim:
        outcome = sim.run(_drive(loop))
    assert outcome.reason == reason
    assert sim.check().ok


def test_the_policies_loop_holds_every_invariant_under_verify() -> None:
    report = simloop.verify(_drive("correct_policies"), limits={"max_steps": 10}, max_examples=60, seed=3)
    assert report.ok and report.examples is not None and report.examples >= 60


# -- expect.reason: one reason or a list of them -------------------------------------------------------------


def test_expect_reason_takes_one_reason_or_a_list() -> None:
    assert Expect(reason="final").reasons == ("final",)
    assert Expect(reason=["max_steps", "repetition"]).reasons == ("max_steps", "repetition")
    assert Expect().reasons is None and Expect().allows("error")
    assert Expect(reason=["max_steps", "repetition"]).allows("repetition")
    assert not Expect(reason=["max_steps", "repetition"]).allows("final")
    assert Expect(reason=["max_steps", "repetition"]).reason_text() == "one of 'max_steps', 'repetition'"


def test_an_unknown_reason_is_reported_with_its_line() -> None:
    text = "version: 1\ntask: x\nmodel:\n  - end_turn: hi\nexpect: {reason: [final, finished]}\n"
    with pytest.raises(simloop.ScenarioError) as info:
        Scenario.from_yaml(text, path="bad.yaml")
    message = str(info.value)
    assert "bad.yaml:5" in message
    assert "'finished' is not an outcome reason; expected one of final, max_steps" in message


def test_a_reason_outside_the_list_fails_the_replay_and_says_the_list(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "version: 1\nname: s\ntask: x\nmodel:\n  - end_turn: hi\nexpect: {violations: [], reason: [error, refusal]}\n"
    )
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.replay(_drive("correct_sync"), path)
    assert "the loop stopped with reason 'final'; the file expects one of 'error', 'refusal'" in str(info.value)
