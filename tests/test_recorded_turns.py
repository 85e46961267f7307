"""`verify(recorded=...)` serves a recorded conversation turn by turn (docs/design.md, Cassettes).

A recording with later user turns (the corpus's llm-anthropic ``test_async_prompt``: a question, then "in french")
replays each turn's recorded replies to that turn: a turn the loop ended early (an API error it gave up on) does
not push its unused reply into the next turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import simloop
from simloop.cassettes import FaultedRecording, FaultPlan, load_recording
from tests.corpus import CASSETTES, requires_corpus
from tests.loops import readme

PROMPT = CASSETTES / "llm-anthropic" / "test_anthropic" / "test_async_prompt.yaml"
ANSWERS = ("- Captain\n- Scoop", "- Capitaine\n- Bec (beak)")

pytestmark = requires_corpus


def test_the_recording_is_a_conversation_of_two_turns() -> None:
    scenario = load_recording(PROMPT).scenario
    assert scenario.task == "Two names for a pet pelican, be brief" and scenario.followups == ["in french"]


def test_each_turn_gets_its_own_recorded_replies() -> None:
    begun = {"turns": 1}
    model = FaultedRecording(PROMPT, lambda _: None, FaultPlan(), turn=lambda: begun["turns"])
    ask = lambda: model.reply(None)  # type: ignore[arg-type]  (requests are not compared)
    assert ask().end_turn == ANSWERS[0]
    assert ask().end_turn == "Done."  # the turn asked again (a retry): not the next turn's reply
    begun["turns"] = 2
    assert ask().end_turn == ANSWERS[1]


def test_a_turn_that_ended_before_its_reply_does_not_shift_the_next() -> None:
    begun = {"turns": 2}  # the first turn never reached its reply (the loop gave up on an API error)
    model = FaultedRecording(PROMPT, lambda _: None, FaultPlan(), turn=lambda: begun["turns"])
    assert model.reply(None).end_turn == ANSWERS[1]  # type: ignore[arg-type]


def test_verify_replays_the_conversation_in_order(tmp_path: Path) -> None:
    runs: list[list[simloop.Outcome]] = []
    check = simloop.Sim.check

    def record(sim: simloop.Sim, *a: Any, **k: Any) -> simloop.Report:
        runs.append(list(sim.outcomes))
        followup = [r for r in sim.transcript.requests if "in french" in str(r.body.get("messages"))]
        assert len(sim.outcomes) < 2 or followup  # the second turn sends the recorded follow-up
        return check(sim, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simloop.Sim, "check", record)
        report = simloop.verify(readme.conversation, recorded=PROMPT, max_examples=40, seed=0, out_dir=tmp_path)
    assert report.ok and len(runs) == 40
    for outcomes in runs:
        for turn, outcome in enumerate(outcomes):
            if outcome.reason == "final":
                assert outcome.text == ANSWERS[turn], outcomes
    # runs whose first turn failed still hear the second turn's answer (the search draws such runs at this seed)
    assert any(o[0].reason == "error" and o[1].reason == "final" for o in runs)
