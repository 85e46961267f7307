"""The OpenAI wire (Chat Completions) through the official ``openai`` SDK, unmodified: rendering, streaming,
errors and the real API's 400s; the translation into the one world (docs/design.md, The OpenAI wire)."""

from __future__ import annotations

import json
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")

import simloop
from simloop.protocol import openai_chat
from simloop.protocol.render import Turn
from simloop.transcript import Request, Response

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "search", "description": "Search.",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]
CALLS = {"tool_use": [{"name": "search", "input": {"q": "a"}}, {"name": "search", "input": {"q": "b"}}]}


def scenario(*replies: dict[str, Any]) -> dict[str, Any]:
    return {"name": "wire", "task": "Find it.", "tools": [{"name": "search"}], "model": list(replies)}


def test_parallel_tool_calls_render_as_the_sdk_reads_them() -> None:
    with simloop.Sim(scenario(CALLS, {"end_turn": "Found both."})) as sim:
        client = sim.openai_client
        messages: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": sim.task}]
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        choice = reply.choices[0]
        assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        calls = choice.message.tool_calls or []
        assert [json.loads(c.function.arguments) for c in calls] == [{"q": "a"}, {"q": "b"}]
        assert reply.usage is not None and reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
        messages.append(choice.message.model_dump(exclude_none=True))
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in calls]
        final = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        assert final.choices[0].finish_reason == "stop" and final.choices[0].message.content == "Found both."
    # the transcript holds the Messages shape the invariants read: system apart, tool_use ids, one result a message
    req = sim.transcript.requests[1]
    assert req.path == "/v1/chat/completions" and req.body["system"] == "Be brief."
    conv = req.conversation
    assert [b["id"] for b in conv[1]["content"]] == [c.id for c in calls]
    assert [m["content"][0]["tool_use_id"] for m in conv[2:]] == [c.id for c in calls]
    # results_together does not read this wire: a tool message each is its design (the results here are made up,
    # so results_real is not asked)
    assert sim.check(invariants=["pairing", "request_valid", "results_together"]).ok


def test_streaming_chunks_carry_tool_call_deltas_and_done() -> None:
    with simloop.Sim(scenario(CALLS, {"end_turn": "Done, and done well."})) as sim:
        client = sim.openai_client
        stream = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}],
                                                tools=TOOLS, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert [d.id for d in deltas if d.id] and {d.index for d in deltas} == {0, 1}
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
        assert chunks[-1].choices == [] and chunks[-1].usage is not None  # the usage chunk, then [DONE]
        with client.chat.completions.stream(model="gpt-4o", messages=[{"role": "user", "content": "x"}]) as s:
            final = s.get_final_completion()
        assert final.choices[0].message.content == "Done, and done well."
    raw = openai_chat.render_chunks(Turn([{"type": "text", "text": "hi"}], "end_turn"),
                                    {"id": "msg_01x", "usage": {}}, model="m", created=0)
    assert raw[-1] == b"data: [DONE]\n\n" and all(e.startswith(b"data: ") for e in raw)


def test_a_stream_cut_or_broken_midway_raises_what_the_sdk_raises() -> None:
    with simloop.Sim(scenario({"error": "stream_cut"}, {"error": "stream_error"})) as sim:
        client = sim.openai_client.with_options(max_retries=0)
        for error in (openai.APIConnectionError, openai.APIError):
            with pytest.raises(error) as info:
                list(client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}],
                                                    stream=True))
            assert type(info.value) is error
    assert [r.fault for r in sim.transcript.responses] == ["stream_cut", "stream_error"]
    assert info.value.body == {"message": "The server had an error while processing your request. Sorry about that!",
                               "type": "server_error", "param": None, "code": None}


def test_length_keeps_the_cut_arguments_and_a_refusal_is_stop_with_its_text_in_refusal() -> None:
    cut = {"max_tokens": {"text": "Let me", "tool_use": [{"name": "search", "input": {"q": "abcdefgh"}}]}}
    with simloop.Sim(scenario(cut, {"refusal": "I can't help with that."})) as sim:
        client = sim.openai_client
        reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
        choice = reply.choices[0]
        assert choice.finish_reason == "length"
        args = (choice.message.tool_calls or [])[0].function.arguments
        assert args.startswith('{"q"') and not args.endswith("}")  # cut off: not JSON
        refused = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "y"}])
        assert refused.choices[0].finish_reason == "stop"  # as the real API: content_filter is the moderation's
        assert refused.choices[0].message.refusal == "I can't help with that." and refused.choices[0].message.content is None


def test_a_500_burst_is_retried_by_the_sdk_then_raised_in_the_openai_envelope() -> None:
    with simloop.Sim(scenario({"error": 500, "repeat": 3})) as sim, pytest.raises(openai.InternalServerError) as info:
        sim.openai_client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 500
    assert info.value.body == {"message": "The server had an error while processing your request. Sorry about that!",
                               "type": "server_error", "param": None, "code": None}
    assert [r.attempt for r in sim.transcript.requests] == [0, 1, 2] and {r.call for r in sim.transcript.requests} == {1}


@pytest.mark.parametrize(("status", "wait", "error"), [(429, 7.0, openai.RateLimitError),
                                                        (503, 1.0, openai.InternalServerError),
                                                        (529, 1.0, openai.InternalServerError)])
def test_retry_headers_time_the_sdk_retry(status: int, wait: float, error: type[Exception]) -> None:
    first: dict[str, Any] = {"error": status, **({"retry_after": wait} if status == 429 else {})}

    def drive(sim: simloop.Sim) -> simloop.Outcome:
        reply = sim.openai_client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        return simloop.Outcome(reason="final", text=reply.choices[0].message.content or "")

    with simloop.Sim(scenario(first, {"end_turn": "ok"})) as sim:
        assert sim.run(drive).text == "ok"
    requests = sim.transcript.requests
    assert requests[1].t - requests[0].t == pytest.approx(wait)  # retry-after-ms, read by the SDK (virtual time)
    served = sim.transcript.responses[0]
    assert served.status == (503 if status == 529 else status) and served.error is not None
    assert set(served.error["error"]) == {"message", "type", "param", "code"}
    with simloop.Sim(scenario({**first, "repeat": 3})) as sim:
        outcome = sim.run(drive)
    assert isinstance(outcome.exception, error)


def _sent(messages: list[Any], **extra: Any) -> tuple[Any, Response]:
    with simloop.Sim(scenario({"end_turn": "ok"})) as sim, pytest.raises(openai.BadRequestError) as info:
        sim.openai_client.chat.completions.create(model="gpt-4o", messages=messages, **extra)
    assert len(sim.transcript.requests) == 1  # a 400 is not retried (x-should-retry: false)
    return info.value, sim.transcript.responses[0]


ASKED: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": '{"q":"a"}'}},
    {"id": "call_b", "type": "function", "function": {"name": "search", "arguments": '{"q":"b"}'}}]}


def test_a_tool_calls_turn_answered_in_part_gets_the_real_400() -> None:
    err, resp = _sent([{"role": "user", "content": "x"}, ASKED, {"role": "tool", "tool_call_id": "call_a", "content": "1"},
                       {"role": "user", "content": "and?"}], tools=TOOLS)
    assert err.body == {
        "message": "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                   "'tool_call_id'. The following tool_call_ids did not have response messages: call_b",
        "type": "invalid_request_error", "param": "messages.[1].role", "code": None}
    assert resp.kind == "rejected"


def test_a_tool_message_answering_nothing_gets_the_real_400() -> None:
    err, _ = _sent([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "call_a", "content": "1"}])
    assert err.body["message"] == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
    assert err.body["param"] == "messages.[1].role"
    err, _ = _sent([{"role": "user", "content": "x"}, ASKED, {"role": "tool", "tool_call_id": "call_z", "content": "1"}],
                   tools=TOOLS)
    assert err.body["message"] == "Invalid parameter: 'tool_call_id' of 'call_z' not found in 'tool_calls' of previous message."


def test_request_shape_errors() -> None:
    err, _ = _sent([{"role": "user", "content": "x"}], tool_choice="required")
    assert err.body["message"] == "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    err, _ = _sent([{"role": "robot", "content": "x"}])
    assert err.body["code"] == "invalid_value" and err.body["param"] == "messages[0].role"
    err, _ = _sent([])
    assert err.body["code"] == "empty_array"


def test_translation_into_the_messages_shape() -> None:
    body = {"model": "gpt-4o", "max_completion_tokens": 99, "stop": "###", "parallel_tool_calls": False,
            "tool_choice": {"type": "function", "function": {"name": "search"}}, "tools": TOOLS,
            "messages": [{"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
                         {"role": "user", "content": "x"}, ASKED,
                         {"role": "tool", "tool_call_id": "call_a", "content": "1"},
                         {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "2"}]}]}
    assert openai_chat.validate_chat(body) is None
    internal = openai_chat.to_internal(body)
    assert internal["system"] == "Rules." and internal["max_tokens"] == 99 and internal["stop_sequences"] == ["###"]
    assert internal["tool_choice"] == {"type": "tool", "name": "search", "disable_parallel_tool_use": True}
    assert internal["tools"][0]["input_schema"]["properties"] == {"q": {"type": "string"}}
    assert internal["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_a", "name": "search", "input": {"q": "a"}},
        {"type": "tool_use", "id": "call_b", "name": "search", "input": {"q": "b"}}]
    assert internal["messages"][3] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_b", "content": "2"}]}
    assert openai_chat.to_internal({**body, "tool_choice": "required"})["tool_choice"]["type"] == "any"


def test_the_async_client_and_a_tool_error_told_in_text() -> None:
    def boom(q: str) -> str:
        raise RuntimeError("index offline")

    async def drive(sim: simloop.Sim) -> simloop.Outcome:
        client = sim.async_openai_client
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        reply = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        for call in reply.choices[0].message.tool_calls or []:
            try:
                out = await sim.arun_tool(call.function.name, json.loads(call.function.arguments), tool_use_id=call.id)
            except RuntimeError as exc:
                out = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
        final = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        return simloop.Outcome(reason="final", text=final.choices[0].message.content or "")

    with simloop.Sim(scenario(CALLS, {"end_turn": "The index is offline."}), tools={"search": boom}) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "final"
    report = sim.check(outcome)
    assert report.ok, str(report)  # tool_errors: this wire has no is_error; the text says it
    assert isinstance(sim.transcript.events[0], Request)


# -- on a real socket: simloop serve and verify --command ---------------------------------------------------------------


def test_the_loopback_server_answers_both_wires_at_either_base_url() -> None:
    import anthropic
    import httpx2

    from simloop.wire import loopback
    from simloop.wire.server import route

    world = scenario({"end_turn": "Hello, Messages."}, CALLS, {"end_turn": "Found both."}, {"end_turn": "Bare."})
    with loopback.serve(world) as server:
        assert server.openai_base_url == server.base_url + "/v1"  # as the SDKs' default https://api.openai.com/v1
        claude = anthropic.Anthropic(api_key="sk-ant-x", base_url=server.base_url, max_retries=0)
        said = claude.messages.create(model="claude-sonnet-5", max_tokens=64, messages=[{"role": "user", "content": "x"}])
        assert said.content[0].type == "text" and said.content[0].text == "Hello, Messages."
        gpt = openai.OpenAI(api_key="sk-x", base_url=server.openai_base_url, max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Find it."}]
        reply = gpt.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        calls = reply.choices[0].message.tool_calls or []
        assert reply.choices[0].finish_reason == "tool_calls" and len(calls) == 2
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in calls]
        stream = gpt.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Found both."
        # a base URL without /v1 (the server's bare address) reaches the same route
        bare = openai.OpenAI(api_key="sk-x", base_url=server.base_url, max_retries=0)
        done = bare.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "again"}])
        assert done.choices[0].message.content == "Bare."
        missing = httpx2.post(server.base_url + "/messages", json={}, headers={"authorization": "Bearer sk-x"})
        assert missing.status_code == 404  # the Messages API has no alias: its SDKs always write /v1
    paths = [r.path for r in server.transcript.requests]
    assert paths == ["/v1/messages", "/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions",
                     "/messages"]
    assert [r.call for r in server.transcript.requests][:4] == [1, 2, 3, 4]  # the wires share one world's calls
    assert route("/chat/completions") == route("/v1/chat/completions") == "/v1/chat/completions"
    assert route("/v1/messages") == "/v1/messages" and route("/messages") == "/messages"


def test_fast_retries_replace_the_chat_wires_own_wait() -> None:
    # before: a 429's own retry-after-ms (30000) and simloop's (1) were both sent; the SDK read neither as a number
    # and waited the 30 s of retry-after, in real time
    import time

    import httpx2

    from simloop.wire import loopback

    limited = {"error": 429, "retry_after": 30}
    with loopback.serve(scenario(limited, limited, {"end_turn": "ok"})) as server:
        server.fast_retries = True  # what verify --command serves with
        raw = httpx2.post(server.openai_base_url + "/chat/completions", headers={"authorization": "Bearer sk-x"},
                          json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
        assert raw.status_code == 429 and raw.headers.get_list("retry-after-ms") == ["1"]
        gpt = openai.OpenAI(api_key="sk-x", base_url=server.openai_base_url, max_retries=1)
        started = time.monotonic()
        reply = gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "y"}])
        took = time.monotonic() - started
    assert reply.choices[0].message.content == "ok"
    assert [r.attempt for r in server.transcript.requests] == [0, 0, 1]
    assert took < 20  # not the 30 s the 429 asked for


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)
    with simloop.Sim(scenario({"end_turn": "ok"})) as sim, pytest.raises(simloop.UsageError, match=r"simloop\[openai\]"):
        sim.openai_client  # noqa: B018
