"""The Messages API's failures, planned: its error envelope, the simulator's own refusals, a recorded error
served again, and the scripted faults (an HTTP status, a dropped connection, a timeout, a stream cut or a
stream that ends in an error event)."""

from __future__ import annotations

import json
from typing import Any

from simloop.models import Ids, ModelRequest, RecordedError, turn_from_reply
from simloop.protocol.errors import error_body, error_headers
from simloop.protocol.render import render_error_event, render_sse
from simloop.protocol.validate import Rejection
from simloop.scenario import Reply
from simloop.transcript import Request, Response
from simloop.wire.openai_wires import _Chat
from simloop.wire.planned import FRAMING_HEADERS, SSE, Planned

__all__ = ["error", "fault", "recorded_error", "reject"]


def error(
    req: Request,
    status: int,
    request_id: str,
    *,
    message: str,
    type: str = "invalid_request_error",
    details: dict[str, Any] | None = None,
    rejection: Rejection | None = None,
) -> Planned:
    """An error in the Messages API's envelope, recorded as a refusal (``rejection``: the rule that refused)."""
    payload = error_body(status, request_id=request_id, message=message, type=type, details=details)
    rec = Response(
        t=0.0, index=req.index, call=req.call, status=status, kind="rejected", error=json.loads(payload),
        fault="http",
    )
    if rejection is not None:
        rec.rejection = {"status": status, "type": type, "message": message, "path": rejection.path}
    return Planned(status=status, headers=error_headers(status, request_id=request_id), body=payload, record=rec)


def reject(req: Request, rejection: Rejection, request_id: str) -> Planned:
    """The real API's answer to a request the simulator refuses."""
    return error(
        req, rejection.status, request_id, message=rejection.message, type=rejection.type,
        details=rejection.details, rejection=rejection,
    )


def recorded_error(req: Request, answer: RecordedError) -> Planned:
    """A recorded error, served with its recorded headers and body (framing headers left to the transport)."""
    try:
        error = json.loads(answer.body) if answer.body else None
    except ValueError:
        error = None
    rec = Response(
        t=0.0, index=req.index, call=req.call, status=answer.status, kind="error", fault="http",
        error=error if isinstance(error, dict) else None,
    )
    headers = [(k, v) for k, v in answer.headers if k.lower() not in FRAMING_HEADERS]
    rec.latency = answer.latency
    return Planned(status=answer.status, headers=headers, body=answer.body, latency=answer.latency, record=rec)


def fault(
    req: Request, reply: Reply, mreq: ModelRequest, request_id: str, ids: Ids, *, chat: _Chat | None = None,
) -> Planned:
    """A scripted fault (``reply.error``) as the loop meets it on the wire it called (``chat``: an OpenAI one's)."""
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
    return _broken_stream(req, reply, mreq, request_id, ids, rec, chat)


def _broken_stream(
    req: Request, reply: Reply, mreq: ModelRequest, request_id: str, ids: Ids, rec: Response, chat: _Chat | None,
) -> Planned:
    """A stream that starts well and then fails: the model was writing an answer."""
    err = reply.error
    partial = turn_from_reply(Reply(end_turn="Let me look into that and get back with the details."), mreq, ids)
    if chat is not None:
        return chat.broken_stream(partial, ids.message(), rec, request_id, reply.latency, error=err == "stream_error")
    events = render_sse(partial, id=ids.message(), model=str(mreq.body.get("model")), input_tokens=req.input_tokens)
    cut = min(4, len(events) - 2)
    rec.status = 200
    planned = Planned(headers=[SSE, ("request-id", request_id)], events=events, cut_after=cut,
                      latency=reply.latency, record=rec)
    if err == "stream_error":
        rec.error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        planned.error_event = render_error_event("overloaded_error", "Overloaded", request_id)
    return planned
