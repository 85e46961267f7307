"""What the server hands a transport for one request (`Planned`), and the names every part of the server shares.

A leaf of `simloop.wire`: the parts that plan a reply (`failures`, `answer`, `openai`) and the server itself
build `Planned` values; the transports carry them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simloop.transcript import Response

__all__ = ["COUNT_TOKENS", "MESSAGES", "READ_HEADERS", "Budget", "InternalFailure", "Planned"]

#: The request headers `SimServer.handle` reads (lower-case): a transport may pass only these.
READ_HEADERS = ("x-stainless-retry-count", "x-api-key", "authorization", "anthropic-beta")
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
JSON = ("content-type", "application/json")
SSE = ("content-type", "text/event-stream; charset=utf-8")
# Headers that describe a recorded body's framing, not the answer: the transport sets its own.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "content-encoding", "connection"})


class InternalFailure(BaseException):
    """Carries a bug in simloop out through the SDK, which would otherwise retry it as a connection error."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"simloop internal error: {error!r}")
        self.error = error


@dataclass(slots=True)
class Planned:
    """What a transport must do for one request.

    Either ``raise_`` (``connection``, ``timeout`` or ``cut``: no complete
    response; ``crash``: the response is recorded, and the process dies before
    the client reads it), or a response with ``status`` and ``headers`` and a ``body``
    or SSE ``events``; ``cut_after`` ends a stream early with a transport
    error, ``error_event`` is sent after ``cut_after`` events instead.
    """

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    events: list[bytes] | None = None
    cut_after: int | None = None
    error_event: bytes | None = None
    raise_: str | None = None
    latency: float = 0.0
    record: Response | None = None


@dataclass(slots=True)
class Budget:
    """When simloop stops a loop that does not stop itself (the ``stops`` invariant)."""

    model_calls: int = 30
    requests: int = 128
