"""`simloop.adapters.litellm`: an agent loop on LiteLLM, routed to the simulated Chat Completions wire.

LiteLLM reaches the simulator through ``client=sim.openai_client`` (no socket, no URL).  Skipped cleanly
when LiteLLM is not installed (``pip install simloop[litellm]``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm", reason="litellm is not installed (pip install simloop[litellm])")

import simloop
from simloop import Limits, Outcome, Scenario, Sim
from simloop.adapters import litellm as lt

TOOLS = [
    {"name": "search", "kind": "read", "description": "Search the knowledge base.",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    {"name": "send_email", "kind": "write", "description": "Send an email.",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                      "required": ["to"]}},
]
SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]}
CUT_CALL = {"max_tokens": {"text": "Emailing, then searching.", "tool_use": [  # the last call is cut mid-arguments
    {"name": "send_email", "input": {"to": "ann@example.com", "body": "Your refund of order 1234 is approved."}},
    {"name": "search", "input": {"q": "refund policy for order 1234"}}]}}
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
DRIVES = [lt.drive, lt.async_drive, lt.stream_drive]


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    import litellm

    shown, litellm.suppress_debug_info = litellm.suppress_debug_info, True  # its help banner on every API error
    logger = logging.getLogger("LiteLLM")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the async logging worker warns when each run's event loop changes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LiteLLM's own deprecation warnings (pydantic's model_fields)
        yield
    litellm.suppress_debug_info = shown
    logger.setLevel(level)


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    data = {"name": "t", "task": "Refund order 1234.", "tools": TOOLS, "model": list(model), **kw}
    return Scenario.model_validate(data)


def run(drive: Any, s: Scenario | Path, **kw: Any) -> tuple[Outcome, Sim]:
    with Sim(s, **kw) as sim:
        outcome = sim.run(drive)
    return outcome, sim


def test_importing_the_adapter_keeps_litellm_off_the_network() -> None:
    import os

    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


@pytest.mark.parametrize("drive", DRIVES)
def test_the_loop_runs_tools_and_answers_through_the_simulated_chat_wire(drive: Any) -> None:
    outcome, sim = run(drive, scenario(SEARCH, {"end_turn": "Refunded."}))
    assert outcome == Outcome("final", "Refunded.")
    assert [r.path for r in sim.transcript.requests] == ["/v1/chat/completions"] * 2
    assert sim.transcript.requests[0].body.get("stream", False) is (drive is lt.stream_drive)
    result = sim.transcript.requests[1].conversation[-1]["content"][0]
    assert result["type"] == "tool_result" and "result 1 of search" in str(result["content"])
    assert sim.check(outcome).ok


@pytest.mark.parametrize("drive", DRIVES)
def test_a_cut_reply_runs_nothing_and_is_truncated(drive: Any) -> None:
    outcome, sim = run(drive, scenario(CUT_CALL))
    assert outcome.reason == "truncated" and sim.transcript.of(simloop.transcript.ToolStart) == []
    assert sim.check(outcome).ok


@pytest.mark.parametrize("drive", DRIVES)
def test_the_next_turn_after_a_cut_reply_answers_its_calls_as_not_run(drive: Any) -> None:
    outcome, sim = run(drive, scenario(CUT_CALL, {"end_turn": "No email went out."}, followups=["Did it go out?"]))
    assert outcome == Outcome("final", "No email went out.")
    answers = sim.transcript.requests[1].body["messages"][2:4]
    assert [m["content"][0]["content"] for m in answers] == [lt._NOT_RUN_ENDED] * 2
    assert sim.check(outcome).ok


def test_the_tutorial_loop_runs_the_cut_call_and_is_caught() -> None:
    outcome, sim = run(lt.drive_trusting_tool_calls, scenario(CUT_CALL, {"end_turn": "Sent."}))
    assert outcome == Outcome("final", "Sent.")
    assert [e.tool for e in sim.transcript.of(simloop.transcript.ToolStart)] == ["send_email"]  # the cut one: bad JSON
    assert [v.invariant for v in sim.check(outcome).violations] == ["truncation"]


@pytest.mark.parametrize("drive", DRIVES)
def test_a_refusal_is_a_refusal(drive: Any) -> None:
    outcome, sim = run(drive, scenario({"refusal": "I can't help with that."}))
    if drive is lt.stream_drive:
        # litellm.stream_chunk_builder drops the refusal's text, and a refusal is finish_reason "stop" (the real
        # API's): nothing tells it from an empty answer (docs/findings.md, L1)
        assert outcome == Outcome("final", "")
        assert [v.invariant for v in sim.check(outcome).violations] == ["honest_outcome"]
        return
    assert outcome == Outcome("refusal", "I can't help with that.") and sim.check(outcome).ok


@pytest.mark.parametrize("drive", DRIVES)
def test_an_outage_and_a_cut_stream_are_errors(drive: Any) -> None:
    outcome, sim = run(drive, scenario({"error": 503, "repeat": 4}))
    assert outcome.reason == "error" and "ServiceUnavailableError" in outcome.text
    assert len(sim.transcript.requests) == 3 and sim.check(outcome).ok  # the client's 2 retries, set by LiteLLM
    outcome, sim = run(drive, SCENARIOS / "stream-cut.yaml")
    assert sim.check(outcome).ok


def test_the_step_cap_and_the_token_budget_stop_the_loop() -> None:
    outcome, sim = run(lt.drive, scenario(SEARCH, then="repeat_last"), limits=Limits(max_steps=3))
    assert outcome.reason == "max_steps" and sim.transcript.model_calls == 3 and sim.check(outcome).ok
    heavy = {**SEARCH, "usage": {"input_tokens": 5000, "output_tokens": 10}}
    outcome, sim = run(lt.drive, scenario(heavy, then="repeat_last"), limits=Limits(max_total_tokens=4000))
    assert outcome.reason == "token_budget" and sim.transcript.model_calls == 1 and sim.check(outcome).ok


@pytest.mark.parametrize("drive", DRIVES)
def test_verify_runs_to_completion_on_litellm(drive: Any, tmp_path: Path) -> None:
    limits = Limits(max_steps=6, deadline_s=300, max_total_tokens=200_000)
    report = simloop.verify(drive, limits=limits, max_examples=12, seed=3, out_dir=tmp_path)
    assert report.ok and report.examples == 12


def test_verify_with_stop_presses_holds(tmp_path: Path) -> None:
    plan = simloop.strategies.plans(ending_kinds=("end_turn", "refusal"))
    report = simloop.verify(lt.drive, limits=Limits(max_steps=6), max_examples=12, seed=5, out_dir=tmp_path,
                            plan=plan, abort=True)
    assert report.ok and report.examples == 12
