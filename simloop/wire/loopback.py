"""The simulated API on a real socket (``simloop serve``): for other processes and for recording.

In a `Sim` the SDK reaches the simulator through an in-process transport, on virtual time.  Some
users cannot inject a transport: a loop in another language or process, a framework that builds its
own client.  They point ``ANTHROPIC_BASE_URL`` at this server instead (``base_url``: the Messages API),
or ``OPENAI_BASE_URL`` (``openai_base_url``, the same server with ``/v1``: the OpenAI Chat Completions
wire, one world with the Messages API; the bare ``base_url`` works too).  It is also how simloop tests
its recorder (`simloop.cassettes.record`, vcrpy underneath), which only sees traffic on real sockets.

A real socket means real time (research ``libs.md`` E6: a virtual clock makes the client's timeouts
fire at once), so this server never sleeps: it answers at once, and reports a reply's scripted
latency in the ``x-envoy-upstream-service-time`` header the real API sends (milliseconds), from which
`simloop.cassettes.to_scenario` reads latencies back.  Its threads never run on the virtual clock.

Faults on the wire: ``connection`` and ``timeout`` close the connection without an answer (a
real-time server does not wait out the client's read timeout), a cut stream ends mid-body without
the last chunk, a mid-stream error is the real ``event: error``.  A scripted run that ends
(`ScriptExhausted`), a loop the runaway budget stops (`LoopHalted`, kept in ``halted``) or a simloop
bug is answered with a 500 the SDK does not retry
(``x-should-retry: false``) whose message says what happened, and is kept in ``errors``.

Hostile input (docs/security.md): every error, the standard library's own included (a malformed
request line, a header too long, an unknown method), is answered with the API's JSON error envelope,
never an HTML page; a bad ``Content-Length`` or chunked framing gets a 400 and a body past the real
API's 32 MB a 413.  Each connection's reads and writes time out after ``read_timeout`` seconds, and at
most ``max_connections`` are served at once: one more is answered with a 529 (overloaded) and closed,
so a flood of slow connections cannot make the server start a thread for each.

Tools: with a `ToolBox` (``serve(..., mcp=True)`` makes one for the scenario) the scenario's tools are
served too, with their faults and the execution ledger in the same transcript: over MCP streamable
HTTP at ``mcp_url`` (`simloop.mcp.HTTPServer`, a port of its own) and as plain JSON at ``POST
/simloop/tools/NAME`` (the input as the body; the answer ``{"content": TEXT, "is_error": BOOL}``), for a
loop in a language without an MCP client at hand.  Tools never sleep either: a ``slow`` fault's latency
is not waited out.

Retry waits: with ``fast_retries`` (what ``simloop verify --command`` uses) every retryable error
(408, 429, 5xx) carries ``retry-after-ms: 1`` (in place of the wire's own, the Chat Completions one's), which
the official SDKs of both vendors (Python and TypeScript) obey in place of their exponential backoff, so a run of outages costs milliseconds, not seconds.  A dropped
connection has no headers to say so: the SDK waits its own backoff (about half a second) before retrying.

Example::

    with simloop.wire.loopback.serve("scenarios/happy-path.yaml") as server:
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=server.base_url)
        chat = openai.OpenAI(api_key="sk-test", base_url=server.openai_base_url)
"""

from __future__ import annotations

import ipaddress
import json
import math
import random
import re
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from simloop._runtime.halt import LoopHalted
from simloop._runtime.process import FAKE_OPENAI_KEY
from simloop._runtime.realtime import REAL, RealTimeThread
from simloop.errors import UsageError
from simloop.models import Ids, ModelPolicy, Script, ScriptExhausted
from simloop.protocol.errors import STATUS_ERRORS, error_body
from simloop.protocol.openai_chat import chat_error_body
from simloop.scenario import Scenario, load_scenario
from simloop.tools import ToolBox
from simloop.transcript import Header, Request, ToolEnd, ToolStart, Transcript
from simloop.wire.server import InternalFailure, Planned, SimServer, is_openai_path

__all__ = ["LoopbackServer", "export_lines", "run", "serve"]

Target = Scenario | SimServer | str | Path | dict[str, Any]
_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection"})
#: The real API's request size limit (a 413 ``request_too_large`` past it).
MAX_BODY_BYTES = 32 * 1000 * 1000
#: How long a connection may be silent (reading the request, or not reading the answer), by default.
READ_TIMEOUT_S = 30.0
#: How many connections are served at once, by default; more are answered with a 529 and closed.
MAX_CONNECTIONS = 64
#: What ``simloop serve`` keeps of each text a client sends (characters): a long session's memory stays bounded.
KEPT_TEXT = 65_536
_MAX_LINE = 65536
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOOLS_PATH = "/simloop/tools/"
#: The header a tools-endpoint call names the tool_use it answers with (lower case: headers are read so).
TOOL_USE_ID_HEADER = "x-simloop-tool-use-id"
_RETRYABLE = frozenset({408, 429, 500, 502, 503, 504, 529})


class LoopbackServer:
    """A running loopback server: ``base_url`` to give the client, ``close()`` (or ``with``) to stop it.

    ``base_url`` is what the ``anthropic`` SDKs take (``ANTHROPIC_BASE_URL``), ``openai_base_url`` (the same
    with ``/v1``) what the ``openai`` SDKs take (``OPENAI_BASE_URL``): one server, one world, both wires.

    ``server`` is the `SimServer` answering (its ``transcript`` records every request, on real time
    since the start); ``errors`` holds what ended a request with a simloop 500 (a script that ran
    out, a recording that diverged, a bug); ``halted`` the `LoopHalted` of a loop that ran past the
    runaway budget.  ``tools`` (a `ToolBox` on the same transcript) serves the scenario's tools, over
    MCP at ``mcp_url`` when ``mcp`` is set.
    """

    def __init__(
        self,
        server: SimServer,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        read_timeout: float = READ_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        tools: ToolBox | None = None,
        mcp: bool = False,
        fast_retries: bool = False,
        max_kept_text: int | None = None,
    ) -> None:
        if mcp and tools is None:
            raise UsageError("LoopbackServer(mcp=True) serves the scenario's tools: pass tools=ToolBox(...)")
        if not (isinstance(read_timeout, (int, float)) and math.isfinite(read_timeout) and read_timeout > 0):
            raise UsageError(f"read_timeout is a positive number of seconds, got {read_timeout!r}")
        if not (isinstance(max_connections, int) and max_connections >= 1):
            raise UsageError(f"max_connections is a positive number, got {max_connections!r}")
        self.server = server
        self.errors: list[BaseException] = []
        self.halted: LoopHalted | None = None
        self.on_halt: Callable[[], None] | None = None  # called when the runaway budget (or the search) stops the run
        self.stopped: BaseException | None = None  # what else stopped the run from inside the model (Hypothesis)
        self.tools = tools
        self.fast_retries = fast_retries
        if max_kept_text is not None and not (isinstance(max_kept_text, int) and max_kept_text >= 0):
            raise UsageError(f"max_kept_text is a number of characters (0 or more) or None, got {max_kept_text!r}")
        self.max_kept_text = max_kept_text
        self._lock = threading.Lock()
        self._mcp: Any = None
        self.mcp_url: str | None = None
        if mcp:
            from simloop.mcp import HTTPServer, tool_server

            schemas = [t.schema_dict() for t in self.tools.scenario.tools] if self.tools else []
            self._mcp = HTTPServer(tool_server(schemas, self._acall_tool), host=host, read_timeout=float(read_timeout))
            self.mcp_url = self._mcp.url
        self._http = _HTTPServer(self, host, port, read_timeout=float(read_timeout), max_connections=max_connections)
        bound_host, bound_port = self._http.server_address[:2]
        self.host = str(bound_host)
        self.port = int(bound_port)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.base_url = f"http://{shown}:{self.port}"
        #: The OpenAI SDKs' base URL (theirs ends in /v1 by default: https://api.openai.com/v1).
        self.openai_base_url = self.base_url + "/v1"
        #: Set when the server is reachable from other machines (bound beyond loopback): say so everywhere.
        self.warning: str | None = None if _is_loopback(self.host) else (
            f"simloop serve is bound to {self.host}, not to loopback: any machine that can reach this one can use "
            "the simulated API" + (" and run the scenario's tools over MCP" if mcp else "")
            + ". Bind 127.0.0.1 (the default) unless that is what you want."
        )
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
        if self._mcp is not None:
            self._mcp.close()
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
        if self.tools is not None and path.startswith(_TOOLS_PATH) and method == "POST":
            return self._tool_request(path[len(_TOOLS_PATH):], body, headers)
        with self._lock:  # SimServer keeps per-run state (call numbers, threads, the script position)
            seen = len(self.server.transcript.events)
            try:
                planned = self._handle(method, path, headers, body, seen)
            except (ScriptExhausted, InternalFailure) as exc:
                self.errors.append(exc)
                return _simloop_error(exc)
            except LoopHalted as halted:
                self._halt(halted)
                return _simloop_error(halted)
            except (Exception, KeyboardInterrupt, SystemExit):
                raise  # a simloop bug is answered by the handler (a 500); an interrupt is the process's
            except BaseException as stop:  # noqa: BLE001 - e.g. Hypothesis ending the example mid-run (StopTest)
                self.stopped = self.stopped or stop
                if self.on_halt is not None:
                    self.on_halt()
                return _simloop_error(stop)
        if self.fast_retries and planned.status in _RETRYABLE:  # replaces the wire's own (a Chat Completions 429's)
            planned.headers = [*(h for h in planned.headers if h[0].lower() != "retry-after-ms"), ("retry-after-ms", "1")]
        return planned

    def _handle(self, method: str, path: str, headers: dict[str, str], body: bytes, seen: int) -> Planned:
        """`SimServer.handle`, then the texts of what it recorded cut to `max_kept_text` (memory stays bounded)."""
        try:
            return self.server.handle(method, path, headers, body)
        finally:
            self._shrink(seen)

    def _shrink(self, seen: int) -> None:
        """Cut the long texts of the events recorded since ``seen`` (client data: request bodies, tool inputs)."""
        if self.max_kept_text is None:
            return
        for event in self.server.transcript.events[seen:]:
            if isinstance(event, Request):
                event.body = _cut(event.body, self.max_kept_text)
                event.messages = _cut(event.messages, self.max_kept_text)
            elif isinstance(event, ToolStart):
                event.input = _cut(event.input, self.max_kept_text)
            elif isinstance(event, ToolEnd):
                event.result = _cut(event.result, self.max_kept_text)
                event.error = _cut(event.error, self.max_kept_text)

    def call_tool(self, name: str, input: Any, *, tool_use_id: str | None = None) -> str:
        """Run a scenario tool for a client of this server (MCP or plain JSON); raises what the tool raises.

        ``tool_use_id`` (the ``x-simloop-tool-use-id`` header, or ``_meta.tool_use_id`` in an MCP call) binds
        the execution to that tool_use exactly; without it, simloop binds it by name and input.
        """
        if self.tools is None:
            raise UsageError("this loopback server serves no tools (serve(..., mcp=True) or tools=ToolBox(...))")
        with self._lock:  # one ledger with the API's transcript: a call is matched to the replies served so far
            seen = len(self.tools.transcript.events)
            try:
                return self.tools.run(name, input, tool_use_id=tool_use_id)
            except LoopHalted as halted:
                self._halt(halted)
                raise RuntimeError(f"simloop stopped the run: {halted}") from None
            finally:
                self._shrink(seen)

    def _halt(self, halted: LoopHalted) -> None:
        first = self.halted is None
        self.halted = self.halted or halted
        if first and self.on_halt is not None:
            self.on_halt()

    async def _acall_tool(self, name: str, input: dict[str, Any], *, tool_use_id: str | None = None) -> str:
        return self.call_tool(name, input, tool_use_id=tool_use_id)

    def _tool_request(self, name: str, body: bytes, headers: dict[str, str]) -> Planned:
        try:
            data = json.loads(body or b"{}")
        except ValueError as e:
            payload = _envelope(400, f"POST {_TOOLS_PATH}{name}: the body must be the tool input as JSON ({e})")
            return Planned(status=400, headers=[("content-type", "application/json")], body=payload)
        try:
            uid = headers.get(TOOL_USE_ID_HEADER) or None
            answer = {"content": self.call_tool(name, data, tool_use_id=uid), "is_error": False}
        except Exception as exc:  # noqa: BLE001 - a tool failure is the loop's to handle, as an is_error result
            answer = {"content": f"{type(exc).__name__}: {exc}", "is_error": True}
        return Planned(status=200, headers=[("content-type", "application/json")], body=json.dumps(answer).encode())

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
    read_timeout: float = READ_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    mcp: bool = False,
    max_kept_text: int | None = None,
) -> LoopbackServer:
    """Serve the simulated API for ``target`` on a real socket; returns the running `LoopbackServer`.

    ``target`` is a `Scenario` (or a scenario file path, or a dict in the file format), whose script
    answers (``model`` replaces it, e.g. a `simloop.cassettes.Recorded`), or a ready `SimServer`.
    ``port=0`` picks a free port: read ``base_url``.  Use it as a context manager, or call ``close()``.
    ``read_timeout`` (seconds a connection may stay silent) and ``max_connections`` (served at once;
    more get a 529) bound what a slow or flooding client can hold.  ``mcp=True`` also serves the
    scenario's tools (faults and ledger included) over MCP at ``server.mcp_url`` and at ``POST
    /simloop/tools/NAME`` (needs ``simloop[mcp]`` for MCP).  ``max_kept_text`` bounds the memory a
    long session holds: each text the transcript keeps from a client (request bodies, tool inputs and
    results) is cut to that many characters (`KEPT_TEXT` for ``simloop serve``; None keeps all).

    Raises:
        UsageError: ``target`` is none of those; ScenarioError: a scenario file is malformed.
    """
    if isinstance(target, SimServer):
        if model is not None:
            raise UsageError("serve(server, model=...): a SimServer already has its model; pass a Scenario instead")
        return LoopbackServer(
            target, host=host, port=port, read_timeout=read_timeout, max_connections=max_connections,
            max_kept_text=max_kept_text,
        )
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
    tools = None
    if mcp:
        tools = ToolBox(scenario, transcript, now=server.now, sleep=_no_sleep)
    return LoopbackServer(
        server, host=host, port=port, read_timeout=read_timeout, max_connections=max_connections, tools=tools, mcp=mcp,
        max_kept_text=max_kept_text,
    )


def _is_loopback(host: str) -> bool:
    """Whether a bound address is loopback-only (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _cut(value: Any, keep: int) -> Any:
    """``value`` with every string longer than ``keep`` characters cut, and said so (new containers; shared
    ones, such as the server's own parse of the previous body, are never changed)."""
    if isinstance(value, str):
        if len(value) <= keep:
            return value
        return value[:keep] + f"...[simloop serve kept {keep:,} of {len(value):,} characters]"
    if isinstance(value, dict):
        return {k: _cut(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, keep) for v in value]
    return value


def _no_sleep(seconds: float) -> None:
    """A loopback server's tools answer at once (real time): a ``slow`` fault is not waited out."""


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
    if isinstance(exc, ScriptExhausted):
        detail = exc.message
    elif isinstance(exc, LoopHalted):
        detail = f"the run was stopped as a runaway ({exc})"
    elif not isinstance(exc, Exception):
        detail = f"the run was stopped ({type(exc).__name__})"
    else:
        detail = f"simloop internal error: {exc}"
    payload = error_body(500, request_id="req_simloop", message=f"simloop: {detail}", type="api_error")
    headers = [("content-type", "application/json"), ("request-id", "req_simloop"), ("x-should-retry", "false")]
    return Planned(status=500, headers=headers, body=payload)


def _envelope(status: int, message: str) -> bytes:
    """The API's JSON error envelope for a status the simulated API itself never scripts (a transport error)."""
    kind = STATUS_ERRORS[status][0] if status in STATUS_ERRORS else (
        "invalid_request_error" if status < 500 else "api_error"
    )
    return error_body(status, request_id="req_simloop", message=f"simloop serve: {message}", type=kind)


class _BadRequest(Exception):
    """The request's framing is malformed: answered with ``status`` and closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # a burst of connections waits in the kernel's queue, to be served or refused

    def __init__(
        self, owner: LoopbackServer, host: str, port: int, *, read_timeout: float, max_connections: int
    ) -> None:
        self.owner = owner
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Like ThreadingMixIn's, but the handler threads never inherit a Sim's virtual clock, and there are
        # at most max_connections of them: past that a connection is answered at once and closed.
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        with self._connections_lock:
            self._connections.add(request)
        thread = RealTimeThread(target=self._serve_one, args=(request, client_address), daemon=True)
        try:
            thread.start()
        except RuntimeError:  # the interpreter cannot start another thread: refuse rather than fail
            self._slots.release()
            self._refuse(request)

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: socket.socket) -> None:
        body = _envelope(529, f"{self.max_connections} connections are open, the most this server serves at once")
        head = (
            "HTTP/1.1 529 Overloaded\r\ncontent-type: application/json\r\nrequest-id: req_simloop\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        try:
            request.settimeout(min(self.read_timeout, 1.0))  # never hold the accepting thread up
            request.sendall(head.encode() + body)
        except OSError:
            pass
        self.shutdown_request(request)

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

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout)  # reads and writes: a silent client is let go
        # the head and the body go out in separate writes: without this, Nagle holds the body back until the
        # client's delayed ACK (40 ms a response on Linux, most of a --command example's time)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test server prints nothing

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The API's JSON error envelope, where the standard library would send its HTML error page: the OpenAI
        one on the OpenAI API's paths (``{"error": {"message", "type", "param", "code"}}``, which its SDKs read),
        the Anthropic one elsewhere.  A 4xx or a 501 (a method not served) is not worth a retry."""
        short = self.responses.get(code, ("Error", ""))[0]
        openai = is_openai_path(str(getattr(self, "path", "") or ""))
        body = chat_error_body(code, message=f"simloop serve: {message or short}") if openai else _envelope(
            code, message or short)
        retry = "false" if (400 <= code < 500 and code != 408) or code == 501 else "true"
        self.close_connection = True
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.request_version = "HTTP/1.1"  # a garbled request line reads as HTTP/0.9, which has no headers
        try:
            self.send_response(code, short)
            self.send_header("content-type", "application/json")
            self.send_header("x-request-id" if openai else "request-id", "req_simloop")
            self.send_header("x-should-retry", retry)
            self.send_header("connection", "close")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            pass  # the client is gone; there is no one left to tell

    def do_POST(self) -> None:
        self._serve()

    do_GET = do_PUT = do_DELETE = do_PATCH = do_POST  # the SimServer answers them with its 404

    def _serve(self) -> None:
        owner = self.server.owner
        try:
            body = self._body()
        except _BadRequest as e:
            self.send_error(e.status, e.message)
            return
        except TimeoutError:
            self.send_error(408, f"the request body did not arrive within {self.server.read_timeout:g}s")
            return
        except ConnectionError:
            self.close_connection = True  # the client hung up mid-body: no one to answer
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            planned = owner._plan(self.command, urlsplit(self.path).path, headers, body)
        except Exception as e:  # noqa: BLE001 - a simloop bug is answered as one, never as a dropped connection
            with owner._lock:
                owner.errors.append(e)
            self.send_error(500, f"simloop internal error: {type(e).__name__}: {e}")
            return
        if planned.raise_ is not None:  # connection, timeout, cut before the status line: no answer at all
            owner._deliver(planned)
            self._drop()
            return
        self.send_response(planned.status)
        for name, value in planned.headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("x-envoy-upstream-service-time", str(round(planned.latency * 1000)))
        if owner.warning is not None:
            self.send_header("x-simloop-warning", owner.warning)
        if planned.events is None:
            self.send_header("content-length", str(len(planned.body)))
            self.end_headers()
            # recorded before it is sent: a client acting on the reply at once (running its tools) must find it in
            # the transcript, or its tool calls would match no tool_use
            owner._deliver(planned)
            self.wfile.write(planned.body)
            self.wfile.flush()
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
        """The request body, by ``Content-Length`` or chunked; `_BadRequest` for malformed framing."""
        encoding = self.headers.get_all("transfer-encoding") or []
        lengths = [v.strip() for v in self.headers.get_all("content-length") or []]
        if encoding:
            if [e.strip().lower() for e in encoding] != ["chunked"]:
                raise _BadRequest(400, f"transfer-encoding {', '.join(encoding)!r} is not supported; send chunked")
            if lengths:
                raise _BadRequest(400, "a request has a content-length or is chunked, not both")
            return self._chunked()
        if not lengths:
            return b""
        if len(set(lengths)) != 1 or not lengths[0].isdigit() or not lengths[0].isascii():
            raise _BadRequest(400, f"content-length must be one non-negative integer, got {', '.join(lengths)!r}")
        length = int(lengths[0])
        if length > MAX_BODY_BYTES:
            raise _BadRequest(413, f"the request is {length:,} bytes; the API takes at most {MAX_BODY_BYTES:,}")
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            raise ConnectionError("the client closed the connection mid-body")
        return body

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(_MAX_LINE + 1)
            if not line:
                raise ConnectionError("the client closed the connection mid-body")
            size_text = line.split(b";")[0].strip()
            if len(line) > _MAX_LINE or not _CHUNK_SIZE.fullmatch(size_text):
                raise _BadRequest(400, f"malformed chunked body: bad chunk size line {line[:40]!r}")
            size = int(size_text, 16)
            total += size
            if total > MAX_BODY_BYTES:
                raise _BadRequest(413, f"the request is over {MAX_BODY_BYTES:,} bytes, the most the API takes")
            if size == 0:
                for _ in range(100):  # trailers, up to the empty line
                    if self.rfile.readline(_MAX_LINE + 1) in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
                raise _BadRequest(400, "malformed chunked body: too many trailer lines")
            data = self.rfile.read(size)
            if len(data) < size:
                raise ConnectionError("the client closed the connection mid-body")
            parts.append(data)
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _BadRequest(400, "malformed chunked body: a chunk is not followed by CRLF")

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


def export_lines(server: LoopbackServer) -> list[str]:
    """The shell lines that point both vendors' SDKs (Python and TypeScript) at ``server``.

    The ``anthropic`` SDKs read ``ANTHROPIC_BASE_URL``, the ``openai`` SDKs ``OPENAI_BASE_URL`` (with ``/v1``,
    as their default ``https://api.openai.com/v1``) and will not start without an ``OPENAI_API_KEY``: a fake
    one (the server takes any key).
    """
    lines = [f"export ANTHROPIC_BASE_URL={server.base_url}", f"export OPENAI_BASE_URL={server.openai_base_url}",
             f"export OPENAI_API_KEY={FAKE_OPENAI_KEY}"]
    if server.mcp_url:
        lines.append(f"export SIMLOOP_MCP_URL={server.mcp_url}")
    return lines


def run(target: Target, host: str = "127.0.0.1", port: int = 8765, *, seed: int = 0,
        model: ModelPolicy | None = None, echo: Callable[[str], None] = print,
        stop: threading.Event | None = None) -> LoopbackServer:
    """Serve until interrupted (Ctrl-C) or until ``stop`` is set: the body of ``simloop serve``.

    ``model`` replaces the scenario's script (e.g. ``Recorded(cassette, strict=False)`` to serve a
    recording).  Prints the base URL and the lines to export for both SDKs (`export_lines`); returns
    the closed server (its ``transcript`` holds the session).
    """
    server = serve(target, host, port, seed=seed, model=model, max_kept_text=KEPT_TEXT)
    name = getattr(server.server.transcript.header, "scenario", "scenario")
    if server.warning is not None:
        echo(f"simloop: WARNING: {server.warning}")
    echo(f"simloop: serving {name} at {server.base_url}")
    for line in export_lines(server):
        echo(f"  {line}")
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
