"""The model's answer to a request, planned: the turn the policy's reply makes, its usage, the message it is
rendered as and how it goes out on the Messages wire (JSON or SSE), on an OpenAI wire, or not at all (a crash)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from simloop.models import Ids, ModelRequest, _turn, turn_from_reply
from simloop.protocol.render import Turn, render_message, render_message_json, render_sse
from simloop.scenario import Reply
from simloop.transcript import Request, Response
from simloop.wire.fastlane import Lane, offer
from simloop.wire.openai_wires import _Chat
from simloop.wire.planned import JSON, SSE, Planned

__all__ = ["Answer", "ReplyKinds", "compose", "make_turn", "plain", "planned"]


class ReplyKinds:
    """Each scripted reply's ``kind``, worked out once: replies are frozen, and the same ones come back."""

    __slots__ = ("_kinds",)

    def __init__(self) -> None:
        self._kinds: dict[int, tuple[Reply, str]] = {}  # id(reply) -> (reply, reply.kind)

    def kind(self, reply: Reply) -> str:
        known = self._kinds.get(id(reply))
        if known is not None and known[0] is reply:
            return known[1]
        kind = reply.kind
        if len(self._kinds) >= 256:
            self._kinds.clear()
        self._kinds[id(reply)] = (reply, kind)
        return kind

def make_turn(answer: Any, kind: str | None, mreq: ModelRequest, ids: Ids) -> Turn:
    """The turn a policy's answer makes (``kind``: a scripted `Reply`'s, else None)."""
    if isinstance(answer, Reply) and kind is not None:
        return _turn(answer, kind, mreq, ids)
    return answer if isinstance(answer, Turn) else turn_from_reply(answer, mreq, ids)


@dataclass(slots=True)
class Answer:
    """One answer rendered as a Messages API message, with what its wire renderings need."""

    turn: Turn
    message: dict[str, Any]
    body_json: bytes | None  # the JSON reply's body, rendered with the message (content serialized once)
    rec: Response
    msg_id: str
    model: str
    input_tokens: int
    output_tokens: int | None
    cache: tuple[int, int]
    crash: bool


def compose(
    req: Request, turn: Turn, reply: Reply | None, effective: dict[str, Any], ids: Ids, *, openai: bool,
) -> Answer:
    """The message ``turn`` is, with the usage a scripted ``reply`` states (else the request's own count)."""
    input_tokens = req.input_tokens
    output_tokens: int | None = None
    cache = (0, 0)
    if reply is not None and reply.usage is not None:
        input_tokens = reply.usage.input_tokens if reply.usage.input_tokens is not None else input_tokens
        output_tokens = reply.usage.output_tokens
        cache = (reply.usage.cache_creation_input_tokens or 0, reply.usage.cache_read_input_tokens or 0)
    msg_id = turn.id or ids.message()
    model = turn.model or str(effective.get("model", "claude-sonnet-5"))
    crash = reply is not None and reply.crash
    body_json: bytes | None = None
    if not openai and not req.stream and not crash:
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
    return Answer(turn, message, body_json, rec, msg_id, model, input_tokens, output_tokens, cache, crash)


def planned(answer: Answer, req: Request, request_id: str, chat: _Chat | None) -> Planned:
    """How ``answer`` goes out: on the wire the loop called, or a crash before the loop reads it."""
    rec, latency = answer.rec, answer.rec.latency
    if answer.crash:  # answered, and the process dies before the loop reads it
        rec.fault = "crash"
        return Planned(headers=[JSON, ("request-id", request_id)], latency=latency, record=rec, raise_="crash")
    if chat is not None:
        return chat.planned(answer.turn, answer.message, rec, request_id, latency, stream=req.stream)
    if req.stream:
        events = render_sse(answer.turn, id=answer.msg_id, model=answer.model, input_tokens=answer.input_tokens,
                            output_tokens=answer.output_tokens, cache=answer.cache, message=answer.message)
        return Planned(headers=[SSE, ("request-id", request_id)], events=events, latency=latency, record=rec)
    body = answer.body_json if answer.body_json is not None else to_json(answer.message)
    return Planned(headers=[JSON, ("request-id", request_id)], body=body, latency=latency, record=rec)


def plain(reply: Reply | None, kind: str | None, req: Request, body: dict[str, Any], ids: Ids, request_id: str,
          seen: frozenset[str]) -> tuple[Planned, Lane | None] | None:
    """The fast lane's answer to a scripted reply of text or tool calls, and the lane it opens (`offer`; ``seen``:
    the tool_use ids of ``body``'s history): its turn made at once, as `make_turn` makes it (the same draws, in their
    order), without its general cases, which the lane rules out or this leaves to it (None): a server call the
    history leaves running (the lane's history holds none), thinking, or a reply with a usage, a crash or server
    calls."""
    if reply is None or kind not in ("tool_use", "end_turn"):
        return None
    cfg = body.get("thinking")
    if (reply.usage is not None or reply.crash or reply.server_tools
            or (isinstance(cfg, dict) and cfg.get("type") in ("enabled", "adaptive"))):
        return None
    text = reply.text if kind == "tool_use" else reply.end_turn
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if kind == "tool_use":
        for call in reply.tool_use or ():
            content.append({"type": "tool_use", "id": ids.tool_use(), "name": call.name, "input": dict(call.input)})
    composed = compose(req, Turn(content=content, stop_reason=kind), reply, body, ids, openai=False)
    return planned(composed, req, request_id, None), offer(body, composed.message, seen)
