"""Rendered replies parse through the real SDK (strict validation) into the Message the Turn describes.

Every reply kind is rendered both as a JSON body and as an SSE stream; both go through an unmodified
``anthropic`` client over an ``httpx2.MockTransport`` and must give equal Messages.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx2
import jiter
import pytest
from pydantic_core import to_json

from simloop.protocol.render import (
    Turn,
    render_error_event,
    render_json,
    render_message,
    render_message_json,
    render_sse,
    turn_from_message,
    turn_from_sse,
)

KW: dict[str, Any] = {"id": "msg_01Sim", "model": "claude-sonnet-4-6", "input_tokens": 42}
CREATE: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}
SSE_TYPE = "text/event-stream; charset=utf-8"

LONG_TEXT = (
    "The refund for order 1234 has been processed and the customer was notified by email; "
    "it should appear on their statement within five business days."
)
PARTIAL_TOOL_JSON = '{"to": "a@example.com", "subject": "Refund", "body": "Dear custo'


def _tool(i: int, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_01Sim{i:04d}", "name": name, "input": input, "caller": {"type": "direct"}}


REPLIES: dict[str, Turn] = {
    "end_turn": Turn(content=[{"type": "text", "text": LONG_TEXT}], stop_reason="end_turn"),
    "tool_use": Turn(
        content=[
            {"type": "text", "text": "Let me look that up."},
            _tool(1, "search", {"query": "refund policy", "limit": 5}),
        ],
        stop_reason="tool_use",
    ),
    "parallel_tool_use": Turn(
        content=[
            _tool(1, "get_weather", {"city": "Paris", "units": "metric"}),
            _tool(2, "get_weather", {"city": "Zürich – Schweiz", "units": "metric"}),
            _tool(3, "get_time", {"tz": "Europe/Paris", "nested": {"a": [1, 2.5, None, True], "b": 'x"y\\z\n'}}),
        ],
        stop_reason="tool_use",
    ),
    "max_tokens_text": Turn(content=[{"type": "text", "text": LONG_TEXT[:57]}], stop_reason="max_tokens"),
    "max_tokens_tool_input": Turn(
        content=[
            {"type": "text", "text": "Sending the email now."},
            {"type": "tool_use", "id": "toolu_01SimCut", "name": "send_email", "partial_json": PARTIAL_TOOL_JSON},
        ],
        stop_reason="max_tokens",
    ),
    "stop_sequence": Turn(
        content=[{"type": "text", "text": "Step one: gather the data. Step two: "}],
        stop_reason="stop_sequence",
        stop_sequence="###",
    ),
    "refusal": Turn(
        content=[],
        stop_reason="refusal",
        stop_details={"type": "refusal", "category": None, "explanation": "This request asks for harmful content."},
    ),
    "pause_turn": Turn(
        content=[
            {"type": "text", "text": "I'll search the web for that."},
            {"type": "server_tool_use", "id": "srvtoolu_01Sim", "name": "web_search", "input": {"query": "weather"}},
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01Sim",
                "content": [
                    {
                        "type": "web_search_result",
                        "title": "Weather",
                        "url": "https://example.com/weather",
                        "encrypted_content": "EqgfCioIARgB",
                        "page_age": None,
                    }
                ],
            },
        ],
        stop_reason="pause_turn",
    ),
    "thinking_text": Turn(
        content=[
            {
                "type": "thinking",
                "thinking": "The user wants the weather. I should answer briefly and mention the source.",
                "signature": "EqQBCkYIBxgCKkBsig==",
            },
            {"type": "text", "text": "It is sunny in Paris today."},
        ],
        stop_reason="end_turn",
    ),
    "redacted_thinking": Turn(
        content=[
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
            {"type": "text", "text": "Here is my answer."},
        ],
        stop_reason="end_turn",
    ),
}


def _client(body: bytes, content_type: str) -> anthropic.Anthropic:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type, "request-id": "req_x"}, content=body)

    return anthropic.Anthropic(
        api_key="k",
        base_url="http://sim.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        _strict_response_validation=True,
        max_retries=0,
    )


def parse_json(body: bytes) -> anthropic.types.Message:
    message: anthropic.types.Message = _client(body, "application/json").messages.create(**CREATE)
    return message


def parse_sse(items: list[bytes]) -> anthropic.types.Message:
    with _client(b"".join(items), SSE_TYPE).messages.stream(**CREATE) as stream:
        return stream.get_final_message()


def _without_none(value: Any) -> Any:
    """A block as the SDK dumps it with exclude_none, for comparing against the Turn's dict."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _event_names(items: list[bytes]) -> list[str]:
    return [item.split(b"\n", 1)[0].decode().removeprefix("event: ") for item in items]


@pytest.mark.parametrize("kind", list(REPLIES))
def test_json_and_sse_parse_into_equal_messages(kind: str) -> None:
    turn = REPLIES[kind]
    from_json = parse_json(render_json(turn, **KW))
    from_sse = parse_sse(render_sse(turn, **KW))

    assert from_json.model_dump() == from_sse.model_dump()
    assert from_json.id == KW["id"] and from_json.model == KW["model"]
    assert from_json.stop_reason == turn.stop_reason
    assert from_json.stop_sequence == turn.stop_sequence
    assert from_json.usage.input_tokens == 42
    # Every block but a cut tool input comes back exactly as the Turn says.
    for block, got in zip(turn.content, from_json.content, strict=True):
        if "partial_json" not in block:
            assert got.model_dump(exclude_none=True) == _without_none(block)


@pytest.mark.parametrize("kind", list(REPLIES))
def test_sse_event_order_matches_the_real_stream(kind: str) -> None:
    turn = REPLIES[kind]
    names = _event_names(render_sse(turn, **KW))

    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == len(turn.content)
    if turn.content:
        assert names[1:3] == ["content_block_start", "ping"]
        assert names.count("ping") == 1
    else:
        assert "ping" not in names


def test_tool_input_streams_an_empty_delta_first_then_chunks() -> None:
    items = render_sse(REPLIES["parallel_tool_use"], **KW)
    deltas = [json.loads(i.split(b"data: ", 1)[1]) for i in items if i.startswith(b"event: content_block_delta")]
    third = [d["delta"]["partial_json"] for d in deltas if d["index"] == 2]

    assert third[0] == ""
    assert len(third) >= 3
    assert json.loads("".join(third)) == REPLIES["parallel_tool_use"].content[2]["input"]
    starts = [json.loads(i.split(b"data: ", 1)[1]) for i in items if i.startswith(b"event: content_block_start")]
    assert starts[0]["content_block"] == {
        "type": "tool_use",
        "id": "toolu_01Sim0001",
        "name": "get_weather",
        "input": {},
        "caller": {"type": "direct"},
    }


def test_long_text_streams_as_several_word_chunks() -> None:
    items = render_sse(REPLIES["end_turn"], **KW)
    texts = [
        json.loads(i.split(b"data: ", 1)[1])["delta"]["text"]
        for i in items
        if i.startswith(b"event: content_block_delta")
    ]

    assert len(texts) >= 4
    assert "".join(texts) == LONG_TEXT
    assert all(t for t in texts)


def test_thinking_streams_deltas_then_one_signature() -> None:
    items = render_sse(REPLIES["thinking_text"], **KW)
    kinds = [
        json.loads(i.split(b"data: ", 1)[1])["delta"]["type"]
        for i in items
        if i.startswith(b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0')
    ]

    assert kinds[-1] == "signature_delta"
    assert kinds[:-1] and set(kinds[:-1]) == {"thinking_delta"}


def test_cut_tool_input_renders_as_the_sdk_partial_parse() -> None:
    turn = REPLIES["max_tokens_tool_input"]
    message = render_message(turn, **KW)
    tool = message["content"][1]
    from_sse = parse_sse(render_sse(turn, **KW))

    assert tool == {
        "type": "tool_use",
        "id": "toolu_01SimCut",
        "name": "send_email",
        "input": {"to": "a@example.com", "subject": "Refund"},
    }
    assert tool["input"] == jiter.from_json(PARTIAL_TOOL_JSON.encode(), partial_mode=True)
    assert from_sse.content[1].input == tool["input"]  # type: ignore[union-attr]


def test_message_has_the_real_key_order_and_usage_shape() -> None:
    message = render_message(REPLIES["thinking_text"], **KW)

    assert list(message) == [
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "stop_details",
        "usage",
    ]
    usage = message["usage"]
    assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (0, 0)
    assert (usage["service_tier"], usage["inference_geo"]) == ("standard", "not_available")
    assert usage["output_tokens"] == -(
        -len(json.dumps(message["content"], separators=(",", ":"), ensure_ascii=False)) // 4
    )
    assert 0 < usage["output_tokens_details"]["thinking_tokens"] < usage["output_tokens"]
    assert render_message(REPLIES["refusal"], **KW)["usage"]["output_tokens"] == 0


def test_turn_fields_win_over_arguments() -> None:
    usage = {"input_tokens": 7, "output_tokens": 3}
    turn = Turn(
        content=[{"type": "text", "text": "x"}],
        stop_reason="end_turn",
        usage=usage,
        id="msg_rec",
        model="claude-rec",
        extra={"container": None},
    )
    message = render_message(turn, **KW)

    assert (message["id"], message["model"], message["usage"]) == ("msg_rec", "claude-rec", usage)
    assert message["container"] is None
    assert render_message(REPLIES["end_turn"], **KW, output_tokens=9)["usage"]["output_tokens"] == 9


def test_mid_stream_error_raises_api_status_error_with_status_200() -> None:
    items = render_sse(REPLIES["end_turn"], **KW)
    broken = [*items[:4], render_error_event("overloaded_error", "Overloaded", "req_011Sim")]

    with pytest.raises(anthropic.APIStatusError) as info:
        parse_sse(broken)

    assert info.value.status_code == 200
    assert info.value.type == "overloaded_error"
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_011Sim",
    }


def test_stream_cut_before_message_delta_has_no_stop_reason() -> None:
    turn = REPLIES["tool_use"]
    items = render_sse(turn, **KW)
    cut = items[: _event_names(items).index("message_delta")]

    message = parse_sse(cut)

    assert message.stop_reason is None
    assert [b.model_dump(exclude_none=True) for b in message.content] == turn.content


def test_turn_without_stop_reason_renders_a_cut_stream() -> None:
    turn = Turn(content=[{"type": "text", "text": "Half an ans"}], stop_reason=None)
    items = render_sse(turn, **KW)

    assert "message_delta" not in _event_names(items)
    assert parse_sse(items).model_dump() == parse_json(render_json(turn, **KW)).model_dump()


def test_async_client_parses_json_and_stream() -> None:
    turn = REPLIES["parallel_tool_use"]
    json_body = render_json(turn, **KW)
    sse_body = b"".join(render_sse(turn, **KW))

    async def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        if body.get("stream"):
            return httpx2.Response(200, headers={"content-type": SSE_TYPE, "request-id": "req_x"}, content=sse_body)
        return httpx2.Response(
            200, headers={"content-type": "application/json", "request-id": "req_x"}, content=json_body
        )

    async def main() -> tuple[anthropic.types.Message, anthropic.types.Message]:
        client = anthropic.AsyncAnthropic(
            api_key="k",
            base_url="http://sim.test",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
            _strict_response_validation=True,
        )
        created = await client.messages.create(**CREATE)
        async with client.messages.stream(**CREATE) as stream:
            streamed = await stream.get_final_message()
        return created, streamed

    created, streamed = asyncio.run(main())

    assert created.model_dump() == streamed.model_dump() == parse_json(json_body).model_dump()
    assert [b.input for b in created.content] == [b["input"] for b in turn.content]  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", list(REPLIES))
def test_turn_from_sse_and_from_message_invert_the_renderers(kind: str) -> None:
    turn = REPLIES[kind]
    message = render_message(turn, **KW)

    from_json = turn_from_message(json.loads(render_json(turn, **KW)))
    from_sse = turn_from_sse(b"".join(render_sse(turn, **KW)))

    assert from_json.content == message["content"]
    assert from_sse.content == turn.content  # a cut tool input stays partial_json
    for back in (from_json, from_sse):
        assert (back.stop_reason, back.stop_sequence, back.stop_details) == (
            turn.stop_reason,
            turn.stop_sequence,
            turn.stop_details,
        )
        assert (back.id, back.model, back.usage) == (KW["id"], KW["model"], message["usage"])
        assert render_message(back, **KW) == message


def test_turn_from_sse_tolerates_real_wire_quirks() -> None:
    body = (
        "event: message_start\r\n"
        'data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",'
        '"model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,'
        '"output_tokens":1}}      }\r\n\r\n'
        ": a comment line\r\n\r\n"
        'event: content_block_start\r\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}   }\r\n\r\n'
        'event: ping\r\ndata: {"type": "ping"}\r\n\r\n'
        'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"IGNORED"}}\r\n\r\n'
        'event: something_new\r\ndata: {"type":"something_new","x":1}\r\n\r\n'
        'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"Hello"}          }\r\n\r\n'
        'event: content_block_stop\r\ndata: {"type":"content_block_stop","index":0 }\r\n\r\n'
        'event: message_delta\r\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
        '"stop_sequence":null},"usage":{"output_tokens":12,"cache_read_input_tokens":null}}\r\n\r\n'
        'event: message_stop\r\ndata: {"type":"message_stop"  }\r\n\r\n'
    )
    turn = turn_from_sse(body.encode())

    assert turn.content == [{"type": "text", "text": "Hello"}]
    assert turn.stop_reason == "end_turn"
    assert turn.usage == {"input_tokens": 5, "output_tokens": 12}


def test_turn_from_sse_keeps_a_cut_tool_input_as_partial_json() -> None:
    items = render_sse(REPLIES["tool_use"], **KW)
    names = _event_names(items)
    # Drop the last input chunk and everything after it: the stream ends mid-JSON.
    last_delta = max(i for i, n in enumerate(names) if n == "content_block_delta")
    turn = turn_from_sse(b"".join(items[:last_delta]))

    tool = turn.content[1]
    assert turn.stop_reason is None
    assert "input" not in tool
    full = '{"query":"refund policy","limit":5}'
    assert full.startswith(tool["partial_json"]) and len(tool["partial_json"]) < len(full)
    assert parse_sse(render_sse(turn, **KW)).model_dump() == parse_json(render_json(turn, **KW)).model_dump()


def test_turn_from_sse_rejects_a_body_without_message_start() -> None:
    with pytest.raises(ValueError, match="no `event: message_start`"):
        turn_from_sse('data: {"type":"message_start"}\n\n')


def test_error_event_bytes() -> None:
    assert render_error_event("api_error", "Internal server error") == (
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"Internal server error"}}\n\n'
    )


def test_citations_and_compaction_follow_the_recorded_streams() -> None:
    citation = {
        "type": "web_search_result_location",
        "cited_text": "Sunny, 21 C",
        "url": "https://example.com/weather",
        "title": "Weather",
        "encrypted_index": "Eo8BCioIAhgB",
    }
    turn = Turn(
        content=[
            {"type": "compaction", "content": "Summary of the earlier conversation."},
            {"type": "text", "text": "It is sunny.", "citations": [citation, citation]},
        ],
        stop_reason="end_turn",
    )
    items = render_sse(turn, **KW)
    starts = [json.loads(i.split(b"data: ", 1)[1])["content_block"] for i in items if b"content_block_start" in i[:30]]

    assert starts == [{"type": "compaction", "content": None}, {"type": "text", "text": "", "citations": []}]

    def beta_client(body: bytes, content_type: str) -> anthropic.Anthropic:
        return _client(body, content_type)

    created = beta_client(render_json(turn, **KW), "application/json").beta.messages.create(**CREATE)
    with beta_client(b"".join(items), SSE_TYPE).beta.messages.stream(**CREATE) as stream:
        streamed = stream.get_final_message()
    assert created.model_dump() == streamed.model_dump()
    assert created.content[1].citations is not None and len(created.content[1].citations) == 2


def test_a_partial_json_that_is_no_json_prefix_is_reported() -> None:
    turn = Turn(
        content=[{"type": "tool_use", "id": "toolu_bad", "name": "send_email", "partial_json": "to: a@example.com"}],
        stop_reason="max_tokens",
    )

    with pytest.raises(ValueError, match=r"tool_use block 'toolu_bad': partial_json must be the beginning of a JSON"):
        render_json(turn, **KW)


def test_rendering_is_deterministic_and_does_not_touch_the_turn() -> None:
    turn = REPLIES["max_tokens_tool_input"]
    before = json.dumps(turn.content)

    first = (render_json(turn, **KW), render_sse(turn, **KW))
    second = (render_json(turn, **KW), render_sse(turn, **KW))

    assert first == second
    assert json.dumps(turn.content) == before


@pytest.mark.parametrize("kind", list(REPLIES))
def test_message_and_its_body_rendered_together_are_render_message_and_its_json(kind: str) -> None:
    turn = REPLIES[kind]
    for usage in ({}, {"output_tokens": 7}, {"cache": (3, 4)}):
        message, body = render_message_json(turn, **KW, **usage)  # type: ignore[arg-type]
        expected = render_message(turn, **KW, **usage)  # type: ignore[arg-type]
        assert message == expected
        assert body == to_json(expected)  # the same bytes, key order included


def test_message_and_body_rendered_together_keep_turn_fields_and_extras() -> None:
    turn = Turn(
        content=[{"type": "text", "text": "Caf\u00e9 \"quoted\" \u2603"}], stop_reason="end_turn",
        usage={"input_tokens": 1, "output_tokens": 2}, id="msg_01Own", model="claude-own",
        extra={"container": {"id": "c1"}, "id": "msg_01Extra"},  # an extra may replace a field in its place
    )
    for t in (turn, Turn(content=[], stop_reason="end_turn")):
        message, body = render_message_json(t, **KW)
        assert message == render_message(t, **KW)
        assert body == to_json(render_message(t, **KW))
        assert json.loads(body) == message
