"""No secret reaches the disk in any wire form it takes (issue 27 items 1-3).

A key-shaped key after an escape's letter (JSON ``\\n``, ``\\t``, ``\\u00e9``) or a percent code
(``%3D``); a key a streamed reply echoes in 5-character deltas; user info in the URL; a listed
secret base64-encoded; and what ``simloop convert`` copies from a cassette into a scenario.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simloop import Scenario, load_scenario
from simloop.cassettes import Scrubber, convert, load_cassette, record
from simloop.cassettes._record import CassetteSerializer
from simloop.cassettes._scrub import _base64_forms
from simloop.protocol import render
from simloop.protocol.render import turn_from_sse
from simloop.wire import loopback

KEY = "sk-ant-api03-" + "x7Gq2LmZ9pWv4Rt8Ks1Nd6Hb3Jc5Fy0Ue" + "-AbC"  # key-shaped, and not repetitive
LISTED = "tenant-7731-private"
AUTH = {"x-api-key": "not-a-real-key"}


class FakeRequest:
    """The parts of ``vcr.request.Request`` the hook touches."""

    def __init__(self, uri: str, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.body = body
        self.headers = headers or {}


def scrub_body(body: bytes, **kw: Any) -> bytes:
    return bytes(Scrubber(**kw).request(FakeRequest("http://h/v1/messages", body)).body)


# -- 1. key-shaped keys after the letters and digits of an escape ------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"content": "my key:\n" + KEY + "\nthanks"}).encode(),  # on its own line: \nsk-ant-...
        json.dumps({"content": "key\t" + KEY}).encode(),  # after a tab: \tsk-ant-...
        json.dumps({"content": "é" + KEY}).encode(),  # after \u00e9
        ("q=" + quote_plus("key=" + KEY)).encode(),  # after %3D in a form-encoded value
        ("a" + KEY).encode(),  # a real key's prefix, after any character at all
    ],
    ids=["json-newline", "json-tab", "json-unicode-escape", "percent-encoded-equals", "after-a-letter"],
)
def test_a_key_shaped_key_after_an_escape_is_scrubbed(body: bytes) -> None:
    scrubbed = scrub_body(body)
    assert KEY[7:] not in scrubbed.decode() and b"[REDACTED]" in scrubbed


def test_a_key_after_percent_3d_in_a_query_value_is_scrubbed_from_the_uri() -> None:
    uri = f"https://h.test/v1/messages?next={quote('a=' + KEY, safe='')}"
    assert str(Scrubber().request(FakeRequest(uri)).uri) == "https://h.test/v1/messages?next=a%3D[REDACTED]"


def test_ordinary_words_ending_in_sk_are_not_scrubbed() -> None:
    text = b"risk-management-frameworks-and-controls, task-ant-colony, desk-booking"
    assert scrub_body(text) == text


def test_a_recording_keeps_no_key_on_its_own_line_in_a_json_string(tmp_path: Path) -> None:
    path = tmp_path / "newline.yaml"
    scenario = Scenario.model_validate({"name": "s", "task": "hi", "model": [{"end_turn": "ok"}]})
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": f"key:\n{KEY}\n\tand\t{KEY}"}]}
    with loopback.serve(scenario) as server, record(path), httpx2.Client(headers=AUTH) as client:
        url = f"{server.base_url}/v1/messages?next={quote('a=' + KEY, safe='')}"
        assert client.post(url, json=body).status_code == 200
    text = path.read_text(encoding="utf-8")
    assert KEY[7:] not in text
    (interaction,) = load_cassette(path)
    assert interaction.request.json()["messages"][0]["content"] == "key:\n[REDACTED]\n\tand\t[REDACTED]"


# -- 2. a key echoed in a streamed reply, split across deltas -----------------------------------------------------


def _stream(text: str, size: int) -> str:
    """A Messages SSE stream whose one text block arrives in ``size``-character deltas."""
    deltas = [text[i:i + size] for i in range(0, len(text), size)]
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
    events = [("message_start", {"type": "message_start", "message": message}),
              ("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": d}}) for d in deltas]
    events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                  "usage": {"output_tokens": 5}}),
               ("message_stop", {"type": "message_stop"})]
    return "".join(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n" for name, data in events)


def _openai_stream(form: str, text: str, size: int) -> str:
    """An OpenAI stream spelling ``text`` out in ``size``-character deltas: a Chat Completions choice's content
    and a tool call's arguments (``chat-sse``), or a Responses output text and call arguments (``responses-sse``)."""
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    if form == "chat-sse":
        events: list[Any] = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
        events += [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": p}}]}}]}
                   for p in pieces]
        return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    events = [{"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": p} for p in pieces]
    events += [{"type": "response.function_call_arguments.delta", "output_index": 1, "delta": p} for p in pieces]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def _openai_texts(stream: str) -> list[str]:
    """What an OpenAI stream spells out, per part (joined the way `_openai_stream` split them)."""
    parts: dict[str, str] = {}
    for line in stream.split("\n"):
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                delta = choice["delta"]
                parts["content"] = parts.get("content", "") + delta.get("content", "")
                for call in delta.get("tool_calls", []):
                    parts["arguments"] = parts.get("arguments", "") + call["function"]["arguments"]
            if "delta" in event and isinstance(event["delta"], str):
                parts[event["type"]] = parts.get(event["type"], "") + event["delta"]
    return list(parts.values())


def _response(body: str) -> dict[str, Any]:
    return {"status": {"code": 200, "message": "OK"},
            "headers": {"content-type": ["text/event-stream"], "content-length": [str(len(body))]},
            "body": {"string": body}}


@pytest.mark.parametrize("size", [1, 2, 5, 7, 24])
def test_a_key_streamed_in_small_deltas_is_scrubbed_across_event_boundaries(size: int) -> None:
    body = _stream(f"Your key is {KEY}, and {LISTED} is your tenant.", size)
    scrubbed = Scrubber(secrets=[LISTED]).response(_response(body))
    out = scrubbed["body"]["string"]
    turn = turn_from_sse(out)
    assert turn.content[0]["text"] == "Your key is [REDACTED], and [REDACTED] is your tenant."
    assert turn.stop_reason == "end_turn"
    assert scrubbed["headers"]["content-length"] == [str(len(out.encode()))]
    pieces = "".join(json.loads(line[5:])["delta"]["text"] for line in out.split("\n") if "text_delta" in line)
    assert KEY[7:] not in pieces and LISTED not in pieces


def test_a_recorded_stream_echoing_a_key_in_5_character_deltas_keeps_no_piece_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "_CHUNK", 5)
    monkeypatch.setattr(render, "_CHUNK_RUN", 0)
    path = tmp_path / "stream.yaml"
    scenario = Scenario.model_validate({"name": "s", "task": "hi", "model": [{"end_turn": f"Echo: {KEY} done"}] * 2})
    body = {"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": f"echo {KEY}"}]}
    with loopback.serve(scenario) as server, record(path), httpx2.Client(headers=AUTH) as client:
        url = f"{server.base_url}/v1/messages"
        response = client.post(url, json=body)
        assert turn_from_sse(response.content).content[0]["text"] == f"Echo: {KEY} done"  # the live stream has it
        assert KEY[:12] not in response.text  # in pieces: no event holds it whole
    text = path.read_text(encoding="utf-8")
    for piece in (KEY[7:], KEY[12:17], KEY[17:22], KEY[-5:]):  # the 5-character deltas in the middle
        assert piece not in text, piece
    (interaction,) = load_cassette(path)
    assert turn_from_sse(interaction.response.body).content[0]["text"] == "Echo: [REDACTED] done"
    with record(path, mode="none"), httpx2.Client(headers=AUTH) as client:  # the cassette still replays
        replayed = client.post(url, json=body)
    assert turn_from_sse(replayed.content).content[0]["text"] == "Echo: [REDACTED] done"


# -- 3. user info in the URL, base64, convert ----------------------------------------------------------------------


def test_user_info_in_the_url_is_recorded_scrubbed_and_replays(tmp_path: Path) -> None:
    path = tmp_path / "userinfo.yaml"
    scenario = Scenario.model_validate({"name": "s", "task": "hi", "model": [{"end_turn": "ok"}]})
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with loopback.serve(scenario) as server, record(path), httpx2.Client(headers=AUTH) as client:
        url = server.base_url.replace("http://", "http://me:hunter22pass@") + "/v1/messages"
        assert client.post(url, json=body).status_code == 200
    text = path.read_text(encoding="utf-8")
    assert "hunter22pass" not in text and "me:hunter" not in text
    (interaction,) = load_cassette(path)
    assert interaction.request.uri.startswith("http://REDACTED@127.0.0.1:")
    with record(path, mode="none"), httpx2.Client(headers=AUTH) as client:
        assert client.post(url, json=body).status_code == 200


@pytest.mark.parametrize("offset", [0, 1, 2])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode], ids=["standard", "urlsafe"])
def test_a_listed_secret_base64_encoded_is_scrubbed_at_every_alignment(offset: int, encode: Any) -> None:
    secret = "p?>~secret-value-1"  # encodes to + and / in standard base64, - and _ in urlsafe
    data = encode(b"\xfb\xff"[:offset] + b"x" * offset + secret.encode() + b"tail").decode()
    body = json.dumps({"source": {"type": "base64", "data": data}}).encode()
    scrubbed = scrub_body(body, secrets=[secret])
    assert b"[REDACTED]" in scrubbed
    for start in range(3):  # no run of the secret's own base64 is left
        core = encode(bytes(start) + secret.encode())[4:-4]
        assert core not in scrubbed


def _leaky_cassette(path: Path) -> None:
    """A cassette written without scrubbing (as another tool would), with a key in the prompt and the reply."""
    request = {"model": "claude-opus-5", "max_tokens": 64,
               "messages": [{"role": "user", "content": f"use {KEY} and {LISTED}"}]}
    reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-5",
             "content": [{"type": "text", "text": f"I will use {KEY}"}], "stop_reason": "end_turn",
             "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 5}}
    cassette = {"version": 1, "interactions": [{
        "request": {"method": "POST", "uri": "https://api.anthropic.com/v1/messages", "headers": {},
                    "body": json.dumps(request)},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": ["application/json"]},
                     "body": {"string": json.dumps(reply)}},
    }]}
    path.write_text(CassetteSerializer.serialize(cassette), encoding="utf-8")


def test_convert_scrubs_what_it_copies_into_the_scenario(tmp_path: Path) -> None:
    source = tmp_path / "leaky.yaml"
    _leaky_cassette(source)
    assert KEY in source.read_text(encoding="utf-8")
    out = convert(source, tmp_path / "out.yaml", secrets=[LISTED])
    text = out.read_text(encoding="utf-8")
    assert KEY[7:] not in text and LISTED not in text
    assert "use [REDACTED] and [REDACTED]" in text and "I will use [REDACTED]" in text
    assert load_scenario(out).task == "use [REDACTED] and [REDACTED]"  # and it reads back


def test_simloop_convert_scrubs_keys_and_the_secrets_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simloop.cli import main

    source = tmp_path / "leaky.yaml"
    _leaky_cassette(source)
    out = tmp_path / "out.yaml"
    assert main(["convert", str(source), "-o", str(out), "--secret", LISTED]) == 0
    text = out.read_text(encoding="utf-8")
    assert KEY[7:] not in text and LISTED not in text


# -- the property: any secret, any wire form, any split -----------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    secret=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=6, max_size=20).map(
        lambda s: "Zq" + s),
    before=_TEXT,
    after=_TEXT,
    form=st.sampled_from(["json", "nested-json", "query", "header", "sse", "chat-sse", "responses-sse"]),
    split=st.integers(1, 9),
)
def test_a_secret_never_reaches_the_written_cassette_and_it_replays(
    tmp_path: Path, secret: str, before: str, after: str, form: str, split: int
) -> None:
    text = before + secret + after
    uri, headers, request_body, response_body = "https://h.test/v1/messages", {}, b"{}", "{}"
    if form == "json":
        request_body = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()
    elif form == "nested-json":
        request_body = json.dumps({"input": json.dumps({"q": text})}).encode()
    elif form == "query":
        uri += "?q=" + quote_plus(text)
    elif form == "header":
        headers = {"x-note": text}
    elif form == "sse":
        response_body = _stream(text, split)
    else:
        response_body = _openai_stream(form, text, split)
    scrubber = Scrubber(secrets=[secret])
    request = scrubber.request(FakeRequest(uri, request_body, headers))
    response = scrubber.response(_response(response_body))
    cassette = {"version": 1, "interactions": [{
        "request": {"method": "POST", "uri": request.uri, "headers": request.headers, "body": request.body},
        "response": response}]}
    path = tmp_path / "p.yaml"
    path.write_text(CassetteSerializer.serialize(cassette), encoding="utf-8")
    (item,) = load_cassette(path)
    seen = [unquote_plus(item.request.uri), *item.request.headers.values(), json.dumps(item.request.json())]
    if form == "nested-json":
        seen.append(json.loads(item.request.json()["input"])["q"])
    elif form == "json":
        seen.append(item.request.json()["messages"][0]["content"])
    elif form == "sse":
        seen.append(turn_from_sse(item.response.body).content[0]["text"])
    else:
        seen += _openai_texts(item.response.body.decode("utf-8"))
    for value in seen:
        assert secret not in str(value)


# -- 4. a key echoed in an OpenAI stream, on both OpenAI wires (issue 41 item 1) ------------------------------------


def _forms(secret: str) -> list[str]:
    """A secret in every encoding the tests above check: raw, JSON-escaped, URL- and form-encoded, base64."""
    forms = {secret, json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    forms |= {f.decode() for f in _base64_forms(secret)}
    return sorted(forms)


def _written_leaks(folder: Path, secret: str, size: int) -> list[str]:
    """Every file under ``folder`` holding ``secret`` in any form, or any ``size`` characters of it in a row."""
    inner = secret[8:]  # past the prefix: every piece of this part is the key's own
    pieces = [inner[i:i + size] for i in range(len(inner) - size + 1)]
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.name}: {leak!r}" for leak in [*_forms(secret), *pieces] if leak in text]
    return found


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_a_key_echoed_in_an_openai_stream_in_5_character_deltas_keeps_no_piece_on_disk(
    wire: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai = pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK")
    from simloop.protocol import openai_chat, openai_responses

    def five(text: str) -> list[str]:
        return [text[k:k + 5] for k in range(0, len(text), 5)] or [""]

    monkeypatch.setattr(openai_chat, "_chunk_piece", five)
    monkeypatch.setattr(openai_responses, "_pieces", five)
    key = "sk-proj-" + "Qm4xT9vLr2Wc8Nh5Zp1Ks7Jd3Gf6By0A"  # an OpenAI project key, not repetitive
    scenario = Scenario.model_validate({"name": "s", "task": "hi", "tools": [{"name": "save"}], "model": [
        {"tool_use": [{"name": "save", "input": {"token": key}}, {"name": "save", "input": {"note": f"a {key} b"}}]},
        {"end_turn": f"Echo: {key} done"}]})
    cassette = tmp_path / "cassettes" / "stream.yaml"
    tools: Any = [{"type": "function", "function": {"name": "save", "parameters": {"type": "object"}}}]
    with loopback.serve(scenario) as server, record(cassette):
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="sk-test-not-a-real-key-000", max_retries=0)
        for _ in range(2):  # a tool-call turn (arguments in pieces), then a text turn (content in pieces)
            if wire == "chat":
                events = list(client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "hi"}], tools=tools, stream=True))
                live = "".join(c.choices[0].delta.content or "" for c in events if c.choices)
                live += "".join(t.function.arguments or "" for c in events if c.choices
                                for t in c.choices[0].delta.tool_calls or [] if t.function)
            else:
                events = list(client.responses.create(model="gpt-4o", input="hi", tools=[
                    {"type": "function", "name": "save", "parameters": {"type": "object"}}], stream=True))
                live = "".join(e.delta for e in events if e.type.endswith(".delta"))
            assert key in live  # the live stream has it, in pieces
    assert _written_leaks(tmp_path, key, 5) == []
    items = load_cassette(cassette)
    assert len(items) == 2 and all("[REDACTED]" in str(i.response.body) for i in items)
    convert(cassette, tmp_path / "out" / "scenario.yaml")
    assert _written_leaks(tmp_path, key, 5) == []
