"""Recordings nobody here made: every cassette layout, redacted URIs, recorded errors, transport fields, fallbacks.

Issue 19, items 1-5.  Each test writes a small cassette in the layout it is about (in ``tmp_path``) and
reads, replays or converts it the way a user would.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]

import simloop
from simloop import Outcome, Sim
from simloop.cassettes import (
    CassetteError,
    CassetteSerializer,
    Recorded,
    convert,
    load_cassette,
    load_recording,
    to_scenario,
)
from simloop.protocol.render import render_json, render_sse, turn_from_sse

MODEL = "claude-sonnet-4-6"
TASK = "What is the capital of France?"
REQUEST: dict[str, Any] = {"max_tokens": 64, "messages": [{"role": "user", "content": TASK}], "model": MODEL}


def message(text: str, *, id: str = "msg_01Rec", model: str = MODEL) -> dict[str, Any]:
    return {
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }  # fmt: skip


def body(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def vcr_request(payload: dict[str, Any], *, uri: str = "https://api.anthropic.com/v1/messages") -> dict[str, Any]:
    """A request as vcrpy's ``Request._to_dict`` gives it (the in-memory layout)."""
    return {"method": "POST", "uri": uri, "body": body(payload), "headers": {"content-type": ["application/json"]}}


def vcr_response(
    payload: dict[str, Any], *, status: int = 200, headers: dict[str, list[str]] | None = None, gzipped: bool = False
) -> dict[str, Any]:
    raw = body(payload).encode()
    heads = {"content-type": ["application/json"], "request-id": ["req_011CRecorded"], **(headers or {})}
    if gzipped:
        heads["content-encoding"] = ["gzip"]
        return {"status": {"code": status, "message": "OK"}, "headers": heads, "body": {"string": gzip.compress(raw)}}
    return {"status": {"code": status, "message": "OK"}, "headers": heads, "body": {"string": raw.decode()}}


def write_in_memory_layout(path: Path, requests: list[Any], responses: list[Any]) -> Path:
    """langchain's cassette layout: vcrpy's in-memory dict, YAML, the whole file gzip-compressed."""
    path.write_bytes(gzip.compress(yaml.safe_dump({"requests": requests, "responses": responses}).encode()))
    return path


def write_file_layout(path: Path, pairs: list[tuple[Any, Any]]) -> Path:
    interactions = [{"request": q, "response": r} for q, r in pairs]
    path.write_text(yaml.safe_dump({"version": 1, "interactions": interactions}), encoding="utf-8")
    return path


def ask(sim: Sim) -> Outcome:
    reply = sim.client.messages.create(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": TASK}])
    return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]


# --------------------------------------------------------------------------- 1. layouts and gzip


def test_a_langchain_yaml_gz_in_the_in_memory_layout_loads_replays_and_converts(tmp_path: Path) -> None:
    path = write_in_memory_layout(
        tmp_path / "test_invoke.yaml.gz", [vcr_request(REQUEST)], [vcr_response(message("Paris."), gzipped=True)]
    )
    (interaction,) = load_cassette(path)
    assert interaction.request.json() == REQUEST and interaction.response.json() == message("Paris.")
    assert "content-encoding" not in interaction.response.headers
    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        outcome = sim.run(ask)
    assert outcome.text == "Paris." and sim.leftovers() == []
    scenario = to_scenario(path)
    assert scenario.name == "test_invoke" and scenario.task == TASK and scenario.model[0].end_turn == "Paris."
    written = convert(path)
    assert written == tmp_path / "test_invoke.scenario.yaml"
    assert simloop.load_scenario(written) == scenario
    # vcrpy itself (through simloop's serializer) reads the layout too.
    text = gzip.decompress(path.read_bytes()).decode()
    assert len(CassetteSerializer.deserialize(text)["interactions"]) == 1


def test_the_in_memory_layout_with_unpaired_lists_names_the_file(tmp_path: Path) -> None:
    path = write_in_memory_layout(tmp_path / "odd.yaml.gz", [vcr_request(REQUEST)] * 2, [vcr_response(message("x"))])
    with pytest.raises(CassetteError, match=r"odd.yaml.gz: 2 requests but 1 responses; in this layout the n-th"):
        load_cassette(path)


# --------------------------------------------------------------------------- 2. redacted URIs


REDACTED = "**REDACTED**"


def redacted(item: dict[str, Any]) -> dict[str, Any]:
    """What langchain's newer recorder does: every header value and the URI replaced."""
    item = {**item, "headers": {k: [REDACTED] for k in item["headers"]}}
    if "uri" in item:
        item["uri"] = REDACTED
    return item


def test_a_call_with_a_redacted_uri_is_recognised_by_its_body_and_response(tmp_path: Path) -> None:
    path = write_file_layout(
        tmp_path / "hidden.yaml",
        [(redacted(vcr_request(REQUEST)), redacted(vcr_response(message("Paris."), gzipped=True)))],
    )  # content-encoding is redacted too: the body is told to be gzip by its magic bytes
    (interaction,) = load_cassette(path)
    assert interaction.uri_hidden and interaction.is_model_call and interaction.is_anthropic_messages
    recording = load_recording(path)
    assert len(recording.calls) == 1 and recording.scenario.model[0].end_turn == "Paris."
    with Sim(recording.scenario, model=Recorded(path)) as sim:
        assert sim.run(ask).text == "Paris."


def test_convert_says_why_a_scenario_is_empty(tmp_path: Path) -> None:
    legacy = {"model": "claude-2.1", "prompt": "\n\nHuman: hi\n\nAssistant:", "max_tokens_to_sample": 20}
    answer = {"type": "completion", "completion": " Hello!", "stop_reason": "stop_sequence", "model": "claude-2.1"}
    path = write_file_layout(tmp_path / "legacy.yaml", [(redacted(vcr_request(legacy)), redacted(vcr_response(answer)))])
    with pytest.raises(CassetteError) as refused:  # never a scenario with no reply: refused, saying why
        convert(path)
    assert str(refused.value) == (
        f"{path}: cannot convert: no model call (POST /v1/messages, /v1/chat/completions or /v1/responses) in the "
        "cassette, so the scenario has no reply: it holds 1 legacy Text Completions call(s) (POST /v1/complete), "
        "which simloop does not simulate"
    )
    assert not path.with_name("legacy.scenario.yaml").exists()


# --------------------------------------------------------------------------- 3. recorded errors


EMPTY = {"max_tokens": 64, "messages": [], "model": MODEL}
EMPTY_400 = {
    "type": "error", "error": {"type": "invalid_request_error", "message": "messages: at least one message is required"},
    "request_id": "req_011CRecorded400",
}  # fmt: skip


def test_a_recorded_400_the_simulator_also_answers_is_used_up(tmp_path: Path) -> None:
    path = write_file_layout(tmp_path / "recovers.yaml", [
        (vcr_request(EMPTY), vcr_response(EMPTY_400, status=400)),
        (vcr_request(REQUEST), vcr_response(message("Paris."))),
    ])  # fmt: skip

    def recovers(sim: Sim) -> Outcome:
        with pytest.raises(anthropic.BadRequestError, match="at least one message is required"):
            sim.client.messages.create(model=MODEL, max_tokens=64, messages=[])
        return ask(sim)

    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        outcome = sim.run(recovers)
    assert outcome.text == "Paris."
    assert sim.leftovers() == []


RATE_LIMITED = {
    "type": "error",
    "error": {"type": "rate_limit_error", "message": "This request would exceed the rate limit for your organization."},
}


def test_a_recorded_error_is_served_with_its_recorded_headers_and_body(tmp_path: Path) -> None:
    path = write_file_layout(tmp_path / "limited.yaml", [
        (vcr_request(REQUEST), vcr_response(RATE_LIMITED, status=429, headers={"x-ratelimit-note": ["recorded"]})),
        (vcr_request(REQUEST), vcr_response(message("Paris."))),
    ])  # fmt: skip
    seen: list[anthropic.RateLimitError] = []

    def no_retries(sim: Sim) -> Outcome:
        try:
            sim.client.with_options(max_retries=0).messages.create(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": TASK}]
            )
        except anthropic.RateLimitError as exc:
            seen.append(exc)
        return ask(sim)

    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        assert sim.run(no_retries).text == "Paris."
    (error,) = seen
    assert error.body == RATE_LIMITED
    assert "retry-after" not in error.response.headers  # none was recorded: the SDK backs off as it did
    assert error.response.headers["x-ratelimit-note"] == "recorded"
    assert error.request_id == "req_011CRecorded"
    assert sim.transcript.responses[0].status == 429 and sim.leftovers() == []


# --------------------------------------------------------------------------- 4. transport-only fields


def test_the_sdks_thread_field_is_not_part_of_the_match_but_is_named_in_the_drift(tmp_path: Path) -> None:
    path = write_file_layout(tmp_path / "old_sdk.yaml", [(vcr_request(REQUEST), vcr_response(message("Paris.")))])

    def threaded(sim: Sim, content: str = TASK) -> Outcome:
        reply = sim.client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": content}],
            extra_body={"thread": {"type": "create"}},
        )
        return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]

    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        assert sim.run(threaded).text == "Paris."
    model = Recorded(path, strict=False)
    with Sim(to_scenario(path), model=model) as sim:
        sim.run(lambda s: threaded(s, "What is the capital of Spain?"))
    (drift,) = model.drift
    assert drift.lines[-1] == (
        'thread: recorded nothing, sent {"type": "create"} (not compared: it only steers the transport)'
    )


# --------------------------------------------------------------------------- 5. fallback


def fallback_stream(first: str, second: str) -> bytes:
    events = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_01Fb", "type": "message", "role": "assistant", "model": first, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
            "type": "fallback", "from": {"model": first}, "to": {"model": second},
            "trigger": {"type": "refusal", "category": None}}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                 "delta": {"type": "text_delta", "text": "Paris."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def sdk_stream_model(events: bytes) -> str:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=events)

    client = anthropic.Anthropic(
        api_key="k", base_url="http://sim.test", max_retries=0, _strict_response_validation=True,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )  # fmt: skip
    with client.beta.messages.stream(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": TASK}]) as s:
        return s.get_final_message().model


def test_a_streamed_fallback_is_relabelled_with_the_model_it_fell_back_to() -> None:
    recorded = fallback_stream("claude-opus-5", "claude-sonnet-5")
    assert sdk_stream_model(recorded) == "claude-sonnet-5"  # what the SDK makes of the real stream
    turn = turn_from_sse(recorded)
    assert turn.model == "claude-sonnet-5"
    assert json.loads(render_json(turn, id="x", model="m", input_tokens=1))["model"] == "claude-sonnet-5"
    events = render_sse(turn, id="x", model="m", input_tokens=1)
    assert b'"model":"claude-opus-5"' in events[0]  # the stream starts under the requested model, as recorded
    assert sdk_stream_model(b"".join(events)) == "claude-sonnet-5"


def test_a_recording_without_threads_replays_the_sdks_threaded_tool_runner_strictly(tmp_path: Path) -> None:
    """Recorded with ``thread=False`` (as older SDKs sent it), replayed with the runner's default threads."""
    from simloop import Scenario
    from simloop.cassettes import record
    from simloop.wire import loopback

    scenario = Scenario.model_validate({
        "name": "runner", "task": "Find the refund policy.",
        "tools": [{"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {
            "q": {"type": "string"}}, "required": ["q"]}, "results": ["30 days"]}],
        "model": [{"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]}, {"end_turn": "30 days."}],
    })  # fmt: skip

    def run(client: anthropic.Anthropic, **kwargs: Any) -> str:
        @anthropic.beta_tool
        def search(q: str) -> str:
            """Search the knowledge base."""
            return "30 days"

        runner = client.beta.messages.tool_runner(
            model=MODEL, max_tokens=512, tools=[search], messages=[{"role": "user", "content": scenario.task}], **kwargs
        )
        return "".join(b.text for b in runner.until_done().content if b.type == "text")

    path = tmp_path / "runner.yaml"
    with loopback.serve(scenario) as server, record(path):
        assert run(anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0), thread=False) == "30 days."
    assert all("thread" not in i.request.json() for i in load_cassette(path))
    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        outcome = sim.run(lambda s: Outcome("final", run(s.client)))
    assert outcome.text == "30 days."
    assert sim.transcript.requests[1].body["thread"]["type"] == "continue"
    assert sim.leftovers() == []


def test_the_convert_command_says_why_the_scenario_is_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from simloop.cli import main

    only_count = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    path = write_file_layout(tmp_path / "count.yaml", [(
        vcr_request(only_count, uri="https://api.anthropic.com/v1/messages/count_tokens"),
        vcr_response({"input_tokens": 8}),
    )])  # fmt: skip
    assert main(["convert", str(path), "-o", str(tmp_path / "out.yaml")]) == 2  # never exit 0 with no reply
    assert capsys.readouterr().err == (
        f"simloop: error: {path}: cannot convert: no model call (POST /v1/messages, /v1/chat/completions or "
        "/v1/responses) in the cassette, so the scenario has no reply: it holds 1 count_tokens call(s) (no model "
        "reply)\n"
    )
    assert not (tmp_path / "out.yaml").exists()


def test_verify_fuzzes_a_langchain_yaml_gz_recording(tmp_path: Path) -> None:
    from examples import correct_sync

    path = write_in_memory_layout(
        tmp_path / "test_invoke.yaml.gz", [vcr_request(REQUEST)], [vcr_response(message("Paris."), gzipped=True)]
    )
    report = simloop.verify(correct_sync.drive, recorded=path, max_examples=5, seed=1, out_dir=tmp_path / "out")
    assert report.ok and report.examples == 5


# --------------------------------------------------------------------------- other recorders' layouts


def test_a_vcrpy_recording_made_through_aiohttp_loads_replays_and_converts(tmp_path: Path) -> None:
    """A real recording by VCR.py through aiohttp (vcrpy's own serializer, aiohttp against the loopback server):
    the request's ``json=`` is stored as a YAML mapping, not a string."""
    aiohttp = pytest.importorskip("aiohttp", reason="aiohttp (the test extra) records through aiohttp's client")
    import asyncio

    import vcr  # type: ignore[import-untyped, unused-ignore]

    from simloop.wire import loopback

    scenario = simloop.Scenario(name="aio", task=TASK, model=[simloop.Reply(end_turn="Paris.")])
    path = tmp_path / "aio.yaml"

    async def call(base_url: str) -> str:
        async with aiohttp.ClientSession() as session, session.post(
            f"{base_url}/v1/messages", json=REQUEST,
            headers={"x-api-key": "sk-ant-test-aiohttp-00000000", "anthropic-version": "2023-06-01"},
        ) as response:
            return str((await response.json())["content"][0]["text"])

    with loopback.serve(scenario) as server, vcr.VCR().use_cassette(str(path)):
        assert asyncio.run(call(server.base_url)) == "Paris."
    assert yaml.safe_load(path.read_text(encoding="utf-8"))["interactions"][0]["request"]["body"] == REQUEST
    [interaction] = load_cassette(path)
    assert interaction.request.json() == REQUEST
    assert interaction.is_model_call
    assert interaction.response.headers["content-type"] == ["application/json"]
    assert interaction.response.json()["content"][0]["text"] == "Paris."
    assert to_scenario(path).model[0].end_turn == "Paris."
    with Sim(simloop.Scenario(task=TASK), model=Recorded(path)) as sim:
        assert sim.run(ask).text == "Paris."


AIOHTTP_VCR = """\
interactions:
- request:
    body: '{request}'
    headers: {{}}
    method: POST
    uri: https://api.anthropic.com/v1/messages
  response:
    body:
      string: '{response}'
    headers:
      ? !!python/object/apply:multidict._multidict.istr
      - Content-Type
      : - application/json
      ? !!python/object/apply:multidict._multidict.istr
      - Request-Id
      : - req_011CIstr
    status:
      code: 200
      message: OK
version: 1
"""


def test_aiohttp_header_names_tagged_as_multidict_istr_read_as_strings(tmp_path: Path) -> None:
    """Older VCR.py through aiohttp wrote each header name as ``!!python/object/apply:multidict._multidict.istr``
    (a case-insensitive str), which a safe YAML loader refuses; simloop reads it as the string it is."""
    path = tmp_path / "aiohttp.yaml"
    path.write_text(AIOHTTP_VCR.format(request=body(REQUEST), response=body(message("Paris."))), encoding="utf-8")
    [interaction] = load_cassette(path)
    assert interaction.response.headers == {"content-type": ["application/json"], "request-id": ["req_011CIstr"]}
    assert to_scenario(path).model[0].end_turn == "Paris."


def test_a_python_object_tag_other_than_aiohttp_header_names_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text("interactions:\n- request: !!python/object/apply:os.system ['echo pwned']\n", encoding="utf-8")
    with pytest.raises(CassetteError, match=r"evil\.yaml:2: not valid YAML .*python/object/apply:os\.system"):
        load_cassette(path)


RUBY_VCR = """\
---
http_interactions:
- request:
    method: post
    uri: https://api.anthropic.com/v1/messages
    body:
      encoding: UTF-8
      string: '{"max_tokens":64,"messages":[{"role":"user","content":"What is the capital of France?"}],"model":"claude-sonnet-4-6"}'
    headers:
      Content-Type:
      - application/json
  response:
    status:
      code: 200
      message: OK
    headers:
      Content-Type:
      - application/json
      Content-Encoding:
      - gzip
    body:
      encoding: ASCII-8BIT
      string: !binary |-
        {gzipped}
  recorded_at: Tue, 01 Dec 2026 12:00:00 GMT
recorded_with: VCR 6.3.1
"""


def test_a_ruby_vcr_cassette_with_a_binary_gzipped_body_loads_and_converts(tmp_path: Path) -> None:
    """Ruby VCR's layout (``http_interactions``, lower-case method, ``!binary`` base64 bodies), as
    ``VCR.use_cassette`` writes it with ``preserve_exact_body_bytes``."""
    import base64

    packed = base64.b64encode(gzip.compress(body(message("Paris.")).encode())).decode()
    path = tmp_path / "ruby.yml"
    path.write_text(RUBY_VCR.replace("{gzipped}", packed), encoding="utf-8")
    [interaction] = load_cassette(path)
    assert interaction.is_anthropic_messages
    assert interaction.request.json() == REQUEST
    assert interaction.response.json()["content"][0]["text"] == "Paris."
    assert to_scenario(path).model[0].end_turn == "Paris."


def test_r_vcr_and_betamax_base64_strings_load(tmp_path: Path) -> None:
    import base64

    path = tmp_path / "r.yml"
    path.write_text(yaml.safe_dump({"http_interactions": [{
        "request": {"method": "post", "uri": "https://api.anthropic.com/v1/messages",
                    "body": {"encoding": "", "string": body(REQUEST)}, "headers": {}},
        "response": {"status": {"status_code": "200", "code": 200},
                     "headers": {"content-type": "application/json"},
                     "body": {"encoding": "", "base64_string": base64.b64encode(body(message("Lyon?")).encode()).decode()}},
    }], "recorded_with": "vcr/1.2.2"}), encoding="utf-8")
    assert load_cassette(path)[0].response.json()["content"][0]["text"] == "Lyon?"


def test_a_har_file_loads_and_converts(tmp_path: Path) -> None:
    """HAR (a browser's or a proxy's save): JSON, headers as name/value lists, bodies decoded."""
    path = tmp_path / "session.har"
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": [{
        "request": {"method": "POST", "url": "https://api.anthropic.com/v1/messages",
                    "headers": [{"name": "content-type", "value": "application/json"}],
                    "postData": {"mimeType": "application/json", "text": body(REQUEST)}},
        "response": {"status": 200, "headers": [{"name": "content-type", "value": "application/json"},
                                                {"name": "content-encoding", "value": "gzip"}],
                     "content": {"mimeType": "application/json", "text": body(message("Paris."))}},
    }]}}), encoding="utf-8")
    [interaction] = load_cassette(path)
    assert interaction.response.json()["content"][0]["text"] == "Paris."
    assert to_scenario(path).task == TASK


def test_a_file_in_no_layout_read_names_the_layouts_that_are(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("entries: []\n", encoding="utf-8")
    with pytest.raises(CassetteError, match=r"other\.yaml: not a cassette simloop reads.*Ruby VCR.*HAR"):
        load_cassette(path)


# --------------------------------------------------------------------------- keys and models


def test_a_scripted_401_and_404_reach_the_sdk_as_the_real_api_answers_them() -> None:
    """The simulator takes any key and any model; a scenario asks for the refusals a misconfigured client gets."""
    scenario = simloop.Scenario(task=TASK, model=[simloop.Reply(error=404), simloop.Reply(error=401)])

    def drive(sim: Sim) -> list[type[BaseException]]:
        raised: list[type[BaseException]] = []
        for _ in range(2):
            try:
                sim.client.messages.create(model="claude-sonet-4-5", max_tokens=64,
                                           messages=[{"role": "user", "content": TASK}])
            except anthropic.APIStatusError as e:
                raised.append(type(e))
                assert e.response.headers["x-should-retry"] == "false"
                assert e.body["error"]["message"] in ("model: claude-sonet-4-5", "invalid x-api-key")  # type: ignore[index]
        return raised

    with Sim(scenario) as sim:
        assert sim.run(lambda s: Outcome("error", str(drive(s)))).text == str(
            [anthropic.NotFoundError, anthropic.AuthenticationError])
        assert sim.transcript.model_calls == 2  # not retried: the SDK retries neither


def test_a_recorded_404_converts_to_a_scripted_404(tmp_path: Path) -> None:
    missing = {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-sonet-4-5"}}
    path = write_file_layout(tmp_path / "404.yaml", [
        (vcr_request(REQUEST), vcr_response(missing, status=404)),
        (vcr_request(REQUEST), vcr_response(message("Paris."))),
    ])
    scenario = to_scenario(path)
    assert [r.error for r in scenario.model] == [404, None]


# --------------------------------------------------------------------------- conversations


def _turn(history: list[Any], text: str) -> list[Any]:
    return [*history, {"role": "user", "content": text}]


def test_a_recorded_conversation_converts_with_its_followups_and_replays_strictly(tmp_path: Path) -> None:
    """Later user turns become ``followups:``; a conversation drive replays every reply, nothing left unserved."""
    first = [{"role": "user", "content": TASK}]
    second = [*first, {"role": "assistant", "content": [{"type": "text", "text": "Paris."}]},
              {"role": "user", "content": "And of Italy?"}]
    path = write_file_layout(tmp_path / "chat.yaml", [
        (vcr_request({**REQUEST, "messages": first}), vcr_response(message("Paris."))),
        (vcr_request({**REQUEST, "messages": second}), vcr_response(message("Rome.", id="msg_02"))),
    ])
    scenario = to_scenario(path)
    assert scenario.task == TASK and scenario.followups == ["And of Italy?"]

    def chat(sim: Sim) -> list[Outcome]:
        history: list[Any] = []
        outcomes = []
        for text in sim.user_turns:
            history.append({"role": "user", "content": text})
            reply = sim.client.messages.create(model=MODEL, max_tokens=64, messages=history)
            history.append({"role": "assistant", "content": reply.content})
            outcomes.append(Outcome("final", reply.content[0].text))  # type: ignore[union-attr]
        return outcomes

    out = tmp_path / "chat.scenario.yaml"
    convert(path, out)
    report = simloop.replay(chat, out)
    assert report.ok, report.violations


def test_a_cassette_of_independent_conversations_says_so_and_converts_the_one_asked_for(tmp_path: Path) -> None:
    path = write_file_layout(tmp_path / "two.yaml", [
        (vcr_request(REQUEST), vcr_response(message("Paris."))),
        (vcr_request({**REQUEST, "messages": [{"role": "user", "content": "Capital of Spain?"}]}),
         vcr_response(message("Madrid.", id="msg_02"))),
    ])
    recording = load_recording(path)
    assert recording.scenario.task == TASK and len(recording.scenario.model) == 1
    assert any("2 independent conversations" in n and "conversation 0" in n for n in recording.notes)
    assert to_scenario(path, conversation=1).task == "Capital of Spain?"
    with pytest.raises(simloop.UsageError, match="holds 2 conversation"):
        to_scenario(path, conversation=2)


def test_a_cache_breakpoint_moved_to_the_newest_block_keeps_one_conversation(tmp_path: Path) -> None:
    """Issue 40, item 11: a client that moves its ``cache_control`` breakpoint each turn (chatlas does) sends its first
    message with a breakpoint, then without: still one conversation, converted whole."""
    cached = {"type": "text", "text": TASK, "cache_control": {"type": "ephemeral"}}
    first = [{"role": "user", "content": [cached]}]
    second = [{"role": "user", "content": [{"type": "text", "text": TASK}]},
              {"role": "assistant", "content": [{"type": "text", "text": "Paris."}]},
              {"role": "user", "content": [{"type": "text", "text": "And of Italy?", "cache_control": {"type": "ephemeral"}}]}]
    path = write_file_layout(tmp_path / "cached.yaml", [
        (vcr_request({**REQUEST, "messages": first}), vcr_response(message("Paris."))),
        (vcr_request({**REQUEST, "messages": second}), vcr_response(message("Rome.", id="msg_02"))),
    ])
    recording = load_recording(path)
    assert not any("independent conversations" in n for n in recording.notes), recording.notes
    scenario = recording.scenario
    assert scenario.task == TASK and scenario.followups == ["And of Italy?"] and len(scenario.model) == 2
