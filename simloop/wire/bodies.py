"""Reading request bodies: the incremental parse, the call each body belongs to, and its input tokens.

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
from typing import Any

from pydantic_core import from_json, to_json

__all__ = ["CallNumbers", "estimate_tokens", "request_tokens"]


class _BodyParser:
    """Parses the bodies of one conversation's requests, sharing the unchanged history.

    It keeps the previous ``/v1/messages`` body, its parse and where its ``messages`` array ends.
    When the next body is those same bytes with messages added at the end of that array (what
    the SDK sends as a loop appends to its history), only the added messages are parsed; the
    history and every other field are the previous parse's objects.  Any other body gets a full
    parse.  The result always equals ``from_json(body)``; invalid JSON raises its ValueError.
    """

    __slots__ = ("_doc", "_end", "_raw", "base", "last", "settings_bytes")

    def __init__(self) -> None:
        self._raw = b""  # the previous body, once located
        self._doc: dict[str, Any] = {}  # its parse
        self._end = -1  # offset in _raw of the `]` closing _doc["messages"]; -1: nothing to extend
        self.last: Any = None  # the latest parse returned
        #: the parse ``last`` extends (its bytes with messages added at the end of its array), else None
        self.base: dict[str, Any] | None = None
        #: `_settings_bytes` of ``last``, once worked out (-1: not yet).  An extended body has the previous
        #: one's head and tail bytes, so the same settings (the same objects): the count is kept, not redone.
        self.settings_bytes = -1

    def parse(self, body: bytes) -> Any:
        self.base = None
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
        self.base = self._doc
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


class CallNumbers:
    """Which logical model call each request is: SDK retries (retry count > 0) belong to the call whose body they
    repeat; a body sent again as a new call (retry count 0) starts a new call, which the body then belongs to."""

    __slots__ = ("_by_size", "_known", "calls")

    def __init__(self) -> None:
        self.calls = 0  # logical model calls
        # body -> the latest call that sent it (at most 65 bodies), kept by length: a body only ever matches
        # one of its own length.  A body up to `_KEPT_BODY` bytes is kept as itself (the same bytes object,
        # compared with ``==`` only when a body of its length comes again), a larger one as its digest: no
        # hash on the common path (a new body of a new length), and at most some 4 MiB held.
        self._by_size: dict[int, list[tuple[bytes, bool, int]]] = {}  # size -> [(body or digest, hashed, call)]
        self._known = 0

    def number(self, attempt: int, body: bytes) -> int:
        """The call ``body`` (a model call's request, sent as retry ``attempt``) belongs to."""
        size = len(body)
        same_size = self._by_size.get(size)
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
                    if self._known > 64:
                        break  # forgotten below with every other body, then kept anew
                    # the same body sent again as a new call: it now belongs to this one
                    self.calls += 1
                    same_size[k] = (sent, hashed, self.calls)
                    return self.calls
        self.calls += 1
        if self._known > 64:
            self._by_size.clear()
            self._known = 0
            same_size = None
        # kept: the body itself while small (bytes are immutable; no hash), else a digest, not a body of up to 32 MB
        if size <= _KEPT_BODY and type(body) is bytes:
            entry = (body, False, self.calls)
        else:
            entry = (digest if digest is not None else _digest(body), True, self.calls)
        if same_size is None:
            self._by_size[size] = [entry]
        else:
            same_size.append(entry)
        self._known += 1
        return self.calls


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


#: The largest request body `CallNumbers` keeps as itself (65 at most): larger ones are kept as a digest.
_KEPT_BODY = 64 * 1024


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()
