"""Model policies: what the simulated model answers to each request.

A policy sees each `/v1/messages` request (as a `ModelRequest`) and returns a
`Reply` (the scenario-level description: ``end_turn``, ``tool_use``, an
``error``...) or a wire-level `Turn` (exact content blocks, as a recording
has them).  The server renders either into the real API's JSON or SSE.

* `Script` answers with a scenario's replies in order, then ``then``.
* `FunctionModel` asks a user callable, so a test can answer the request it sees.

Recorded (cassette) and generated (Hypothesis) policies live with their
features (`simloop.cassettes`, `simloop.strategies`) and follow the same protocol.
"""

from __future__ import annotations

import copy
import json
import random
from binascii import b2a_base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from simloop.errors import UsageError
from simloop.protocol import servertools
from simloop.protocol.render import Turn
from simloop.protocol.validate import thinking_signature
from simloop.scenario import MaxTokensBody, PauseTurnBody, Reply, Scenario, ServerToolCall, ToolCall

__all__ = [
    "FunctionModel",
    "Ids",
    "ModelPolicy",
    "ModelRequest",
    "RecordedError",
    "Script",
    "ScriptExhausted",
    "turn_from_reply",
]

_ALTCHARS = bytes.maketrans(b"+/", b"01")  # what base64.b64encode(altchars=b"01") does, table built once


class ScriptExhausted(BaseException):
    """The loop asked for more replies than the script holds (``then: fail``).

    A `BaseException`, so that neither the SDK's retry loop nor the loop's own
    ``except Exception`` turns it into an API error: it is a fact about the
    scenario, reported to the user by `simloop.Sim.run`.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(slots=True)
class ModelRequest:
    """What the simulated model sees of one request.

    ``conversation`` is the whole message list (a thread continuation's stored
    history included); ``tools`` the names of the tools the request defines.
    Read-only for a policy: the simulator shares these objects with the transcript
    and the next request's history (`FunctionModel` hands its function a copy).
    """

    call: int
    attempt: int
    body: dict[str, Any]
    conversation: list[Any]
    stream: bool

    @property
    def tools(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools") or [] if isinstance(t, dict)]

    @property
    def thinking(self) -> bool:
        """Whether the request enables extended thinking (then replies start with a thinking block)."""
        cfg = self.body.get("thinking")
        return isinstance(cfg, dict) and cfg.get("type") in ("enabled", "adaptive")

    @property
    def pending_tool_uses(self) -> int:
        """How many tool_use blocks the last assistant message holds (what the loop just answered)."""
        for msg in reversed(self.conversation):
            if isinstance(msg, dict) and msg.get("role") == "assistant":
                content = msg.get("content")
                if isinstance(content, list):
                    return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_use")
                return 0
        return 0


@dataclass(frozen=True, slots=True)
class RecordedError:
    """An HTTP error answer served byte for byte as recorded: status, headers and body.

    A cassette's 4xx/5xx answers are served this way (`simloop.cassettes.Recorded`), so the SDK sees
    the recorded ``retry-after`` (or none) and the recorded message, not simloop's canned ones.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    latency: float = 0.0


@runtime_checkable
class ModelPolicy(Protocol):
    """Anything that answers model requests."""

    def reply(self, request: ModelRequest) -> Reply | Turn | RecordedError: ...

    def leftovers(self) -> list[str]:
        """What the policy was told to do and never did (strict teardown reports it)."""
        ...


class Script:
    """The scenario's replies in order (``repeat`` expanded), then ``then``.

    ``then``: ``end_turn`` answers "Done." forever, ``repeat_last`` repeats the
    last reply forever, ``fail`` raises `ScriptExhausted` naming the call.
    """

    def __init__(self, replies: Sequence[Reply], *, then: str = "fail") -> None:
        self.replies = list(replies)
        self.then = then
        self._pos = 0  # index into replies
        self._used = 0  # uses of replies[_pos] so far
        self.served = 0

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> Script:
        return cls(scenario.model, then=scenario.then)

    def reply(self, request: ModelRequest) -> Reply:
        while self._pos < len(self.replies):
            current = self.replies[self._pos]
            if current.repeat == "forever" or self._used < current.repeat:
                self._used += 1
                self.served += 1
                return current
            self._pos += 1
            self._used = 0
        self.served += 1
        if self.then == "end_turn":
            return Reply(end_turn="Done.")
        if self.then == "repeat_last" and self.replies:
            return self.replies[-1]
        last = _summarise(request)
        # model calls are numbered over every request, those the API rejected (a 400) included: say so when
        # they differ from the replies asked for, or the count looks wrong
        at = f"model call {request.call}"
        if request.call != self.served:
            at += f", reply #{self.served} (requests the API rejected are numbered as calls but get no reply)"
        else:
            at += f" (request #{self.served})"
        raise ScriptExhausted(
            f"the script has {len(self.replies)} repl{'y' if len(self.replies) == 1 else 'ies'} and the loop "
            f"asked for another at {at}; the last request was: "
            f"{last}. Add replies to `model:`, or set `then: end_turn` or `then: repeat_last`."
        )

    def leftovers(self) -> list[str]:
        out: list[str] = []
        for i in range(self._pos, len(self.replies)):
            r = self.replies[i]
            if r.repeat == "forever":
                continue
            left = r.repeat - (self._used if i == self._pos else 0)
            if left > 0:
                out.append(f"model[{i}] ({r.kind}) was never served" + (f" ({left} of {r.repeat} left)" if r.repeat > 1 else ""))
        return out

    def __repr__(self) -> str:
        return f"Script({len(self.replies)} replies, then={self.then!r})"


ReplyLike = Reply | Turn | dict[str, Any] | str


class FunctionModel:
    """A model that is a function of the request.

    ``fn(request: ModelRequest)`` returns a `Reply`, a dict in the scenario's
    reply format (``{"tool_use": [{"name": ..., "input": {...}}]}``), a `Turn`,
    or a string (a final ``end_turn`` answer).

    Example::

        def model(req):
            return {"end_turn": "done"} if req.call > 2 else {"tool_use": [{"name": "search", "input": {"q": "x"}}]}
    """

    def __init__(self, fn: Callable[[ModelRequest], ReplyLike]) -> None:
        self.fn = fn

    def reply(self, request: ModelRequest) -> Reply | Turn:
        # The function gets its own copy: the simulator's parse of the request is shared with the
        # transcript and with the next request's history, so an edit here must not rewrite what earlier
        # requests appear to have sent.
        body = copy.deepcopy(request.body)
        messages = body.get("messages")
        conversation: list[Any]
        if request.conversation is request.body.get("messages") and type(messages) is list:
            conversation = messages  # one copy, still one object, as in the request handed over
        else:
            conversation = copy.deepcopy(request.conversation)
        out = self.fn(ModelRequest(request.call, request.attempt, body, conversation, request.stream))
        if isinstance(out, (Reply, Turn)):
            return out
        if isinstance(out, str):
            return Reply(end_turn=out)
        if isinstance(out, dict):
            return Reply.model_validate(out)
        raise UsageError(
            f"the FunctionModel's function returned {type(out).__name__}; return a simloop Reply, a reply dict "
            "such as {'end_turn': 'done'}, a Turn, or a string"
        )

    def leftovers(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return f"FunctionModel({getattr(self.fn, '__qualname__', self.fn)!r})"


@dataclass(slots=True)
class Ids:
    """Deterministic ids shaped like the real API's, drawn from the run's seed."""

    rng: random.Random
    counts: dict[str, int] = field(default_factory=dict)
    #: The shape of tool call ids: ``toolu_01`` + 22 characters (the Messages API), or ``call_`` + 24 (the OpenAI
    #: wires, `for_openai`).  Both draw the same bits, so one seed makes the same world on either wire.
    tool_prefix: str = "toolu_01"

    def make(self, prefix: str, n: int = 24) -> str:
        # one draw, base64 with digits for '+' and '/': alphanumeric like the real ids, and cheap (hot path)
        size = 3 * -(-n // 4)  # a multiple of 3 bytes: no '=' padding
        raw = self.rng.getrandbits(8 * size).to_bytes(size, "big")
        return prefix + b2a_base64(raw, newline=False).translate(_ALTCHARS).decode("ascii")[:n]

    # The three kinds the server draws on every request, written out: make("msg_01", 22) and so on.
    def message(self) -> str:
        raw = self.rng.getrandbits(144).to_bytes(18, "big")
        return "msg_01" + b2a_base64(raw, newline=False).translate(_ALTCHARS).decode("ascii")[:22]

    def tool_use(self) -> str:
        raw = self.rng.getrandbits(144).to_bytes(18, "big")
        text = b2a_base64(raw, newline=False).translate(_ALTCHARS).decode("ascii")
        return "toolu_01" + text[:22] if self.tool_prefix == "toolu_01" else self.tool_prefix + text[:24]

    def for_openai(self) -> Ids:
        """The same draws (one random stream, one set of counts), with tool call ids shaped as the OpenAI API's
        (``call_`` + 24 characters): the OpenAI wires' replies carry them, and loops send them back as they are."""
        return Ids(self.rng, self.counts, "call_")

    def server_tool_use(self) -> str:
        """A ``srvtoolu_01...`` id, as the real API gives server tool calls."""
        return self.make("srvtoolu_01", 22)

    def request(self) -> str:
        raw = self.rng.getrandbits(120).to_bytes(15, "big")
        return "req_011C" + b2a_base64(raw, newline=False).translate(_ALTCHARS).decode("ascii")[:20]


DEFAULT_STOP_SEQUENCE = "###"


def turn_from_reply(reply: Reply, request: ModelRequest, ids: Ids) -> Turn:
    """The wire-level turn for a (non-error) reply to ``request``.

    Token usage is not set here: the server computes it from the request size
    (and ``reply.usage`` overrides), as the real API reports it.
    """
    return _turn(reply, reply.kind, request, ids)


def _turn(reply: Reply, kind: str, request: ModelRequest, ids: Ids) -> Turn:
    """`turn_from_reply` for a reply whose ``kind`` the caller already knows (the server's hot path)."""
    content: list[dict[str, Any]] = []
    # A server call the request left running (a paused turn sent back, or one in flight beside client calls)
    # is answered first: the continuation opens with its result, and carries on the turn without a new
    # thinking block (recorded: pydantic-ai test_pause_turn_web_search_vcr.yaml).
    pending = servertools.pending_server_uses(request.conversation)
    for use in pending:
        name, args = str(use["name"]), use["input"] if isinstance(use["input"], dict) else {}
        content.append(servertools.result_block(use["id"], name, args))
    if request.thinking and not pending:
        thought = reply.thinking if reply.thinking is not None else "Let me work out the next step."
        content.append({"type": "thinking", "thinking": thought, "signature": thinking_signature(thought)})
    for call in reply.server_tools or ():
        _server_call(content, call, ids)
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    if kind == "end_turn":
        if reply.end_turn:
            content.append({"type": "text", "text": reply.end_turn})
    elif kind == "tool_use":
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for c in reply.tool_use or ():
            content.append({"type": "tool_use", "id": ids.tool_use(), "name": c.name, "input": dict(c.input)})
    elif kind == "max_tokens":
        body = reply.max_tokens
        if isinstance(body, MaxTokensBody):
            _text(content, body.text)
            calls = body.tool_use
            for i, c in enumerate(calls):
                block = _tool_use(c, ids)
                if i == len(calls) - 1:  # the last call was cut mid-input
                    full = json.dumps(c.input, separators=(",", ":"), ensure_ascii=False)
                    block["partial_json"] = full[: max(1, len(full) // 2)]
                content.append(block)
        else:
            _text(content, body)
    elif kind == "stop_sequence":
        _text(content, reply.stop_sequence)
        stop_sequence = reply.sequence or DEFAULT_STOP_SEQUENCE
    elif kind == "refusal":
        _text(content, reply.refusal)
        stop_details = {"type": "refusal", "category": None, "explanation": reply.refusal or None}
    elif kind == "pause_turn":
        paused = reply.pause_turn
        if isinstance(paused, PauseTurnBody):  # paused mid server call: the call goes out without its result
            _text(content, paused.text)
            call = paused.server_tool_use
            content.append(servertools.use_block(ids.server_tool_use(), call.name, call.input))
        else:
            _text(content, (paused or "").rstrip())
    else:  # pragma: no cover - errors never reach here
        raise ValueError(f"an {kind} reply has no turn")
    stop = reply.max_tokens.stop_reason if isinstance(reply.max_tokens, MaxTokensBody) else kind
    return Turn(content=content, stop_reason=stop, stop_sequence=stop_sequence, stop_details=stop_details)


def _text(content: list[dict[str, Any]], text: str | None) -> None:
    if text:
        content.append({"type": "text", "text": text})


def _server_call(content: list[dict[str, Any]], call: ServerToolCall, ids: Ids) -> None:
    """A completed server call: its ``server_tool_use`` block, then its result block."""
    use_id = ids.server_tool_use()
    content.append(servertools.use_block(use_id, call.name, call.input))
    content.append(servertools.result_block(use_id, call.name, call.input, result=call.result, error=call.error))


def _tool_use(call: ToolCall, ids: Ids) -> dict[str, Any]:
    return {"type": "tool_use", "id": ids.tool_use(), "name": call.name, "input": dict(call.input)}


def _summarise(request: ModelRequest) -> str:
    conv = request.conversation
    if not conv:
        return "(no messages)"
    last = conv[-1]
    role = last.get("role", "?") if isinstance(last, dict) else "?"
    content = last.get("content") if isinstance(last, dict) else last
    if isinstance(content, list):
        kinds = ", ".join(str(b.get("type")) for b in content if isinstance(b, dict))
        shown = f"[{kinds}]"
    else:
        shown = repr(content)[:80]
    return f"{len(conv)} messages, the last a {role} message {shown}"
