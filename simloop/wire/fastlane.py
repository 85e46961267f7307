"""The fast lane: a tool loop's next request, when it is the previous one plus simloop's own reply and its results.

Most model calls of a tool loop send the previous request again with two messages appended: the assistant
message simloop just answered, as it answered it, and a user message of nothing but the tool_results for its
tool_use blocks.  Such a request passes every rule of the full check (`simloop.protocol.validate`) exactly when
the previous request did and those two messages are as below, so the server answers it without walking the rules
(`SimServer`): what is read of it is the parser's proof that the bytes extend the previous body (`_BodyParser`),
the two messages, and the tool_use ids of the history (once per conversation).

Why it is exact: the previous request passed the full check and ended with a user message; the rules then read
the same head (model, tools, system, thinking, ...: the same bytes) and the same history; what they would read of
the two new messages is what `offer` and `Lane.admit` demand of them (plain text and tool_use blocks with valid,
new, distinct ids, thinking blocks as simloop signs them; a user turn answering each call once, in any order, with
results that are strings or lists of plain text blocks; no cache_control, no citations, no server tools anywhere
in the history).  With thinking on, the reply must open with its thinking block: the tool turn the rule reads then
opens either with it or, when the last genuine user turn lies further back, where it opened in the previous
request, which passed.  Anything else is left to the full path, which stays the oracle: `tests/test_fastlane.py`
runs both on generated histories and edge bodies and demands the same bytes, transcript and verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from simloop.protocol.validate import _ID_RE, context_window, thinking_signature
from simloop.wire.bodies import _BodyParser, estimate_tokens

__all__ = ["Lane", "offer"]

_TEXT_KEYS = frozenset({"type", "text"})
_USE_KEYS = frozenset({"type", "id", "name", "input"})
_THINKING_KEYS = frozenset({"type", "thinking", "signature"})
_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error"})
#: Block types of a history the lane may extend: none of them is a server tool's (whose calls a request may leave
#: in flight only just before its final user turn, a rule the two appended messages would then break).
_PLAIN_BLOCKS = frozenset({"text", "tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"})


class Lane:
    """What the next request must be to take the lane: ``doc`` (the request just answered) plus ``assistant`` (the
    reply, as rendered) and a user turn answering each of ``uses`` (its tool_use ids).  ``seen``: the tool_use
    ids of ``doc``'s history, when known (None: worked out from it when first needed)."""

    __slots__ = ("assistant", "count", "doc", "seen", "uses")

    def __init__(self, doc: dict[str, Any], content: list[Any], uses: frozenset[str], seen: frozenset[str] | None):
        self.doc = doc
        self.assistant = {"role": "assistant", "content": content}
        self.uses = uses
        self.count = len(doc["messages"]) + 2
        self.seen = seen

    def take(
        self, doc: Any, parser: _BodyParser, headers: Mapping[str, str], raw: bytes, settings: Callable[[Any], int],
    ) -> tuple[frozenset[str], int] | None:
        """(the tool_use ids of ``doc``'s history, its input tokens) if the request takes the lane: authenticated,
        `admit`ted, and inside the model's context window by its bytes (``settings``: the bytes of its settings,
        which the model does not read); else None, and the full path decides (it counts what the model reads)."""
        if not (headers.get("x-api-key") or headers.get("authorization", "").startswith("Bearer ")):
            return None
        seen = self.admit(doc, parser)
        if seen is None:
            return None
        tokens = estimate_tokens(len(raw) - settings(doc))
        if tokens > context_window(doc.get("model"), headers.get("anthropic-beta", "")):
            return None
        return seen, tokens

    def admit(self, doc: Any, parser: _BodyParser) -> frozenset[str] | None:
        """The tool_use ids of ``doc``'s history if it takes the lane (else None: the full path decides)."""
        if parser.base is not self.doc or type(doc) is not dict:  # not these bytes plus messages
            return None
        messages = doc["messages"]
        if len(messages) != self.count or messages[-2] != self.assistant:
            return None
        user = messages[-1]
        if type(user) is not dict or len(user) != 2 or user.get("role") != "user":
            return None
        content = user.get("content")
        uses = self.uses
        if type(content) is not list or len(content) != len(uses):
            return None
        answered = set()
        for block in content:
            if type(block) is not dict or block.get("type") != "tool_result" or not block.keys() <= _RESULT_KEYS:
                return None
            result, error = block.get("content"), block.get("is_error")
            if (result is not None and type(result) is not str and not _texts(result)) or (
                    error is not None and type(error) is not bool):
                return None
            answered.add(block.get("tool_use_id"))
        if answered != uses:  # each call answered once (as many results as calls), no stray result
            return None
        seen = self.seen if self.seen is not None else _history_ids(self.doc["messages"])
        if seen is None or not seen.isdisjoint(uses):
            return None
        return seen | uses


def _texts(result: Any) -> bool:
    """Whether a tool_result's content is a list of plain text blocks (as pydantic-ai sends every result): the rules
    read only each block's type there, and its cache_control (which the lane leaves to the full path)."""
    if type(result) is not list:
        return False
    for block in result:
        if type(block) is not dict or block.keys() != _TEXT_KEYS or block["type"] != "text" or type(block["text"]) is not str:
            return False
    return True


def offer(body: dict[str, Any], message: dict[str, Any], seen: frozenset[str] | None) -> Lane | None:
    """The lane for the request after ``body``, answered with ``message`` (a plain 200), if it can have one."""
    if "thread" in body:  # a thread continuation is expanded: the full path
        return None
    messages = body["messages"]
    last = messages[-1] if messages else None
    if type(last) is not dict or last.get("role") != "user":  # the reply must open a turn of its own
        return None
    content = message.get("content")
    if type(content) is not list or not content:
        return None
    uses: list[str] = []
    for block in content:
        use_id = _plain_block(block)
        if use_id is None:
            return None
        if use_id:
            uses.append(use_id)
    distinct = frozenset(uses)
    if not uses or len(distinct) != len(uses):
        return None
    thinking = body.get("thinking")  # valid (the request passed): with thinking on, a tool turn opens with it
    if type(thinking) is dict and thinking.get("type") in ("enabled", "adaptive") and content[0]["type"] != "thinking":
        return None
    return Lane(body, content, distinct, seen)


def _plain_block(block: Any) -> str | None:
    """A reply's block the rules pass wherever it stands: its tool_use id, "" for text or signed thinking; None:
    anything else (blank text, a server tool's block, cache_control, citations, ...)."""
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return "" if block.keys() == _TEXT_KEYS and type(text) is str and text and not text.isspace() else None
    if kind == "tool_use":
        use_id = block.get("id")
        if (block.keys() != _USE_KEYS or type(use_id) is not str or _ID_RE.fullmatch(use_id) is None
                or type(block.get("name")) is not str or type(block.get("input")) is not dict):
            return None
        return use_id
    if kind == "thinking":
        text = block.get("thinking")
        if block.keys() == _THINKING_KEYS and type(text) is str and block.get("signature") == thinking_signature(text):
            return ""
    return None


def _history_ids(messages: list[Any]) -> frozenset[str] | None:
    """The tool_use ids of a history that passed the full check, or None if it holds any block not plain."""
    seen: set[str] = set()
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        if type(content) is list:
            for block in content:
                kind = block.get("type") if type(block) is dict else None
                if kind == "tool_use":
                    seen.add(block["id"])
                elif kind not in _PLAIN_BLOCKS:
                    return None
    return frozenset(seen)
