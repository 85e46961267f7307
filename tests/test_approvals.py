"""The person at the permission gate (docs/design.md, Approvals): ``sim.approve``, ``approvals:``, the ``approval``
invariant, ``verify(approvals=True)``, and the one line of wiring for the SDK loop, pydantic-ai and LangGraph."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import threading
import warnings
from pathlib import Path
from typing import Annotated, Any

import pytest

import simloop
from simloop import Outcome, Scenario, ScenarioError, Sim
from simloop.transcript import ApprovalEvent, Transcript

try:  # (at module level: the tool's annotations are resolved in this module's globals)
    from langchain_core.tools import InjectedToolCallId
except ImportError:  # the LangGraph test is skipped then
    InjectedToolCallId = None  # type: ignore[assignment,misc]

EMAIL = {"name": "send_email", "kind": "write", "results": ["sent"],
         "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}}
SEARCH = {"name": "search", "kind": "read", "results": ["found"],
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}


def world(*model: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"name": "gate", "task": "Email a.", "tools": [SEARCH, EMAIL], "model": list(model), "then": "end_turn",
            **kw}


def email(to: str = "a") -> dict[str, Any]:
    return {"tool_use": [{"name": "send_email", "input": {"to": to}}]}


def loop(sim: Sim, *, gate: str = "before", timeout: float | None = None) -> Outcome:
    """A plain SDK loop, written from the README, with its gate wired one of several ways (some of them wrong)."""
    approved: set[str] = set()

    def run_tool(name: str, input: Any, tool_use_id: str) -> dict[str, Any]:
        result = {"type": "tool_result", "tool_use_id": tool_use_id}
        if name not in sim.scenario.gated_tools:
            return {**result, "content": sim.run_tool(name, input)}
        if gate == "after":
            out = sim.run_tool(name, input)
            return {**result, "content": out if sim.approve(name, input) else "denied"}
        if gate == "once" and name in approved:
            return {**result, "content": sim.run_tool(name, input)}
        if not sim.approve(name, input, timeout=timeout):
            if gate == "swallow":
                return {**result, "content": "ok"}
            return {**result, "content": f"{name} was denied by the user", "is_error": True}
        approved.add(name)
        return {**result, "content": sim.run_tool(name, input)}

    messages: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(6):
        reply = sim.client.messages.create(model="m", max_tokens=256, tools=sim.tool_schemas, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        messages.append({"role": "user", "content": [
            run_tool(b.name, b.input, b.id) for b in reply.content if b.type == "tool_use"
        ]})
    return Outcome("max_steps", "")


def run(scenario: dict[str, Any], drive: Any = loop, **kw: Any) -> tuple[Sim, simloop.Report]:
    with Sim(scenario, **kw) as sim:
        outcome = sim.run(drive)
    return sim, sim.check(outcome)


def ids(report: simloop.Report) -> set[str]:
    return {v.invariant for v in report.violations}


# -- the scenario keys -------------------------------------------------------------------------------------------


def test_approvals_and_needs_approval_are_read_and_put_the_policy_in_force() -> None:
    s = Scenario.model_validate(world(approvals=[{"tool": "send_email", "call": 2, "answer": "deny", "after": 30}]))
    assert s.approval_policy and s.gated_tools == ("send_email",) and "approvals" in s.needs
    assert s.approvals is not None and s.approvals[0].answer == "deny" and s.approvals[0].after == 30
    plain = Scenario.model_validate(world())
    assert not plain.approval_policy and "approvals" not in plain.needs
    marked = Scenario.model_validate({**world(), "tools": [{**SEARCH, "needs_approval": True},
                                                           {**EMAIL, "needs_approval": False}]})
    assert marked.approval_policy and marked.gated_tools == ("search",)
    assert "approvals:" in Scenario.model_validate(world(approvals=[])).to_yaml()


def test_an_answer_for_an_unknown_tool_is_a_scenario_error_with_its_line() -> None:
    text = "task: x\ntools: [{name: search}]\napprovals:\n  - {tool: send, answer: deny}\n"
    with pytest.raises(ScenarioError, match=r"approvals\[0\]\.tool: 'send' is not in tools \(search\)"):
        Scenario.from_yaml(text)
    with pytest.raises(ScenarioError, match="answer"):
        Scenario.from_yaml("task: x\napprovals: [{answer: maybe}]\n")


# -- sim.approve -------------------------------------------------------------------------------------------------


def test_without_the_policy_approve_says_yes_at_once_and_records_nothing() -> None:
    sim, report = run(world(email(), {"end_turn": "done"}))
    assert report.ok and sim.approvals == [] and sim.transcript.header.approval is None
    assert '"approval"' not in sim.transcript.to_jsonl().splitlines()[0]  # the header it always wrote


def test_each_request_is_logged_bound_to_its_call_and_answered_in_virtual_time() -> None:
    sim, report = run(world(email("a"), email("b"), {"end_turn": "done"},
                            approvals=[{"call": 2, "answer": "deny", "after": 30}]))
    assert report.ok, report
    first, second = sim.approvals
    assert (first.tool, first.input, first.answer, first.asked, first.t) == ("send_email", {"to": "a"}, "approved", 0, 0)
    assert (second.input, second.answer, second.asked, second.t) == ({"to": "b"}, "denied", 0, 30)
    replies = [r for r in sim.transcript.responses if r.tool_uses]
    assert [a.matched for a in sim.approvals] == [r.tool_uses[0]["id"] for r in replies]
    again = Transcript.from_jsonl(sim.transcript.to_jsonl())
    assert again.of(ApprovalEvent) == sim.approvals and again.header.approval == ["send_email"]


def test_no_answer_in_time_is_false_at_the_loops_deadline_or_timeout() -> None:
    late = world(email(), {"end_turn": "done"}, approvals=[{"answer": "approve", "after": 500}],
                 limits={"deadline_s": 100})
    sim, _ = run(late)
    assert [(a.answer, a.t) for a in sim.approvals] == [("none", 100)]
    sim, _ = run(late, lambda s: loop(s, timeout=5))
    assert [(a.answer, a.t) for a in sim.approvals] == [("none", 5)]
    sim, _ = run(world(email(), {"end_turn": "done"}, approvals=[{"answer": "away"}]), lambda s: loop(s, timeout=7))
    assert [(a.answer, a.t) for a in sim.approvals] == [("none", 7)]


def test_a_person_who_never_answers_a_loop_without_a_bound_is_a_runaway() -> None:
    sim, report = run(world(email(), approvals=[{"answer": "away"}]))
    assert ids(report) == {"stops"} and sim.transcript.halt is not None
    assert sim.transcript.halt.budget == "virtual_time"


def test_aapprove_waits_on_the_event_loop() -> None:
    async def drive(sim: Sim) -> Outcome:
        answers = await asyncio.gather(sim.aapprove("send_email", {"to": "a"}), sim.aapprove("send_email", {"to": "b"}))
        return Outcome("final", str(answers))

    sim, _ = run(world(approvals=[{"call": 1, "answer": "deny", "after": 10}, {"call": 2, "after": 4}]), drive)
    assert sim.outcomes[-1].text == "[False, True]"
    assert [(a.input["to"], a.answer, a.t) for a in sim.approvals] == [("b", "approved", 4), ("a", "denied", 10)]


def test_approve_tells_a_wrong_call_what_to_pass() -> None:
    with Sim(world(approvals=[])) as sim, pytest.raises(simloop.UsageError, match="tool is the tool's name"):
        sim.approve(3, {})  # type: ignore[arg-type]


# -- the invariant ----------------------------------------------------------------------------------------------

DENIED = world(email(), {"end_turn": "done"}, approvals=[{"answer": "deny"}])


def test_a_loop_asking_before_each_call_and_reporting_the_no_passes() -> None:
    assert run(DENIED)[1].ok
    assert run(world(email("a"), email("b"), {"end_turn": "done"}, approvals=[]))[1].ok


@pytest.mark.parametrize(("gate", "scenario", "kind"), [
    ("after", DENIED, "asked_after"),
    ("swallow", DENIED, "swallowed"),
    ("once", world(email("a"), email("b"), {"end_turn": "done"}, approvals=[]), "reused"),
])
def test_the_gates_defects_are_caught(gate: str, scenario: dict[str, Any], kind: str) -> None:
    _, report = run(scenario, lambda s: loop(s, gate=gate))
    assert ids(report) == {"approval"}, report
    assert [v.evidence["kind"] for v in report.violations] == [kind]


def test_a_loop_that_never_asks_is_caught_only_under_the_policy() -> None:
    def unasked(sim: Sim) -> Outcome:
        sim.client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "x"}])
        reply = sim.transcript.responses[-1]
        sim.run_tool("send_email", reply.tool_uses[0]["input"])
        return Outcome("final", "")

    _, report = run(world(email(), approvals=[]), unasked)
    assert [v.evidence["kind"] for v in report.violations if v.invariant == "approval"] == ["unasked"]
    assert "without asking the person (sim.approve)" in str(report)
    assert "approval" not in ids(run(world(email()), unasked)[1])


def test_a_wait_past_the_loops_own_deadline_is_caught() -> None:
    _, report = run(world(email(), {"end_turn": "x"}, approvals=[{"answer": "approve", "after": 500}],
                          limits={"deadline_s": 100}), lambda s: loop(s, timeout=3600))
    assert "past_deadline" in [v.evidence["kind"] for v in report.violations if v.invariant == "approval"]


# -- the reference loops, the defect loops and the curated files ------------------------------------------------


def _drive(name: str) -> Any:
    return importlib.import_module(f"examples.{name}").drive


@pytest.mark.parametrize("name", ["approval_after_write", "approval_reused", "denial_swallowed"])
def test_verify_with_approvals_finds_each_defect_and_saves_the_persons_answers(name: str, tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(_drive(name), limits={"max_steps": 10, "deadline_s": 300}, max_examples=100, seed=1,
                       out_dir=tmp_path, approvals=True)
    assert {v.invariant for v in found.value.violations} == {"approval"}
    assert found.value.scenario is not None and found.value.scenario.approvals is not None
    assert "--claims approvals" in (found.value.replay or "")
    assert simloop.replay(_drive("correct_sync"), found.value.scenario_path or "").ok


def test_verify_without_approvals_draws_no_person(tmp_path: Path) -> None:
    seen: list[Any] = []

    def drive(sim: Sim) -> Any:
        seen.append(sim.transcript.header.approval)
        return _drive("approval_after_write")(sim)

    simloop.verify(drive, max_examples=20, seed=0, out_dir=tmp_path)
    assert seen and set(seen) == {None}


def test_a_file_at_the_gate_is_skipped_for_a_loop_that_does_not_claim_one() -> None:
    report = simloop.replay(_drive("correct_sync"), "scenarios/approval-denied.yaml", approvals=False)
    assert report.skipped == (
        "needs a permission gate wired to sim.approve (approvals:): pass replay(..., approvals=True) if your loop "
        "has one"
    )


# -- one line of wiring for the frameworks -----------------------------------------------------------------------


def test_pydantic_ai_deferred_approvals_are_answered_by_the_person() -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (pip install 'simloop[pydantic-ai]')")
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults

    from simloop.adapters import pydantic_ai as pai

    async def drive(sim: Sim) -> Outcome:
        tools = [dataclasses.replace(t, requires_approval=t.name in sim.scenario.gated_tools) for t in pai.tools(sim)]
        agent = Agent(pai.model(sim), tools=tools, output_type=[str, DeferredToolRequests])
        result = await agent.run(sim.task)
        while isinstance(result.output, DeferredToolRequests):
            answers = {c.tool_call_id: await sim.aapprove(c.tool_name, c.args_as_dict(), tool_use_id=c.tool_call_id)
                       for c in result.output.approvals}  # the one line
            result = await agent.run(message_history=result.all_messages(),
                                     deferred_tool_results=DeferredToolResults(approvals=answers))
        return Outcome("final", result.output)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic-ai warns about models it does not know the prices of
        sim, report = run(world(email("a"), email("b"), {"end_turn": "done"},
                                approvals=[{"call": 1, "answer": "deny"}]), drive)
    assert report.ok, report
    assert [a.answer for a in sim.approvals] == ["denied", "approved"]
    assert [s.input for s in sim.transcript.of(simloop.transcript.ToolStart)] == [{"to": "b"}]


def test_langgraph_interrupt_is_resumed_with_the_persons_answer() -> None:
    pytest.importorskip("langgraph", reason="LangGraph is not installed (pip install 'simloop[langgraph]')")
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    from simloop.adapters import langgraph as lg

    def drive(sim: Sim) -> Outcome:
        @tool
        def send_email(to: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
            """Send an email."""
            if not interrupt({"tool": "send_email", "input": {"to": to}, "id": call_id}):
                return "Denied: the user did not approve this email; it was not sent."
            return sim.run_tool("send_email", {"to": to}, tool_use_id=call_id)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from langgraph.prebuilt import create_react_agent

            agent = create_react_agent(lg.chat_model(sim), [send_email], checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "1"}}
        state = agent.invoke({"messages": [{"role": "user", "content": sim.task}]}, config)
        while "__interrupt__" in state:
            ask = state["__interrupt__"][0].value
            state = agent.invoke(Command(resume=sim.approve(ask["tool"], ask["input"], tool_use_id=ask["id"])),
                                 config)  # the one line
        return Outcome("final", str(state["messages"][-1].content))

    scenario = {**world(email("a"), email("b"), {"end_turn": "done"}, approvals=[{"call": 1, "answer": "deny"}]),
                "tools": [EMAIL]}
    sim, report = run(scenario, drive)
    assert report.ok, report
    assert [a.answer for a in sim.approvals] == ["denied", "approved"]
    assert [s.input for s in sim.transcript.of(simloop.transcript.ToolStart)] == [{"to": "b"}]
    issued = [r.tool_uses[0]["id"] for r in sim.transcript.responses if r.tool_uses]
    assert [a.tool_use_id for a in sim.approvals] == issued  # the call id carried to the person: bound exactly


def test_the_sdk_loop_wiring_reports_a_denial_as_the_tools_error() -> None:
    from tests.loops.readme import gated

    sim, report = run(DENIED, gated)
    assert report.ok, report
    sent = sim.transcript.requests[-1].conversation[-1]["content"][0]
    assert sent["is_error"] is True and "denied by the user" in sent["content"]


def test_identical_calls_without_ids_bind_the_run_to_the_approved_one() -> None:
    """A README loop passes no ids: of two identical calls, the person refuses the first and approves the second;
    the one execution answers the approved call, not the refused one (no false alarm under approval or
    results_real)."""
    from tests.loops.readme import gated

    twice = {"tool_use": [{"name": "send_email", "input": {"to": "a"}}, {"name": "send_email", "input": {"to": "a"}}]}
    sim, report = run(world(twice, {"end_turn": "done"}, approvals=[{"call": 1, "answer": "deny"}]), gated)
    assert report.ok, report
    first, second = (b["id"] for b in sim.transcript.responses[0].tool_uses)
    assert [(a.matched, a.answer) for a in sim.approvals] == [(first, "denied"), (second, "approved")]
    assert [s.matched for s in sim.transcript.of(simloop.transcript.ToolStart)] == [second]


def _sdk_loop(sim: Sim, ask: Any, *, denied: str = "Denied by the user; not sent.") -> Outcome:
    """A README-style SDK loop with its gate: ``ask(sim, calls)`` returns each call's answer by tool_use id; an
    approved call runs, a refused one is answered with an is_error result saying so."""
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(6):
        reply = sim.client.messages.create(model="m", max_tokens=256, tools=sim.tool_schemas, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        calls = [b for b in reply.content if b.type == "tool_use"]
        answers = ask(sim, calls)
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input)} if answers[b.id]
            else {"type": "tool_result", "tool_use_id": b.id, "is_error": True, "content": denied}
            for b in calls
        ]})
    return Outcome("max_steps", "")


def test_a_yes_under_the_calls_id_for_another_input_does_not_count() -> None:
    """The id binds the question to its call; the input asked about must still be the input that runs (#40)."""
    def drive(sim: Sim) -> Outcome:
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        reply = sim.client.messages.create(model="m", max_tokens=256, tools=sim.tool_schemas, messages=messages)
        call = next(b for b in reply.content if b.type == "tool_use")
        if sim.approve(call.name, {"to": "benign@example.com"}, tool_use_id=call.id):  # asks about a decoy
            sim.run_tool(call.name, call.input, tool_use_id=call.id)
        return Outcome("final", "")

    _, report = run(world(email("a@example.com"), approvals=[]), drive)
    assert [v.evidence["kind"] for v in report.violations if v.invariant == "approval"] == ["other_input"], report
    assert "benign@example.com" in str(report) and "a@example.com" in str(report)

    def honest(sim: Sim) -> Outcome:  # the same loop asking about what it runs
        return _sdk_loop(sim, lambda s, calls: {b.id: s.approve(b.name, b.input, tool_use_id=b.id) for b in calls})

    assert run(world(email("a@example.com"), {"end_turn": "done"}, approvals=[]), honest)[1].ok


@pytest.mark.parametrize("denied_call", [1, 2])
def test_identical_calls_asked_about_last_first_bind_each_answer_by_evidence(denied_call: int) -> None:
    """Two identical send_email calls, no ids, asked about last-first: the approved one runs, the other is answered
    as denied; every tool_result is true, so nothing is reported (#40: approval and results_real fired)."""
    twice = {"tool_use": [{"name": "send_email", "input": {"to": "ann@"}}, {"name": "send_email", "input": {"to": "ann@"}}]}

    def last_first(sim: Sim, calls: list[Any]) -> dict[str, bool]:
        return {b.id: sim.approve(b.name, b.input) for b in reversed(calls)}

    scenario = world(twice, {"end_turn": "done"}, approvals=[{"call": denied_call, "answer": "deny"}])
    _, report = run(scenario, lambda s: _sdk_loop(s, last_first))
    assert report.ok, report
    # the same loop answering the refused call with an error that does not say why is still caught
    _, report = run(scenario, lambda s: _sdk_loop(s, last_first, denied="ok"))
    assert ids(report) == {"approval"} and [v.evidence["kind"] for v in report.violations] == ["unexplained"], report


# -- the answer reaches the thread that runs the call (#40 item 3) -----------------------------------------------

LATE_YES = world(email("a"), email("b"), {"end_turn": "done"}, approvals=[{"answer": "approve", "after": 30}])


@pytest.mark.parametrize("after", [30, 0])
def test_a_call_run_without_waiting_for_an_answer_asked_on_another_thread_is_caught(after: int) -> None:
    """A background wait moves the shared clock on at once, so the write was recorded after the yes; in the loop's
    own thread the question was still unanswered.  Caught on every run, whatever the threads' scheduling."""
    from tests.loops.gate_defects import asks_in_the_background

    scenario = world(email("a"), email("b"), {"end_turn": "done"}, approvals=[{"answer": "approve", "after": after}])
    for _ in range(3):
        _, report = run(scenario, asks_in_the_background)
        assert ids(report) == {"approval"}, report
        assert {v.evidence["kind"] for v in report.violations} <= {"unanswered", "asked_after"}, report
    assert "before the answer reached that thread" in str(run(LATE_YES, asks_in_the_background)[1])


def _asked_on_a_thread(how: str) -> Any:
    """The README's gated loop asking the person on another thread, and waiting for the answer as ``how`` says."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.loops.readme import run_agent

    def drive(sim: Sim) -> Outcome:
        pool = ThreadPoolExecutor(2)

        def ask(name: str, input: Any) -> bool:
            if how == "future":
                return pool.submit(sim.approve, name, input).result()
            box: dict[str, bool] = {}
            done = threading.Event()

            def asking() -> None:
                box["yes"] = sim.approve(name, input)
                done.set()

            thread = threading.Thread(target=asking)
            thread.start()
            thread.join() if how == "join" else done.wait()
            return box["yes"]

        def run_tool(name: str, input: Any) -> str:
            if name in sim.scenario.gated_tools and not ask(name, input):
                raise PermissionError(f"{name} was denied by the user")
            if how == "future":  # the call itself on the pool too, as a framework's tool node runs it
                return pool.submit(sim.run_tool, name, input).result()
            return sim.run_tool(name, input)

        with pool:
            return Outcome(*run_agent(sim.client, sim.tool_schemas, run_tool, sim.task))

    return drive


@pytest.mark.parametrize("how", ["join", "event", "future"])
@pytest.mark.parametrize("after", [30, 0])
def test_a_loop_that_waits_for_the_answer_asked_on_another_thread_passes(how: str, after: int) -> None:
    scenario = world(email("a"), email("b"), {"end_turn": "done"}, approvals=[{"answer": "approve", "after": after}])
    for _ in range(2):
        sim, report = run(scenario, _asked_on_a_thread(how))
        assert report.ok, report
        assert len(sim.transcript.of(simloop.transcript.ToolStart)) == 2


@pytest.mark.parametrize("how", ["background", "to_thread", "aapprove"])
def test_an_async_loop_is_held_to_the_answers_its_event_loop_heard(how: str) -> None:
    """On the event loop: an answer asked on a thread of its own and not awaited does not count; one awaited
    (``asyncio.to_thread``, ``sim.aapprove``) does."""
    async def drive(sim: Sim) -> Outcome:
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        for _ in range(6):
            reply = await sim.async_client.messages.create(model="m", max_tokens=256, tools=sim.tool_schemas,
                                                           messages=messages)
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use":
                return Outcome("final", "")
            results = []
            for b in (b for b in reply.content if b.type == "tool_use"):
                if how == "background":
                    threading.Thread(target=sim.approve, args=(b.name, b.input)).start()
                    yes = True
                else:
                    yes = await (asyncio.to_thread(sim.approve, b.name, b.input) if how == "to_thread"
                                 else sim.aapprove(b.name, b.input))
                results.append({"type": "tool_result", "tool_use_id": b.id, "content": await sim.arun_tool(
                    b.name, b.input)} if yes else {"type": "tool_result", "tool_use_id": b.id, "is_error": True,
                                                   "content": "denied by the user"})
            messages.append({"role": "user", "content": results})
        return Outcome("max_steps", "")

    for _ in range(2):
        _, report = run(LATE_YES, drive)
        assert (ids(report) == {"approval"}) if how == "background" else report.ok, report


# -- the gate on the OpenAI wires: the same binding as on the Messages API (#40 items 2, 3, 10) ---------------------

Ask = Any  # (sim, [(call id, name, input)]) -> {call id: bool}


def _chat_loop(sim: Sim, ask: Ask, *, denied: str = "Denied by the user; not sent.") -> Outcome:
    """A README-style Chat Completions loop with its gate: approved calls run, refused ones are answered so."""
    tools: Any = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
                  for t in sim.tool_schemas]
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(6):
        choice = sim.openai_client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools).choices[0]
        messages.append(choice.message.model_dump(exclude_none=True))
        if choice.finish_reason != "tool_calls":
            return Outcome("final", choice.message.content or "")
        calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
        answers = ask(sim, calls)
        messages += [{"role": "tool", "tool_call_id": id_, "content": sim.run_tool(name, input) if answers[id_]
                      else denied} for id_, name, input in calls]
    return Outcome("max_steps", "")


def _responses_loop(sim: Sim, ask: Ask, *, denied: str = "Denied by the user; not sent.") -> Outcome:
    """The same loop on the Responses API, keeping its own history of items."""
    tools: Any = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False}
                  for t in sim.tool_schemas]
    items: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(6):
        response = sim.openai_client.responses.create(model="gpt-4o", input=items, tools=tools)
        items += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [(i.call_id, i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
        if not calls:
            return Outcome("final", response.output_text)
        answers = ask(sim, calls)
        items += [{"type": "function_call_output", "call_id": id_, "output": sim.run_tool(name, input)
                   if answers[id_] else denied} for id_, name, input in calls]
    return Outcome("max_steps", "")


OPENAI_LOOPS = {"chat": _chat_loop, "responses": _responses_loop}


@pytest.mark.parametrize("wire", sorted(OPENAI_LOOPS))
def test_on_the_openai_wires_a_yes_counts_only_for_the_input_asked_about(wire: str) -> None:
    pytest.importorskip("openai", reason="the OpenAI wires need the openai SDK: pip install 'simloop[openai]'")
    loop = OPENAI_LOOPS[wire]

    def decoy(sim: Sim, calls: list[Any]) -> dict[str, bool]:  # asks about another input under the call's id
        return {id_: sim.approve(name, {"to": "benign@example.com"}, tool_use_id=id_) for id_, name, _ in calls}

    def honest(sim: Sim, calls: list[Any]) -> dict[str, bool]:
        return {id_: sim.approve(name, input, tool_use_id=id_) for id_, name, input in calls}

    scenario = world(email("a@example.com"), {"end_turn": "done"}, approvals=[])
    _, report = run(scenario, lambda s: loop(s, decoy))
    assert [v.evidence["kind"] for v in report.violations if v.invariant == "approval"] == ["other_input"], report
    sim, report = run(scenario, lambda s: loop(s, honest))
    assert report.ok, report
    assert [a.tool_use_id for a in sim.approvals] == [r.tool_uses[0]["id"] for r in sim.transcript.responses[:1]]


@pytest.mark.parametrize("wire", sorted(OPENAI_LOOPS))
@pytest.mark.parametrize("denied_call", [1, 2])
def test_on_the_openai_wires_identical_calls_without_ids_bind_each_answer_by_evidence(wire: str, denied_call: int) -> None:
    pytest.importorskip("openai", reason="the OpenAI wires need the openai SDK: pip install 'simloop[openai]'")
    loop = OPENAI_LOOPS[wire]
    twice = {"tool_use": [{"name": "send_email", "input": {"to": "ann@"}}, {"name": "send_email", "input": {"to": "ann@"}}]}

    def last_first(sim: Sim, calls: list[Any]) -> dict[str, bool]:
        return {id_: sim.approve(name, input) for id_, name, input in reversed(calls)}

    scenario = world(twice, {"end_turn": "done"}, approvals=[{"call": denied_call, "answer": "deny"}])
    _, report = run(scenario, lambda s: loop(s, last_first))
    assert report.ok, report
    _, report = run(scenario, lambda s: loop(s, last_first, denied="ok"))  # a refusal answered as if it ran
    # (these wires have no is_error flag: a plain "ok" for the refused call reads as a result of it)
    assert ids(report) == {"approval"} and [v.evidence["kind"] for v in report.violations] == ["swallowed"], report


@pytest.mark.parametrize("wire", sorted(OPENAI_LOOPS))
def test_on_the_openai_wires_a_call_run_before_the_answer_reached_its_thread_is_caught(wire: str) -> None:
    pytest.importorskip("openai", reason="the OpenAI wires need the openai SDK: pip install 'simloop[openai]'")
    loop = OPENAI_LOOPS[wire]

    def background(sim: Sim, calls: list[Any]) -> dict[str, bool]:  # asks on another thread and does not wait
        for _, name, input in calls:
            threading.Thread(target=sim.approve, args=(name, input)).start()
        return {id_: True for id_, _, _ in calls}

    def waits(sim: Sim, calls: list[Any]) -> dict[str, bool]:  # asks on another thread and joins it
        box: dict[str, bool] = {}
        threads = [threading.Thread(target=lambda c=c: box.__setitem__(c[0], sim.approve(c[1], c[2]))) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return box

    _, report = run(LATE_YES, lambda s: loop(s, background))
    assert ids(report) == {"approval"}, report
    assert "before the answer reached that thread" in str(report)
    assert run(LATE_YES, lambda s: loop(s, waits))[1].ok
