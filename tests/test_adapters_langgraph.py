"""`simloop.adapters.langgraph`: LangGraph's prebuilt ReAct agent with ChatAnthropic on the simulated API.

Skipped cleanly when langgraph or langchain-anthropic is not installed (``pip install simloop[langgraph]``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (pip install simloop[langgraph])")
pytest.importorskip("langchain_anthropic", reason="langchain-anthropic is not installed (simloop[langgraph])")

import simloop
from simloop import Limits, Outcome, Scenario, Sim
from simloop.adapters import langgraph as lg

TOOLS = [
    {"name": "search", "kind": "read", "description": "Search the knowledge base.",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    {"name": "send_email", "kind": "write", "description": "Send an email.",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}},
]
SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    data = {"name": "t", "task": "Refund order 1234.", "tools": TOOLS, "model": list(model), **kw}
    return Scenario.model_validate(data)


def run(drive: Any, s: Scenario, **kw: Any) -> tuple[Outcome, Sim]:
    with Sim(s, **kw) as sim:
        outcome = sim.run(drive)
    return outcome, sim


@pytest.mark.parametrize("drive", [lg.drive, lg.async_drive, lg.make_drive(streaming=True)])
def test_the_agent_runs_tools_and_answers_through_the_simulated_api(drive: Any) -> None:
    outcome, sim = run(drive, scenario(SEARCH, {"end_turn": "Refunded."}))
    assert outcome == Outcome("final", "Refunded.")
    assert sim.transcript.model_calls == 2
    assert [e.tool for e in sim.transcript.of(simloop.transcript.ToolStart)] == ["search"]
    assert sim.check(outcome).ok


@pytest.mark.parametrize("drive", [lg.drive, lg.async_drive])
def test_each_tool_run_is_told_the_call_it_answers_also_for_identical_calls_run_at_once(drive: Any) -> None:
    # The ToolNode runs a reply's calls at once (threads, or tasks): matched by name and input, two identical
    # calls could each take the other's id, and a fault meant for one would be reported for the other.
    twice = {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}] * 2}
    outcome, sim = run(drive, scenario(twice, {"end_turn": "Refunded."}))
    starts = sim.transcript.of(simloop.transcript.ToolStart)
    asked = [b["id"] for b in sim.transcript.responses[0].tool_uses]
    assert sorted(s.tool_use_id for s in starts) == sorted(asked)
    assert all(s.matched == s.tool_use_id for s in starts)
    assert sim.check(outcome).ok


def test_the_chat_model_keeps_its_own_settings_and_sends_the_scenarios_schemas() -> None:
    with Sim(scenario({"end_turn": "x"})) as sim:
        model = lg.chat_model(sim, max_retries=5)
        assert model._client.max_retries == 5
        assert model._client._client is sim.http_client  # the transport is the simulator's
        sim.run(lg.drive)
    sent = {t["name"]: t["input_schema"] for t in sim.transcript.requests[0].body["tools"]}
    assert sent["send_email"]["required"] == ["to"]


def test_max_steps_becomes_a_recursion_limit_of_two_steps_a_turn() -> None:
    assert lg.recursion_limit(None) is None
    assert lg.recursion_limit(4) == 8
    outcome, sim = run(lg.drive, scenario(SEARCH, then="repeat_last"), limits=Limits(max_steps=4))
    assert outcome == Outcome("max_steps", lg.NEED_MORE_STEPS)
    assert sim.transcript.model_calls == 4
    assert sim.check(outcome).ok


@pytest.mark.parametrize(
    ("ending", "reason"),
    [
        ({"stop_sequence": "Here it is", "sequence": "###"}, "final"),
        ({"max_tokens": "The refund policy says that"}, "truncated"),
        ({"refusal": "I can't help with that."}, "refusal"),
        ({"pause_turn": "Searching."}, "error"),  # the agent ends on it; it is not an answer
    ],
)
def test_the_last_messages_stop_reason_is_the_outcome(ending: dict[str, Any], reason: str) -> None:
    outcome, sim = run(lg.drive, scenario(ending, then="end_turn"))
    assert outcome.reason == reason
    assert sim.check(outcome).ok


@pytest.mark.parametrize("drive", [lg.drive, lg.async_drive])
def test_the_drive_stops_the_graph_at_the_deadline(drive: Any) -> None:
    slow = [{"tool": "search", "call": 1, "kind": "slow", "latency": 90}]
    s = scenario(SEARCH, SEARCH, {"end_turn": "x"}, faults=slow)
    outcome, sim = run(drive, s, limits=Limits(deadline_s=60))
    assert outcome.reason == "deadline"
    assert sim.transcript.model_calls == 1
    assert sim.check(outcome).ok


def test_the_drive_stops_the_graph_when_the_token_budget_is_spent() -> None:
    heavy = {**SEARCH, "usage": {"input_tokens": 5000, "output_tokens": 10}}
    outcome, sim = run(lg.drive, scenario(heavy, then="repeat_last"), limits=Limits(max_total_tokens=4000))
    assert outcome.reason == "token_budget"
    assert sim.transcript.model_calls == 1 and sim.transcript.of(simloop.transcript.ToolStart) == []
    assert sim.check(outcome).ok


def test_an_api_outage_is_an_error() -> None:
    outcome, sim = run(lg.drive, scenario({"error": 529, "repeat": 3}))
    assert outcome.reason == "error" and "OverloadedError" in outcome.text
    assert sim.check(outcome).ok


def test_handle_tool_errors_sends_the_exception_back_as_an_error_message() -> None:
    s = scenario({"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]}, {"end_turn": "Sorry."},
                 faults=[{"tool": "send_email", "call": 1, "kind": "raise"}])
    outcome, sim = run(lg.drive_handle_tool_errors, s)
    assert outcome == Outcome("final", "Sorry.")
    result = sim.transcript.requests[1].conversation[-1]["content"][0]
    assert result["is_error"] is True and "could not reach the backend" in str(result["content"])
    assert sim.check(outcome).ok


def test_outcome_of_a_graph_that_did_not_end_on_the_model() -> None:
    assert lg.outcome_of(None).reason == "error"


def test_verify_runs_to_completion_on_langgraph(tmp_path: Any) -> None:
    # endings without max_tokens: the ReAct agent runs tools from cut-off replies (a finding, replayed elsewhere)
    plan = simloop.strategies.plans()
    report = simloop.verify(
        lg.drive_handle_tool_errors, limits=Limits(max_steps=5, deadline_s=120), max_examples=12, seed=3,
        out_dir=tmp_path, plan=plan.filter(lambda p: p.ending.kind != "max_tokens"),
    )
    assert report.ok and report.examples == 12


# -- one thread per conversation, resumed after a restart ----------------------------------------------------------


def _user_texts(request: Any) -> list[str]:
    out = []
    for m in (request.body or {}).get("messages", []):
        if m.get("role") != "user":
            continue
        content = m["content"]
        blocks = [content] if isinstance(content, str) else [b.get("text", "") for b in content if b.get("type") == "text"]
        out.extend(b for b in blocks if b)
    return out


@pytest.mark.parametrize("drive", [lg.drive, lg.async_drive])
def test_the_drive_keeps_one_thread_per_conversation_and_resumes_it_after_a_restart(drive: Any) -> None:
    from simloop.transcript import Request

    s = scenario(SEARCH, {"end_turn": "Refunded."}, {"end_turn": "lost", "crash": True}, {"end_turn": "It went out."},
                 followups=["Did the email go out?"], then="end_turn")
    outcome, sim = run(drive, s)
    assert outcome == Outcome("final", "It went out.") and sim.lives == 2
    assert sim.store[lg.THREAD] == lg.THREAD_ID and sim.store[lg.CHECKPOINTER] is not None
    calls = [r for r in sim.transcript.of(Request) if r.path.endswith("/messages")]
    assert len(calls) == 4  # turn 1: two calls; turn 2: the call that died in flight, and the same call again
    # turn 2 goes on turn 1's thread, and the restarted process resumes that thread: each message once
    assert _user_texts(calls[2]) == _user_texts(calls[3]) == ["Refund order 1234.", "Did the email go out?"]
    assert calls[3].body["messages"] == calls[2].body["messages"]  # type: ignore[index]
    assert sim.check().ok


def test_the_drive_runs_conversations_with_restarts_under_verify(tmp_path: Any) -> None:
    seen: list[tuple[int, int]] = []

    def watched(sim: Sim) -> Any:
        out = lg.drive(sim)
        seen.append((sim.user_turns.started, sim.lives))
        return out

    watched.simloop_prepare = lg.drive.simloop_prepare  # type: ignore[attr-defined]
    report = simloop.verify(watched, limits=Limits(max_steps=8), turns=2, restarts=1, seed=0, max_examples=40,
                            out_dir=tmp_path, invariants=["stops", "pairing", "request_valid"])
    assert report.ok
    assert any(turns == 2 for turns, _ in seen) and any(lives == 2 for _, lives in seen)
