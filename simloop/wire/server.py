"""The simulated Messages API: routes, threads, usage, faults, and the transcript.

`SimServer.handle` turns one HTTP request into a `Planned` response (what
to send, after how much virtual latency, or which transport fault to raise).
It knows nothing of httpx: the transports in `simloop.wire.transport` carry
the plan out, sync or async, and call `deliver` when the reply is on the wire.

Routes (on the URL path only; ``?beta=true`` is ignored, as by the real API):
``POST /v1/messages`` (JSON or SSE) and ``POST /v1/messages/count_tokens``; the OpenAI wires in
`OPENAI_WIRES` (``POST /v1/chat/completions``), each also without its ``/v1`` (`route`: what the ``openai``
SDKs send when their base URL lacks it).

`SimServer` reads and routes; each concern is its own object beside it: `bodies` (the incremental parse, the
call each body belongs to, the token counts), `checks` (the rules and the size), `threads` (message threads),
`answer` (the model's answer planned), `failures` (errors and scripted faults) and `openai_wires` (the
OpenAI wires' translation; their ``previous_response_id`` chains are ``stored_responses``).

The fast lane (`simloop.wire.fastlane`, `SimServer._fast`): a tool loop's next request that is the previous one
plus simloop's own plain reply and its tool_results skips the rules' walk (which it is proven to pass) and the
routing; every other request takes the full path, the lane's oracle (`_FAST_LANE`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import from_json

from simloop._runtime.order import turn
from simloop.models import Ids, ModelPolicy, ModelRequest, RecordedError
from simloop.protocol import openai_responses
from simloop.protocol.validate import Rejection, validate_count_tokens_request
from simloop.scenario import Reply
from simloop.transcript import SUBRUN, Request, Response, Transcript
from simloop.wire import failures
from simloop.wire.answer import ReplyKinds, compose, make_turn, plain, planned
from simloop.wire.bodies import CallNumbers, _BodyParser, estimate_tokens, request_tokens
from simloop.wire.callers import Callers
from simloop.wire.checks import Checks
from simloop.wire.fastlane import Lane, offer
from simloop.wire.openai_wires import OPENAI_WIRES, _Chat, is_openai_path, route
from simloop.wire.planned import COUNT_TOKENS, JSON, MESSAGES, READ_HEADERS, Budget, InternalFailure, Planned
from simloop.wire.threads import Expanded, MessageThreads

__all__ = [
    "OPENAI_WIRES", "READ_HEADERS", "Budget", "InternalFailure", "Planned", "SimServer", "estimate_tokens",
    "is_openai_path", "request_tokens", "route",
]

#: Whether a `SimServer` made from now on takes the fast lane (`simloop.wire.fastlane`) where it can; False: the
#: full path for every request (the lane's oracle: `tests/test_fastlane.py` runs both).  Private.
_FAST_LANE = True


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
        self.requests = 0
        self._one_at_a_time = threading.RLock()  # (re-entrant: a model function may call the API itself)
        self.callers = Callers()  # which thread made each call (`Request.thread`)
        self._numbers = CallNumbers()
        self._threads = MessageThreads()
        self._parser = _BodyParser()
        self._checks = Checks(self._parser, sign_thinking=sign_thinking)
        self._kinds = ReplyKinds()
        self._fast_lane = _FAST_LANE  # False: every request takes the full path (the fast lane's oracle)
        self._lane: Lane | None = None  # what the next request must be to take the fast lane
        self._lane_taken = 0  # requests answered on the fast lane
        # the Responses API's stored responses of this run: id -> the input and output items it chains
        self.stored_responses = openai_responses.ResponseStore()

    @property
    def calls(self) -> int:
        """Logical model calls so far (an SDK's retries of a call are that call)."""
        return self._numbers.calls

    # -- entry point -----------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes, *,
               thread: int | None = None) -> Planned:
        """Plan the response to one HTTP request (never raises an Exception: see `InternalFailure`).

        ``headers`` by lower-case name (only the `READ_HEADERS` are read); ``thread``: the caller's (`Callers`).  One
        request at a time: its parse, numbering, checks and reply read the state the one before left (the incremental
        parse, the fast lane, the model's draws), so the loop's threads (parallel sub-agents, say) take turns."""
        turn()  # a run's threads call at once in start/submit order (simloop._runtime.order)
        try:
            with self._one_at_a_time:
                self.callers.current = thread
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

    # -- reading and routing -------------------------------------------------------

    def _handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Planned:
        lane, self._lane = self._lane, None  # only the request right after a plain answer may take the lane
        path = route(path)
        self.requests += 1
        attempt = _int(headers.get("x-stainless-retry-count"))
        call = self._numbers.number(attempt, body) if path == MESSAGES or path in OPENAI_WIRES else self.calls
        try:
            parsed = (self._parser.parse(body) if path == MESSAGES else from_json(body)) if body else None
        except ValueError:
            parsed = None
        if lane is not None and path == MESSAGES and method == "POST":
            fast = self._fast(lane, headers, parsed, body, call, attempt)
            if fast is not None:
                return fast
        wire = OPENAI_WIRES.get(path)  # an OpenAI wire: recorded as the Messages request it stands for
        chat = wire(parsed, self.stored_responses, self.now()) if wire is not None else None
        # A thread continuation stands for its whole history: record that before the budgets may halt the
        # run here, so that the transcript never shows a request as only the messages it added.
        expanded = self._threads.expand(parsed) if path == MESSAGES and type(parsed) is dict and "thread" in parsed else None
        req, request_id = self._recorded(
            call, attempt, path, isinstance(parsed, dict) and bool(parsed.get("stream")),
            chat.internal if chat is not None else parsed,
            expanded[0]["messages"] if expanded is not None and expanded[0] is not parsed else None,
        )
        if chat is not None:
            return self._chat(req, chat, method, headers, body, request_id)
        return self._route(req, method, headers, parsed, body, request_id, expanded)

    def _fast(self, lane: Lane, headers: Mapping[str, str], parsed: Any, raw: bytes, call: int,
              attempt: int) -> Planned | None:
        """The fast lane (`simloop.wire.fastlane`): a request that extends the one just answered plainly by that
        answer and its tool results, answered without walking the rules; None: the full path answers it.

        The same steps as the full path's, in its order, for a request it would accept: recorded, ``on_request``,
        its id drawn, its tokens counted, then the one reply (`_reply`).
        """
        taken = lane.take(parsed, self._parser, headers, raw, self._checks.settings)
        if taken is None:
            return None
        seen, tokens = taken
        req, request_id = self._recorded(call, attempt, MESSAGES, bool(parsed.get("stream")), parsed)
        req.input_tokens = tokens
        self._lane_taken += 1
        return self._reply(req, parsed, parsed, request_id, None, None, seen)

    def _recorded(
        self, call: int, attempt: int, path: str, stream: bool, body: Any, messages: list[Any] | None = None,
    ) -> tuple[Request, str]:
        """The request recorded (``messages``: the whole history a thread continuation stands for), the budgets
        checked (``on_request``), and its id drawn: the first steps of every request, on either path."""
        req = Request(t=self.now(), index=self.requests - 1, call=call, attempt=attempt, path=path, stream=stream,
                      body=body, input_tokens=0, subrun=SUBRUN.get(), own=self.own() if self.own is not None else None,
                      thread=self.callers.number())
        if messages is not None:
            req.messages = messages
        self.transcript.append(req)
        if self.on_request is not None:
            self.on_request(self)
        return req, self.ids.request()

    def _route(
        self, req: Request, method: str, headers: Mapping[str, str], parsed: Any, body: bytes, request_id: str,
        expanded: Expanded | None,
    ) -> Planned:
        """A request on any route but an OpenAI wire's: the Messages API's, or not found."""
        path = req.path
        if is_openai_path(path):  # a route of an OpenAI wire the simulator does not serve: in that wire's envelope
            return _Chat(None, None, self.now()).error(req, 404, request_id, message=f"Invalid URL ({method} {path}): simloop serves POST /v1/chat/completions and POST /v1/responses only")
        if method != "POST" or path not in (MESSAGES, COUNT_TOKENS):
            return failures.error(req, 404, request_id, message=f"Not found: {method} {path}", type="not_found_error")
        if not (headers.get("x-api-key") or headers.get("authorization", "").startswith("Bearer ")):
            return failures.error(
                req, 401, request_id, message="x-api-key header is required", type="authentication_error"
            )
        if not isinstance(parsed, dict):
            return failures.error(req, 400, request_id, message="There was an error parsing the body of your request.")
        if path == COUNT_TOKENS:
            return self._count_tokens(req, parsed, body, request_id)
        return self._messages(req, parsed, body, request_id, expanded, betas=headers.get("anthropic-beta", ""))

    # -- endpoints -----------------------------------------------------------------

    def _count_tokens(self, req: Request, body: dict[str, Any], raw: bytes, request_id: str) -> Planned:
        rejection = validate_count_tokens_request(body)
        if rejection is not None:
            return failures.reject(req, rejection, request_id)
        tokens = request_tokens(body, len(raw))
        req.input_tokens = tokens
        payload = json.dumps({"input_tokens": tokens}).encode()
        rec = Response(t=0.0, index=req.index, call=req.call, status=200, kind="count_tokens")
        return Planned(headers=[JSON, ("request-id", request_id)], body=payload, record=rec)

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

    def _messages(
        self, req: Request, body: dict[str, Any], raw: bytes, request_id: str, expanded: Expanded | None, *,
        betas: str = "", chat: _Chat | None = None,
    ) -> Planned:
        """A model request (``expanded``: the thread it continues): checked, answered by the policy, planned."""
        if expanded is not None:  # a thread: see _handle
            effective, history_bytes, thread_error = expanded
            if thread_error is not None:
                return failures.reject(req, thread_error, request_id)
        else:
            effective, history_bytes = body, 0
        rejection = self._checks.check(req, body, effective, len(raw) + history_bytes, betas=betas,
                                       rules=chat is None, sign_thinking=self.sign_thinking,
                                       truncates=chat is not None and chat.truncates())
        if rejection is not None:
            self._rejected(req, effective, rejection)
            return failures.reject(req, rejection, request_id)
        return self._reply(req, body, effective, request_id, expanded, chat, None)

    def _reply(
        self, req: Request, body: dict[str, Any], effective: dict[str, Any], request_id: str,
        expanded: Expanded | None, chat: _Chat | None, seen: frozenset[str] | None,
    ) -> Planned:
        """An accepted model request answered by the policy and planned; a plain answer on the Messages wire opens
        the fast lane to the next request (``seen``: the tool_use ids of ``body``'s history, when known)."""
        mreq = ModelRequest(
            call=req.call, attempt=req.attempt, body=effective, conversation=effective["messages"], stream=req.stream
        )
        answer = self.policy.reply(mreq)
        reply = answer if isinstance(answer, Reply) else None
        kind = self._kinds.kind(reply) if reply is not None else None
        if seen is not None and (lean := plain(reply, kind, req, body, self.ids, request_id, seen)) is not None:
            self._lane = lean[1]  # on the fast lane: a scripted reply of text or calls, its turn made at once
            return lean[0]
        # the OpenAI wires' tool call ids are shaped as theirs (``call_...``), drawn from the same random stream
        ids = self.ids if chat is None else self.ids.for_openai()
        if isinstance(answer, RecordedError):
            return failures.recorded_error(req, answer)
        if kind == "error":
            assert reply is not None
            return failures.fault(req, reply, mreq, request_id, self.ids, chat=chat)
        composed = compose(req, make_turn(answer, kind, mreq, ids), reply, effective, self.ids, openai=chat is not None)
        if expanded is not None:
            self._threads.store(body, effective, composed.message)
        elif chat is None and self._fast_lane and not composed.crash:
            self._lane = offer(body, composed.message, seen)
        return planned(composed, req, request_id, chat)

    def _rejected(self, req: Request, effective: dict[str, Any], rejection: Rejection) -> None:
        """Tell a policy that keeps a recording (`simloop.cassettes.Recorded`) that the simulator refused this request
        itself: the recording's call answered with the same error is used up (on every wire)."""
        rejected = getattr(self.policy, "rejected", None)
        if rejected is not None:
            sent = effective.get("messages")
            conversation = sent if type(sent) is list else []
            rejected(ModelRequest(req.call, req.attempt, effective, conversation, req.stream), rejection)


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
