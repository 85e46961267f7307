"""`simloop.adapters.openai_agents`: the OpenAI Agents SDK's Runner on the simulated OpenAI wires.

Skipped cleanly when the SDK is not installed (``pip install simloop[openai-agents]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed (pip install simloop[openai-agents])")

import simloop
from simloop import Limits, Outcome, Scenario, Sim
from simloop.adapters import openai_agents as oa

TOOLS = [
    {"name": "search", "kind": "read", "description": "Search the knowledge base.",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    {"name": "send_email", "kind": "write", "description": "Send an email.",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                      "required": ["to"]}},
]
SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]}
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    data = {"name": "t", "task": "Refund order 1234.", "tools": TOOLS, "model": list(model), **kw}
    return Scenario.model_validate(data)


def run(drive: Any, s: Scenario | Path, **kw: Any) -> tuple[Outcome, Sim]:
    with Sim(s, **kw) as sim:
        outcome = sim.run(drive)
    return outcome, sim


def test_the_runner_runs_tools_and_answers_through_the_simulated_chat_wire() -> None:
    outcome, sim = run(oa.drive, scenario(SEARCH, {"end_turn": "Refunded."}))
    assert outcome == Outcome("final", "Refunded.")
    assert [r.path for r in sim.transcript.requests] == ["/v1/chat/completions"] * 2
    result = sim.transcript.requests[1].conversation[-1]["content"][0]
    assert result["type"] == "tool_result" and "result 1 of search" in str(result["content"])
    assert sim.check(outcome).ok


def test_tools_keep_the_scenarios_schema() -> None:
    _, sim = run(oa.drive, scenario({"end_turn": "x"}))
    sent = {t["name"]: t["input_schema"] for t in sim.transcript.requests[0].body["tools"]}
    assert sent["send_email"]["required"] == ["to"] and set(sent["send_email"]["properties"]) == {"to", "body"}


def test_the_responses_model_runs_on_the_simulated_responses_wire() -> None:
    """The SDK's default wire: ``OpenAIResponsesModel``, its tool outputs sent as ``function_call_output``."""
    outcome, sim = run(oa.drive_responses, scenario(SEARCH, {"end_turn": "Refunded."}))
    assert outcome == Outcome("final", "Refunded.")
    assert [r.path for r in sim.transcript.requests] == ["/v1/responses"] * 2
    assert sim.check(outcome).ok
    with Sim(scenario({"end_turn": "x"})) as sim, pytest.raises(simloop.UsageError, match="got 'completions'"):
        oa.model(sim, api="completions")  # type: ignore[arg-type]


def test_max_turns_maps_max_steps() -> None:
    assert oa.max_turns(None) == oa.DEFAULT_MAX_TURNS == 10  # the SDK's default
    assert oa.max_turns(Limits(max_steps=4)) == 4


def test_max_turns_exceeded_ends_the_run_as_max_steps() -> None:
    outcome, sim = run(oa.drive, scenario(SEARCH, then="repeat_last"), limits=Limits(max_steps=3))
    assert outcome.reason == "max_steps" and "MaxTurnsExceeded" in outcome.text
    assert sim.transcript.model_calls == 3 and sim.check(outcome).ok


def test_the_token_budget_stops_the_run_before_the_next_call() -> None:
    heavy = {**SEARCH, "usage": {"input_tokens": 5000, "output_tokens": 10}}
    outcome, sim = run(oa.drive, scenario(heavy, then="repeat_last"), limits=Limits(max_total_tokens=4000))
    assert outcome.reason == "token_budget" and sim.transcript.model_calls == 1
    assert sim.check(outcome).ok


def test_the_deadline_stops_the_run_before_the_next_call() -> None:
    s = scenario(SEARCH, {"end_turn": "x"}, faults=[{"tool": "search", "call": 1, "kind": "slow", "latency": 90}])
    outcome, sim = run(oa.drive, s, limits=Limits(deadline_s=60))
    assert outcome.reason == "deadline" and sim.transcript.model_calls == 1
    assert sim.check(outcome).ok


@pytest.mark.parametrize("refusal", ["I can't help with that.", ""])
def test_a_refusal_is_a_refusal(refusal: str) -> None:
    outcome, sim = run(oa.drive, scenario({"refusal": refusal}))
    assert outcome.reason == "refusal" and "ModelRefusalError" in outcome.text
    assert sim.check(outcome).ok


def test_an_api_outage_is_an_error_after_the_sdks_retries() -> None:
    outcome, sim = run(oa.drive, scenario({"error": 500, "repeat": 4}))
    assert outcome.reason == "error" and "InternalServerError" in outcome.text
    assert len(sim.transcript.requests) == 3 and sim.check(outcome).ok  # the openai SDK's 2 retries


def test_a_tool_exception_fails_the_run_or_reaches_the_model() -> None:
    s = scenario({"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]}, {"end_turn": "Sorry."},
                 faults=[{"tool": "send_email", "call": 1, "kind": "commit_then_raise"}])
    outcome, sim = run(oa.drive, s)  # a FunctionTool's exception: UserError out of Runner.run
    assert outcome.reason == "error" and outcome.text.startswith("UserError: Error running tool send_email")
    assert sim.transcript.model_calls == 1 and sim.check(outcome).ok
    outcome, sim = run(oa.drive_tool_messages, s)
    assert outcome == Outcome("final", "Sorry.")
    answer = sim.transcript.requests[1].conversation[-1]["content"][0]
    assert "ConnectionResetError" in str(answer["content"]) and sim.check(outcome).ok


def test_stop_while_the_reply_streams_starts_no_tool_and_the_next_turn_goes_on() -> None:
    outcome, sim = run(oa.drive, SCENARIOS / "stop-button-while-streaming.yaml")
    assert sim.transcript.of(simloop.transcript.ToolStart) == []
    assert [e.reason for e in sim.transcript.of(simloop.transcript.OutcomeEvent)] == ["aborted", "final"]
    assert sim.check(outcome).ok


def test_stop_during_a_tool_keeps_the_results_of_the_tools_that_ran() -> None:
    outcome, sim = run(oa.drive, SCENARIOS / "stop-button-during-tool.yaml")
    assert [e.reason for e in sim.transcript.of(simloop.transcript.OutcomeEvent)] == ["aborted", "final"]
    assert sim.check(outcome).ok  # the second turn's request answers every call of the first


@pytest.mark.parametrize("drive", [oa.drive, oa.drive_tool_messages, oa.drive_responses])
def test_verify_runs_to_completion_on_the_runner(drive: Any, tmp_path: Path) -> None:
    # replies cut at "length" are left out: the Runner returns cut text as final_output and runs the complete
    # calls of a cut reply, known findings (docs/findings.md) with their own replaying tests
    plan = simloop.strategies.plans(ending_kinds=("end_turn", "stop_sequence", "refusal"))
    limits = Limits(max_steps=6, deadline_s=300, max_total_tokens=200_000)
    report = simloop.verify(drive, limits=limits, max_examples=12, seed=3, out_dir=tmp_path, plan=plan)
    assert report.ok and report.examples == 12


def test_verify_with_stop_presses_holds(tmp_path: Path) -> None:
    plan = simloop.strategies.plans(ending_kinds=("end_turn", "refusal"))
    report = simloop.verify(oa.drive_tool_messages, limits=Limits(max_steps=6), max_examples=12, seed=5,
                            out_dir=tmp_path, plan=plan, abort=True)
    assert report.ok and report.examples == 12
