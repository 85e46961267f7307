"""`simloop.adapters.tool_runner`: the SDK's tool runner driven against the simulated API.

Every ready-made drive (sync/async, streaming or not, threads or not) runs a
scenario end to end; the runner's endings map onto the right Outcome; the
declared limits are honoured (``max_iterations`` natively, the deadline and
token budget by the drive); and `verify` runs to completion on the runner with
limits declared.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import simloop
from simloop import Limits, Outcome, Scenario, Sim
from simloop.adapters import tool_runner

TOOLS = [
    {"name": "search", "kind": "read", "description": "Search the knowledge base.",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    {"name": "send_email", "kind": "write", "description": "Send an email.",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}},
]
SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]}
EMAIL = {"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com"}}]}

DRIVES = [
    "drive", "drive_no_thread", "stream_drive", "stream_drive_no_thread",
    "async_drive", "async_drive_no_thread", "async_stream_drive", "async_stream_drive_no_thread",
]


@pytest.fixture(autouse=True)
def _quiet_runner_logs() -> Iterator[None]:
    # the runner logs every tool exception with a traceback (log.exception); the tests look at the transcript
    logger = logging.getLogger("anthropic")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    data = {"name": "t", "task": "Refund order 1234.", "tools": TOOLS, "model": list(model), **kw}
    return Scenario.model_validate(data)


def run(name: str, s: Scenario, **kw: Any) -> tuple[Outcome, Sim]:
    with Sim(s, **kw) as sim:
        outcome = sim.run(getattr(tool_runner, name))
    return outcome, sim


@pytest.mark.parametrize("name", DRIVES)
def test_every_ready_drive_runs_the_runner_to_a_final_answer(name: str) -> None:
    outcome, sim = run(name, scenario(SEARCH, EMAIL, {"end_turn": "Refunded and emailed."}))
    assert outcome == Outcome("final", "Refunded and emailed.")
    reqs = sim.transcript.requests
    assert len(reqs) == 3
    threaded = "no_thread" not in name
    assert ("thread" in reqs[1].body) is threaded
    assert len(reqs[1].body["messages"]) == (1 if threaded else 3)
    assert [e.tool for e in sim.transcript.of(simloop.transcript.ToolStart)] == ["search", "send_email"]
    assert sim.check(outcome).ok, sim.check(outcome)


@pytest.mark.parametrize(
    ("ending", "reason"),
    [
        ({"stop_sequence": "Here it is", "sequence": "###"}, "final"),
        ({"max_tokens": "The refund policy says that"}, "truncated"),
        ({"refusal": "I can't help with that."}, "refusal"),
    ],
)
@pytest.mark.parametrize("name", ["drive", "async_stream_drive_no_thread"])
def test_the_last_replys_stop_reason_is_the_outcome(name: str, ending: dict[str, Any], reason: str) -> None:
    outcome, sim = run(name, scenario(SEARCH, ending))
    assert outcome.reason == reason
    assert sim.check(outcome).ok


@pytest.mark.parametrize("name", ["drive_no_thread", "async_drive"])
def test_tools_of_a_max_tokens_reply_do_not_run(name: str) -> None:
    cut = {"max_tokens": {"text": "Sending now.", "tool_use": [{"name": "send_email", "input": {"to": "ann@"}}]}}
    outcome, sim = run(name, scenario(cut))
    assert outcome.reason == "truncated"
    assert sim.transcript.of(simloop.transcript.ToolStart) == []
    assert sim.check(outcome).ok


def test_a_paused_turn_is_sent_back_and_continued() -> None:
    outcome, sim = run("drive_no_thread", scenario({"pause_turn": "Searching."}, {"end_turn": "Found it."}))
    assert outcome == Outcome("final", "Found it.")
    assert len(sim.transcript.requests) == 2
    assert sim.transcript.requests[1].body["messages"][-1]["role"] == "assistant"
    assert sim.check(outcome).ok


@pytest.mark.parametrize("name", ["drive", "stream_drive_no_thread", "async_drive_no_thread", "async_stream_drive"])
def test_max_steps_becomes_max_iterations(name: str) -> None:
    outcome, sim = run(name, scenario(SEARCH, then="repeat_last"), limits=Limits(max_steps=3))
    assert outcome.reason == "max_steps"
    assert "max_iterations=3" in outcome.text
    assert sim.transcript.model_calls == 3
    assert sim.check(outcome).ok


def test_make_drive_max_iterations_overrides_the_declared_limit() -> None:
    with Sim(scenario(SEARCH, then="repeat_last"), limits=Limits(max_steps=5)) as sim:
        outcome = sim.run(tool_runner.make_drive(max_iterations=2))
    assert outcome.reason == "max_steps" and sim.transcript.model_calls == 2


@pytest.mark.parametrize("name", ["drive", "async_stream_drive_no_thread"])
def test_an_outage_the_sdk_cannot_retry_away_is_an_error(name: str) -> None:
    outcome, sim = run(name, scenario(SEARCH, {"error": 529, "repeat": 3}))
    assert outcome.reason == "error"
    assert "OverloadedError" in outcome.text
    assert sim.check(outcome).ok


@pytest.mark.parametrize("name", ["drive", "async_drive_no_thread"])
def test_a_tool_exception_goes_back_as_an_is_error_result(name: str) -> None:
    s = scenario(EMAIL, {"end_turn": "Could not send."}, faults=[{"tool": "send_email", "call": 1, "kind": "raise"}])
    outcome, sim = run(name, s)
    assert outcome == Outcome("final", "Could not send.")
    result = sim.transcript.requests[1].conversation[-1]["content"][0]
    assert result["is_error"] is True and "ConnectionError" in result["content"]
    assert sim.check(outcome).ok


@pytest.mark.parametrize("name", ["drive", "async_drive"])
def test_the_drive_stops_the_runner_at_the_deadline(name: str) -> None:
    slow = [{"tool": "search", "call": 1, "kind": "slow", "latency": 90}]
    s = scenario(SEARCH, SEARCH, {"end_turn": "Done."}, faults=slow)
    outcome, sim = run(name, s, limits=Limits(deadline_s=60))
    assert outcome.reason == "deadline"
    assert sim.transcript.model_calls == 1  # the slow tool spent the deadline: no second request
    assert sim.check(outcome).ok


def test_the_drive_stops_the_runner_when_the_token_budget_is_spent() -> None:
    heavy = {**SEARCH, "usage": {"input_tokens": 5000, "output_tokens": 100}}
    outcome, sim = run("stream_drive", scenario(heavy, SEARCH, {"end_turn": "x"}), limits=Limits(max_total_tokens=4000))
    assert outcome.reason == "token_budget"
    assert sim.transcript.model_calls == 1
    assert sim.transcript.of(simloop.transcript.ToolStart) == []  # stopped before running the reply's tools
    assert sim.check(outcome).ok


def test_outcome_of_without_a_reply_is_an_error() -> None:
    assert tool_runner.outcome_of(None, iterations=0, max_iterations=None).reason == "error"


def test_runnable_tools_are_the_sdks_function_tools_with_the_scenarios_schemas() -> None:
    from anthropic.lib.tools import BetaAsyncFunctionTool, BetaFunctionTool

    with Sim(scenario({"end_turn": "x"})) as sim:
        sync_tools = tool_runner.runnable_tools(sim)
        async_tools = tool_runner.async_runnable_tools(sim)
    assert all(isinstance(t, BetaFunctionTool) for t in sync_tools)
    assert all(isinstance(t, BetaAsyncFunctionTool) for t in async_tools)
    assert [t.to_dict() for t in sync_tools] == [
        {"name": s["name"], "description": s["description"], "input_schema": s["input_schema"]} for s in TOOLS
    ]


@pytest.mark.parametrize("name", ["drive", "async_stream_drive_no_thread"])
def test_verify_runs_to_completion_on_the_runner_with_a_step_cap(name: str, tmp_path: Any) -> None:
    report = simloop.verify(
        getattr(tool_runner, name), limits=Limits(max_steps=6), max_examples=15, seed=3, out_dir=tmp_path
    )
    assert report.ok and report.examples == 15


def test_ready_drives_have_importable_names_for_replay_lines() -> None:
    for name in DRIVES:
        fn = getattr(tool_runner, name)
        assert fn.__qualname__ == name and fn.__module__ == "simloop.adapters.tool_runner"


def test_import_simloop_imports_no_adapter() -> None:
    code = "import sys, simloop; print(sorted(m for m in sys.modules if m.startswith('simloop.adapters') " \
           "or m.split('.')[0] in ('pydantic_ai', 'langgraph', 'langchain_anthropic')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
