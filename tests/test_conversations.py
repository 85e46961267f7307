"""Conversations: `sim.user_turns`, per-turn outcomes, per-turn invariants, `verify(turns=N)` and its options."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import anthropic
import pytest

import simloop
from simloop import Outcome, Sim, UsageError
from simloop.cli import main
from simloop.timeline import render_timeline
from simloop.transcript import OutcomeEvent, Transcript, TurnStart

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
DECLARED = {"max_steps": 10, "deadline_s": 300, "max_total_tokens": 200_000}


def _world(model: list[dict[str, Any]], followups: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "chat", "task": "Hello.", "followups": followups, "model": model, "then": "end_turn",
        "tools": [{"name": "search", "kind": "read", "input_schema": {"type": "object"}, "results": ["found"]}],
        **extra,
    }


def _one_call_per_turn(claim: str = "final") -> Any:
    """A drive that asks the model once a turn, through one history, and claims ``claim`` each turn."""

    def drive(sim: Sim) -> list[Outcome]:
        history: list[Any] = []
        outcomes = []
        for text in sim.user_turns:
            history.append({"role": "user", "content": text})
            sim.client.messages.create(model=sim.model, max_tokens=100, messages=history)
            history.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
            outcomes.append(Outcome(claim, "ok"))
        return outcomes

    return drive


def _drive(name: str) -> Any:
    return importlib.import_module(f"examples.{name}").drive


# -- the Sim ----------------------------------------------------------------------------------------------------


def test_user_turns_are_the_task_then_the_followups_each_marked_when_taken() -> None:
    world = _world([{"end_turn": "a"}, {"end_turn": "b"}, {"end_turn": "c"}], ["Thanks.", "Bye."])
    with Sim(world) as sim:
        assert list(sim.user_turns) == ["Hello.", "Thanks.", "Bye."]  # taking them marks them
    with Sim(world) as sim:
        outcome = sim.run(_one_call_per_turn())
    assert outcome == Outcome("final", "ok") and [o.reason for o in sim.outcomes] == ["final"] * 3
    marks = sim.transcript.turns
    assert [(m.turn, m.text) for m in marks] == [(0, "Hello."), (1, "Thanks."), (2, "Bye.")]
    assert [e.turn for e in sim.transcript.of(OutcomeEvent)] == [0, 1, 2]
    assert sim.check().ok and sim.leftovers() == []


def test_a_list_of_the_wrong_length_says_what_to_return() -> None:
    def drive(sim: Sim) -> list[Outcome]:
        for text in sim.user_turns:
            sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": text}])
        return [Outcome("final")]

    with Sim(_world([], ["Thanks."])) as sim, pytest.raises(UsageError) as e:
        sim.run(drive)
    assert str(e.value) == (
        "the drive ran 2 user turn(s) (taken from sim.user_turns) but returned 1 outcome(s); return one Outcome "
        "per turn taken, in order, or only the last turn's Outcome"
    )


def test_turns_are_taken_in_order() -> None:
    with Sim(_world([], ["Thanks.", "Bye."])) as sim:
        assert sim.user_turns[0] == "Hello." and sim.user_turns[0] == "Hello."  # read twice: one turn
        with pytest.raises(UsageError, match=r"sim.user_turns\[2\] taken before turn 1: take the turns in order"):
            sim.user_turns[2]
        with pytest.raises(IndexError):
            sim.user_turns[3]
    assert len(sim.transcript.turns) == 1


def test_the_runaway_budget_is_per_turn() -> None:
    # 3 turns of 20 calls each: 60 calls in all, over the run's budget of 51, but no turn is a runaway
    def drive(sim: Sim) -> list[Outcome]:
        outcomes = []
        for text in sim.user_turns:
            for _ in range(20):
                sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": text}])
            outcomes.append(Outcome("final"))
        return outcomes

    with Sim(_world([], ["b", "c"], then="end_turn")) as sim:
        sim.run(drive)
    assert sim.transcript.halt is None and sim.transcript.model_calls == 60


# -- invariants per turn ----------------------------------------------------------------------------------------


def test_honest_outcome_is_checked_per_turn() -> None:
    # turn 1 was refused and the loop says final; the last turn's final is honest: only a per-turn check sees it
    with Sim(_world([{"refusal": "I can't."}, {"end_turn": "Sure."}], ["Please?"])) as sim:
        sim.run(_one_call_per_turn())
    violations = sim.check().violations
    assert [(v.invariant, v.step, v.evidence["turn"]) for v in violations] == [("honest_outcome", 1, 0)]
    assert violations[0].message.startswith("in user turn 1: the loop reported 'final' but the last reply was a refusal")


def test_limits_count_from_each_turns_start() -> None:
    def drive(sim: Sim) -> list[Outcome]:
        outcomes = []
        for n, text in enumerate(sim.user_turns):
            for _ in range(2 if n < 2 else 3):  # the third turn makes one call past its cap of two
                sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": text}])
            outcomes.append(Outcome("max_steps"))
        return outcomes

    with Sim(_world([], ["b", "c"], limits={"max_steps": 2})) as sim:
        sim.run(drive)
    violations = sim.check(invariants=["limits"]).violations
    assert [(v.step, v.evidence["turn"]) for v in violations] == [(7, 2)]  # conversation step 7, turn 3
    assert "the scenario declares max_steps=2 (its limits:) but the loop made model call 3" in violations[0].message


def test_a_single_outcome_is_the_last_turns() -> None:
    # the drive returns only the last outcome: turn 1's refusal is not judged, the last turn's final is honest
    def drive(sim: Sim) -> Outcome:
        return _one_call_per_turn()(sim)[-1]

    with Sim(_world([{"refusal": "I can't."}, {"end_turn": "Sure."}], ["Please?"])) as sim:
        sim.run(drive)
    assert [e.turn for e in sim.transcript.of(OutcomeEvent)] == [None]
    assert sim.check().ok


def test_transcripts_with_turns_round_trip_and_old_ones_still_load(tmp_path: Path) -> None:
    with Sim(_world([{"end_turn": "a"}, {"end_turn": "b"}], ["Thanks."])) as sim:
        sim.run(_one_call_per_turn())
    back = Transcript.from_jsonl(sim.transcript.to_jsonl())
    assert back.turns == sim.transcript.turns and back.to_jsonl() == sim.transcript.to_jsonl()
    old = "\n".join(line for line in sim.transcript.to_jsonl().splitlines() if '"type":"turn"' not in line)
    old = old.replace(',"turn":0', "").replace(',"turn":1', "")
    assert '"turn"' not in old
    legacy = Transcript.from_jsonl(old)
    assert legacy.turns == [] and all(e.turn is None for e in legacy.of(OutcomeEvent))
    assert simloop.invariants.check(legacy).ok


def test_the_timeline_shows_each_turn_and_its_outcome() -> None:
    with Sim(_world([{"end_turn": "a"}, {"end_turn": "b"}], ["Thanks."])) as sim:
        sim.run(_one_call_per_turn())
    text = render_timeline(sim.transcript)
    assert '-- user turn 1: "Hello."' in text and '-- user turn 2: "Thanks."' in text
    assert text.index("user turn 2") > text.index("end_turn") and 'outcome of turn 2: final "ok"' in text
    with Sim(_world([{"end_turn": "a"}], [])) as single:
        single.run(_drive("correct_sync"))
    assert "user turn" not in render_timeline(single.transcript)  # one turn: no marks


# -- the catalogue's conversation loops -------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["pause_left_in_history", "empty_answer_appended"])
def test_the_poisoned_history_fails_on_the_next_turn(loop: str) -> None:
    with Sim(SCENARIOS / "pause-then-followup.yaml") as sim:
        sim.run(_drive(loop))
    violations = sim.check().violations
    assert {v.invariant for v in violations} == {"request_valid"}
    turn_of_step = {}
    for e in sim.transcript.events:
        if isinstance(e, TurnStart):
            current = e.turn
        elif getattr(e, "call", None) is not None:
            turn_of_step.setdefault(e.call, current)  # type: ignore[attr-defined]
    assert turn_of_step[violations[0].step] > 0  # never in the turn that left the history


def test_settle_leaves_a_history_the_next_turn_can_send() -> None:
    from examples._common import settle, start_turn

    paused = {"role": "assistant", "content": [
        {"type": "text", "text": "Searching."},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
    ]}
    history: list[Any] = [{"role": "user", "content": "Hi"}, paused]
    settle(history)
    assert history == [{"role": "user", "content": "Hi"}]
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": []}]
    settle(history)
    assert history == [{"role": "user", "content": "Hi"}]
    cut = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}]}
    history = [{"role": "user", "content": "Hi"}, cut]
    settle(history)
    assert history[-1] == {"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
        "content": "Not run: the turn stopped before this tool ran."}]}
    assert start_turn(history, "Next")[-1]["content"][-1] == {"type": "text", "text": "Next"}  # joins the results


# -- verify(turns=N) --------------------------------------------------------------------------------------------


def test_verify_finds_the_empty_answer_and_saves_the_conversation(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(_drive("empty_answer_appended"), limits=DECLARED, turns=3, seed=0, max_examples=200,
                       out_dir=tmp_path)
    # the catalogue's two faces of the bug: the next turn's request refused, or the turn's results left unsent
    assert {v.invariant for v in found.value.violations} <= {"request_valid", "results_sent"}
    scenario = found.value.scenario
    assert scenario is not None and len(scenario.followups) == 1  # shrunk to the two turns it needs
    assert "-- user turn 2" in (found.value.timeline or "")
    with pytest.raises(simloop.InvariantViolation):
        simloop.replay(_drive("empty_answer_appended"), found.value.scenario_path or "")
    assert simloop.replay(_drive("correct_sync"), found.value.scenario_path or "").ok


def _reports_refusal_as_final(sim: Sim) -> list[Outcome]:
    """The README's conversation loop (tests/loops/readme.py) with one bug: a refused turn is reported ``final``."""
    from tests.loops.readme import run_agent

    history: list[Any] = []
    outcomes = []
    for text in sim.user_turns:
        reason, answer = run_agent(sim.client, sim.tool_schemas, sim.run_tool, text, history=history)
        outcomes.append(Outcome("final" if reason == "refusal" else reason, answer))  # BUG: a refusal is no answer
    return outcomes


@pytest.mark.parametrize("seed", [0, 1, 11, 14])
def test_a_one_turn_bug_found_in_conversations_shrinks_to_one_turn_and_one_reply(seed: int, tmp_path: Path) -> None:
    # the bug needs one reply (a refusal) in one turn; under turns=3 it is often first found in a later turn, and
    # came back as 3 replies in 2 turns when each later turn's plan was drawn as the turn began (seeds 1, 11, 14)
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(_reports_refusal_as_final, turns=3, seed=seed, max_examples=200, out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} == {"honest_outcome"}
    scenario = found.value.scenario
    assert scenario is not None
    assert scenario.followups == []
    assert [r.kind for r in scenario.model] == ["refusal"]


def test_verify_conversations_of_the_reference_loop_hold() -> None:
    report = simloop.verify(_drive("correct_sync"), limits=DECLARED, turns=3, seed=1, max_examples=60)
    assert report.ok and report.examples == 60


def test_a_single_turn_drive_under_turns_holds_as_before() -> None:
    # a drive that never reads sim.user_turns answers the task only: one turn, checked as before
    from examples.correct_sync import run_agent

    def drive(sim: Sim) -> Outcome:
        return run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.limits, model=sim.model)  # type: ignore[arg-type]

    seen: list[int] = []
    report = simloop.verify(lambda sim: (seen.append(len(sim.scenario.followups)), drive(sim))[1], limits=DECLARED,
                            turns=2, seed=0, max_examples=40)
    assert report.ok and max(seen) == 1  # follow-ups were offered, and left unread


@pytest.mark.parametrize("turns", [0, -1, True, 1.5])
def test_verify_turns_must_be_a_positive_int(turns: Any) -> None:
    with pytest.raises(UsageError, match=r"verify\(turns=...\) is the most user turns of a conversation, an int >= 1"):
        simloop.verify(_drive("correct_sync"), turns=turns)


def test_cli_verify_takes_turns(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    args = ["verify", "examples.empty_answer_appended:drive", "--max-examples", "200", "--seed", "0",
            "--max-steps", "10", "--out", str(tmp_path), "--no-progress"]
    assert main([*args, "--turns", "3"]) == 1
    assert "request_valid" in capsys.readouterr().out
    assert main(args) == 0  # one turn: the loop's bug never shows


def test_plugin_turns_option(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(test_chat="""
        import json

        def test_turns(simloop):
            seen = []

            def drive(sim):
                seen.append(len(sim.scenario.followups))
                from examples.correct_sync import drive as reference
                return reference(sim)

            simloop.verify(drive, max_examples=30)
            with open("turns.json", "w") as f:
                json.dump(max(seen), f)
    """)
    pytester.runpytest("--simloop-turns=3", "--simloop-seed=1").assert_outcomes(passed=1)
    assert (pytester.path / "turns.json").read_text() == "2"
    pytester.runpytest("--simloop-seed=1").assert_outcomes(passed=1)
    assert (pytester.path / "turns.json").read_text() == "0"
    pytester.runpytest("--simloop-turns=0").stderr.fnmatch_lines(["*--simloop-turns*"])


def test_anthropic_types_are_accepted_in_the_history() -> None:
    # the reference loops keep the SDK's content blocks; settle reads them as well as dicts
    from examples._common import settle

    block = anthropic.types.ServerToolUseBlock(id="srvtoolu_1", name="web_search", input={}, type="server_tool_use")
    history: list[Any] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [block]}]
    settle(history)
    assert history == [{"role": "user", "content": "Hi"}]


def test_the_pydantic_ai_drive_keeps_the_conversation_in_message_history() -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (pip install simloop[pydantic-ai])")
    from simloop.adapters import pydantic_ai as pai

    world = _world([{"end_turn": "Hi there."}, {"end_turn": "Fine, thanks."}], ["How are you?"])
    with Sim(world) as sim:
        sim.run(pai.make_drive())
    assert [o.reason for o in sim.outcomes] == ["final", "final"] and sim.check().ok
    second = [r for r in sim.transcript.requests if r.path == "/v1/messages"][-1]
    texts = [str(m.get("content")) for m in second.conversation]
    assert "Hello." in texts[0] and "Hi there." in texts[1] and "How are you?" in texts[2]
