"""An in-memory FastMCP client transport to a low-level MCP ``Server`` (what pydantic-ai's ``MCPToolset`` takes).

FastMCP's own in-memory transport takes a FastMCP or an SDK ``MCPServer``, not the SDK's low-level
``Server`` that `simloop.mcp.tool_server` builds; this is the same few lines for that one: the server
runs as a task on the caller's event loop (in a `Sim`, the virtual-time one), joined by memory streams.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from fastmcp.client.transports.base import ClientTransport, SessionKwargs, TransportOptions
from mcp import ClientSession
from mcp.server import Server
from mcp.shared.memory import create_client_server_memory_streams
from typing_extensions import Unpack

__all__ = ["InMemory"]


class InMemory(ClientTransport):
    """Connects a FastMCP client to ``server`` in this process."""

    def __init__(self, server: Server[Any]) -> None:
        self.server = server

    @contextlib.asynccontextmanager
    async def connect_session(
        self, *, transport_options: TransportOptions | None = None, **session_kwargs: Unpack[SessionKwargs]
    ) -> AsyncGenerator[ClientSession, None]:
        options = transport_options or TransportOptions()
        server = self.server
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(lambda: server.run(server_streams[0], server_streams[1], server.create_initialization_options()))
            try:
                async with options.session_class(
                    read_stream=client_streams[0], write_stream=client_streams[1], **session_kwargs
                ) as session:
                    yield session
            finally:
                tg.cancel_scope.cancel()

    def __repr__(self) -> str:
        return f"<simloop InMemory MCP transport to {self.server.name!r}>"
