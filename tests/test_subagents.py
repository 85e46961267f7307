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
from simloop.transcript import SubagentEnd, SubagentStart, ToolStart, Transcript

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


# -- sub-runs that overlap in time --------------------------------------------------------------------------------


def _overlapping(partial_as_done: bool) -> Any:
    """A loop that runs a turn's two tools at once on threads, a delegate and a search, as frameworks run sync
    tools.  To make the overlap certain, the search runs (start to end) on its own thread while the delegate's
    sub-run is open; ``partial_as_done`` is the delegate's bug (a cut sub-run told to the parent as done)."""
    import threading

    def drive(sim: Sim) -> Outcome:
        beside: list[threading.Thread] = []

        def delegate(task: str = "") -> str:
            with sim.subagent(task, limits={"max_steps": 4}) as sub:
                for thread in beside:
                    thread.start()
                    thread.join()  # the parent's search, from start to end, while the sub-run is open
                sub.finish(correct_delegate.run_agent(sub.client, tool_params(sub.tool_schemas), sub.run_tool,
                                                      sub.task, sub.limits))
            assert sub.outcome is not None
            if sub.outcome.reason != "final" and not partial_as_done:
                raise RuntimeError(f"the sub-agent stopped early ({sub.outcome.reason})")
            return sub.outcome.text or "done"

        sim.bind_tool("delegate", delegate)
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        out: dict[str, Any] = {}

        def run(c: Any) -> None:
            try:
                out[c.id] = sim.run_tool(c.name, c.input)
            except Exception as e:  # noqa: BLE001 - the tool's failure, told to the model
                out[c.id] = e

        for _ in range(4):
            reply = sim.client.messages.create(model=sim.model, max_tokens=512, tools=tool_params(sim.tool_schemas),
                                               messages=messages)
            messages.append({"role": "assistant", "content": reply.content})
            calls = [b for b in reply.content if b.type == "tool_use"]
            if reply.stop_reason != "tool_use":
                return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
            beside[:] = [threading.Thread(target=run, args=(c,)) for c in calls if c.name != "delegate"]
            for c in calls:
                if c.name == "delegate":
                    run(c)
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c.id, "is_error": True, "content": str(out[c.id])}
                if isinstance(out[c.id], Exception) else
                {"type": "tool_result", "tool_use_id": c.id, "content": out[c.id]} for c in calls]})
        return Outcome("max_steps")

    return drive


#: The parent asks for a delegate and a search at once; the sub-agent searches too, then answers (or is cut).
_OVERLAP = (
    {"tool_use": [{"name": "delegate", "input": {"task": "dig"}}, {"name": "search", "input": {"q": "top"}}]},
    {"tool_use": [{"name": "search", "input": {"q": "deep"}}]},
)


@pytest.mark.parametrize("cut", [False, True])
def test_sub_runs_overlapping_a_parent_tool_on_threads_are_told_apart(cut: bool) -> None:
    last = {"max_tokens": "Two outages in Ma"} if cut else {"end_turn": "Found two outages."}
    scenario = _scenario(*_OVERLAP, last, {"end_turn": "All done."})
    with Sim(scenario) as sim:
        outcome = sim.run(_overlapping(partial_as_done=False))
    assert outcome.reason == "final"
    events = sim.transcript.events
    top = next(e for e in sim.transcript.of(ToolStart) if e.input == {"q": "top"})
    assert events.index(sim.transcript.of(SubagentStart)[0]) < events.index(top)  # inside the sub-run's window
    assert top.subrun is None and sim.transcript.of(SubagentStart)[0].parent == 0  # yet the parent's
    assert {e.subrun for e in sim.transcript.of(ToolStart) if e.input == {"q": "deep"}} == {1}
    assert check(sim.transcript).violations == []  # no false alarm: each run's results went where they belong
    with Sim(scenario) as sim:
        sim.run(_overlapping(partial_as_done=True))
    assert {v.invariant for v in check(sim.transcript).violations} == ({"subagent_honest"} if cut else set())


def test_a_transcript_without_subrun_tags_is_split_by_the_order_of_its_events() -> None:
    """Transcripts written before the tags: what happened between a sub-run's start and end is the sub-run's."""
    with Sim(_scenario(*_OVERLAP, {"end_turn": "Found two outages."}, {"end_turn": "All done."})) as sim:
        sim.run(_overlapping(partial_as_done=False))
    old = Transcript.from_jsonl(sim.transcript.to_jsonl().replace('"parent":0,', ""))
    assert all(e.parent is None for e in old.events if isinstance(e, SubagentStart))
    # read by order, the parent's search inside the window is taken for the sub-run's: what the tags fix
    assert {v.invariant for v in check(old).violations} and not check(sim.transcript).violations


# -- the run-wide bound across sub-runs (#40 item 5) ------------------------------------------------------------

BOMB = {"name": "bomb", "task": "Research the refund policy.",
        "tools": [{"name": "delegate", "kind": "read", "description": "Hand a task to a sub-agent.",
                   "input_schema": {"type": "object", "properties": {"task": {"type": "string"}}}},
                  {"name": "search", "kind": "read"}],
        "model": [{"tool_use": [{"name": "delegate", "input": {"task": "find it"}}]}], "then": "end_turn"}


def test_a_delegate_that_starts_sub_agents_for_ever_is_halted_by_the_run_wide_bound() -> None:
    """Each sub-run has a fresh budget and virtual time stands still: only a bound across sub-runs ends it."""
    from simloop.sim import RUNAWAY_MODEL_CALLS, RUNAWAY_SUBRUNS
    from tests.loops.gate_defects import subagent_bomb

    with Sim(BOMB) as sim:
        outcome = sim.run(subagent_bomb)
    report = sim.check(outcome)
    assert [v.invariant for v in report.violations] == ["stops"], report
    assert report.violations[0].evidence["budget"] == "subagents"
    bound = RUNAWAY_SUBRUNS * RUNAWAY_MODEL_CALLS
    assert f"started {bound + 1} sub-agent runs" in str(report) and "kept starting sub-agents" in str(report)
    assert len(sim.transcript.of(SubagentStart)) == bound


def test_simloop_run_ends_a_sub_agent_bomb_with_a_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from simloop.cli import main

    path = tmp_path / "bomb.yaml"
    path.write_text(yaml.safe_dump(BOMB))
    assert main(["run", str(path), "--drive", "tests.loops.gate_defects:subagent_bomb"]) == 1
    assert "kept starting sub-agents" in capsys.readouterr().out


def test_a_parent_that_delegates_within_its_cap_is_no_bomb() -> None:
    """Ten delegations in one reply, each to a sub-agent that makes its calls and finishes: under the bound."""
    from tests.loops.readme import delegating

    ten = {"tool_use": [{"name": "delegate", "input": {"task": f"part {i}"}} for i in range(10)]}
    with Sim({**BOMB, "model": [ten, ten, ten], "then": "end_turn"}) as sim:
        report = sim.check(sim.run(delegating))
    assert report.ok, report
