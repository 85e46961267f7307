"""Usage follows the request: input tokens are what the request carries, as ``count_tokens`` counts them.

``usage.input_tokens`` of ``/v1/messages`` equals the ``count_tokens`` answer for the same conversation
(JSON or stream, whatever the settings); it grows with the history and with each tool output sent back,
also under the SDK tool runner's message threads (a continuation resends only the new messages);
output tokens follow the reply; a scenario's ``usage:`` stays an explicit override.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import simloop
from simloop import Outcome, Sim
from simloop.wire.server import estimate_tokens, request_tokens

TASK = "What is the refund policy for orders older than 30 days?"
SEARCH = {"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}


def _sim(*replies: dict[str, Any], **extra: Any) -> Sim:
    scenario = simloop.Scenario.model_validate(
        {"task": TASK, "system": "Be brief.", "tools": [SEARCH], "model": list(replies), "then": "end_turn", **extra}
    )
    return Sim(scenario, seed=0)


def _client(sim: Sim) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="k", base_url="https://api.anthropic.com", http_client=sim.http_client, _strict_response_validation=True
    )


@pytest.mark.parametrize("stream", [False, True])
def test_usage_input_tokens_equal_count_tokens_for_the_same_conversation(stream: bool) -> None:
    with _sim({"end_turn": "Within 30 days only."}) as sim:
        client = _client(sim)
        content: dict[str, Any] = {
            "model": "claude-sonnet-5",
            "system": "Be brief.",
            "tools": sim.tool_schemas,
            "messages": [{"role": "user", "content": TASK}],
        }
        counted = client.messages.count_tokens(**content).input_tokens
        settings: dict[str, Any] = {"max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024}}
        if stream:
            with client.messages.stream(**content, **settings) as s:
                used = s.get_final_message().usage.input_tokens
        else:
            used = client.messages.create(**content, **settings, metadata={"user_id": "u-1"}).usage.input_tokens
    assert used == counted
    # what the request carries, at about four bytes a token: a short request is a few dozen tokens
    assert 20 < counted < 100


def test_input_tokens_grow_with_a_huge_tool_output() -> None:
    replies: list[dict[str, Any]] = [
        {"tool_use": [{"name": "search", "input": {"q": "refund"}}]},
        {"end_turn": "Done."},
    ]
    with _sim(*replies, faults=[{"tool": "search", "kind": "huge_output", "size": 200_000}]) as sim:

        def drive(sim: Sim) -> Outcome:
            client = sim.client
            tools: Any = sim.tool_schemas
            messages: list[Any] = [{"role": "user", "content": sim.task}]
            first = client.messages.create(model=sim.model, max_tokens=512, tools=tools, messages=messages)
            call = next(b for b in first.content if b.type == "tool_use")
            output = sim.run_tool(call.name, call.input, tool_use_id=call.id)
            messages += [
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": output}]},
            ]
            second = client.messages.create(model=sim.model, max_tokens=512, tools=tools, messages=messages)
            return Outcome("final", f"{first.usage.input_tokens} {second.usage.input_tokens}")

        outcome = sim.run(drive)
    before, after = map(int, outcome.text.split())
    assert before < 200
    assert 50_000 <= after - before < 60_000  # 200,000 characters sent back (JSON-escaped): some 50k tokens more


def test_a_thread_continuation_counts_its_whole_history() -> None:
    """The SDK tool runner sends only the new messages on a thread; the count covers the whole conversation."""
    replies: list[dict[str, Any]] = [
        {"tool_use": [{"name": "search", "input": {"q": "refund"}}]},
        {"end_turn": "Done."},
    ]
    counts: dict[bool, list[int]] = {}
    for thread in (True, False):
        with _sim(*replies) as sim:

            def drive(sim: Sim, thread: bool = thread) -> Outcome:
                @anthropic.beta_tool
                def search(q: str) -> str:
                    """Search the knowledge base."""
                    return sim.run_tool("search", {"q": q})

                options: Any = {} if thread else {"thread": False}
                runner = sim.client.beta.messages.tool_runner(
                    model=sim.model, max_tokens=512, tools=[search], system="Be brief.",
                    messages=[{"role": "user", "content": sim.task}], **options,
                )  # fmt: skip
                runner.until_done()
                return Outcome("final", "")

            sim.run(drive)
            counts[thread] = [r.input_tokens for r in sim.transcript.requests]
    # the same conversation with and without threads: the same input tokens (the thread settings aside)
    assert counts[True] == counts[False]
    assert counts[True][1] > counts[True][0]


def test_output_tokens_follow_the_reply_and_usage_stays_an_explicit_override() -> None:
    long_answer = "The policy: refunds within 30 days, store credit after. " * 20
    with _sim({"end_turn": "Yes."}, {"end_turn": long_answer}, {"end_turn": "ok", "usage": {"input_tokens": 7}}) as sim:
        client = _client(sim)
        ask: dict[str, Any] = {"model": "m", "max_tokens": 512, "messages": [{"role": "user", "content": TASK}]}
        short, long, overridden = (client.messages.create(**ask).usage for _ in range(3))
    assert short.output_tokens < 10 < long.output_tokens
    assert long.output_tokens >= len(long_answer) // 4
    assert overridden.input_tokens == 7 and short.input_tokens > 7


def test_request_tokens_leave_the_settings_out() -> None:
    content = b'{"messages":[{"role":"user","content":"hi"}]}'
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    assert request_tokens(body, len(content)) == estimate_tokens(len(content))
    with_settings = {"max_tokens": 100, **body, "model": "claude-sonnet-5", "stream": True}
    raw = b'{"max_tokens":100,"messages":[{"role":"user","content":"hi"}],"model":"claude-sonnet-5","stream":true}'
    assert abs(request_tokens(with_settings, len(raw)) - estimate_tokens(len(content))) <= 1
