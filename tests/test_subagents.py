"""Sub-agents (issue 32 item 4): ``sim.subagent`` runs a loop inside a tool on the same simulated API; the run is
nested in the transcript and the timeline, the invariants hold inside it, and ``subagent_honest`` holds the
parent's tool_result to what the sub-run did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import simloop
from examples import correct_delegate, subagent_partial_as_done
from examples._common import tool_params
from simloop import Outcome, Scenario, Sim, UsageError
from simloop.invariants import check
from simloop.timeline import render_timeline
from simloop.transcript import SubagentEnd, SubagentStart, Transcript

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "subagent-truncated.yaml"
TOOLS = [
    {"name": "delegate", "input_schema": {"type": "object", "properties": {"task": {"type": "string"}}}},
    {"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
]


def _scenario(*replies: dict[str, Any], limits: dict[str, Any] | None = None) -> Scenario:
    return Scenario.model_validate({"tools": TOOLS, "model": list(replies), "then": "end_turn",
                                    "limits": limits or {}})


def _naive(sub: Any) -> Outcome:
    """A sub-agent loop with two bugs a test may use: a cut reply is its answer, and it has no step cap."""
    messages: list[Any] = [{"role": "user", "content": sub.task}]
    while True:
        reply = sub.client.messages.create(model=sub.model, max_tokens=512, tools=tool_params(sub.tool_schemas),
                                           messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason != "tool_use" or not calls:
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": sub.run_tool(c.name, c.input)} for c in calls]})


def _drive(sub_loop: Any, *, sub_limits: dict[str, Any] | None = None) -> Any:
    """A parent loop (the reference one) whose delegate tool runs ``sub_loop`` and reports it honestly."""

    def drive(sim: Sim) -> Any:
        def delegate(task: str = "") -> str:
            outcome = sim.subagent(task, limits=sub_limits).run(sub_loop)
            if outcome.reason != "final":
                raise RuntimeError(f"the sub-agent stopped early ({outcome.reason})")
            return outcome.text or "done"

        sim.bind_tool("delegate", delegate)
        return correct_delegate.run_agent(sim.client, tool_params(sim.tool_schemas), sim.run_tool, sim.task,
                                          sim.limits)

    return drive


DELEGATE = {"tool_use": [{"name": "delegate", "input": {"task": "find it"}}]}
SEARCH = {"tool_use": [{"name": "search", "input": {"q": "it"}}]}


def test_the_defect_reports_a_cut_sub_run_as_done() -> None:
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.replay(subagent_partial_as_done.drive, SCENARIO)
    (v,) = caught.value.violations
    assert (v.invariant, v.step) == ("subagent_honest", 4)
    assert v.message.startswith(
        "sub-agent run 1 ('Summarise the March incident reports.', in delegate exec 1) stopped with reason "
        "'truncated', but the tool_result the parent sent for it reads as a complete result"
    )
    assert v.evidence["reason"] == "truncated" and v.evidence["exec"] == 1
    timeline = caught.value.timeline or ""
    assert "[sub-agent 1] max_tokens" in timeline
    assert 'sub-agent 1 returned truncated "Two outages in March' in timeline


def test_the_correct_delegate_says_the_sub_run_stopped_early() -> None:
    report = simloop.replay(correct_delegate.drive, SCENARIO)
    assert report.ok and "subagent_honest" in report.checked
    assert report.transcript is not None
    (start,) = report.transcript.of(SubagentStart)
    (end,) = report.transcript.of(SubagentEnd)
    assert (start.run, start.exec, start.tool, start.limits) == (1, 1, "delegate", {"max_steps": 4})
    assert (end.reason, end.exception) == ("truncated", None)
    sent = report.transcript.requests[-1].body["messages"][-1]["content"][0]
    assert sent["is_error"] is True and "stopped early (truncated)" in sent["content"]


def test_the_invariants_hold_inside_a_sub_run() -> None:
    # the sub-agent takes its cut reply for an answer: truncation, reported in the sub-run at the run's step 3
    scenario = _scenario(DELEGATE, SEARCH, {"max_tokens": "half an answer"})
    with Sim(scenario) as sim:
        outcome = sim.run(_drive(_naive))
        report = sim.check(outcome)
    found = [(v.invariant, v.step) for v in report.violations]
    assert found == [("truncation", 3)]
    assert report.violations[0].message.startswith("in sub-agent run 1 ('find it', in delegate): ")
    assert report.violations[0].evidence["subagent"] == 1


def test_each_run_is_held_to_its_own_limits() -> None:
    # the parent declares 2 steps and makes 2 calls; its sub-agent declares 1 and makes 2
    scenario = _scenario(DELEGATE, SEARCH, {"end_turn": "found"}, {"end_turn": "done"}, limits={"max_steps": 2})
    with Sim(scenario) as sim:
        report = sim.check(sim.run(_drive(_naive, sub_limits={"max_steps": 1})))
    assert [(v.invariant, v.step) for v in report.violations] == [("limits", 3)]
    assert "the loop declared max_steps=1 but made model call 2" in report.violations[0].message


def test_a_clean_nested_run_reads_back_and_checks_the_same(tmp_path: Path) -> None:
    scenario = _scenario(DELEGATE, SEARCH, {"end_turn": "found it"}, {"end_turn": "done"})
    with Sim(scenario) as sim:
        report = sim.check(sim.run(_drive(_naive)))
    assert report.ok
    back = Transcript.read(sim.transcript.write(tmp_path / "t.jsonl"))
    assert [type(e).__name__ for e in back.events] == [type(e).__name__ for e in sim.transcript.events]
    assert check(back).ok
    assert "[sub-agent 1] end_turn" in render_timeline(back)


def test_misuse_is_a_usage_error() -> None:
    with Sim(_scenario()) as sim:
        with pytest.raises(UsageError, match=r"'nope' is not a tool of this run \(its tools: delegate, search\)"):
            sim.subagent("x", tools=["nope"])
        with pytest.raises(UsageError, match=r"bind_tool: 'nope' is not a tool of this run .*binds it only where the run has it"):
            sim.bind_tool("nope", lambda: "x")
        sub = sim.subagent("x")
        assert sub.tools == ["delegate", "search"]  # started outside a tool: every tool
        with sub:
            pass
        with pytest.raises(UsageError, match="runs once"):
            sub.__enter__()


def test_verify_passes_the_delegating_loop_and_catches_its_twin(tmp_path: Path) -> None:
    assert simloop.verify(correct_delegate.drive, tools=correct_delegate.TOOLS, max_examples=40, seed=2).ok
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(subagent_partial_as_done.drive, tools=correct_delegate.TOOLS, max_examples=200, seed=2,
                       out_dir=tmp_path)
    assert {v.invariant for v in caught.value.violations} == {"subagent_honest"}


def test_sub_agent_calls_count_against_their_own_runaway_budget() -> None:
    # the parent's cap is 10 and its runaway budget 51 calls; ten delegations of five sub-agent calls each (50 in
    # sub-runs, 10 in the parent's: 60) are a bounded run, not a runaway
    replies = [DELEGATE, *([SEARCH] * 5)] * 10
    scenario = _scenario(*replies, limits={"max_steps": 10})

    def five_steps(sub: Any) -> Outcome:
        return correct_delegate.run_agent(sub.client, tool_params(sub.tool_schemas), sub.run_tool, sub.task,
                                          sub.limits)

    with Sim(scenario) as sim:
        report = sim.check(sim.run(_drive(five_steps, sub_limits={"max_steps": 5})))
    assert report.ok, report.violations
    assert sim.transcript.model_calls == 60
