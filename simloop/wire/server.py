"""The simulated Messages API: routes, threads, usage, faults, and the transcript.

`SimServer.handle` turns one HTTP request into a `Planned` response (what
to send, after how much virtual latency, or which transport fault to raise).
It knows nothing of httpx: the transports in `simloop.wire.transport` carry
the plan out, sync or async, and call `deliver` when the reply is on the wire.

Routes (on the URL path only; ``?beta=true`` is ignored, as by the real API):
``POST /v1/messages`` (JSON or SSE) and ``POST /v1/messages/count_tokens``; the OpenAI wires in
`OPENAI_WIRES` (``POST /v1/chat/completions``), each also without its ``/v1`` (`route`: what the ``openai``
SDKs send when their base URL lacks it).
Message threads (the beta the SDK's tool runner uses by default) are kept
per reply id, so a ``continue`` request stands for its whole history.

Why the hot path is incremental: a loop resends its whole history on every
call, so parsing and validating each body from scratch costs time quadratic in
the conversation's length, and it is most of the simulator's cost per call.
`_BodyParser` parses only the bytes a request added to the previous one's
messages and shares the unchanged history (the same objects, as message
threads already do); `ConversationValidator` resumes its walk over that
history.  Both give exactly what a full parse and a full validation give.
Request bodies are therefore read-only: the transcript and the model policies
see shared objects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json, to_json

from simloop.models import Ids, ModelPolicy, ModelRequest, RecordedError, _turn, turn_from_reply
from simloop.protocol import openai_chat, openai_responses
from simloop.protocol.errors import error_body, error_headers
from simloop.protocol.render import Turn, render_error_event, render_message, render_message_json, render_sse
from simloop.protocol.validate import (
    IMAGE_TOKENS,
    ConversationValidator,
    Rejection,
    context_window,
    opaque_bytes,
    prompt_too_long,
    validate_count_tokens_request,
)
from simloop.scenario import Reply
from simloop.transcript import SUBRUN, Request, Response, Transcript

__all__ = [
    "OPENAI_WIRES", "READ_HEADERS", "Budget", "InternalFailure", "Planned", "SimServer", "estimate_tokens",
    "request_tokens", "route",
]

#: The request headers `SimServer.handle` reads (lower-case): a transport may pass only these.
READ_HEADERS = ("x-stainless-retry-count", "x-api-key", "authorization", "anthropic-beta")
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
_JSON = ("content-type", "application/json")
_SSE = ("content-type", "text/event-stream; charset=utf-8")
# Headers that describe a recorded body's framing, not the answer: the transport sets its own.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "content-encoding", "connection"})


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


class _BodyParser:
    """Parses the bodies of one conversation's requests, sharing the unchanged history.

    It keeps the previous ``/v1/messages`` body, its parse and where its ``messages`` array ends.
    When the next body is those same bytes with messages added at the end of that array (what
    the SDK sends as a loop appends to its history), only the added messages are parsed; the
    history and every other field are the previous parse's objects.  Any other body gets a full
    parse.  The result always equals ``from_json(body)``; invalid JSON raises its ValueError.
    """

    __slots__ = ("_doc", "_end", "_raw", "last", "settings_bytes")

    def __init__(self) -> None:
        self._raw = b""  # the previous body, once located
        self._doc: dict[str, Any] = {}  # its parse
        self._end = -1  # offset in _raw of the `]` closing _doc["messages"]; -1: nothing to extend
        self.last: Any = None  # the latest parse returned
        #: `_settings_bytes` of ``last``, once worked out (-1: not yet).  An extended body has the previous
        #: one's head and tail bytes, so the same settings (the same objects): the count is kept, not redone.
        self.settings_bytes = -1

    def parse(self, body: bytes) -> Any:
        if self._end >= 0:
            doc = self._extend(body)
            if doc is not None:
                self.last = doc
                return doc
        parsed = from_json(body)
        self.last, self.settings_bytes = parsed, -1
        self._locate(body, parsed)
        return parsed

    def _extend(self, body: bytes) -> dict[str, Any] | None:
        raw, end = self._raw, self._end
        tail = len(raw) - end  # the `]` closing messages, and everything after it
        new_end = len(body) - tail
        if new_end == end and body == raw:  # a retry: the same document again
            doc = dict(self._doc)
            doc["messages"] = list(doc["messages"])
            self._doc = doc
            return doc
        # body == raw[:end] + "," + N + raw[end:]: the same document with N's values appended to messages
        # (compared in place: slicing would copy both whole histories on every call)
        view = memoryview(raw)
        if (new_end <= end + 1 or body[end] != 0x2C or not body.startswith(view[:end])
                or not body.endswith(view[end:])):
            return None
        try:  # the added values as one array: one copy of them (concatenating would copy them twice)
            added = from_json(b"".join((b"[", memoryview(body)[end + 1 : new_end], b"]")))
        except ValueError:
            return None  # not complete values: the full parse decides (and raises)
        if type(added) is not list or not added:
            return None
        doc = dict(self._doc)  # the same keys in the same order: head and tail are the same bytes
        doc["messages"] = [*doc["messages"], *added]
        self._raw, self._doc, self._end = body, doc, new_end
        return doc

    def _locate(self, body: bytes, doc: Any) -> None:
        """Find where ``doc["messages"]`` ends in ``body``, proving it, or give up (no extension)."""
        self._end = -1
        messages = doc.get("messages") if type(doc) is dict else None
        if type(messages) is not list or not messages:
            return
        needle = b'"messages":' + to_json(messages)  # found when the client wrote it compactly, like the SDK
        at = body.find(needle)
        if at < 0 or body.find(needle, at + 1) >= 0:
            return
        start, end = at + 11, at + len(needle) - 1  # the `[` and the `]` of that array
        # Proof that this array is the document's messages: with it emptied, the document is the same
        # document with no messages (a nested array, another key's value or a shadowed duplicate "messages"
        # key would leave the messages as they are).
        try:
            rest = from_json(body[:start] + b"[]" + body[end + 1 :])
        except ValueError:
            return
        if rest != {**doc, "messages": []}:
            return
        self._raw, self._doc, self._end = body, doc, end


@dataclass(slots=True)
class _Thread:
    messages: list[Any]
    fields: dict[str, Any]
    continued: bool = False
    json_items: int = -1  # sum of the compact-JSON lengths of the messages (-1: not known yet)


class SimServer:
    """One run's simulated API.

    ``policy`` answers model requests; every request and response is appended
    to ``transcript`` at ``now()`` (virtual seconds); ``on_request`` is called
    first for every request (the Sim feeds its watchdog and checks budgets there).
    """

    def __init__(
        self,
        policy: ModelPolicy,
        transcript: Transcript,
        *,
        ids: Ids,
        now: Callable[[], float],
        on_request: Callable[[SimServer], None] | None = None,
        sign_thinking: bool = True,
    ) -> None:
        self.policy = policy
        self.transcript = transcript
        self.ids = ids
        self.now = now
        self.on_request = on_request
        self.on_deliver: Callable[[Response], None] | None = None  # after a response is recorded (the abort trigger)
        self.own: Callable[[], float | None] | None = None  # the caller's own time when behind (set by the Sim)
        self.sign_thinking = sign_thinking
        self.calls = 0  # logical model calls
        self.requests = 0
        self._threads: dict[str, _Thread] = {}
        # body -> the latest call that sent it (at most 65 bodies), kept by length: a body only ever matches
        # one of its own length.  A body up to `_KEPT_BODY` bytes is kept as itself (the same bytes object,
        # compared with ``==`` only when a body of its length comes again), a larger one as its digest: no
        # hash on the common path (a new body of a new length), and at most some 4 MiB held.
        self._calls_by_size: dict[int, list[tuple[bytes, bool, int]]] = {}  # size -> [(body or digest, hashed, call)]
        self._known_bodies = 0
        self._parser = _BodyParser()
        self._validator = ConversationValidator(signed_by_sim=sign_thinking, read_only=True)
        self._kinds: dict[int, tuple[Reply, str]] = {}  # id(reply) -> (reply, reply.kind): replies are frozen
        # the Responses API's stored responses of this run: id -> the input and output items it chains
        self.stored_responses = openai_responses.ResponseStore()

    # -- entry point -----------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Planned:
        """Plan the response to one HTTP request (never raises an Exception: see `InternalFailure`).

        ``headers`` is looked up by lower-case name; only the `READ_HEADERS` are read.
        """
        try:
            return self._handle(method, path, headers, body)
        except BaseException as e:
            if isinstance(e, Exception):
                raise InternalFailure(e) from e
            raise

    def deliver(self, planned: Planned) -> None:
        """The response is on the wire now: record it at the current virtual time."""
        rec = planned.record
        if rec is not None:
            rec.t = self.now()
            self.transcript.append(rec)
            planned.record = None
            if self.on_deliver is not None:
                self.on_deliver(rec)

    # -- routing -----------------------------------------------------------------

    def _handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Planned:
        path = route(path)
        self.requests += 1
        index = self.requests - 1
        attempt = _int(headers.get("x-stainless-retry-count"))
        call = self._call_number(path, attempt, body)
        try:
            parsed = (self._parser.parse(body) if path == MESSAGES else from_json(body)) if body else None
        except ValueError:
            parsed = None
        wire = OPENAI_WIRES.get(path)  # an OpenAI wire: recorded as the Messages request it stands for
        chat = wire(parsed, self.stored_responses, self.now()) if wire is not None else None
        req = Request(
            t=self.now(), index=index, call=call, attempt=attempt, path=path,
            stream=isinstance(parsed, dict) and bool(parsed.get("stream")),
            body=chat.internal if chat is not None else parsed, input_tokens=0, subrun=SUBRUN.get(),
            own=self.own() if self.own is not None else None,
        )
        # A thread continuation stands for its whole history: record that before the budgets may halt the
        # run here, so that the transcript never shows a request as only the messages it added.
        expanded = self._expand_thread(parsed) if path == MESSAGES and type(parsed) is dict and "thread" in parsed else None
        if expanded is not None and expanded[0] is not parsed:
            req.messages = expanded[0]["messages"]
        self.transcript.append(req)
        if self.on_request is not None:
            self.on_request(self)
        request_id = self.ids.request()
        if chat is not None:
            return self._chat(req, chat, method, headers, body, request_id)
        if is_openai_path(path):  # a route of an OpenAI wire the simulator does not serve: in that wire's envelope
            return _Chat(None, None, self.now()).error(req, 404, request_id, message=f"Invalid URL ({method} {path}): simloop serves POST /v1/chat/completions and POST /v1/responses only")
        if method != "POST" or path not in (MESSAGES, COUNT_TOKENS):
            return self._error(req, 404, request_id, message=f"Not found: {method} {path}", type="not_found_error")
        if not (headers.get("x-api-key") or headers.get("authorization", "").startswith("Bearer ")):
            return self._error(
                req, 401, request_id, message="x-api-key header is required", type="authentication_error"
            )
        if not isinstance(parsed, dict):
            return self._error(req, 400, request_id, message="There was an error parsing the body of your request.")
        if path == COUNT_TOKENS:
            return self._count_tokens(req, parsed, body, request_id)
        return self._messages(req, parsed, body, request_id, expanded, betas=headers.get("anthropic-beta", ""))

    def _call_number(self, path: str, attempt: int, body: bytes) -> int:
        """SDK retries (retry count > 0) belong to the call whose body they repeat.

        A body sent again as a new call (retry count 0) starts a new call, which the body then belongs to.
        """
        if path != MESSAGES and path not in OPENAI_WIRES:
            return self.calls
        size = len(body)
        same_size = self._calls_by_size.get(size)
        digest: bytes | None = None
        if same_size is not None:  # only a body of the same length can be the same body
            for k, (sent, hashed, call) in enumerate(same_size):
                if hashed:
                    if digest is None:
                        digest = _digest(body)
                    same = sent == digest
                else:
                    same = sent == body
                if same:
                    if attempt > 0:
                        return call
                    if self._known_bodies > 64:
                        break  # forgotten below with every other body, then kept anew
                    # the same body sent again as a new call: it now belongs to this one
                    self.calls += 1
                    same_size[k] = (sent, hashed, self.calls)
                    return self.calls
        self.calls += 1
        if self._known_bodies > 64:
            self._calls_by_size.clear()
            self._known_bodies = 0
            same_size = None
        # kept: the body itself while small (bytes are immutable; no hash), else a digest, not a body of up to 32 MB
        if size <= _KEPT_BODY and type(body) is bytes:
            entry = (body, False, self.calls)
        else:
            entry = (digest if digest is not None else _digest(body), True, self.calls)
        if same_size is None:
            self._calls_by_size[size] = [entry]
        else:
            same_size.append(entry)
        self._known_bodies += 1
        return self.calls

    # -- endpoints -----------------------------------------------------------------

    def _count_tokens(self, req: Request, body: dict[str, Any], raw: bytes, request_id: str) -> Planned:
        rejection = validate_count_tokens_request(body)
        if rejection is not None:
            return self._reject(req, rejection, request_id)
        tokens = request_tokens(body, len(raw))
        req.input_tokens = tokens
        payload = json.dumps({"input_tokens": tokens}).encode()
        rec = Response(t=0.0, index=req.index, call=req.call, status=200, kind="count_tokens")
        return Planned(headers=[_JSON, ("request-id", request_id)], body=payload, record=rec)

    def _messages(
        self, req: Request, body: dict[str, Any], raw: bytes, request_id: str,
        expanded: tuple[dict[str, Any], int, Rejection | None] | None, *, betas: str = "", chat: _Chat | None = None,
    ) -> Planned:
        threaded = expanded is not None
        if expanded is not None:  # a thread: see _handle
            effective, history_bytes, thread_error = expanded
            if thread_error is not None:
                return self._reject(req, thread_error, request_id)
        else:
            effective, history_bytes = body, 0
        validator = self._validator
        if validator.signed_by_sim != self.sign_thinking:
            validator = self._validator = ConversationValidator(signed_by_sim=self.sign_thinking, read_only=True)
        # the OpenAI wire's rules were checked on its own request (`openai_chat.validate_chat`): the Messages API's
        # own (cache breakpoints, thinking signatures, server tools, ...) are not the Chat Completions API's
        rejection = validator.validate(effective) if chat is None else None
        if rejection is None:  # valid: then the size, as the real API checks it last
            # request_tokens(body, len(raw) + history_bytes), its settings' bytes counted once per conversation
            parser = self._parser
            if body is parser.last:
                settings = parser.settings_bytes
                if settings < 0:
                    settings = parser.settings_bytes = _settings_bytes(body)
            else:
                settings = _settings_bytes(body)
            req.input_tokens = estimate_tokens(len(raw) + history_bytes - settings)
            window = context_window(effective.get("model"), betas)
            if req.input_tokens > window:  # by its bytes; then without what the model does not read as text
                nbytes, sources = opaque_bytes(effective)
                read = req.input_tokens - nbytes // 4 + sources * IMAGE_TOKENS
                if read > window:
                    rejection = prompt_too_long(read, window)
        if rejection is not None:
            self._rejected(req, effective, rejection)
            return self._reject(req, rejection, request_id)
        mreq = ModelRequest(
            call=req.call, attempt=req.attempt, body=effective, conversation=effective["messages"], stream=req.stream
        )
        answer = self.policy.reply(mreq)
        # the OpenAI wires' tool call ids are shaped as theirs (``call_...``), drawn from the same random stream
        ids = self.ids if chat is None else self.ids.for_openai()
        if isinstance(answer, RecordedError):
            return self._recorded_error(req, answer)
        reply: Reply | None
        if isinstance(answer, Reply):
            reply = answer
            known = self._kinds.get(id(answer))
            if known is not None and known[0] is answer:
                kind = known[1]
            else:
                kind = answer.kind
                if len(self._kinds) >= 256:
                    self._kinds.clear()
                self._kinds[id(answer)] = (answer, kind)
            if kind == "error":
                return self._fault(req, answer, mreq, request_id, chat=chat)
            turn = _turn(answer, kind, mreq, ids)
        else:
            reply = None
            turn = answer if isinstance(answer, Turn) else turn_from_reply(answer, mreq, ids)
        input_tokens = req.input_tokens
        output_tokens: int | None = None
        cache = (0, 0)
        if reply is not None and reply.usage is not None:
            input_tokens = reply.usage.input_tokens if reply.usage.input_tokens is not None else input_tokens
            output_tokens = reply.usage.output_tokens
            cache = (reply.usage.cache_creation_input_tokens or 0, reply.usage.cache_read_input_tokens or 0)
        msg_id = turn.id or self.ids.message()
        model = turn.model or str(effective.get("model", "claude-sonnet-5"))
        body_json: bytes | None = None  # the JSON reply's body, rendered with the message (content serialized once)
        if chat is None and not req.stream and not (reply is not None and reply.crash):
            message, body_json = render_message_json(turn, id=msg_id, model=model, input_tokens=input_tokens,
                                                     output_tokens=output_tokens, cache=cache)
        else:
            message = render_message(turn, id=msg_id, model=model, input_tokens=input_tokens,
                                     output_tokens=output_tokens, cache=cache)
        latency = reply.latency if reply else 0.0
        rec = Response(
            t=0.0, index=req.index, call=req.call, status=200, kind=str(turn.stop_reason),
            stop_reason=turn.stop_reason, message=message, latency=latency,
        )
        if threaded:
            self._store_thread(body, effective, message)
        if reply is not None and reply.crash:  # answered, and the process dies before the loop reads it
            rec.fault = "crash"
            return Planned(headers=[_JSON, ("request-id", request_id)], latency=latency, record=rec, raise_="crash")
        if chat is not None:
            return chat.planned(turn, message, rec, request_id, latency, stream=req.stream)
        if req.stream:
            events = render_sse(turn, id=msg_id, model=model, input_tokens=input_tokens, output_tokens=output_tokens,
                                cache=cache)
            return Planned(headers=[_SSE, ("request-id", request_id)], events=events, latency=latency, record=rec)
        return Planned(headers=[_JSON, ("request-id", request_id)], body=body_json if body_json is not None
                       else to_json(message), latency=latency, record=rec)

    def _fault(self, req: Request, reply: Reply, mreq: ModelRequest, request_id: str, *, chat: _Chat | None = None) -> Planned:
        err = reply.error
        rec = Response(t=0.0, index=req.index, call=req.call, status=0, kind="error", latency=reply.latency)
        if isinstance(err, int):
            rec.status = err
            rec.fault = "http"
            # a scripted 404 is the real API's answer to an unknown model: it names the model asked for
            message = f"model: {mreq.body.get('model')}" if err == 404 else None
            payload = error_body(err, request_id=request_id, message=message)
            rec.error = json.loads(payload)
            headers = error_headers(err, request_id=request_id, retry_after=reply.retry_after)
            return Planned(status=err, headers=headers, body=payload, latency=reply.latency, record=rec)
        rec.fault = err
        if err in ("connection", "timeout") or (err == "stream_cut" and not req.stream):
            return Planned(raise_="cut" if err == "stream_cut" else err, latency=reply.latency, record=rec)
        if err == "stream_error" and not req.stream:
            # A non-streaming request cannot fail mid-stream: the same overload reaches it as a 500.
            rec.status = 500
            payload = error_body(500, request_id=request_id)
            rec.error = json.loads(payload)
            return Planned(
                status=500, headers=error_headers(500, request_id=request_id), body=payload,
                latency=reply.latency, record=rec,
            )
        # A stream that starts well and then fails: the model was writing an answer.
        partial = turn_from_reply(Reply(end_turn="Let me look into that and get back with the details."), mreq, self.ids)
        if chat is not None:
            return chat.broken_stream(partial, self.ids.message(), rec, request_id, reply.latency, error=err == "stream_error")
        events = render_sse(partial, id=self.ids.message(), model=str(mreq.body.get("model")), input_tokens=req.input_tokens)
        cut = min(4, len(events) - 2)
        rec.status = 200
        planned = Planned(headers=[_SSE, ("request-id", request_id)], events=events, cut_after=cut,
                          latency=reply.latency, record=rec)
        if err == "stream_error":
            rec.error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            planned.error_event = render_error_event("overloaded_error", "Overloaded", request_id)
        return planned

    def _chat(
        self, req: Request, chat: _Chat, method: str, headers: Mapping[str, str], raw: bytes, request_id: str,
    ) -> Planned:
        """An OpenAI wire's request (`OPENAI_WIRES`): its own checks, then the one world, then its own rendering."""
        if method != "POST":
            return chat.error(req, 404, request_id, message=f"Invalid URL ({method} {req.path})")
        if not headers.get("authorization", "").startswith("Bearer "):
            return chat.error(req, 401, request_id, message="You didn't provide an API key. You need to provide your "
                              "API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        if chat.rejection is not None:
            if type(chat.internal) is dict:
                self._rejected(req, chat.internal, chat.rejection)
            return chat.reject(req, chat.rejection, request_id)
        planned = self._messages(req, chat.internal, raw, request_id, None, chat=chat)
        return chat.converted(planned, request_id)

    def _recorded_error(self, req: Request, answer: RecordedError) -> Planned:
        """A recorded error, served with its recorded headers and body (framing headers left to the transport)."""
        try:
            error = json.loads(answer.body) if answer.body else None
        except ValueError:
            error = None
        rec = Response(
            t=0.0, index=req.index, call=req.call, status=answer.status, kind="error", fault="http",
            error=error if isinstance(error, dict) else None,
        )
        headers = [(k, v) for k, v in answer.headers if k.lower() not in _FRAMING_HEADERS]
        rec.latency = answer.latency
        return Planned(status=answer.status, headers=headers, body=answer.body, latency=answer.latency, record=rec)

    def _rejected(self, req: Request, effective: dict[str, Any], rejection: Rejection) -> None:
        """Tell a policy that keeps a recording (`simloop.cassettes.Recorded`) that the simulator refused this request
        itself: the recording's call answered with the same error is used up (on every wire)."""
        rejected = getattr(self.policy, "rejected", None)
        if rejected is not None:
            sent = effective.get("messages")
            conversation = sent if type(sent) is list else []
            rejected(ModelRequest(req.call, req.attempt, effective, conversation, req.stream), rejection)

    def _reject(self, req: Request, rejection: Rejection, request_id: str) -> Planned:
        return self._error(
            req, rejection.status, request_id, message=rejection.message, type=rejection.type,
            details=rejection.details, rejection=rejection,
        )

    def _error(
        self,
        req: Request,
        status: int,
        request_id: str,
        *,
        message: str,
        type: str = "invalid_request_error",
        details: dict[str, Any] | None = None,
        rejection: Rejection | None = None,
    ) -> Planned:
        payload = error_body(status, request_id=request_id, message=message, type=type, details=details)
        rec = Response(
            t=0.0, index=req.index, call=req.call, status=status, kind="rejected", error=json.loads(payload),
            fault="http",
        )
        if rejection is not None:
            rec.rejection = {"status": status, "type": type, "message": message, "path": rejection.path}
        return Planned(status=status, headers=error_headers(status, request_id=request_id), body=payload, record=rec)

    # -- message threads -------------------------------------------------------------

    def _expand_thread(self, body: dict[str, Any]) -> tuple[dict[str, Any], int, Rejection | None]:
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

    def _store_thread(self, body: dict[str, Any], effective: dict[str, Any], message: dict[str, Any]) -> None:
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


#: The top-level request fields that carry what the model reads; the others (model, max_tokens, stream,
#: thinking, metadata, thread, ...) are settings and are not input tokens.
_CONTENT_FIELDS = frozenset({"messages", "system", "tools", "tool_choice"})


def request_tokens(body: dict[str, Any], nbytes: int) -> int:
    """Input tokens of a request of ``nbytes`` JSON bytes: what it carries, as ``count_tokens`` counts it.

    The messages, system prompt and tool definitions count (`estimate_tokens` of their bytes); the
    settings fields do not.  So ``/v1/messages`` reports in ``usage.input_tokens`` exactly what
    ``/v1/messages/count_tokens`` answers for the same conversation, and the count grows with the
    history and with every tool output sent back, as the real counts do.
    """
    return estimate_tokens(nbytes - _settings_bytes(body))


def _settings_bytes(body: dict[str, Any]) -> int:
    """The length of the compact JSON of the body's settings fields (0 without any): bytes that are not input."""
    settings = {k: v for k, v in body.items() if k not in _CONTENT_FIELDS}
    return len(to_json(settings)) if settings else 0


def estimate_tokens(nbytes: int) -> int:
    """Input tokens for a request of ``nbytes`` JSON bytes: about four bytes a token, as for English text.

    Deterministic and monotonic in the request size, so a growing history shows growing usage.
    """
    return max(1, (nbytes + 3) // 4)


def _json_items(items: list[Any]) -> int:
    """The total length of the items' compact JSON (``json.dumps`` encodes a list's items one by one)."""
    return sum(len(json.dumps(item, separators=(",", ":"))) for item in items)


def _thread_error(code: str, message: str) -> Rejection:
    return Rejection(status=400, type="invalid_request_error", message=message, details={"error_code": code})


#: The largest request body `SimServer._call_number` keeps as itself (65 at most): larger ones are kept as a digest.
_KEPT_BODY = 64 * 1024


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


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
