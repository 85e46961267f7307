"""httpx2 transports that carry the simulated API to the official SDK.

They subclass httpx2's base transport classes directly (not
`httpx2.MockTransport`, which vcrpy intercepts), so a client built as
``anthropic.Anthropic(http_client=httpx2.Client(transport=SimTransport(...)))``
talks to the simulator unmodified.  Latency is spent on the virtual clock:
``sleep`` for sync code, the running loop's timers for async code.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx2

from simloop._runtime.order import acting
from simloop.errors import SimulatedCrash
from simloop.wire.server import READ_HEADERS, Planned, SimServer

__all__ = ["AsyncSimTransport", "SimTransport"]

_CUT = "peer closed connection without sending complete message body (incomplete chunked read)"
_CLOSED = "this simloop transport is closed (its client was closed)"
_NO_TIME = timedelta(0)  # (immutable: shared)
_READ = frozenset(name.encode("ascii") for name in READ_HEADERS)


def _headers(request: httpx2.Request) -> dict[str, str]:
    """The headers the server reads, as `httpx2.Headers.get` gives them, in one pass over the raw list.

    ``Headers.get`` lower-cases, encodes and scans the whole list on every call: a few µs each on
    the simulator's hot path.  Repeated headers are joined with ``", "``, as ``Headers.get`` joins them.
    """
    found: dict[str, str] = {}
    headers = request.headers
    # httpx2 keeps (raw name, lower-case name, value) triples: read them as they are when it still does.
    items = getattr(headers, "_list", None)
    if type(items) is not list or (items and len(items[0]) != 3):
        items = [(key, key.lower(), value) for key, value in headers.raw]
    for _, name, value in items:
        if name in _READ:
            try:
                text = value.decode("ascii")  # what the headers' own encoding gives for ASCII bytes
            except UnicodeDecodeError:
                text = value.decode(headers.encoding)
            lowered = name.decode("ascii")
            found[lowered] = f"{found[lowered]}, {text}" if lowered in found else text
    return found


def _no_world(seconds: float) -> None:
    """No runaway bound to move on (a transport outside a Sim)."""


def _read_timeout(request: httpx2.Request) -> float:
    timeout = request.extensions.get("timeout") or {}
    value = timeout.get("read") if isinstance(timeout, dict) else None
    return float(value) if value is not None else 600.0


def _response(request: httpx2.Request, planned: Planned, content: Any) -> httpx2.Response:
    if type(content) is not bytes:  # a stream cut or ending in an error event: the client reads it as it goes
        return httpx2.Response(planned.status, headers=planned.headers, content=content, request=request)
    # The headers ``content=`` would give (none for a stream, which the API sends chunked); the body is handed
    # over already read (what ``content=`` gets by reading a byte stream through the decoders: a good part of a
    # call's cost, for bytes we have; a whole stream's events are one chunk either way, see `_iter_events`).
    # Should httpx2 stop honouring ``_content``, the client reads the stream instead: slower, not wrong.
    if planned.events is None:
        headers = [*planned.headers, ("Content-Length", str(len(content)))] if content else planned.headers
        response = httpx2.Response(planned.status, headers=headers, stream=httpx2.ByteStream(content), request=request)
    else:  # a stream read to its end: nothing is left on the wire (the openai SDK drains it after ``[DONE]``)
        response = httpx2.Response(planned.status, headers=planned.headers, stream=_READ_TO_THE_END, request=request)
        response.is_stream_consumed = True
    response._content = content
    # The client never times a response it does not read: ``elapsed`` is the virtual time it took.
    response.elapsed = timedelta(seconds=planned.latency) if planned.latency else _NO_TIME
    return response


class _ReadToTheEnd(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """The raw stream of a response whose body was handed over already read: nothing left, as after a real one."""

    def __iter__(self) -> Iterator[bytes]:
        return iter(())

    async def __aiter__(self) -> AsyncIterator[bytes]:
        return
        yield b""  # (an async generator with nothing to give)


_READ_TO_THE_END = _ReadToTheEnd()


def _fault(request: httpx2.Request, kind: str | None, call: int = 0) -> BaseException:
    if kind == "crash":  # a BaseException, as a tool's crash: neither the SDK's retries nor the loop catch it
        return SimulatedCrash(
            f"the process died while model call {call} was in flight (the request was sent and answered; its reply "
            "was never read)"
        )
    if kind == "timeout":
        return httpx2.ReadTimeout("The read operation timed out", request=request)
    if kind == "cut":
        return httpx2.RemoteProtocolError(_CUT, request=request)
    return httpx2.ConnectError("[Errno 111] Connection refused", request=request)


class SimTransport(httpx2.BaseTransport):
    """Sync transport: ``sleep(seconds)`` spends virtual latency (the Sim passes its clock's sleep)."""

    def __init__(self, server: SimServer, *, sleep: Callable[[float], None],
                 world: Callable[[float], None] = _no_world) -> None:
        self.server: SimServer | None = server
        self.sleep = sleep
        self.world = world  # told of the world's time before it is spent (the Sim's runaway bound moves on)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        with acting():  # one turn among the run's threads, latency included (simloop._runtime.order)
            server = self.server
            if server is None:
                raise RuntimeError(_CLOSED)
            body = request.read()
            planned = server.handle(request.method, request.url.path, _headers(request), body,
                                     thread=threading.get_ident())
            if planned.latency:
                self.world(planned.latency)
                self.sleep(planned.latency)
            if planned.raise_ is not None:
                if planned.raise_ == "timeout":
                    self.world(_read_timeout(request))
                    self.sleep(_read_timeout(request))
                call = planned.record.call if planned.record is not None else 0
                server.deliver(planned)
                raise _fault(request, planned.raise_, call)
            server.deliver(planned)
            return _response(request, planned, _content(request, planned, _iter_events))

    def close(self) -> None:
        # Let go of the run (server, transcript, clock): the SDK client around this transport sits in a
        # reference cycle, which would otherwise keep the whole run alive until a full garbage collection.
        self.server = None
        self.sleep = _closed_sleep


def _content(request: httpx2.Request, planned: Planned, events: Callable[[httpx2.Request, Planned], Any]) -> Any:
    """The body: the JSON bytes, a whole stream's events as bytes, or ``events`` (a stream cut or ending in an
    error event, which the client must meet as it reads)."""
    if planned.events is None:
        return planned.body
    if planned.cut_after is None and planned.error_event is None:
        return b"".join(planned.events)
    return events(request, planned)


def _iter_events(request: httpx2.Request, planned: Planned) -> Iterator[bytes]:
    """The stream's bytes: its events in one chunk (the SDK's decoder splits them, as it does whatever chunks the
    network makes; a chunk per event cost the SDK a read each, some 15% of a streamed call), then its error event,
    or the cut."""
    events = planned.events or []
    stop = len(events) if planned.cut_after is None else planned.cut_after
    sent = b"".join(events[:stop]) + (planned.error_event or b"")
    if sent:
        yield sent
    if planned.error_event is None and planned.cut_after is not None:
        raise _fault(request, "cut")


class AsyncSimTransport(httpx2.AsyncBaseTransport):
    """Async transport: latency is a timer on the running loop (virtual inside a Sim)."""

    def __init__(self, server: SimServer, *, sleep: Callable[[float], None],
                 world: Callable[[float], None] = _no_world) -> None:
        self.server: SimServer | None = server
        self.sleep = sleep  # used when the running loop is not virtual
        self.world = world  # see SimTransport

    async def _wait(self, seconds: float) -> None:
        self.world(seconds)
        loop = asyncio.get_running_loop()
        if getattr(loop, "simloop_clock", None) is not None:
            await asyncio.sleep(seconds)
        else:
            self.sleep(seconds)
            await asyncio.sleep(0)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        server = self.server
        if server is None:
            raise RuntimeError(_CLOSED)
        body = await request.aread()
        planned = server.handle(request.method, request.url.path, _headers(request), body,
                                 thread=threading.get_ident())
        if planned.latency:
            await self._wait(planned.latency)
        if planned.raise_ is not None:
            if planned.raise_ == "timeout":
                await self._wait(_read_timeout(request))
            call = planned.record.call if planned.record is not None else 0
            server.deliver(planned)
            raise _fault(request, planned.raise_, call)
        server.deliver(planned)
        return _response(request, planned, _content(request, planned, _aiter_events))

    async def aclose(self) -> None:
        self.server = None  # see SimTransport.close
        self.sleep = _closed_sleep


def _closed_sleep(seconds: float) -> None:
    raise RuntimeError(_CLOSED)


async def _aiter_events(request: httpx2.Request, planned: Planned) -> AsyncIterator[bytes]:
    for chunk in _iter_events(request, planned):
        yield chunk
