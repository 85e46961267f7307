"""The OpenAI wires (Chat Completions and Responses) in front of the one world.

Each request on an OpenAI route is read by its wire (`OPENAI_WIRES`), which holds the wire's own checks, the
Messages request it stands for (what the policy, faults, transcript and invariants see) and the rendering of
the answer in its own shape; `route` and `is_openai_path` say which paths are the OpenAI API's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from simloop.protocol import openai_chat, openai_responses
from simloop.protocol.render import Turn
from simloop.protocol.validate import Rejection
from simloop.transcript import Request, Response
from simloop.wire.planned import JSON as _JSON
from simloop.wire.planned import SSE as _SSE
from simloop.wire.planned import Planned

__all__ = ["OPENAI_WIRES", "is_openai_path", "route"]


class _Chat:
    """One Chat Completions request: what it stands for in the Messages shape, and how its answer is rendered.

    The world (policy, faults, transcript, invariants) sees ``internal``; the loop sees the Chat Completions
    wire (`simloop.protocol.openai_chat`).  ``rejection`` is the real API's 400 for the request as sent, if any.
    """

    __slots__ = ("created", "include_usage", "internal", "model", "rejection")

    @classmethod
    def read(cls, sent: Any, now: float) -> _Chat:
        """The request body as sent (parsed JSON, or None), at virtual second ``now``."""
        return cls(sent, openai_chat.validate_chat(sent), now)

    def __init__(self, sent: Any, rejection: Rejection | None, now: float) -> None:
        self.rejection = rejection
        self.internal: Any = sent
        if type(sent) is dict:
            try:  # a request refused for its pairing still stands for a conversation: the invariants read it
                self.internal = openai_chat.to_internal(sent)
            except (KeyError, TypeError, AttributeError):
                self.internal = sent
        self.model = str(sent.get("model")) if type(sent) is dict else "gpt-4o"
        options = sent.get("stream_options") if type(sent) is dict else None
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True
        self.created = openai_chat.CREATED_EPOCH + int(now)

    def truncates(self) -> bool:
        """Whether the API drops the oldest input to fit the model's window instead of refusing the request."""
        return False

    def planned(
        self, turn: Turn, message: dict[str, Any], rec: Response, request_id: str, latency: float, *, stream: bool,
    ) -> Planned:
        headers = [_JSON, ("x-request-id", request_id)]
        if stream:
            events = openai_chat.render_chunks(turn, message, model=self.model, created=self.created,
                                               include_usage=self.include_usage)
            return Planned(headers=[_SSE, ("x-request-id", request_id)], events=events, latency=latency, record=rec)
        payload = openai_chat.render_completion(turn, message, model=self.model, created=self.created)
        return Planned(headers=headers, body=to_json(payload), latency=latency, record=rec)

    def broken_stream(
        self, partial: Turn, message_id: str, rec: Response, request_id: str, latency: float, *, error: bool,
    ) -> Planned:
        """A stream that starts well and then breaks: cut, or an error line (``stream_error``)."""
        cut_turn = Turn(content=partial.content, stop_reason=None)
        events = openai_chat.render_chunks(cut_turn, {"id": message_id, "usage": {}}, model=self.model,
                                           created=self.created)
        rec.status = 200
        planned = Planned(headers=[_SSE, ("x-request-id", request_id)], events=events, cut_after=min(3, len(events)),
                          latency=latency, record=rec)
        if error:
            planned.error_event = openai_chat.stream_error_event()
            rec.error = json.loads(planned.error_event[6:])
        return planned

    def error(self, req: Request, status: int, request_id: str, *, message: str) -> Planned:
        body = openai_chat.chat_error_body(status, message=message)
        rec = Response(t=0.0, index=req.index, call=req.call, status=status, kind="rejected",
                       error=json.loads(body), fault="http")
        return Planned(status=status, headers=openai_chat.chat_error_headers(status, request_id=request_id),
                       body=body, record=rec)

    def reject(self, req: Request, rejection: Rejection, request_id: str) -> Planned:
        status, body, headers = openai_chat.chat_error(rejection.status, rejection=rejection, request_id=request_id,
                                                       model=self.model)
        rec = Response(t=0.0, index=req.index, call=req.call, status=status, kind="rejected",
                       error=json.loads(body), fault="http")
        rec.rejection = {"status": status, "type": rejection.type, "message": rejection.message,
                         "path": rejection.path}
        return Planned(status=status, headers=headers, body=body, record=rec)

    def context_error(self, tokens: str, limit: str) -> tuple[str, str]:
        """The context window's 400 text and ``param`` on this wire."""
        return ((f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                f"{tokens} tokens. Please reduce the length of the messages."), "messages")

    def converted(self, planned: Planned, request_id: str) -> Planned:
        """An error the one world decided (a scripted fault, the context window), in this wire's envelope."""
        rec = planned.record
        if planned.status < 400 or planned.raise_ is not None or rec is None:
            return planned
        retry_after = next((float(v) for k, v in planned.headers if k.lower() == "retry-after"), None)
        rejection = None
        if rec.rejection is not None and str(rec.rejection.get("message", "")).startswith("prompt is too long"):
            tokens = str(rec.rejection["message"]).split(": ", 1)[1].split(" ", 1)[0]
            limit = str(rec.rejection["message"]).rsplit("> ", 1)[1].split(" ", 1)[0]
            text, param = self.context_error(tokens, limit)
            rejection = Rejection(400, "invalid_request_error", text, {"param": param,
                                                                       "code": "context_length_exceeded"}, param)
            rec.rejection = {**rec.rejection, "message": text}
        status, body, headers = openai_chat.chat_error(planned.status, rejection=rejection, request_id=request_id,
                                                       model=self.model, retry_after=retry_after)
        rec.status = status
        rec.error = json.loads(body)
        return Planned(status=status, headers=headers, body=body, latency=planned.latency, record=rec)


class _Responses(_Chat):
    """One Responses API request (`simloop.protocol.openai_responses`): the conversation it stands for (its
    ``previous_response_id`` chain, then its ``input``) in the Messages shape, and its answer rendered as a
    ``response`` or its events.  A response the loop did not send with ``store: false`` is kept for chaining."""

    __slots__ = ("body", "items", "stored")

    def __init__(self, sent: Any, stored: openai_responses.ResponseStore, now: float) -> None:
        items, rejection = openai_responses.expand(sent, stored)
        if rejection is None:
            rejection = openai_responses.validate_responses(sent, items)
        super().__init__(None, rejection, now)
        self.body: dict[str, Any] = sent if type(sent) is dict else {}
        self.items = items
        self.stored = stored
        self.internal = sent
        if type(sent) is dict:
            try:  # a request refused for its pairing still stands for a conversation: the invariants read it
                self.internal = openai_responses.to_internal(sent, items)
            except (KeyError, TypeError, AttributeError):
                self.internal = sent
            self.model = openai_responses.model_of(sent)
        self.created = openai_responses.created_at(now)

    def planned(
        self, turn: Turn, message: dict[str, Any], rec: Response, request_id: str, latency: float, *, stream: bool,
    ) -> Planned:
        payload = openai_responses.render_response(turn, message, self.body, model=self.model, created=self.created)
        if self.body.get("store", True) is not False:  # kept bounded: its own input and output, measured
            size = len(to_json(self.body.get("input"))) + len(to_json(payload["output"]))
            self.stored.keep(payload["id"], [*self.items, *payload["output"]], size, self.body.get("previous_response_id"))
        if stream:
            events = openai_responses.render_events(turn, message, self.body, model=self.model, created=self.created)
            return Planned(headers=[_SSE, ("x-request-id", request_id)], events=events, latency=latency, record=rec)
        return Planned(headers=[_JSON, ("x-request-id", request_id)], body=to_json(payload), latency=latency,
                       record=rec)

    def broken_stream(
        self, partial: Turn, message_id: str, rec: Response, request_id: str, latency: float, *, error: bool,
    ) -> Planned:
        """A stream that starts well and then breaks: cut, or an ``error`` event (``stream_error``)."""
        cut_turn = Turn(content=partial.content, stop_reason=None)
        events = openai_responses.render_events(cut_turn, {"id": message_id, "usage": {}}, self.body,
                                                model=self.model, created=self.created)
        rec.status = 200
        cut = min(5, len(events))
        planned = Planned(headers=[_SSE, ("x-request-id", request_id)], events=events, cut_after=cut,
                          latency=latency, record=rec)
        if error:
            planned.error_event = openai_responses.stream_error_event(cut)
            rec.error = json.loads(planned.error_event.split(b"data: ", 1)[1])
        return planned

    def context_error(self, tokens: str, limit: str) -> tuple[str, str]:
        return openai_responses.CONTEXT_EXCEEDED, "input"

    def truncates(self) -> bool:
        """``truncation: "auto"``: the Responses API drops items from the beginning of the conversation to fit the
        window (the default, ``disabled``, refuses the request with a 400)."""
        return self.body.get("truncation") == "auto"


#: The OpenAI wires, by route: a request there is read by its wire (``read(body, stored, now)``: ``stored``, the
#: run's kept responses by id, for ``previous_response_id``), which holds the wire's own checks, the Messages
#: request it stands for (the one world) and its rendering of the answer (`_Chat`'s methods).
OPENAI_WIRES: dict[str, Callable[[Any, openai_responses.ResponseStore, float], _Chat]] = {
    openai_chat.CHAT_COMPLETIONS: lambda sent, stored, now: _Chat.read(sent, now),
    openai_responses.RESPONSES: _Responses,
}


#: The path prefixes only the OpenAI API has (with and without ``/v1``; ``/v1/models`` is both APIs'): what is not
#: served there is answered in its envelope.
_OPENAI_PREFIXES = ("/v1/chat/", "/v1/responses", "/v1/completions", "/v1/embeddings",
                    "/chat/", "/responses", "/completions", "/embeddings")


def is_openai_path(path: str) -> bool:
    """Whether ``path`` is one of the OpenAI API's (a route of its wires, or one beside them such as
    ``GET /v1/responses/ID``): its errors use the OpenAI envelope, which the ``openai`` SDKs read."""
    return path.split("?", 1)[0].startswith(_OPENAI_PREFIXES)


def route(path: str) -> str:
    """The route a request path names: an OpenAI wire's path also without its ``/v1`` prefix.

    The ``openai`` SDKs append ``/chat/completions`` to their base URL, whose default ends in ``/v1``: pointed
    at ``http://127.0.0.1:PORT/v1`` they send ``/v1/chat/completions``, and at ``http://127.0.0.1:PORT``
    ``/chat/completions``.  Both reach the same route (recorded as ``/v1/...``).  The Messages API's paths
    always carry ``/v1`` (the ``anthropic`` SDKs write it), so they have no alias.
    """
    if path.startswith("/v1/") or "/v1" + path not in OPENAI_WIRES:
        return path
    return "/v1" + path
