"""The context window in the generated world (docs/design.md, Claims and Invariants: request_valid).

A history that outgrows the model's window gets the API's 400.  A loop that claims nothing may stop there
honestly (reason ``error``), but must not send the refused prompt again unchanged; a loop that claims it manages
its context (``verify(context=True)``, ``requires: [context]``) must never be refused so.  The defects are
`examples.context_retried` (retries the refused request) and `examples.context_unmanaged` (claims it, never
trims); the correct loops are the README's plain loop (claims nothing) and `examples.context_trimmed`.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import anthropic
import pytest

import simloop
from examples import context_retried, context_trimmed, context_unmanaged, correct_sync
from examples.catalogue import CONTEXT_DECLARED
from simloop import strategies
from simloop._claims import Claims
from simloop.cli import main
from simloop.scenario import load_scenario
from simloop.transcript import Request, Response, ToolEnd
from tests.corpus import messages_interactions, requires_corpus
from tests.loops import readme

ROOT = Path(__file__).resolve().parents[1]
WINDOW_FILE = ROOT / "scenarios" / "context-window.yaml"

pytest_plugins = ["pytester"]
BIG_BUDGET = simloop.Limits(**CONTEXT_DECLARED)
CONTEXT_FIX = "trim old tool results, summarize the history, or use compaction"
#: Only long runs: five to eight tool rounds whose outputs are each a fifth of the window.
LONG = strategies.plans(
    min_steps=5, max_steps=8, personas=(("finishes", 1),), faults=False, ending_kinds=("end_turn",),
    slow=((False, 1),), heavy=((False, 1),), ending_repeats=((1, 1),), long=((True, 1),),
)


def _run(drive: Any, scenario: simloop.Scenario) -> tuple[simloop.Sim, simloop.Report, Any]:
    with simloop.Sim(scenario, seed=0) as sim:
        outcome = sim.run(drive)
        report = sim.check(outcome)
    return sim, report, outcome


def _refused(sim: simloop.Sim) -> list[Response]:
    return [r for r in sim.transcript.responses if r.kind == "rejected"]


# -- the scenario file -------------------------------------------------------------------------------------------


def test_a_loop_that_claims_nothing_stops_at_the_window_honestly() -> None:
    sim, report, outcome = _run(correct_sync.drive, load_scenario(WINDOW_FILE))
    assert report.violations == []
    assert outcome.reason == "error"
    [refused] = _refused(sim)
    assert str((refused.rejection or {})["message"]).endswith(" tokens > 1000000 maximum")


def test_a_loop_that_retries_the_refused_prompt_breaks_request_valid() -> None:
    sim, report, _ = _run(context_retried.drive, load_scenario(WINDOW_FILE))
    [v] = report.violations
    said = str((_refused(sim)[0].rejection or {})["message"])
    assert v.invariant == "request_valid"
    assert v.message == (
        f'the API refused the request as too long ("{said}") and the loop sent the same prompt again at model call 4; '
        f"1 more resend(s): it can only be refused again; a correct loop stops (reason error) or makes the prompt "
        f"fit: {CONTEXT_FIX}"
    )
    assert v.step == 4 and (v.evidence["refused"], v.evidence["request"]) == (2, 3)  # request indexes: from 0


def test_the_trimming_loop_answers_within_the_window() -> None:
    sim, report, outcome = _run(context_trimmed.drive, load_scenario(WINDOW_FILE))
    assert report.violations == [] and outcome.reason == "final"
    assert _refused(sim) == []


def test_the_same_file_claimed_holds_the_loop_to_the_window() -> None:
    claimed = load_scenario(WINDOW_FILE).model_copy(update={"requires": ["max_total_tokens", "context"]})
    sim, report, _ = _run(context_unmanaged.drive, claimed)
    assert sim.transcript.header.context is True
    [v] = report.violations
    assert v.invariant == "request_valid" and v.evidence["claim"] == "context"
    assert "the loop claims it manages its context (context=True, requires: [context])" in v.message
    assert v.message.endswith(CONTEXT_FIX)
    assert _run(context_trimmed.drive, claimed)[1].violations == []


def test_a_refusal_resent_in_a_new_turn_is_not_a_resend() -> None:
    # a conversation loop that keeps its history: the next turn's request is another prompt (the follow-up added)
    followed = load_scenario(WINDOW_FILE).model_copy(update={"followups": ["And the third one?"]})
    sim, report, _ = _run(readme.conversation, followed)
    assert report.violations == [] and [o.reason for o in sim.outcomes] == ["error", "error"]
    assert len(_refused(sim)) == 2


def test_the_file_needs_the_claim_only_with_requires() -> None:
    assert load_scenario(WINDOW_FILE).needs == ("max_total_tokens",)
    needs = simloop.Scenario(task="t", requires=["context"]).needs
    assert needs == ("context",)
    assert not Claims().has("context") and Claims(context=True).has("context")


# -- the generated world: the long stage ------------------------------------------------------------------------


def test_verify_has_a_long_history_stage() -> None:
    names = [name for name, _, _ in strategies.stages()]
    assert "long" in names and sum(share for _, _, share in strategies.stages()) == 20


def test_verify_catches_a_claimed_loop_that_never_trims(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(context_unmanaged.drive, limits=BIG_BUDGET, plan=LONG, max_examples=5, seed=0,
                       context=True, out_dir=tmp_path)
    assert {v.invariant for v in info.value.violations} == {"request_valid"}
    saved = load_scenario(info.value.scenario_path)
    assert saved.requires == ["context"]
    assert {f.kind for f in saved.faults} == {"huge_output"}
    # the saved failure is a regression test: the trimming loop replays it cleanly, an unclaimed run skips it
    assert simloop.replay(context_trimmed.drive, info.value.scenario_path).ok
    skipped = simloop.replay(correct_sync.drive, info.value.scenario_path, context=False).skipped
    assert skipped == (
        "needs a loop that keeps its requests inside the context window (trims, summarizes or compacts): "
        "pass replay(..., context=True) if your loop has one"
    )


def test_verify_catches_a_loop_that_retries_the_refused_request(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(context_retried.drive, limits=BIG_BUDGET, plan=LONG, max_examples=5, seed=0, out_dir=tmp_path)
    assert {v.invariant for v in info.value.violations} == {"request_valid"}


@pytest.mark.parametrize("drive", [correct_sync.drive, readme.plain], ids=["correct_sync", "readme.plain"])
def test_loops_that_claim_nothing_pass_the_long_runs(drive: Any, tmp_path: Path) -> None:
    # the runs do reach the window (the README loop's own token budget stops it before, or the 400 does)
    seen: list[int] = []
    check = simloop.Sim.check

    def counting(sim: simloop.Sim, *a: Any, **k: Any) -> simloop.Report:
        seen.append(len(_refused(sim)))
        return check(sim, *a, **k)

    limits = BIG_BUDGET if drive is correct_sync.drive else readme.LIMITS
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simloop.Sim, "check", counting)
        report = simloop.verify(drive, limits=limits, plan=LONG, max_examples=5, seed=0, out_dir=tmp_path)
    assert report.ok and len(seen) == 5
    if drive is correct_sync.drive:
        # most runs end at the window, refused once, honestly (a run whose writes the loop declines to repeat
        # grows less); none is refused twice
        assert seen.count(1) >= 3 and set(seen) <= {0, 1}


def test_the_trimming_loop_holds_its_claim_over_long_conversations(tmp_path: Path) -> None:
    report = simloop.verify(context_trimmed.drive, limits=BIG_BUDGET, plan=LONG, max_examples=5, seed=0,
                            context=True, turns=2, out_dir=tmp_path)
    assert report.ok


def test_long_outputs_are_sized_by_the_window_of_the_model_asked_for(tmp_path: Path) -> None:
    sizes: dict[str, set[int]] = {}
    check = simloop.Sim.check

    def record(sim: simloop.Sim, *a: Any, **k: Any) -> simloop.Report:
        model = next(r.body["model"] for r in sim.transcript.requests)
        ends = [e.result for e in sim.transcript.of(ToolEnd) if e.result]
        sizes.setdefault(model, set()).update(int(m[1]) for r in ends if (m := re.search(r"\[(\d+) chars\]$", r)))
        return check(sim, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simloop.Sim, "check", record)
        simloop.verify(readme.plain, limits=readme.LIMITS, plan=LONG, max_examples=2, seed=0, out_dir=tmp_path)
    assert sizes == {"claude-sonnet-4-5": {200_000}}  # README loop's model: the 200k window, a quarter in tokens


# -- the claim on every surface ---------------------------------------------------------------------------------


def test_simloop_run_skips_a_file_that_needs_the_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claimed = tmp_path / "claimed.yaml"
    claimed.write_text(WINDOW_FILE.read_text().replace("requires: [max_total_tokens]", "requires: [max_total_tokens, context]"))
    drive = "examples.context_trimmed:drive"
    assert main(["run", str(claimed), "--drive", drive, "--claims", "max_total_tokens"]) == 5  # nothing was tested
    assert "pass --context if your loop has one" in capsys.readouterr().out
    assert main(["run", str(claimed), "--drive", drive, "--claims", "max_total_tokens", "--context"]) == 0
    assert capsys.readouterr().out.startswith(f"ok    {claimed}  final")
    assert main(["run", str(claimed), "--drive", "examples.context_unmanaged:drive",
                 "--claims", "max_total_tokens,context"]) == 1
    assert "request_valid" in capsys.readouterr().out


# -- the largest real request shape ------------------------------------------------------------------------------


@requires_corpus
def test_the_largest_recorded_request_grown_round_by_round() -> None:
    """The corpus's largest accepted request, as the first request of a loop whose history grows by one long tool
    output a round: the loop that claims nothing is refused once and stops; resending is reported; with the
    claim, the refusal itself is."""
    bodies = [(i.request.json(), i) for _, i in messages_interactions()
              if i.response.status == 200 and not i.request.path.endswith("/count_tokens")]
    body = max((b for b, _ in bodies if b["messages"][-1]["role"] == "user"), key=lambda b: len(json.dumps(b)))
    body = copy.deepcopy(body)
    body.pop("stream", None)

    def drive(resend: bool) -> Any:
        def run(sim: simloop.Sim) -> simloop.Outcome:
            grown = copy.deepcopy(body)
            for round in range(8):
                grown["messages"][-1] = {"role": "user", "content": [
                    *_blocks(grown["messages"][-1]["content"]), {"type": "text", "text": f"output {round}: " + "y" * 200_000}]}
                for attempt in range(2 if resend else 1):
                    try:
                        sim.client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[],
                                                   extra_body={**grown, "model": "claude-sonnet-4-5"})
                        break
                    except anthropic.BadRequestError as e:
                        if attempt == (1 if resend else 0):
                            return simloop.Outcome("error", str(e))
            return simloop.Outcome("final", "")
        return run

    scenario = simloop.Scenario(task="t", then="end_turn", strict=False)
    sim, report, outcome = _run(drive(resend=False), scenario)
    assert outcome.reason == "error" and report.violations == []
    [refused] = _refused(sim)
    assert str((refused.rejection or {})["message"]).endswith(" tokens > 200000 maximum")
    sizes = [r.input_tokens for r in sim.transcript.of(Request)]
    assert sizes == sorted(sizes) and sizes[-1] > 200_000 > sizes[-2]
    _, report, _ = _run(drive(resend=True), scenario)
    assert [v.invariant for v in report.violations] == ["request_valid"]
    _, report, _ = _run(drive(resend=False), scenario.model_copy(update={"requires": ["context"]}))
    assert [v.evidence.get("claim") for v in report.violations] == ["context"]


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def test_plugin_runs_the_files_that_need_the_claim_only_with_it(pytester: pytest.Pytester) -> None:
    text = WINDOW_FILE.read_text(encoding="utf-8").replace("requires: [max_total_tokens]",
                                                          "requires: [max_total_tokens, context]")
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "claimed.yaml").write_text(text, encoding="utf-8")
    pytester.makeini("[pytest]\nsimloop_drive = examples.context_trimmed:drive\nsimloop_claims = max_total_tokens\n")
    plain = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    plain.assert_outcomes(skipped=1)
    plain.stdout.fnmatch_lines([("*needs a loop that keeps its requests inside the context window (trims, "
                                 "summarizes or compacts): pass --simloop-context if your loop has one")])
    pytester.runpytest("-p", "no:cacheprovider", "--simloop-context").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider", "-o", "simloop_context=true").assert_outcomes(passed=1)
    caught = pytester.runpytest("-p", "no:cacheprovider", "--simloop-context",
                                "-o", "simloop_drive=examples.context_unmanaged:drive")
    caught.assert_outcomes(failed=1)
    caught.stdout.fnmatch_lines(["*request_valid*"])


def test_a_size_refusal_after_a_stop_is_not_blamed_on_the_stop() -> None:
    # turn 1 is stopped while its tool runs (its long output kept, as a correct loop keeps it); turn 2's request is
    # then over the window: the window's refusal, not a history the Stop left unsendable
    scenario = simloop.Scenario.model_validate({
        "task": "Read the report.", "followups": ["Summarise it."], "abort": {"tool_call": 1},
        "tools": [{"name": "fetch_report", "input_schema": {"type": "object"}, "results": ["Report text."]}],
        "model": [{"tool_use": [{"name": "fetch_report", "input": {}}]}], "then": "end_turn",
        "faults": [{"tool": "fetch_report", "kind": "huge_output", "size": 900_000}],
    })
    sim, report, _ = _run(readme.conversation, scenario)
    assert [o.reason for o in sim.outcomes] == ["aborted", "error"]
    assert len(_refused(sim)) == 1 and report.violations == []
