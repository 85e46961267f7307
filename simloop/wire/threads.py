"""Message threads (the beta the SDK's tool runner uses by default): a ``continue`` request stands for its whole
history, kept per reply id.  (The Responses API's ``previous_response_id`` chains are
`simloop.protocol.openai_responses.ResponseStore`'s.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from simloop.protocol.validate import Rejection
from simloop.wire.bodies import _json_items

__all__ = ["MAX_THREADS", "Expanded", "MessageThreads"]

#: Threads a run (or `simloop serve`) keeps, as many as the Responses API's stored responses: past it the oldest
#: is dropped, and a continuation of it gets ``thread_not_found`` (a client cannot grow the server without bound).
MAX_THREADS = 256

#: A request as it stands: the body it means (its thread's history and fields with it), the bytes of that
#: history the body does not carry, and the thread's refusal if any.
Expanded = tuple[dict[str, Any], int, Rejection | None]


@dataclass(slots=True)
class _Thread:
    messages: list[Any]
    fields: dict[str, Any]
    continued: bool = False
    json_items: int = -1  # sum of the compact-JSON lengths of the messages (-1: not known yet)


class MessageThreads:
    """The run's message threads, by the id of the reply that ends each (the newest `MAX_THREADS`)."""

    __slots__ = ("_threads",)

    def __init__(self) -> None:
        self._threads: dict[str, _Thread] = {}

    def expand(self, body: dict[str, Any]) -> Expanded:
        """The conversation ``body`` stands for (itself unless it continues a thread)."""
        thread = body.get("thread")
        if not isinstance(thread, dict) or thread.get("type") != "continue":
            return body, 0, None
        prev = thread.get("previous_message_id")
        stored = self._threads.get(prev) if isinstance(prev, str) else None
        if stored is None:
            return body, 0, _thread_error("thread_not_found", f"thread.previous_message_id: no thread holds message {prev}")
        if stored.continued:
            return body, 0, _thread_error(
                "thread_already_continued", f"thread.previous_message_id: the thread was already continued from {prev}"
            )
        for name in ("system", "tools"):
            if name in body:
                return body, 0, _thread_error(
                    "thread_unsupported_request", f"{name}: cannot be changed when continuing a thread"
                )
        new = body.get("messages")
        if type(new) is not list:
            # Nothing to append: the validator answers the body as sent ("messages: Field required" or
            # "messages: Input should be a valid list"), as the real API does before looking at the thread.
            return body, 0, None
        effective = {**stored.fields, **{k: v for k, v in body.items() if k != "messages"}}
        effective["messages"] = [*stored.messages, *new]
        if stored.json_items < 0:
            stored.json_items = _json_items(stored.messages)
        # len(json.dumps(stored.messages, separators=(",", ":"))): brackets, items, commas; and the stored
        # system and tools, which the continuation does not resend but the model reads
        history_bytes = 2 + stored.json_items + max(0, len(stored.messages) - 1)
        if stored.fields:
            history_bytes += len(to_json(stored.fields))
        return effective, history_bytes, None

    def store(self, body: dict[str, Any], effective: dict[str, Any], message: dict[str, Any]) -> None:
        """Keep the thread ``message`` (the reply to ``body``, standing for ``effective``) ends, when asked to."""
        thread = body.get("thread")
        if not isinstance(thread, dict) or message.get("stop_reason") == "refusal":
            return
        if thread.get("type") == "continue":
            prev = thread.get("previous_message_id")
            if isinstance(prev, str) and prev in self._threads:
                self._threads[prev].continued = True
        fields = {k: v for k, v in effective.items() if k in ("system", "tools")}
        reply = {"role": "assistant", "content": message["content"]}
        messages = [*effective["messages"], reply]
        json_items = -1
        if thread.get("type") == "continue":
            # The history's size grows with what this request added: no need to measure it all again.
            prev = thread.get("previous_message_id")
            parent = self._threads.get(prev) if isinstance(prev, str) else None
            if parent is not None and parent.json_items >= 0 and messages[: len(parent.messages)] == parent.messages:
                json_items = parent.json_items + _json_items(messages[len(parent.messages) :])
        self._threads[message["id"]] = _Thread(messages=messages, fields=fields, json_items=json_items)
        while len(self._threads) > MAX_THREADS:
            del self._threads[next(iter(self._threads))]


def _thread_error(code: str, message: str) -> Rejection:
    return Rejection(status=400, type="invalid_request_error", message=message, details={"error_code": code})
