"""Render one simulated model reply as the real Messages API does: a Message JSON body or an SSE stream.

The simulator decides *what* the model answers as a :class:`Turn` (content blocks exactly as in a
Message JSON, plus the stop reason).  This module turns that into wire bytes the official SDK parses
exactly as it parses real traffic, and back: :func:`turn_from_message` and :func:`turn_from_sse` take
recorded responses apart so cassettes can be replayed and so the renderers can be checked against
real recordings (``tests/test_fidelity_responses.py``).

What follows the real wire (2025-26 recordings under ``shared/data/cassettes``):

* Message key order ``id, type, role, model, content, stop_reason, stop_sequence, stop_details, usage``;
  ``stop_details`` is always present (null unless a refusal), as in current traffic.
* The computed usage has the full current shape (cache fields 0, ``cache_creation``, ``service_tier``
  ``standard``, ``inference_geo`` ``not_available``, ``output_tokens_details``), and ``server_tool_use``
  (web search and fetch requests run) when the reply holds server tool blocks.
* Streams: ``message_start`` (empty content, full usage with ``output_tokens`` 1), per block
  ``content_block_start`` / deltas / ``content_block_stop``, one ``ping`` right after the first block
  start, ``message_delta`` (cumulative usage; ``container`` in the delta, ``context_management`` beside
  it) and ``message_stop``.  Tool inputs stream as an empty ``input_json_delta`` then chunks; thinking
  as ``thinking_delta`` chunks then one ``signature_delta``; text with citations starts with
  ``"citations": []`` and gets one ``citations_delta`` each; compaction starts with ``content: null``
  and gets one ``compaction_delta``; every other block (redacted thinking, server tool results, ...)
  arrives whole in its ``content_block_start``.

Performance matters (the simulator must add little to the SDK's ~1 ms per call), so this is plain
dicts serialised with ``pydantic_core.to_json`` (compact, UTF-8, insertion order; the same bytes as
``json.dumps(separators=(",", ":"), ensure_ascii=False)`` up to float exponent spelling, several
times faster) and byte templates for the many small delta events; no pydantic models here.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jiter
from pydantic_core import to_json

__all__ = [
    "CUT_STOPS",
    "Turn",
    "render_error_event",
    "render_json",
    "render_message",
    "render_sse",
    "turn_from_message",
    "turn_from_sse",
]

#: The stop reasons of a reply cut off mid-way (Anthropic's stop-reason table): at the request's ``max_tokens``, or
#: because the response filled the model's context window ("treat it as truncated").
CUT_STOPS: tuple[str, ...] = ("max_tokens", "model_context_window_exceeded")

# Blocks whose `input` streams as input_json_delta chunks.
_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
# Top-level Message keys Turn models explicitly; everything else a recording carries goes to Turn.extra.
_MESSAGE_KEYS = frozenset(
    {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "stop_details", "usage"}
)
# Usage keys the real stream sends only in message_delta (the SDK copies them from there).
_DELTA_ONLY_USAGE = frozenset({"server_tool_use", "output_tokens_details"})
# Usage keys sent in message_delta, in the real order.
_DELTA_USAGE_ORDER = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "output_tokens_details",
    "server_tool_use",
    "iterations",
    "fallback_credit",
)
# A text chunk is at least this many characters, then runs on to the next space (at most _CHUNK_RUN
# more), so deltas look like the real "a few words" chunks and every non-trivial reply has several.
_CHUNK = 24
_CHUNK_RUN = 16

_PING = b'event: ping\ndata: {"type": "ping"}\n\n'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
_BLOCK_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
# Templates: one %-format is several times faster than serialising a nested dict for every delta.
_DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":%s}\n\n'
_TEXT_DELTA = b'{"type":"text_delta","text":%s}'
_THINKING_DELTA = b'{"type":"thinking_delta","thinking":%s}'
_SIGNATURE_DELTA = b'{"type":"signature_delta","signature":%s}'
_JSON_DELTA = b'{"type":"input_json_delta","partial_json":%s}'
_CITATION_DELTA = b'{"type":"citations_delta","citation":%s}'


@dataclass(slots=True)
class Turn:
    """One assistant reply at the wire level: content blocks exactly as in a Message JSON.

    ``stop_reason`` is ``end_turn``, ``tool_use``, ``max_tokens``, ``stop_sequence``, ``refusal``,
    ``pause_turn``, ... or ``None`` for a stream that was cut before its ``message_delta`` (then
    :func:`render_sse` ends after the last block and sends no ``message_delta``/``message_stop``).

    ``usage`` is a full usage dict; ``None`` means the renderers compute one from the token counts
    they are given.  ``id`` and ``model``, when set, win over the renderers' arguments.  ``extra``
    holds other top-level Message fields a recording carried (``container``, ``context_management``,
    ``diagnostics``, ...); they are rendered verbatim.

    A reply cut at ``max_tokens`` in the middle of a tool call carries, instead of a complete
    ``input``, the cut-off JSON text in a ``"partial_json"`` key of that tool_use block, e.g.
    ``{"type": "tool_use", "id": "toolu_1", "name": "write", "partial_json": '{"path": "/tmp/a", "te'}``.
    :func:`render_json` renders its ``input`` as the best-effort parse of that text (jiter partial
    mode, which keeps the complete-so-far object: ``{"path": "/tmp/a"}``), and :func:`render_sse`
    streams exactly that text as ``input_json_delta`` chunks, from which the SDK's partial parser
    builds the same ``input``.

    Example::

        Turn(content=[{"type": "text", "text": "Done."}], stop_reason="end_turn")
    """

    content: list[dict[str, Any]]
    stop_reason: str | None
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    id: str | None = None
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _partial_input(block: dict[str, Any]) -> Any:
    """What the SDK's stream accumulator builds from a cut-off tool input: jiter's partial parse."""
    text = block["partial_json"]
    if not text:
        return {}
    try:
        return jiter.from_json(text.encode(), partial_mode=True)
    except ValueError as exc:
        raise ValueError(
            f"{block.get('type')} block {block.get('id')!r}: partial_json must be the beginning of a JSON "
            f'object, like \'{{"path": "/tmp/a\'; got {text!r} ({exc})'
        ) from exc


def _wire_content(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content as a Message JSON shows it: partial tool inputs resolved to their parsed prefix."""
    out: list[dict[str, Any]] | None = None
    for i, block in enumerate(content):
        if "partial_json" in block:
            if out is None:
                out = list(content[:i])
            resolved = {k: v for k, v in block.items() if k != "partial_json"}
            resolved["input"] = _partial_input(block)
            out.append(resolved)
        elif out is not None:
            out.append(block)
    return content if out is None else out


def _estimate_tokens(chars: int) -> int:
    return -(-chars // 4)


def _computed_usage(
    content: list[dict[str, Any]], input_tokens: int, output_tokens: int | None, cache: tuple[int, int] = (0, 0),
    content_json: bytes | None = None,
) -> dict[str, Any]:
    thinking_chars = 0
    searches = fetches = -1  # -1: no server tool block in the reply (then no server_tool_use usage)
    for block in content:
        kind = block.get("type")
        if kind == "thinking":
            thinking_chars += len(block.get("thinking") or "")
        elif kind == "redacted_thinking":
            thinking_chars += len(block.get("data") or "")
        elif kind == "server_tool_use" or (kind is not None and kind.endswith("_tool_result") and kind != "tool_result"):
            searches, fetches = max(searches, 0), max(fetches, 0)
            # the requests the server ran for this reply: one per result (a paused call's comes with the continuation)
            searches += kind == "web_search_tool_result"
            fetches += kind == "web_fetch_tool_result"
    if output_tokens is None:
        # Deterministic stand-in for a tokenizer: a token is about four characters of the content JSON.
        if not content:
            output_tokens = 0
        else:
            output_tokens = _estimate_tokens(len(content_json if content_json is not None else to_json(content)))
    usage: dict[str, Any] = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache[0],
        "cache_read_input_tokens": cache[1],
        "cache_creation": {"ephemeral_5m_input_tokens": cache[0], "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"thinking_tokens": min(output_tokens, _estimate_tokens(thinking_chars))},
        "service_tier": "standard",
        "inference_geo": "not_available",
    }
    if searches >= 0:
        # As recorded when server tools run (pydantic-ai web search/fetch cassettes); SDK 2.x requires both counts.
        usage["server_tool_use"] = {"web_search_requests": searches, "web_fetch_requests": fetches}
    return usage


def render_message(
    turn: Turn, *, id: str, model: str, input_tokens: int, output_tokens: int | None = None,
    cache: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """The complete Message dict the real API returns for ``turn``.

    ``turn.id``, ``turn.model`` and ``turn.usage`` win over ``id``, ``model`` and the token counts.
    Without ``output_tokens`` the count is computed from the content size: a quarter of the length
    of the content's compact JSON in bytes, rounded up (0 for empty content).

    Raises:
        ValueError: a tool block's ``partial_json`` is not the beginning of a JSON document.
    """
    content = _wire_content(turn.content)
    message: dict[str, Any] = {
        "id": turn.id or id,
        "type": "message",
        "role": "assistant",
        "model": turn.model or model,
        "content": content,
        "stop_reason": turn.stop_reason,
        "stop_sequence": turn.stop_sequence,
        "stop_details": turn.stop_details,
        "usage": turn.usage if turn.usage is not None else _computed_usage(content, input_tokens, output_tokens, cache),
    }
    if turn.extra:
        message.update(turn.extra)
    return message


def render_message_json(
    turn: Turn, *, id: str, model: str, input_tokens: int, output_tokens: int | None = None,
    cache: tuple[int, int] = (0, 0),
) -> tuple[dict[str, Any], bytes]:
    """`render_message`'s dict and its compact JSON (``to_json(message)``), the content serialized once.

    The content's JSON is both the output-token count's measure and part of the body: the message is
    serialized without it and the content's JSON put in its place, not serialized a second time.
    """
    content = _wire_content(turn.content)
    content_json = to_json(content)
    message: dict[str, Any] = {
        "id": turn.id or id,
        "type": "message",
        "role": "assistant",
        "model": turn.model or model,
        "content": None,  # (its JSON goes in below)
        "stop_reason": turn.stop_reason,
        "stop_sequence": turn.stop_sequence,
        "stop_details": turn.stop_details,
        "usage": turn.usage if turn.usage is not None
        else _computed_usage(content, input_tokens, output_tokens, cache, content_json),
    }
    if turn.extra:  # may replace any field, in its place: serialized whole
        message["content"] = content
        message.update(turn.extra)
        return message, to_json(message)
    body = to_json(message)
    message["content"] = content  # the same key, in its place
    # The first '"content":null' is the top-level field's: only strings come before it (id, type, role, model),
    # and in a JSON string every quote is escaped, so the text cannot occur inside one.
    return message, body.replace(b'"content":null', b'"content":' + content_json, 1)


def render_json(turn: Turn, *, id: str, model: str, input_tokens: int, output_tokens: int | None = None) -> bytes:
    """The non-streaming response body for ``turn``: compact JSON bytes (see :func:`render_message`)."""
    message = render_message(turn, id=id, model=model, input_tokens=input_tokens, output_tokens=output_tokens)
    return to_json(message)


def _event(name: bytes, payload: dict[str, Any]) -> bytes:
    return b"event: " + name + b"\ndata: " + to_json(payload) + b"\n\n"


def _chunks(text: str) -> list[str]:
    """Split text into deterministic delta chunks of a few words each (no empty chunks)."""
    n = len(text)
    if n <= _CHUNK:
        return [text] if text else []
    out: list[str] = []
    start = 0
    while start < n:
        end = start + _CHUNK
        if end >= n:
            out.append(text[start:])
            break
        space = text.find(" ", end, end + _CHUNK_RUN)
        if space != -1:
            end = space
        out.append(text[start:end])
        start = end
    return out


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    """content_block_start, its deltas and content_block_stop for one block, as the real stream sends them."""
    kind = block.get("type")
    deltas: list[bytes] = []
    if kind == "text":
        start = dict(block)
        start["text"] = ""
        citations = block.get("citations")
        if citations is not None:
            start["citations"] = []
            for citation in citations:
                deltas.append(_DELTA % (index, _CITATION_DELTA % to_json(citation)))
        for chunk in _chunks(block.get("text", "")):
            deltas.append(_DELTA % (index, _TEXT_DELTA % to_json(chunk)))
    elif kind == "thinking":
        start = dict(block)
        start["thinking"] = ""
        start["signature"] = ""
        for chunk in _chunks(block.get("thinking", "")):
            deltas.append(_DELTA % (index, _THINKING_DELTA % to_json(chunk)))
        deltas.append(_DELTA % (index, _SIGNATURE_DELTA % to_json(block.get("signature", ""))))
    elif kind in _TOOL_BLOCKS:
        start = {k: v for k, v in block.items() if k != "partial_json"}
        start["input"] = {}
        partial = block.get("partial_json")
        text = partial if partial is not None else to_json(block.get("input", {})).decode()
        deltas.append(_DELTA % (index, _JSON_DELTA % b'""'))
        for chunk in _chunks(text):
            deltas.append(_DELTA % (index, _JSON_DELTA % to_json(chunk)))
    elif kind == "compaction":
        start = {k: v for k, v in block.items() if k != "encrypted_content"}
        start["content"] = None
        delta: dict[str, Any] = {"type": "compaction_delta", "content": block.get("content")}
        if "encrypted_content" in block:
            delta["encrypted_content"] = block["encrypted_content"]
        deltas.append(_DELTA % (index, to_json(delta)))
    else:
        start = block
    events = [_event(b"content_block_start", {"type": "content_block_start", "index": index, "content_block": start})]
    events.extend(deltas)
    events.append(_BLOCK_STOP % index)
    return events


def render_sse(
    turn: Turn, *, id: str, model: str, input_tokens: int, output_tokens: int | None = None,
    cache: tuple[int, int] = (0, 0), message: dict[str, Any] | None = None,
) -> list[bytes]:
    """The streaming response for ``turn``: one ``event: X\\ndata: {...}\\n\\n`` bytes item per SSE event.

    The items come in the real order, so a transport can cut the stream or inject an error between
    any two of them.  The SDK accumulates them into the same Message :func:`render_json` gives
    (``message``: that Message, when it is rendered already, with these arguments).
    """
    if message is None:
        message = render_message(turn, id=id, model=model, input_tokens=input_tokens, output_tokens=output_tokens,
                                 cache=cache)
    cut = turn.stop_reason is None
    events = [_message_start(turn, message, cut=cut)]
    for index, block in enumerate(turn.content):
        events.extend(_block_events(index, block))
        if index == 0:
            events.insert(2, _PING)
    if cut:
        return events
    events.append(_message_delta(turn, message["usage"]))
    events.append(_MESSAGE_STOP)
    return events


def _message_start(turn: Turn, message: dict[str, Any], *, cut: bool) -> bytes:
    """The ``message_start`` event: the message without its content and ending, with the usage known so far."""
    usage: dict[str, Any] = message["usage"]
    if cut:
        # No message_delta will follow, so message_start must already carry the final usage.
        start_usage = dict(usage)
    else:
        start_usage = {k: v for k, v in usage.items() if k not in _DELTA_ONLY_USAGE}
        final_output = usage.get("output_tokens") or 0
        start_usage["output_tokens"] = min(final_output, 1)
    # After a fallback the stream starts under the requested model (the first hop's ``from``) and the
    # SDK relabels the message when the fallback block arrives; the rendered JSON names the last ``to``.
    hops = _fallback_models(turn.content) if turn.content else []
    first = hops[0][0] if hops else None
    start_message: dict[str, Any] = {
        "id": message["id"],
        "type": "message",
        "role": "assistant",
        "model": first if isinstance(first, str) else message["model"],
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": start_usage,
    }
    for key, value in turn.extra.items():
        # The real stream sends container and context_management only with message_delta.
        if key not in ("container", "context_management") or (cut and value is not None):
            start_message[key] = value
    return _event(b"message_start", {"type": "message_start", "message": start_message})


def _message_delta(turn: Turn, usage: dict[str, Any]) -> bytes:
    """The ``message_delta`` event: the ending, the final usage, and the container and context management."""
    delta: dict[str, Any] = {
        "stop_reason": turn.stop_reason,
        "stop_sequence": turn.stop_sequence,
        "stop_details": turn.stop_details,
    }
    container = turn.extra.get("container")
    if container is not None:
        delta["container"] = container
    delta_usage = {k: usage[k] for k in _DELTA_USAGE_ORDER if k in usage}
    message_delta: dict[str, Any] = {"type": "message_delta", "delta": delta, "usage": delta_usage}
    context_management = turn.extra.get("context_management")
    if context_management is not None:
        message_delta["context_management"] = context_management
    return _event(b"message_delta", message_delta)


def render_error_event(error_type: str, message: str, request_id: str | None = None) -> bytes:
    """The ``event: error`` item the real API sends mid-stream (e.g. ``overloaded_error``, ``Overloaded``).

    The SDK raises it as ``APIStatusError`` with ``status_code`` 200 and does not retry it.
    """
    payload: dict[str, Any] = {"type": "error", "error": {"type": error_type, "message": message}}
    if request_id is not None:
        payload["request_id"] = request_id
    return _event(b"error", payload)


def turn_from_message(message: dict[str, Any]) -> Turn:
    """Take a recorded Message JSON apart (keeps id, model, usage and any other top-level fields)."""
    return Turn(
        content=copy.deepcopy(message.get("content") or []),
        stop_reason=message.get("stop_reason"),
        stop_sequence=message.get("stop_sequence"),
        stop_details=copy.deepcopy(message.get("stop_details")),
        usage=copy.deepcopy(message.get("usage")),
        id=message.get("id"),
        model=message.get("model"),
        extra={k: copy.deepcopy(v) for k, v in message.items() if k not in _MESSAGE_KEYS},
    )


def _sse_events(text: str) -> list[tuple[str | None, str]]:
    """Split an SSE body into (event name, data) pairs, per the SSE spec (any line ending, comments)."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    data: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                events.append((name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    if data:
        events.append((name, "\n".join(data)))
    return events


class _Accumulator:
    """Builds a Turn from stream events the way the SDK's MessageStream builds its final Message."""

    __slots__ = ("blocks", "buffers", "extra", "message", "stop_details", "stop_reason", "stop_sequence", "usage")

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message
        self.blocks: list[dict[str, Any]] = []
        self.buffers: dict[int, list[str]] = {}
        self.usage: dict[str, Any] | None = copy.deepcopy(message.get("usage"))
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.stop_details: dict[str, Any] | None = None
        self.extra = {k: copy.deepcopy(v) for k, v in message.items() if k not in _MESSAGE_KEYS}

    def block_start(self, event: dict[str, Any]) -> None:
        block = copy.deepcopy(event["content_block"])
        index = event.get("index", len(self.blocks))
        while len(self.blocks) < index:  # tolerate a skipped index rather than misplace later deltas
            self.blocks.append({"type": "text", "text": ""})
        if index < len(self.blocks):
            self.blocks[index] = block
        else:
            self.blocks.append(block)

    def block_delta(self, event: dict[str, Any]) -> None:
        index = event["index"]
        block = self.blocks[index]
        delta = event["delta"]
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
        elif kind == "input_json_delta":
            self.buffers.setdefault(index, []).append(delta["partial_json"])
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta":
            if block.get("citations"):
                block["citations"].append(delta["citation"])
            else:
                block["citations"] = [delta["citation"]]
        elif kind == "compaction_delta":
            block["content"] = delta.get("content")
            if "encrypted_content" in delta:
                block["encrypted_content"] = delta["encrypted_content"]
        # Unknown delta types are ignored, as the SDK ignores them.

    def block_stop(self, index: int) -> None:
        parts = self.buffers.pop(index, None)
        if not parts:
            return
        text = "".join(parts)
        if not text:
            return
        block = self.blocks[index]
        try:
            block["input"] = json.loads(text)
        except ValueError:
            # Cut off mid-input (max_tokens or a cut stream): keep the text, see Turn.
            block.pop("input", None)
            block["partial_json"] = text

    def message_delta(self, event: dict[str, Any]) -> None:
        delta = event.get("delta") or {}
        self.stop_reason = delta.get("stop_reason")
        self.stop_sequence = delta.get("stop_sequence")
        self.stop_details = delta.get("stop_details")
        if delta.get("container") is not None:
            self.extra["container"] = delta["container"]
        for key in ("context_management", "input_transformations"):
            if event.get(key) is not None:
                self.extra[key] = event[key]
        usage = event.get("usage") or {}
        if self.usage is None:
            self.usage = {}
        # Usage on message_delta is cumulative: present values overwrite, absent ones keep the start's.
        for key, value in usage.items():
            if value is not None or key == "output_tokens":
                self.usage[key] = value

    def turn(self) -> Turn:
        for index in list(self.buffers):
            self.block_stop(index)
        return Turn(
            content=self.blocks,
            stop_reason=self.stop_reason,
            stop_sequence=self.stop_sequence,
            stop_details=self.stop_details,
            usage=self.usage,
            id=self.message.get("id"),
            model=_fallen_back_to(self.blocks) or self.message.get("model"),
            extra=self.extra,
        )


def _fallback_models(content: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """(from model, to model) of each ``fallback`` block, in order."""
    hops: list[tuple[Any, Any]] = []
    for block in content:
        if block.get("type") == "fallback":
            src, dst = block.get("from"), block.get("to")
            hops.append((src.get("model") if isinstance(src, dict) else None,
                         dst.get("model") if isinstance(dst, dict) else None))  # fmt: skip
    return hops


def _fallen_back_to(content: list[dict[str, Any]]) -> str | None:
    """The model the last ``fallback`` block hands over to: the SDK relabels a streamed message with it."""
    hops = _fallback_models(content)
    last = hops[-1][1] if hops else None
    return last if isinstance(last, str) else None


def turn_from_sse(body: bytes | str) -> Turn:
    """Take a recorded SSE stream apart by accumulating its events into a :class:`Turn`.

    Tolerates padded JSON, pings, unknown events and any line ending.  Events without an ``event:``
    line are skipped, as the SDK skips them.  A stream cut before ``message_delta`` (or ended by an
    ``error`` event) gives a Turn with ``stop_reason`` None; a tool input cut mid-JSON is kept as
    ``partial_json`` (see :class:`Turn`).

    Raises:
        ValueError: the body has no ``message_start`` event, or one is not valid JSON.
    """
    text = body.decode() if isinstance(body, bytes) else body
    acc: _Accumulator | None = None
    for name, data in _sse_events(text):
        if name is None or name == "ping":
            continue
        if name == "error":
            break
        event = json.loads(data)
        if acc is None:
            if name == "message_start":
                acc = _Accumulator(event["message"])
            continue
        if name == "content_block_start":
            acc.block_start(event)
        elif name == "content_block_delta":
            acc.block_delta(event)
        elif name == "content_block_stop":
            acc.block_stop(event["index"])
        elif name == "message_delta":
            acc.message_delta(event)
        elif name == "message_stop":
            break
    if acc is None:
        raise ValueError("not a Messages stream: no `event: message_start` with data found")
    return acc.turn()
