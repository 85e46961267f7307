"""The simulated API on a real loopback socket (`simloop.wire.loopback`): what other processes and the recorder see.

Every test talks HTTP over 127.0.0.1 with the unmodified SDK (or raw httpx2 for the faults), in real
time; the server answers at once, so nothing here sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anthropic
import httpx2
import pytest
from _sdk import STREAM_CUT_ERROR

from simloop import Scenario
from simloop._runtime.clock import VirtualClock
from simloop._runtime.realtime import RealTimeThread
from simloop.errors import UsageError
from simloop.transcript import Request, Response
from simloop.wire import loopback

KEY = "sk-ant-test-loopback-0000000000"
TOOLS = [
    {"name": "get_order", "kind": "read", "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}},
]
HELLO: dict[str, Any] = {"model": "claude-sonnet-5", "max_tokens": 256, "messages": [{"role": "user", "content": "Hi"}]}


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    return Scenario.model_validate({"name": "wire", "task": "Hi", "tools": TOOLS, "model": list(model), **kw})


def _text(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def client(server: loopback.LoopbackServer, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=KEY, base_url=server.base_url, max_retries=0, **kw)


def test_the_sdk_gets_json_and_streams_over_a_real_socket() -> None:
    plan = scenario(
        {"text": "Looking.", "tool_use": [{"name": "get_order", "input": {"id": "7"}}], "latency": 1.5},
        {"end_turn": "Order 7 has shipped and should arrive on Tuesday."},
    )
    with loopback.serve(plan) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.port > 0
        sdk = client(server, _strict_response_validation=True)
        raw = sdk.messages.with_raw_response.create(**HELLO)
        first = raw.parse()
        assert [b.type for b in first.content] == ["text", "tool_use"]
        assert first.stop_reason == "tool_use"
        # The scripted latency is reported as the real API's upstream time, not slept.
        assert raw.headers["x-envoy-upstream-service-time"] == "1500"
        with sdk.messages.stream(**HELLO) as stream:
            chunks = list(stream.text_stream)
            final = stream.get_final_message()
        assert len(chunks) > 1, "a stream arrives in several chunks"
        assert "".join(chunks) == _text(final) == "Order 7 has shipped and should arrive on Tuesday."
    kinds = [type(e).__name__ for e in server.transcript.events]
    assert kinds == ["Request", "Response", "Request", "Response"]
    assert [e.stream for e in server.transcript.of(Request)] == [False, True]


def test_the_async_client_works_too() -> None:
    async def talk(base_url: str) -> str:
        sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=base_url, max_retries=0)
        async with sdk.messages.stream(**HELLO) as stream:
            message = await stream.get_final_message()
        await sdk.close()
        return _text(message)

    with loopback.serve(scenario({"end_turn": "Hello from the socket."})) as server:
        assert asyncio.run(talk(server.base_url)) == "Hello from the socket."


def test_requests_the_real_api_rejects_get_its_400_and_unknown_paths_404() -> None:
    with loopback.serve(scenario({"end_turn": "never"})) as server:
        with pytest.raises(anthropic.BadRequestError) as bad:
            client(server).messages.create(model="m", max_tokens=5, messages=[])
        assert bad.value.status_code == 400
        missing = httpx2.get(server.base_url + "/v1/models")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
        no_key = httpx2.post(server.base_url + "/v1/messages", json=HELLO)
        assert no_key.status_code == 401


def test_api_errors_and_broken_connections_reach_the_client_as_on_the_wire() -> None:
    plan = scenario(
        {"error": 529}, {"error": "connection"}, {"error": "stream_error"}, {"error": "stream_cut"},
        {"end_turn": "Recovered."},
    )
    with loopback.serve(plan) as server:
        sdk = client(server)
        with pytest.raises(anthropic.InternalServerError) as overloaded:
            sdk.messages.create(**HELLO)
        assert overloaded.value.status_code == 529
        with pytest.raises(anthropic.APIConnectionError):
            sdk.messages.create(**HELLO)
        with pytest.raises(anthropic.APIStatusError) as mid_stream, sdk.messages.stream(**HELLO) as stream:
            stream.get_final_message()
        assert "Overloaded" in str(mid_stream.value)
        with pytest.raises(STREAM_CUT_ERROR), sdk.messages.stream(**HELLO) as stream:
            stream.get_final_message()
        assert _text(sdk.messages.create(**HELLO)) == "Recovered."
    faults = [e.fault for e in server.transcript.of(Response)]
    assert faults == ["http", "connection", "stream_error", "stream_cut", None]


def test_a_script_that_runs_out_answers_a_500_the_sdk_does_not_retry_and_is_kept() -> None:
    with loopback.serve(scenario({"end_turn": "Only one."})) as server:
        sdk = anthropic.Anthropic(api_key=KEY, base_url=server.base_url)  # default retries: must not be used
        sdk.messages.create(**HELLO)
        with pytest.raises(anthropic.InternalServerError) as exc:
            sdk.messages.create(**HELLO)
    assert "simloop: the script has 1 reply and the loop asked for another at model call 2" in str(exc.value)
    assert len(server.errors) == 1
    assert len(server.transcript.of(Request)) == 2, "the 500 was not retried"


def test_serve_takes_a_file_a_dict_or_a_ready_server_and_refuses_anything_else() -> None:
    with loopback.serve("scenarios/happy-path.yaml") as server:
        reply = client(server).messages.create(**HELLO)
        assert reply.stop_reason == "tool_use"
    with loopback.serve({"name": "d", "model": [{"end_turn": "From a dict."}]}) as server, \
            loopback.serve(server.server, port=0) as again:
        assert _text(client(again).messages.create(**HELLO)) == "From a dict."
    with pytest.raises(UsageError, match="serve\\(target\\): give a simloop.Scenario"):
        loopback.serve(42)  # type: ignore[arg-type]


def test_the_server_threads_keep_real_time_even_when_started_inside_a_virtual_clock() -> None:
    clock = VirtualClock()
    with clock.patched():
        server = loopback.serve(scenario({"end_turn": "Real time."}))
    try:
        assert isinstance(server._thread, RealTimeThread)
        # A client outside the clock gets its answer although the server was born on a virtual clock.
        reply = client(server).messages.create(**HELLO)
        assert _text(reply) == "Real time."
    finally:
        server.close()
    assert clock.now() == 0.0


def test_close_is_idempotent_and_stops_answering() -> None:
    server = loopback.serve(scenario({"end_turn": "x"}))
    keep_alive = httpx2.Client()
    keep_alive.get(server.base_url + "/")  # an open keep-alive connection must not hold close() up
    server.close()
    server.close()
    assert "closed" in repr(server)
    with pytest.raises(httpx2.TransportError):
        httpx2.post(server.base_url + "/v1/messages", json=HELLO, headers={"x-api-key": KEY}, timeout=2)
    keep_alive.close()


def test_run_serves_until_stopped_and_says_where() -> None:
    lines: list[str] = []
    stop = threading.Event()
    done: list[loopback.LoopbackServer] = []
    worker = threading.Thread(
        target=lambda: done.append(loopback.run(scenario({"end_turn": "x"}), port=0, echo=lines.append, stop=stop))
    )
    worker.start()
    for _ in range(200):
        if lines:
            break
        threading.Event().wait(0.01)
    stop.set()
    worker.join(timeout=5)
    assert lines[0].startswith("simloop: serving wire at http://127.0.0.1:")
    assert lines[1].startswith("  export ANTHROPIC_BASE_URL=http://127.0.0.1:")
    assert lines[-1] == "simloop: stopped after 0 request(s)"
