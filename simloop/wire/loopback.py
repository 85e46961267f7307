"""The simulated Messages API on a real socket (``simloop serve``): for other processes and for recording.

In a `Sim` the SDK reaches the simulator through an in-process transport, on virtual time.  Some
users cannot inject a transport: a loop in another language or process, a framework that builds its
own client.  They point ``ANTHROPIC_BASE_URL`` at this server instead.  It is also how simloop tests
its recorder (`simloop.cassettes.record`, vcrpy underneath), which only sees traffic on real sockets.

A real socket means real time (research ``libs.md`` E6: a virtual clock makes the client's timeouts
fire at once), so this server never sleeps: it answers at once, and reports a reply's scripted
latency in the ``x-envoy-upstream-service-time`` header the real API sends (milliseconds), from which
`simloop.cassettes.to_scenario` reads latencies back.  Its threads never run on the virtual clock.

Faults on the wire: ``connection`` and ``timeout`` close the connection without an answer (a
real-time server does not wait out the client's read timeout), a cut stream ends mid-body without
the last chunk, a mid-stream error is the real ``event: error``.  A scripted run that ends
(`ScriptExhausted`) or a simloop bug is answered with a 500 the SDK does not retry
(``x-should-retry: false``) whose message says what happened, and is kept in ``errors``.

Example::

    with simloop.wire.loopback.serve("scenarios/happy-path.yaml") as server:
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=server.base_url)
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from simloop.clock import REAL, RealTimeThread
from simloop.errors import UsageError
from simloop.models import Ids, ModelPolicy, Script, ScriptExhausted
from simloop.scenario import Scenario, load_scenario
from simloop.transcript import Header, Transcript
from simloop.wire.errors import error_body
from simloop.wire.server import InternalFailure, Planned, SimServer

__all__ = ["LoopbackServer", "run", "serve"]

Target = Scenario | SimServer | str | Path | dict[str, Any]
_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection"})


class LoopbackServer:
    """A running loopback server: ``base_url`` to give the client, ``close()`` (or ``with``) to stop it.

    ``server`` is the `SimServer` answering (its ``transcript`` records every request, on real time
    since the start); ``errors`` holds what ended a request with a simloop 500 (a script that ran
    out, a recording that diverged, a bug).
    """

    def __init__(self, server: SimServer, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._http = _HTTPServer(self, host, port)
        bound_host, bound_port = self._http.server_address[:2]
        self.host = str(bound_host)
        self.port = int(bound_port)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.base_url = f"http://{shown}:{self.port}"
        self._thread = RealTimeThread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="simloop-loopback", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def transcript(self) -> Transcript:
        """Every request and response so far (times are real seconds since the server started)."""
        return self.server.transcript

    def close(self) -> None:
        """Stop serving and drop open connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._http.shutdown()
        self._http.close_connections()
        self._http.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"<LoopbackServer {self.base_url} {state}>"

    # -- one request (called from the handler threads) ------------------------------------------

    def _plan(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Planned:
        with self._lock:  # SimServer keeps per-run state (call numbers, threads, the script position)
            try:
                return self.server.handle(method, path, headers, body)
            except (ScriptExhausted, InternalFailure) as exc:
                self.errors.append(exc)
                return _simloop_error(exc)

    def _deliver(self, planned: Planned) -> None:
        with self._lock:
            self.server.deliver(planned)


def serve(
    target: Target,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    seed: int = 0,
    model: ModelPolicy | None = None,
) -> LoopbackServer:
    """Serve the simulated API for ``target`` on a real socket; returns the running `LoopbackServer`.

    ``target`` is a `Scenario` (or a scenario file path, or a dict in the file format), whose script
    answers (``model`` replaces it, e.g. a `simloop.cassettes.Recorded`), or a ready `SimServer`.
    ``port=0`` picks a free port: read ``base_url``.  Use it as a context manager, or call ``close()``.

    Raises:
        UsageError: ``target`` is none of those; ScenarioError: a scenario file is malformed.
    """
    if isinstance(target, SimServer):
        if model is not None:
            raise UsageError("serve(server, model=...): a SimServer already has its model; pass a Scenario instead")
        return LoopbackServer(target, host=host, port=port)
    scenario = _scenario(target)
    start = REAL.monotonic()
    transcript = Transcript(
        header=Header(
            scenario=scenario.name, seed=seed, limits=scenario.limits.model_dump(exclude_none=True),
            tools={t.name: t.kind for t in scenario.tools},
        )
    )
    server = SimServer(
        model if model is not None else Script.from_scenario(scenario), transcript,
        ids=Ids(random.Random(seed)), now=lambda: round(REAL.monotonic() - start, 6),
    )
    return LoopbackServer(server, host=host, port=port)


def _scenario(target: Any) -> Scenario:
    if isinstance(target, Scenario):
        return target
    if isinstance(target, (str, Path)):
        return load_scenario(target)
    if isinstance(target, dict):
        return Scenario._from_data(target, path=None)
    raise UsageError(
        f"serve(target): give a simloop.Scenario, a scenario file path, a dict or a SimServer; got {type(target).__name__}"
    )


def _simloop_error(exc: BaseException) -> Planned:
    detail = exc.message if isinstance(exc, ScriptExhausted) else f"simloop internal error: {exc}"
    payload = error_body(500, request_id="req_simloop", message=f"simloop: {detail}", type="api_error")
    headers = [("content-type", "application/json"), ("request-id", "req_simloop"), ("x-should-retry", "false")]
    return Planned(status=500, headers=headers, body=payload)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: LoopbackServer, host: str, port: int) -> None:
        self.owner = owner
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Like ThreadingMixIn's, but the handler threads never inherit a Sim's virtual clock.
        with self._connections_lock:
            self._connections.add(request)
        thread = RealTimeThread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer (a test that stops reading a stream) is not an error here.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        with self._connections_lock:
            open_ = list(self._connections)
        for sock in open_:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as the SDK's client expects
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test server prints nothing

    def do_POST(self) -> None:
        self._serve()

    do_GET = do_PUT = do_DELETE = do_PATCH = do_POST  # the SimServer answers them with its 404

    def _serve(self) -> None:
        owner = self.server.owner
        body = self._body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        planned = owner._plan(self.command, urlsplit(self.path).path, headers, body)
        if planned.raise_ is not None:  # connection, timeout, cut before the status line: no answer at all
            owner._deliver(planned)
            self._drop()
            return
        self.send_response(planned.status)
        for name, value in planned.headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("x-envoy-upstream-service-time", str(round(planned.latency * 1000)))
        if planned.events is None:
            self.send_header("content-length", str(len(planned.body)))
            self.end_headers()
            self.wfile.write(planned.body)
            self.wfile.flush()
            owner._deliver(planned)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        owner._deliver(planned)
        events = planned.events
        stop = len(events) if planned.cut_after is None else planned.cut_after
        for event in events[:stop]:
            self._chunk(event)
        if planned.error_event is not None:
            self._chunk(planned.error_event)
        elif planned.cut_after is not None:
            self._drop()  # mid-body, without the last chunk: the client sees an incomplete chunked read
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _drop(self) -> None:
        self.close_connection = True
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def run(target: Target, host: str = "127.0.0.1", port: int = 8765, *, seed: int = 0,
        model: ModelPolicy | None = None, echo: Callable[[str], None] = print,
        stop: threading.Event | None = None) -> LoopbackServer:
    """Serve until interrupted (Ctrl-C) or until ``stop`` is set: the body of ``simloop serve``.

    ``model`` replaces the scenario's script (e.g. ``Recorded(cassette, strict=False)`` to serve a
    recording).  Prints the base URL and the ``ANTHROPIC_BASE_URL`` line to export; returns the
    closed server (its ``transcript`` holds the session).
    """
    server = serve(target, host, port, seed=seed, model=model)
    name = getattr(server.server.transcript.header, "scenario", "scenario")
    echo(f"simloop: serving {name} at {server.base_url}")
    echo(f"  export ANTHROPIC_BASE_URL={server.base_url}")
    waiter = stop or threading.Event()
    try:
        while not waiter.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    calls = sum(1 for e in server.transcript.events if getattr(e, "type", "") == "request")
    echo(f"simloop: stopped after {calls} request(s)")
    if server.errors:
        echo(json.dumps([str(e) for e in server.errors], indent=2))
    return server
