"""`simloop serve` under hostile input (issue 21, item 11): malformed requests, slow and flooding clients.

Raw sockets to 127.0.0.1 only.  Nothing sleeps: a test that waits for the server's read timeout
blocks in ``recv`` on a server configured with a timeout of a fraction of a second.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from simloop import Scenario, UsageError
from simloop.wire import loopback

KEY = "sk-ant-test-loopback-0000000000"
HELLO = {"model": "claude-sonnet-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}


def _scenario() -> Scenario:
    return Scenario.model_validate({"name": "hostile", "model": [{"end_turn": "Fine.", "repeat": "forever"}]})


@pytest.fixture
def server() -> Iterator[loopback.LoopbackServer]:
    with loopback.serve(_scenario(), read_timeout=0.3, max_connections=4) as running:
        yield running


def _connect(server: loopback.LoopbackServer) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=5)
    return sock


def _exchange(server: loopback.LoopbackServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` and read the whole answer (the server closes after an error)."""
    with _connect(server) as sock:
        sock.sendall(raw)
        return _read_response(sock)


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the server closed the connection without an answer (got {data!r})")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(status_line.split()[1]), headers, body[:length]


def _envelope(body: bytes) -> dict[str, Any]:
    payload = json.loads(body)
    assert payload["type"] == "error"
    assert set(payload["error"]) >= {"type", "message"}
    return payload["error"]  # type: ignore[no-any-return]


POST = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: k\r\ncontent-type: application/json\r\n"

# (id, raw request, status, error type, words the message must hold)
MALFORMED: list[tuple[str, bytes, int, str, str]] = [
    ("garbage request line", b"GARBAGE\r\n\r\n", 400, "invalid_request_error", "Bad request"),
    ("unknown method", b"OPTIONS /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n", 501, "api_error", "Unsupported method"),
    ("bad HTTP version", b"POST /v1/messages HTTP/9.9\r\nHost: x\r\n\r\n", 505, "api_error", "Invalid HTTP version"),
    ("request line too long", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "invalid_request_error", ""),
    ("header line too long", b"GET / HTTP/1.1\r\nx-long: " + b"a" * 70000 + b"\r\n\r\n", 431, "invalid_request_error",
     "Line too long"),
    ("content-length not a number", (POST + "content-length: abc\r\n\r\n{}").encode(), 400, "invalid_request_error",
     "content-length must be one non-negative integer, got 'abc'"),
    ("negative content-length", (POST + "content-length: -5\r\n\r\n{}").encode(), 400, "invalid_request_error",
     "got '-5'"),
    ("two content-lengths", (POST + "content-length: 2\r\ncontent-length: 3\r\n\r\n{}").encode(), 400,
     "invalid_request_error", "got '2, 3'"),
    ("huge content-length", (POST + "content-length: 999999999999\r\n\r\n{}").encode(), 413, "request_too_large",
     "the API takes at most 32,000,000"),
    ("unknown transfer-encoding", (POST + "transfer-encoding: gzip\r\n\r\n{}").encode(), 400, "invalid_request_error",
     "transfer-encoding 'gzip' is not supported"),
    ("chunked and content-length", (POST + "transfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
     .encode(), 400, "invalid_request_error", "not both"),
    ("bad chunk size", (POST + "transfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n").encode(), 400,
     "invalid_request_error", "bad chunk size line"),
    ("negative chunk size", (POST + "transfer-encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n").encode(), 400,
     "invalid_request_error", "bad chunk size line"),
    ("chunk without its CRLF", (POST + "transfer-encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n").encode(), 400,
     "invalid_request_error", "a chunk is not followed by CRLF"),
    ("huge chunk", (POST + "transfer-encoding: chunked\r\n\r\nffffffffff\r\n{}").encode(), 413, "request_too_large",
     "over 32,000,000 bytes"),
]


@pytest.mark.parametrize(("raw", "status", "kind", "words"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_requests_get_the_api_error_envelope(
    server: loopback.LoopbackServer, raw: bytes, status: int, kind: str, words: str
) -> None:
    got, headers, body = _exchange(server, raw)
    assert got == status
    assert headers["content-type"] == "application/json"
    assert b"<html" not in body.lower() and b"<!doctype" not in body.lower()
    error = _envelope(body)
    assert error["type"] == kind
    assert error["message"].startswith("simloop serve: ") and words in error["message"]
    assert server.errors == []


OPENAI_POST = "POST /v1/responses HTTP/1.1\r\nHost: x\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\n"
# On the OpenAI API's paths the same errors come in its envelope (issue 42): the openai SDKs read ``message``,
# ``param`` and ``code`` from ``{"error": {...}}`` and find none in the Anthropic one.
OPENAI_MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("content-length not a number", (OPENAI_POST + "content-length: abc\r\n\r\n{}").encode(), 400,
     "content-length must be one non-negative integer"),
    ("unknown transfer-encoding", (OPENAI_POST + "transfer-encoding: gzip\r\n\r\n{}").encode(), 400,
     "transfer-encoding 'gzip' is not supported"),
    ("unknown method", b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 501, "Unsupported method"),
    ("a stored response fetched", (b"GET /v1/responses/resp_123 HTTP/1.1\r\nHost: x\r\nauthorization: Bearer k\r\n"
     b"content-length: 0\r\n\r\n"), 404, "Invalid URL (GET /v1/responses/resp_123)"),
]


@pytest.mark.parametrize(("raw", "status", "words"), [m[1:] for m in OPENAI_MALFORMED],
                         ids=[m[0] for m in OPENAI_MALFORMED])
def test_on_openai_routes_the_errors_use_the_openai_envelope(
    server: loopback.LoopbackServer, raw: bytes, status: int, words: str
) -> None:
    got, headers, body = _exchange(server, raw)
    assert got == status and headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and words in error["message"]
    assert headers["x-should-retry"] == "false"  # a 501 for a method is no better on a retry
    assert "x-request-id" in headers and server.errors == []


def test_an_unknown_method_is_not_worth_a_retry_on_the_messages_routes_either(server: loopback.LoopbackServer) -> None:
    got, headers, _ = _exchange(server, b"OPTIONS /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got == 501 and headers["x-should-retry"] == "false"


def test_a_chunked_request_is_still_served(server: loopback.LoopbackServer) -> None:
    body = json.dumps(HELLO).encode()
    raw = (POST + "transfer-encoding: chunked\r\nconnection: close\r\n\r\n").encode()
    raw += b"%x\r\n%s\r\n" % (5, body[:5]) + b"%x;ext=1\r\n%s\r\n" % (len(body) - 5, body[5:]) + b"0\r\n\r\n"
    status, _, answer = _exchange(server, raw)
    assert status == 200
    assert json.loads(answer)["content"][0]["text"] == "Fine."


def test_a_body_that_stops_arriving_gets_a_408_after_the_read_timeout(server: loopback.LoopbackServer) -> None:
    with _connect(server) as sock:
        sock.sendall((POST + "content-length: 100\r\n\r\n{\"model\":").encode())
        status, _, body = _read_response(sock)  # blocks until the server's 0.3 s read timeout
    assert status == 408
    assert _envelope(body) == {
        "type": "timeout_error",
        "message": "simloop serve: the request body did not arrive within 0.3s",
    }


def test_an_idle_connection_is_closed_after_the_read_timeout(server: loopback.LoopbackServer) -> None:
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/mess")  # a slow-loris request line, never finished
        assert sock.recv(1024) == b"", "the server hung up"


def _handler_threads() -> int:
    return sum(1 for t in threading.enumerate() if "_serve_one" in t.name)


def test_a_flood_of_slow_connections_holds_a_bounded_number_of_threads(server: loopback.LoopbackServer) -> None:
    slow: list[socket.socket] = []
    try:
        for _ in range(4):  # max_connections=4: these hold every slot, trickling their request lines
            sock = _connect(server)
            sock.sendall(b"POST /v1/messages HTTP/1.1\r\n")
            slow.append(sock)
        refused = []
        for _ in range(40):
            status, headers, body = _exchange(server, (POST + "content-length: 2\r\n\r\n{}").encode())
            refused.append((status, headers.get("connection"), _envelope(body)["type"]))
        assert set(refused) == {(529, "close", "overloaded_error")}
        assert _handler_threads() == 4, "one thread for each slow connection, none for the refused ones"
    finally:
        for sock in slow:
            sock.close()
    # The slots come back as the slow connections go: the API answers again.
    sdk = anthropic.Anthropic(api_key=KEY, base_url=server.base_url, max_retries=0)
    for _ in range(500):
        try:
            reply = sdk.messages.create(**HELLO)  # type: ignore[call-overload]
            break
        except anthropic.APIStatusError as e:
            assert e.status_code == 529  # a slot not yet released
    else:
        raise AssertionError("the server never served again")
    assert reply.content[0].text == "Fine."


def test_a_simloop_bug_is_an_enveloped_500_and_kept(
    server: loopback.LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise KeyError("oops")

    monkeypatch.setattr(server.server, "handle", broken)
    status, _, body = _exchange(server, (POST + "content-length: 2\r\n\r\n{}").encode())
    assert status == 500
    assert _envelope(body) == {"type": "api_error", "message": "simloop serve: simloop internal error: KeyError: 'oops'"}
    assert [type(e) for e in server.errors] == [KeyError]


@pytest.mark.parametrize(("option", "value"), [("read_timeout", 0), ("read_timeout", float("inf")), ("max_connections", 0)])
def test_the_limits_are_checked(option: str, value: Any) -> None:
    with pytest.raises(UsageError, match=option):
        loopback.serve(_scenario(), **{option: value})
