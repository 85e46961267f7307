"""`Arrivals`: when each MCP ``tools/call`` request reached a run's MCP servers, as a place in the transcript.

A client that sends a reply's calls together (pydantic-ai's ``MCPToolset``) has sent the second before Stop fires
in the first; a loop that runs its calls one after another and ignores Stop sends the second after.  When the calls
take no time the two transcripts are the same but for this: where the second request arrived.  The ``abort``
invariant forgives a tool execution whose request arrived before the Stop (the loop had sent it; it could not have
known), and holds one whose request arrived after it (docs/design.md, Abort).

"Arrived" means the client had sent it, never only that the server got round to reading it:

* in memory, the request stamps itself when the server's read stream yields it (`Arrivals.reader`), and a Stop marks
  what is still waiting in the client-to-server pipe at that moment (its buffer, its blocked senders, a message
  already handed to the server's pending read) as arrived before it: those were written before the Stop;
* over HTTP (``sim.mcp_url``), a request stamps itself when the server's handler takes it, and a Stop fired on
  the loop's thread holds the stamp at the Stop's place while the server takes in every request whose bytes
  have reached it (`simloop.mcp.HTTPServer.settle`): the loop, blocked meanwhile, can have sent nothing new.  Each
  call starts only once the loop has settled (`simloop._runtime.eventloop.VirtualTimeEventLoop.settled`), so the requests
  a client made ready with it (a second one on a new connection) have reached the server before it runs.

A request still inside its client's ``send`` when Stop fires (not yet written to the pipe) counts as sent after.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol, Self

__all__ = ["ARRIVED", "Arrivals"]

#: The arrival of the ``tools/call`` request a handler serves (in memory: set in the sender's context by the reader).
ARRIVED: contextvars.ContextVar[int | None] = contextvars.ContextVar("simloop_mcp_arrived", default=None)


class _Settles(Protocol):
    def settle(self, timeout: float) -> None: ...

    def serves_here(self) -> bool: ...


class Arrivals:
    """A run's arrival clock: ``now()`` is the transcript position a request arriving now gets (``len(events)``:
    it arrived after those events were recorded); `stop` marks a Stop."""

    def __init__(self, position: Callable[[], int]) -> None:
        self._position = position
        self._held: int | None = None
        self._readers: weakref.WeakSet[_Reader] | None = None  # (made with the first reader: most runs have none)
        #: the run's HTTP MCP servers (``sim.mcp_url``), settled at each Stop
        self.servers: list[_Settles] = []

    def now(self) -> int:
        """Where a request arriving now stands in the transcript (the Stop's place while a Stop settles the servers)."""
        held = self._held
        return held if held is not None else self._position()

    @contextlib.contextmanager
    def stop(self) -> Iterator[int]:
        """Around recording a Stop (the `AbortEvent` appended inside, at the position yielded): every request the
        client had sent by then is stamped no later than that position."""
        at = self._position()
        self._held = at  # (set before the event is appended: a stamp taken on another thread meanwhile is <= at)
        try:
            for reader in list(self._readers or ()):
                reader.hold(at)
            yield at
            for server in list(self.servers):
                if not server.serves_here():  # (a sync client's call runs on the server's thread: nothing to wait for)
                    server.settle(2.0)
        finally:
            self._held = None

    def reader(self, stream: Any) -> Any:
        """``stream`` (an in-memory server's read stream) stamping each message it yields (`ARRIVED`)."""
        reader = _Reader(stream, self)
        if self._readers is None:
            self._readers = weakref.WeakSet()
        self._readers.add(reader)
        return reader


class _Reader:
    """A server's read stream that puts each message's arrival in the sender's context (``last_context``, which the
    SDK's dispatcher runs the handler in)."""

    def __init__(self, inner: Any, arrivals: Arrivals) -> None:
        self._inner = inner
        self._arrivals = arrivals
        # fixed by a Stop they were waiting at: the message handed to the read in progress, and those in the pipe
        # (by identity, held: a blocked sender cancelled later never delivers its message, and takes no other's stamp)
        self._handed: int | None = None
        self._early: dict[int, tuple[object, int]] = {}
        self._reading = False
        self.last_context: contextvars.Context | None = None

    def hold(self, at: int) -> None:
        """Stop at ``at``: the messages waiting in the pipe arrived before it."""
        handed, waiting = _waiting(self._inner)
        if handed and self._reading:
            self._handed = at if self._handed is None else min(self._handed, at)
        for message in waiting:
            kept = self._early.get(id(message))
            self._early[id(message)] = (message, at if kept is None else min(kept[1], at))

    async def receive(self) -> Any:
        self._reading = True
        try:
            item = await self._inner.receive()
        finally:
            self._reading = False
        early = self._early.pop(id(item), None)
        arrived = self._handed if self._handed is not None else early[1] if early else self._arrivals.now()
        self._handed = None
        sender = getattr(self._inner, "last_context", None)
        ctx = sender.copy() if sender is not None else contextvars.copy_context()
        ctx.run(ARRIVED.set, arrived)
        self.last_context = ctx
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _waiting(stream: Any) -> tuple[bool, list[object]]:
    """What waits in an in-memory pipe for its reader: whether a message was already handed to a pending read, and
    the messages in the buffer and of blocked senders (anyio's memory object stream; nothing for another kind)."""
    inner = getattr(stream, "_inner", stream)  # the SDK's ContextReceiveStream wraps anyio's stream
    state = getattr(inner, "_state", None)
    if state is None:
        return False, []
    handed = any(event.is_set() for event in (getattr(inner, "_waiters", None) or ()))
    queued = [*getattr(state, "buffer", ()), *getattr(state, "waiting_senders", {}).values()]
    # (the SDK's pipe carries (sender's context, message) pairs: the reader gets the message)
    return handed, [m[1] if isinstance(m, tuple) and len(m) == 2 and isinstance(m[0], contextvars.Context) else m
                    for m in queued]
