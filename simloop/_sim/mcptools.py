"""The run's tools over MCP (`McpTools`): in memory (``sim.mcp_server()``) and over streamable HTTP (``sim.mcp_url``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from simloop._arrivals import Arrivals
from simloop._runtime.clock import VirtualClock
from simloop._runtime.halt import LoopHalted
from simloop._runtime.netguard import simloops_own
from simloop._runtime.process import Run
from simloop._runtime.watchdog import Watchdog
from simloop.errors import UsageError
from simloop.tools import ToolBox

if TYPE_CHECKING:
    import mcp.server.mcpserver

__all__ = ["McpTools"]


class McpTools:
    """The scenario's tools as MCP servers on one run's world: each call runs like ``sim.arun_tool``.

    ``proc`` is the run's share of the process while the run lasts (`run_began` / `run_ended`): the HTTP server
    lives as long, closed with the run's closers.
    """

    __slots__ = ("_arrivals", "_clock", "_tools", "_watchdog", "http", "proc")

    def __init__(self, tools: ToolBox, clock: VirtualClock, watchdog: Watchdog, arrivals: Arrivals) -> None:
        self._tools, self._clock, self._watchdog, self._arrivals = tools, clock, watchdog, arrivals
        self.proc: Run | None = None
        self.http: Any = None  # the HTTP server, while the run lasts

    def server(self, schemas: list[dict[str, Any]]) -> mcp.server.mcpserver.MCPServer[Any]:
        """An in-memory MCP server of the tools ``schemas`` describes."""
        with self._watchdog.paused():  # simloop's own set-up (a first import of the MCP SDK), not the loop's time
            from simloop.mcp import sdk_server, tool_server

            return sdk_server(tool_server(schemas, self._tools.arun, arrivals=self._arrivals))

    def run_began(self, proc: Run) -> None:
        self.proc = proc

    def run_ended(self) -> None:
        self.proc = self.http = None

    def url(self, schemas: list[dict[str, Any]]) -> str:
        """The URL of the tools over MCP streamable HTTP, the server started on first use (during the run only)."""
        if self.http is not None:
            return self.http.url  # type: ignore[no-any-return]
        proc = self.proc
        if proc is None:
            raise UsageError(
                "sim.mcp_url serves the tools while the run lasts: read it inside the drive (the server starts "
                "then and stops when the run ends); outside a run, use sim.mcp_server() or `simloop serve --mcp`"
            )
        with self._watchdog.paused(), simloops_own():  # simloop's own set-up, not the loop's time or network
            from simloop._runtime.netguard import allow_own_port
            from simloop.mcp import HTTPServer, tool_server

            server = HTTPServer(tool_server(schemas, self.call, arrivals=self._arrivals))
        forget = allow_own_port(server.port)
        clock, arrivals = self._clock, self._arrivals
        clock.own_servers.append(server)
        arrivals.servers.append(server)

        def close() -> None:
            clock.own_servers.remove(server)
            arrivals.servers.remove(server)
            forget()
            server.close()

        proc.closers.append(close)
        self.http = server
        return server.url

    async def call(
        self, name: str, input: dict[str, Any], *, tool_use_id: str | None = None, arrived: int | None = None
    ) -> str:
        """One MCP call over HTTP (on the server's thread): run on the loop's virtual-time event loop, as in memory;
        with no single such loop running (a sync client), run here, its latency spent on the virtual clock.

        On the loop, the tool starts only once the loop has run what else was due at this instant (`settled`): the
        client's other requests made ready with this one reach the server, and are stamped, before this one's
        zero-time answer can fire a Stop (in production they are all sent before any is answered)."""
        loop = self._clock.running_loop()
        try:
            if loop is None:
                return self._tools.run(name, input, tool_use_id=tool_use_id, arrived=arrived)

            async def call() -> str:
                await loop.settled()
                return await self._tools.arun(name, input, tool_use_id=tool_use_id, arrived=arrived)

            future = asyncio.run_coroutine_threadsafe(call(), loop)
            return await asyncio.wrap_future(future)
        except LoopHalted as halted:  # recorded when raised; the loop sees a tool error, its next call is halted
            raise RuntimeError(f"simloop stopped the run: {halted}") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if loop is not None and future.cancelled() and task is not None and not task.cancelling():  # the loop ended
                raise RuntimeError(f"{name}: cancelled, the loop's event loop ended before the tool finished") from None
            raise
