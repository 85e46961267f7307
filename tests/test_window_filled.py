"""``stop_reason: model_context_window_exceeded``: scripted, generated, and held to as a cut reply (issue 40, item 6).

Anthropic's stop-reason table: the response filled the model's context window; treat it as truncated.  A loop that
calls it ``final`` must be caught (``truncation``), one that reports ``truncated`` is honest, and `verify` must
send it: in the long-history stage, where a history of large tool outputs fills the window.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import simloop
from examples import context_trimmed, window_filled_final
from examples.catalogue import CONTEXT_DECLARED
from simloop import Outcome, Sim, strategies
from simloop.scenario import MaxTokensBody, Reply
from simloop.transcript import Response

WINDOW = "model_context_window_exceeded"
FILLED = {"max_tokens": {"text": "The checkout failed because the pool", "stop_reason": WINDOW}}


def readme_loop(sim: Sim, *, cut: tuple[str, ...] = ("max_tokens",)) -> Outcome:
    """The README's loop: ``cut`` are the stop reasons it reports as truncated; any other non-tool stop is final."""
    client = anthropic.Anthropic(api_key="k", http_client=sim.http_client)
    messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
    for _ in range(10):
        reply = client.messages.create(model=sim.model, max_tokens=1024, messages=messages, tools=sim.tool_schemas)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        text = "".join(b.text for b in reply.content if b.type == "text")
        if reply.stop_reason in cut:
            return Outcome("truncated", text)
        if reply.stop_reason != "tool_use":
            return Outcome("final", text)
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input, tool_use_id=b.id)}
            for b in reply.content if b.type == "tool_use"
        ]})
    return Outcome("max_steps")


def _run(drive: Any, *model: dict[str, Any]) -> tuple[Sim, simloop.Report]:
    scenario = {"name": "w", "task": "Why did checkout fail?", "model": list(model), "strict": False,
                "tools": [{"name": "read_log", "results": ["41,000 lines"]}]}
    with Sim(scenario) as sim:
        outcome = sim.run(drive)
    return sim, sim.check(outcome)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_scripted_window_filled_reply_reaches_the_sdk_with_its_stop_reason(stream: bool) -> None:
    seen: list[str | None] = []

    def drive(sim: Sim) -> Outcome:
        client = anthropic.Anthropic(api_key="k", http_client=sim.http_client, _strict_response_validation=True)
        params: dict[str, Any] = {"model": sim.model, "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]}
        if stream:
            with client.messages.stream(**params) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**params)
        seen.append(message.stop_reason)
        return Outcome("truncated")

    _run(drive, FILLED)
    assert seen == [WINDOW]


def test_a_loop_that_calls_it_final_is_caught_and_one_that_calls_it_truncated_is_honest() -> None:
    _, report = _run(readme_loop, {"tool_use": [{"name": "read_log", "input": {}}]}, FILLED)
    assert [v.invariant for v in report.violations] == ["truncation"]
    assert "cut off at model_context_window_exceeded" in report.violations[0].message
    _, report = _run(lambda sim: readme_loop(sim, cut=("max_tokens", WINDOW)), FILLED)
    assert report.ok, report.violations  # 'truncated' after a window-filled reply is the honest reason


def test_a_tool_call_cut_by_the_window_must_not_run() -> None:
    cut = {"max_tokens": {"text": "Reading", "tool_use": [{"name": "read_log", "input": {"day": "2026-01-01"}}],
                          "stop_reason": WINDOW}}

    def runs_cut_calls(sim: Sim) -> Outcome:
        client = anthropic.Anthropic(api_key="k", http_client=sim.http_client)
        reply = client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": "x"}],
                                       tools=sim.tool_schemas)
        for block in reply.content:
            if block.type == "tool_use":
                sim.run_tool(block.name, block.input, tool_use_id=block.id)
        return Outcome("truncated")

    _, report = _run(runs_cut_calls, cut)
    assert [v.invariant for v in report.violations] == ["truncation"]


def test_the_format_writes_it_as_a_cut_reply() -> None:
    reply = Reply.model_validate(FILLED)
    assert isinstance(reply.max_tokens, MaxTokensBody) and reply.kind == "max_tokens"
    assert reply.max_tokens.stop_reason == WINDOW
    with pytest.raises(simloop.ScenarioError):
        simloop.Scenario.from_yaml("version: 1\ntask: t\nmodel:\n  - max_tokens: {text: a, stop_reason: end_turn}\n",
                                   path="s.yaml")


def test_the_long_history_stage_sends_it_and_verify_catches_the_loop_that_calls_it_final(tmp_path: Any) -> None:
    from hypothesis import find, settings

    [long_stage] = [plans for name, plans, _ in strategies.stages() if name == "long"]
    assert find(long_stage, lambda plan: plan.long and plan.fills, settings=settings(database=None, max_examples=50))
    stop_reasons: set[str | None] = set()

    def trimmed(sim: Sim) -> Any:
        outcome = context_trimmed.drive(sim)
        stop_reasons.update(e.stop_reason for e in sim.transcript.events if isinstance(e, Response))
        return outcome

    none_ = ((None, 1),)
    long = strategies.plans(outages=none_, slow=((False, 1),), heavy=((False, 1),), fault_rates=((0, 1),),
                            tool_fault_rates=((0, 1),), personas=(("finishes", 1),), min_steps=5, max_steps=8,
                            long=((True, 1),), fills=((True, 1),))
    simloop.verify(trimmed, limits=CONTEXT_DECLARED, plan=long, max_examples=6, seed=0, context=True,
                   out_dir=tmp_path)  # the correct loop: no violation
    assert WINDOW in stop_reasons
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(window_filled_final.drive, limits=CONTEXT_DECLARED, plan=long, max_examples=6, seed=0,
                       out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} <= {"truncation", "honest_outcome"}
