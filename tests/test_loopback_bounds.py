"""`simloop serve` bounded in memory and scope (issue 27 item 6).

A long session keeps a bounded amount of each request; the MCP port times out a half-sent request
as the API port does; a server bound beyond loopback says so on stderr and in every response.
"""

from __future__ import annotations

import gc
import socket
import tracemalloc
from pathlib import Path
from typing import Any

import httpx2
import pytest

from simloop import Scenario
from simloop.cli import main
from simloop.wire import loopback

AUTH = {"x-api-key": "not-a-real-key"}


def _scenario(tools: bool = False) -> Scenario:
    data: dict[str, Any] = {"name": "bounds", "task": "hi", "model": [{"end_turn": "Fine.", "repeat": "forever"}]}
    if tools:
        data["tools"] = [{"name": "search", "results": ["found"]}]
    return Scenario.model_validate(data)


def test_a_long_session_keeps_a_bounded_part_of_each_request() -> None:
    big = "x" * 2_000_000
    with loopback.serve(_scenario(), max_kept_text=loopback.KEPT_TEXT) as server, httpx2.Client(headers=AUTH) as client:
        url = f"{server.base_url}/v1/messages"

        def send(i: int) -> None:
            # about 500k tokens: a model with a 1M-token window takes it (200k ones answer "prompt is too long")
            body = {"model": "claude-opus-4-6", "max_tokens": 16, "messages": [{"role": "user", "content": f"{i} {big}"}]}
            assert client.post(url, json=body).status_code == 200

        send(0)  # warm up (imports, the first parse)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(1, 16):  # 30 MB of requests
                send(i)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < 6_000_000, f"{grown:,} bytes kept for 15 requests of 2 MB"
        request = server.transcript.requests[-1]
        content = request.body["messages"][0]["content"]
        assert content.startswith("15 xxx") and content.endswith("[simloop serve kept 65,536 of 2,000,003 characters]")


def test_without_a_cap_the_python_api_keeps_every_request_whole() -> None:
    with loopback.serve(_scenario()) as server, httpx2.Client(headers=AUTH) as client:
        text = "y" * 100_000
        body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
        assert client.post(f"{server.base_url}/v1/messages", json=body).status_code == 200
        assert server.transcript.requests[0].body["messages"][0]["content"] == text


def test_the_mcp_port_drops_a_half_sent_request_after_the_read_timeout() -> None:
    pytest.importorskip("mcp", reason="the MCP port needs the mcp extra")
    with loopback.serve(_scenario(tools=True), mcp=True, read_timeout=0.3) as server:
        assert server.mcp_url is not None
        host, port = server.mcp_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        for partial in (b"POST /mcp HTT", b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 100\r\n\r\n{"):
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(partial)
                data = b""
                while chunk := sock.recv(65536):  # blocks until the server hangs up (or 5 s: a failure)
                    data += chunk
                assert b" 200 " not in data


def test_binding_beyond_loopback_warns_in_every_response() -> None:
    with loopback.serve(_scenario(), host="0.0.0.0") as server, httpx2.Client(headers=AUTH) as client:
        assert server.warning is not None and "bound to 0.0.0.0, not to loopback" in server.warning
        body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
        response = client.post(f"http://127.0.0.1:{server.port}/v1/messages", json=body)
        assert response.headers["x-simloop-warning"] == server.warning
    with loopback.serve(_scenario()) as local, httpx2.Client(headers=AUTH) as client:
        assert local.warning is None
        response = client.post(f"{local.base_url}/v1/messages", json=body)
        assert "x-simloop-warning" not in response.headers


def test_simloop_serve_on_all_interfaces_warns_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from simloop.cli import serve as cli_serve

    scenario = tmp_path / "s.yaml"
    scenario.write_text("version: 1\nname: s\ntask: hi\nmodel: [{end_turn: ok}]\n", encoding="utf-8")
    monkeypatch.setattr(cli_serve, "_wait_for_interrupt", lambda: None)  # serve, then stop at once
    assert main(["serve", "--scenario", str(scenario), "--host", "0.0.0.0"]) == 0
    err = capsys.readouterr().err
    assert "simloop: WARNING: simloop serve is bound to 0.0.0.0, not to loopback" in err
    assert "Bind 127.0.0.1 (the default) unless that is what you want." in err


def test_the_responses_store_keeps_a_bounded_number_and_size_and_a_chain_past_it_gets_the_real_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # before: every stored response was kept whole, for good (40 requests of 3 MB grew simloop serve by 120 MB)
    openai = pytest.importorskip("openai", reason="the Responses wire is driven through the openai SDK")
    from simloop.protocol import openai_responses

    monkeypatch.setattr(openai_responses, "MAX_STORED_BYTES", 1_000_000)
    monkeypatch.setattr(openai_responses, "MAX_STORED_RESPONSES", 4)
    big = "z" * 400_000  # about 100k tokens: within gpt-4o's window
    with loopback.serve(_scenario(), max_kept_text=loopback.KEPT_TEXT) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-anything-0000", max_retries=0)
        first = client.responses.create(model="gpt-4o", input="hi")
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(12):  # 4.8 MB of input
                client.responses.create(model="gpt-4o", input=f"{i} {big}")
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < 2_500_000, f"{grown:,} bytes kept for 12 responses of 400 kB"
        assert len(server.server.stored_responses) <= 4
        latest = [client.responses.create(model="gpt-4o", input=f"small {i}") for i in range(4)]
        chained = client.responses.create(model="gpt-4o", previous_response_id=latest[0].id, input="go on")
        assert chained.output_text == "Fine."  # the newest four are held
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="gpt-4o", previous_response_id=first.id, input="go on")
    assert caught.value.body == {"message": f"Previous response with id '{first.id}' not found.",
                                 "type": "invalid_request_error", "param": "previous_response_id",
                                 "code": "previous_response_not_found"}
