"""The scenario's tools as an MCP server, built on the official ``mcp`` SDK (the extra ``simloop[mcp]``).

A loop whose tools come from an MCP server gets the scenario's tools, faults and execution ledger
through one: every ``tools/call`` runs the tool as `simloop.Sim.run_tool` does (its faults injected,
its execution written to the transcript) and is bound to the tool_use it answers: exactly, when the
call names it in its ``_meta`` (``{"tool_use_id": "toolu_..."}``); otherwise the `simloop.tools.ToolBox`
binds it by tool name and input among the tool_use blocks the model issued and that no execution has
answered yet, as it does for any ``run_tool`` call without an id (docs/design.md, How an execution is
bound to its tool_use); a call nothing matches is recorded as unrequested, and ``no_rerun`` reports it.  A tool's exception is answered as an MCP tool error (``isError: true``, the
text ``"ExceptionType: message"``), the way MCP servers report failures to the client.

Where to reach it:

* in a `Sim`, in memory: ``sim.mcp_server()``, the SDK's ``MCPServer`` (`sdk_server`), which every in-process
  client takes as is: ``mcp.Client(sim.mcp_server())`` (its ``ClientSession``: ``client.session``),
  ``fastmcp.Client(sim.mcp_server())``, pydantic-ai's ``MCPToolset(sim.mcp_server())``;
* in a `Sim`, over streamable HTTP: ``sim.mcp_url``, a loopback port of the run's own (`HTTPServer`), for the
  same clients given the URL, and ``streamable_http_client(url)`` with a ``ClientSession``; the calls run on the
  loop's virtual-time event loop, as in memory;
* over stdio: ``simloop mcp --scenario FILE`` (`serve_stdio`);
* over streamable HTTP next to the Messages API: ``simloop serve`` (`HTTPServer`, on a port of its own,
  path ``/mcp``).

Example::

    async with fastmcp.Client(sim.mcp_server()) as client:   # or fastmcp.Client(sim.mcp_url)
        result = await client.call_tool("search", {"q": "refund policy"})
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import selectors
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from simloop._arrivals import ARRIVED, Arrivals
from simloop._runtime.realtime import REAL, RealTimeThread
from simloop._runtime.sockets import unsent
from simloop.errors import UsageError

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.server.mcpserver import MCPServer

__all__ = ["META_TOOL_USE_ID", "HTTPServer", "require_mcp", "sdk_server", "serve_stdio", "tool_server"]

#: ``call(name, arguments)``, with ``tool_use_id=ID`` when the MCP call names its tool_use and ``arrived=N`` when the
#: server stamps arrivals.
ToolCall = Callable[..., Awaitable[str]]
#: The key of an MCP call's ``_meta`` that names the tool_use it answers.
META_TOOL_USE_ID = "tool_use_id"
SERVER_NAME = "simloop"


def require_mcp() -> None:
    """Raise a `UsageError` saying which extra to install when the ``mcp`` SDK is missing."""
    try:
        import mcp.server  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(
            "simloop's MCP tools need the official MCP SDK: pip install 'simloop[mcp]'"
        ) from None


def tool_server(
    tools: Sequence[dict[str, Any]], call: ToolCall, *, name: str = SERVER_NAME, arrivals: Arrivals | None = None
) -> Server[Any]:
    """A low-level MCP ``Server`` listing ``tools`` (API tool schemas) and running each call with ``call``.

    ``call(name, arguments)`` returns the tool's text; what it raises is answered as an MCP tool error.  A call
    whose ``_meta`` holds ``tool_use_id`` passes it on: ``call(name, arguments, tool_use_id=ID)``.  With
    ``arrivals`` (a run's), each call also passes when its request arrived, ``arrived=N`` (a transcript position:
    `simloop._arrivals`): read from the message in memory (the server's read stream stamps it), else taken when
    the handler starts (over HTTP).
    """
    require_mcp()
    import mcp_types as types
    from mcp.server import Server, ServerRequestContext

    listed = [
        types.Tool(name=t["name"], description=t.get("description"), input_schema=dict(t["input_schema"]))
        for t in tools
    ]
    schemas = {t.name: t.input_schema for t in listed}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            uid = (params.meta or {}).get(META_TOOL_USE_ID)
            arguments = dict(params.arguments or {})
            kwargs: dict[str, Any] = {"tool_use_id": uid} if isinstance(uid, str) and uid else {}
            if arrivals is not None:
                stamped = ARRIVED.get()
                kwargs["arrived"] = stamped if stamped is not None else arrivals.now()
            text = await call(params.name, arguments, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a tool failure is the client's to see, as an MCP tool error
            return types.CallToolResult(
                content=[types.TextContent(text=f"{type(exc).__name__}: {exc}")], is_error=True
            )
        return types.CallToolResult(content=[types.TextContent(text=text)])

    if arrivals is None:
        return Server(name, get_tool_input_schema=schemas.get, on_list_tools=list_tools, on_call_tool=call_tool)
    stamping: Server[Any] = _stamping_server()(
        arrivals, name, get_tool_input_schema=schemas.get, on_list_tools=list_tools, on_call_tool=call_tool
    )
    return stamping


_STAMPING: list[type[Any]] = []


def _stamping_server() -> type[Any]:
    """The SDK's low-level ``Server`` whose in-memory connections stamp each request's arrival as the client sent it
    (`simloop._arrivals`): ``run(read, write, ...)``, the entry every in-memory transport uses, reads through
    `Arrivals.reader` (streamable HTTP serves its requests another way, stamped in the handler)."""
    if not _STAMPING:
        from mcp.server import Server

        class StampingServer(Server[Any]):
            def __init__(self, arrivals: Arrivals, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._simloop_arrivals = arrivals

            async def run(self, read_stream: Any, write_stream: Any, *args: Any, **kwargs: Any) -> None:
                await super().run(self._simloop_arrivals.reader(read_stream), write_stream, *args, **kwargs)

        _STAMPING.append(StampingServer)
    return _STAMPING[0]


_SDK_SERVER: list[type[Any]] = []


def sdk_server(lowlevel: Server[Any]) -> MCPServer[Any]:
    """``lowlevel`` as the SDK's high-level ``MCPServer``: what every in-memory MCP client takes.

    The SDK's ``mcp.Client``, FastMCP's ``Client`` (and so pydantic-ai's ``MCPToolset``) accept an ``MCPServer``
    instance and connect to it in memory through its low-level server; FastMCP refuses a bare low-level
    ``Server`` ("Could not infer a valid transport").  The returned server serves exactly ``lowlevel``
    (``server.lowlevel``); it has no tools, resources or prompts of its own (``add_tool`` and the like are
    not for it), and building it configures no logging (``MCPServer()`` would).
    """
    if not _SDK_SERVER:
        from mcp.server.mcpserver import MCPServer

        class SimloopMCPServer(MCPServer[Any]):
            """The scenario's tools for MCP clients in this process (see `simloop.mcp.sdk_server`)."""

            def __init__(self, lowlevel: Server[Any]) -> None:  # MCPServer.__init__ skipped: it configures logging
                self._lowlevel_server = lowlevel

            @property
            def lowlevel(self) -> Server[Any]:
                """The low-level ``mcp.server.Server`` (``server.run(read, write, ...)``, ``streamable_http_app()``)."""
                return self._lowlevel_server

            def __repr__(self) -> str:
                return f"<simloop MCP server {self.name!r}: the scenario's tools>"

        _SDK_SERVER.append(SimloopMCPServer)
    return _SDK_SERVER[0](lowlevel)  # type: ignore[no-any-return]


def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` on this process's stdin and stdout until the client closes them."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


class HTTPServer:
    """``server`` over MCP streamable HTTP on a loopback port of its own: ``url`` (``.../mcp``), ``close()``.

    It runs uvicorn on a `RealTimeThread` with its own event loop.  A request whose headers or body stop
    arriving for ``read_timeout`` seconds is dropped (uvicorn alone would wait for it for good), as an
    idle connection is.  The socket is bound and listening
    before the thread starts, so a client may connect as soon as ``url`` is known (the kernel queues the
    connection until the server accepts it): there is nothing to wait for.

    `busy` says whether the server has work in hand (a connection to accept, bytes to read, a request
    being handled, an answer on its way): a virtual-time event loop whose only sockets are connections to
    this server waits for it while it is busy, and otherwise jumps to its next timer as if they were not
    there (`simloop._runtime.clock`; ``sim.mcp_url``).
    """

    def __init__(
        self, server: Server[Any], *, host: str = "127.0.0.1", port: int = 0, read_timeout: float = 30.0
    ) -> None:
        import uvicorn

        app = server.streamable_http_app(stateless_http=True, json_response=True, host=host)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._socket.listen(128)
        bound = self._socket.getsockname()
        self.port: int = int(bound[1])
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else str(bound[0])
        self.url = f"http://{shown}:{bound[1]}/mcp"
        config = uvicorn.Config(
            app, log_level="error", access_log=False, lifespan="on", timeout_graceful_shutdown=1,
            http=_timed_protocol(read_timeout),
        )
        self._uvicorn = uvicorn.Server(config)
        self._selector = _WatchedSelector()
        self._closed = False
        self._thread = RealTimeThread(target=self._serve, name="simloop-mcp-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        loop = asyncio.SelectorEventLoop(self._selector)
        try:
            loop.run_until_complete(self._uvicorn.serve(sockets=[self._socket]))
        finally:
            loop.close()

    def busy(self) -> bool:
        """Whether the server has work in hand: called from another thread, it looks at the server's sockets in
        the order work moves through them (a connection to accept or bytes to read, a request being handled,
        an answer not yet received), so a request cannot slip between two looks unseen (Linux; elsewhere it
        says busy while the server runs)."""
        if self._closed or not self._thread.is_alive():
            return False
        if not sys.platform.startswith("linux"):
            return True
        listening = self._socket.fileno()
        # (the dict's values copied in one C call: the server's thread may change the map meanwhile)
        keys = list(self._selector._fd_to_key.values()) if not self._selector.closed else []  # type: ignore[attr-defined]
        if any(key.events & selectors.EVENT_WRITE for key in keys):
            return True  # an answer waits for room in the socket's buffer
        poll = select.poll()
        for fd in {listening, *(key.fd for key in keys)}:
            poll.register(fd, select.POLLIN)
        try:
            if poll.poll(0):
                return True  # a connection to accept, a request to read, a wake-up from another thread
        except OSError:
            return True
        if not self._selector.blocked:
            return True  # handling a request (or starting)
        return any(unsent(key.fd) for key in keys if key.fd != listening)

    def settle(self, timeout: float) -> None:
        """Wait (up to ``timeout`` real seconds) until the server has taken in every request whose bytes have reached
        it: called when Stop fires on the loop's thread (`simloop._arrivals`), so that a request the loop sent before
        the Stop reaches its handler, and is stamped, while the loop can send nothing new.  Settled: two looks in a
        row find no connection to accept and no bytes to read, with the server's loop blocked in ``select`` (its
        handlers are then waiting on the loop, or done).  Linux only; elsewhere it returns at once."""
        if self._closed or not self._thread.is_alive() or not sys.platform.startswith("linux"):
            return
        deadline = REAL.monotonic() + timeout  # real time: the loop's thread is blocked, its clock stands still
        calm = 0
        while calm < 2 and REAL.monotonic() < deadline:
            calm = calm + 1 if self._taken_in() else 0
            if calm < 2:
                REAL.sleep(0.0005)

    def _taken_in(self) -> bool:
        """One look: nothing to accept or read on the server's sockets, then its loop blocked (in that order: the
        order work moves through them)."""
        keys = list(self._selector._fd_to_key.values()) if not self._selector.closed else []  # type: ignore[attr-defined]
        poll = select.poll()
        for fd in {self._socket.fileno(), *(key.fd for key in keys)}:
            poll.register(fd, select.POLLIN)
        try:
            if any(events & select.POLLIN for _, events in poll.poll(0)):  # (a closed fd's POLLNVAL is no work)
                return False
        except OSError:
            return True  # (a socket closed under the look: the server is shutting down)
        return self._selector.blocked

    def serves_here(self) -> bool:
        """Whether the calling thread is the server's own (a sync client's call runs there)."""
        return threading.current_thread() is self._thread

    def close(self) -> None:
        """Stop serving (idempotent)."""
        self._closed = True
        self._uvicorn.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()

    def __repr__(self) -> str:
        return f"<simloop.mcp.HTTPServer {self.url}>"


class _WatchedSelector(selectors.DefaultSelector):
    """The server loop's selector, telling other threads whether the loop is blocked waiting (``blocked``): asyncio
    blocks only when no callback is ready."""

    blocked = False
    closed = False

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:
            self.blocked = True
        try:
            return super().select(timeout)
        finally:
            self.blocked = False

    def close(self) -> None:
        self.closed = True
        super().close()


def _timed_protocol(read_timeout: float) -> type[Any]:
    """uvicorn's h11 protocol, closing a connection whose request stops arriving for ``read_timeout`` seconds.

    uvicorn times out only the idle time between requests; a client that sends half a request line,
    half the headers or half the body would hold its connection (and a file descriptor) for good.
    The timer is re-armed by every read, as the API port's per-read timeout is.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _read_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            if sock is not None:  # an answer's head and body leave at once, not 40 ms apart (Nagle and delayed ACK)
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _arm(self) -> None:
            self._disarm()
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self._read_timer = self.loop.call_later(read_timeout, self._expire)

        def _expire(self) -> None:
            self._read_timer = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self.transport.close()  # the app, if it was reading the body, sees a disconnect

    return TimedH11Protocol
