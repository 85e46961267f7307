"""Scrubbing: the hooks that keep secrets off the disk when a cassette is recorded."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from simloop.errors import UsageError

#: Request headers that carry credentials (SDK 2.x sends the key as ``Authorization: Bearer``).
SECRET_REQUEST_HEADERS = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "anthropic-api-key", "api-key", "x-goog-api-key",
    "cookie", "anthropic-organization-id", "openai-organization", "openai-project",
})
#: Response headers that identify the account or set a session.
SECRET_RESPONSE_HEADERS = frozenset({
    "set-cookie", "anthropic-organization-id", "anthropic-workspace-id", "openai-organization", "openai-project",
    "x-goog-api-key",
})
# Key-shaped strings, wherever they appear (a body, a custom header): Anthropic keys, and the generic
# ``sk-`` + 20 characters of other providers.  The boundary before a key is judged on the data, not on
# the wire bytes: a key may follow a letter or digit that belongs to an escape (the ``n`` of a JSON
# ``\n``, the ``u00e9`` of ``\u00e9``, the ``3D`` of ``%3D``); a real key's prefix (``sk-ant-api03-``,
# ``sk-proj-``) is found after any character at all.
# (Written to start with the literal ``sk-`` so that the regex engine scans for it quickly: the
# boundary is a lookbehind over the ``sk-`` just matched.)
_KEY = (
    rb"sk-(?:(?:(?<![A-Za-z0-9]sk-)|(?<=\\[bfnrt/]sk-)|(?<=\\u[0-9A-Fa-f]{4}sk-)|(?<=%[0-9A-Fa-f]{2}sk-))"
    rb"(?:ant-[A-Za-z0-9_\-]{6,}|[A-Za-z0-9_\-]{20,})"
    rb"|(?:ant-(?:api|admin|oat|sid)[0-9]{2}|proj|svcacct|admin)-[A-Za-z0-9_\-]{20,})"
)
_KEY_PATTERN = re.compile(_KEY)
_REDACTED = b"[REDACTED]"
_ENV_SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
#: Shorter listed secrets are refused: scrubbing them would also rewrite ordinary text.
MIN_SECRET_LENGTH = 8
# Query parameters whose value is a credential whatever it looks like (``?api_key=…``, ``&X-Amz-Signature=…``):
# a name containing one of these words, or equal to one of the short ones.
_SECRET_PARAM_WORDS = ("key", "token", "secret", "password", "passwd", "signature", "credential", "auth")
_SECRET_PARAM_NAMES = frozenset({"sig", "pwd", "code", "session", "sessionid", "sid"})
# JSON's short escapes (RFC 8259), by the character they stand for.
_JSON_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
#: The shortest run of base64 characters a listed secret leaves at every alignment that is scrubbed.
_MIN_BASE64 = 8


def _secret_param(name: str) -> bool:
    name = unquote_plus(name).lower()
    return name in _SECRET_PARAM_NAMES or any(word in name for word in _SECRET_PARAM_WORDS)


def _hex(text: str) -> bytes:
    """A regex matching hex digits ``text`` in either case (``2f`` -> ``2[fF]``)."""
    return b"".join(f"[{c.lower()}{c.upper()}]".encode() if c.isalpha() else c.encode() for c in text)


def _char(ch: str) -> bytes:
    """A regex matching one character in any form the wire gives it, and any mix of them.

    Raw UTF-8; JSON's ``\\uXXXX`` (surrogate pairs for astral characters) and short escapes, behind
    one or more backslashes (JSON inside a JSON string); percent-encoding of each UTF-8 byte, hex in
    either case; ``+`` for a space (form encoding).
    """
    raw = ch.encode("utf-8")
    forms = [re.escape(raw)]
    code = ord(ch)
    units = [code] if code <= 0xFFFF else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]
    forms.append(b"".join(rb"\\+u" + _hex(f"{unit:04x}") for unit in units))
    if ch in _JSON_SHORT:
        forms.append(rb"\\+" + re.escape(_JSON_SHORT[ch].encode()))
    forms.append(b"".join(b"%" + _hex(f"{byte:02x}") for byte in raw))
    if ch == " ":
        forms.append(rb"\+")
    return b"(?:" + b"|".join(forms) + b")"


def _base64_forms(secret: str) -> set[bytes]:
    """The base64 text (standard and urlsafe) a secret's bytes leave at each of the 3 alignments.

    Base64 groups bytes by three, so the encoding of a secret inside longer data depends on its offset
    modulo 3: for each, the characters that only the secret's bits determine.
    """
    data = secret.encode("utf-8")
    forms: set[bytes] = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data)
        start, stop = -(-8 * offset // 6), 8 * (offset + len(data)) // 6
        piece = encoded[start:stop]
        if len(piece) >= _MIN_BASE64:
            forms.add(piece)
            forms.add(piece.replace(b"+", b"-").replace(b"/", b"_"))
    return forms


def _secret_pattern(secret: str) -> bytes:
    """A regex for a listed secret in every form simloop scrubs (`_char` per character, and base64)."""
    spelled = b"".join(_char(ch) for ch in secret)
    forms = sorted(_base64_forms(secret), key=len, reverse=True)
    return b"|".join([spelled, *(re.escape(form) for form in forms)])


class Scrubber:
    """The before-record hooks that keep secrets off the disk (vcrpy's ``before_record_*``).

    Drops credential and account headers (`SECRET_REQUEST_HEADERS`, `SECRET_RESPONSE_HEADERS`),
    replaces key-shaped strings (``sk-ant-…``, wherever they stand: after a JSON escape's letter or a
    percent code too) and every literal in ``secrets`` (plus the values of ``ANTHROPIC_API_KEY``/
    ``ANTHROPIC_AUTH_TOKEN``/``OPENAI_API_KEY`` when set) by ``[REDACTED]`` in the request URI, the
    remaining headers and the bodies, in every form a secret takes there: raw, JSON-escaped (also
    inside a JSON string), percent- or form-encoded (hex in either case, and any mix of these), and
    base64 (standard and urlsafe, at any alignment).  An SSE stream is scrubbed as the text it
    carries: a secret split across deltas is cut out of each of them.  In the URI, the values of
    credential-named query parameters (``api_key``, ``token``, ``secret``, ``signature``, ...) and
    any user:password are replaced too.  vcrpy runs the request hook on every incoming request
    before matching, so recording and replay must share one `Scrubber` (`vcr_config` does).

    Raises:
        UsageError: a listed secret is shorter than `MIN_SECRET_LENGTH` characters (or not a string):
            scrubbing it would rewrite ordinary text, so it is refused rather than silently ignored.
            (An environment variable that short is not a real key and is left alone.)
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        listed = list(secrets) if not isinstance(secrets, str) else [secrets]
        for index, secret in enumerate(listed):
            if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
                what = f"{len(secret)} characters" if isinstance(secret, str) else f"a {type(secret).__name__}"
                raise UsageError(
                    f"secrets[{index}] is {what}: a secret to scrub must be a string of at least "
                    f"{MIN_SECRET_LENGTH} characters (a shorter one would also scrub ordinary text). Pass the "
                    "whole secret, or drop it if it is not one."
                )
        found = [os.environ.get(name, "") for name in _ENV_SECRETS]
        values = {s for s in (*listed, *found) if len(s) >= MIN_SECRET_LENGTH}
        #: The secrets scrubbed besides key-shaped strings (listed, and from the environment), longest first.
        self.secrets = tuple(sorted(values, key=len, reverse=True))
        patterns = [_secret_pattern(v) for v in self.secrets]
        # One pattern per secret for bodies (each scans fast on its own), all in one for a stream's joined text.
        self._patterns = [*(re.compile(p) for p in patterns), _KEY_PATTERN]
        self._pattern = re.compile(b"|".join([*patterns, _KEY]))

    def _text(self, value: bytes) -> bytes:
        for pattern in self._patterns:
            value = pattern.sub(_REDACTED, value)
        return value

    def text(self, value: str) -> str:
        """``value`` with every secret and key-shaped string in it replaced by ``[REDACTED]``."""
        return self._str(value)

    def _str(self, value: str) -> str:
        return self._text(value.encode("utf-8")).decode("utf-8")

    def uri(self, uri: str) -> str:
        """The URI with credentials in its query, its user info and anywhere else replaced."""
        parts = urlsplit(uri)
        netloc = parts.netloc
        if "@" in netloc:
            # Not "[REDACTED]@": brackets in the netloc read as an IPv6 host, and urlsplit refuses the URI.
            netloc = "REDACTED@" + netloc.rsplit("@", 1)[1]
        pairs = []
        for pair in parts.query.split("&") if parts.query else []:
            name, eq, _ = pair.partition("=")
            if eq and _secret_param(name):
                pair = f"{name}=[REDACTED]"
            pairs.append(pair)
        rebuilt = urlunsplit((parts.scheme, netloc, parts.path, "&".join(pairs), parts.fragment))
        return self._str(rebuilt)

    def request(self, request: Any) -> Any:
        """Scrub a ``vcr.request.Request`` (vcrpy passes a deep copy): URI, headers and body."""
        request.uri = self.uri(str(request.uri))
        headers = {k: self._str(str(v)) for k, v in request.headers.items() if k.lower() not in SECRET_REQUEST_HEADERS}
        request.headers = headers
        body = request.body
        if isinstance(body, str):
            body = body.encode("utf-8")
        if isinstance(body, bytes):
            request.body = self._text(body)
        return request

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        """Scrub a vcrpy response dict (``status``, ``headers``, ``body: {string}``)."""
        headers = response.get("headers") or {}
        response["headers"] = {
            k: [self._str(str(v)) for v in (vs if isinstance(vs, list) else [vs])]
            for k, vs in headers.items()
            if str(k).lower() not in SECRET_RESPONSE_HEADERS
        }
        body = response.get("body")
        if isinstance(body, dict):
            value = body.get("string")
            if isinstance(value, str):
                body["string"] = self._str(self._stream(value) if _is_stream(value) else value)
            elif isinstance(value, bytes):
                if _is_stream(value):
                    with contextlib.suppress(UnicodeDecodeError):
                        value = self._stream(value.decode("utf-8")).encode("utf-8")
                body["string"] = self._text(value)
            if body.get("string") != value:
                _fix_length(response["headers"], body["string"])
        return response

    def _stream(self, text: str) -> str:
        """An SSE stream with the secrets its deltas carry between them replaced, event boundaries kept.

        The text each part of the reply spells out over its deltas (`_slots`: a Messages content block's
        ``text``/``partial_json``/``thinking``; a Chat Completions choice's ``content`` and each of its tool
        calls' ``arguments``; a Responses item's ``output_text``, ``function_call_arguments``... deltas) is
        joined, searched as one string, and each match is cut out of the deltas that hold its pieces: the
        first piece becomes ``[REDACTED]``, the others lose their share.  Changed events are written back
        as compact JSON; every other byte of the stream is kept.
        """
        lines = text.split("\n")
        pieces: dict[tuple[Any, ...], list[tuple[int, dict[str, Any], dict[str, Any], str]]] = {}
        for number, line in enumerate(lines):
            if not line.startswith("data:"):
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            for key, holder, field in _slots(event):
                pieces.setdefault(key, []).append((number, event, holder, field))
        changed: dict[int, dict[str, Any]] = {}
        for run in pieces.values():
            texts = [holder[field].encode("utf-8") for _, _, holder, field in run]
            spans = [m.span() for m in self._pattern.finditer(b"".join(texts))]
            start = 0
            for (number, event, holder, field), piece in zip(run, texts, strict=True):
                new = _cut(piece, start, spans)
                if new != piece:
                    holder[field] = new.decode("utf-8")
                    changed[number] = event
                start += len(piece)
        for number, event in changed.items():
            cr = "\r" if lines[number].endswith("\r") else ""
            lines[number] = "data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")) + cr
        return "\n".join(lines)


# The delta fields whose text a content block's deltas spell out between them (the Messages API).
_DELTA_FIELDS = ("text", "partial_json", "thinking")
# The fields of a Chat Completions choice's delta whose text its chunks spell out between them.
_CHAT_FIELDS = ("content", "refusal", "reasoning_content")

Slot = tuple[tuple[Any, ...], dict[str, Any], str]


def _slots(event: Any) -> list[Slot]:
    """The delta texts one stream event carries: (the part of the reply it belongs to, the dict, its field).

    Every wire's stream: the Messages API's ``content_block_delta`` (by block index and field), Chat
    Completions chunks (by choice index, and by tool-call index for ``function.arguments``), and the
    Responses API's ``response.*.delta`` events (by output index, content or summary index and type).
    """
    if not isinstance(event, dict):
        return []
    kind, delta = event.get("type"), event.get("delta")
    if kind == "content_block_delta" and isinstance(delta, dict):
        index = _hashable(event.get("index"))
        return [(("messages", index, f), delta, f) for f in _DELTA_FIELDS if isinstance(delta.get(f), str)]
    if isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta") and isinstance(delta, str):
        part = tuple(_hashable(event.get(k)) for k in ("output_index", "item_id", "content_index", "summary_index"))
        return [(("responses", kind, *part), event, "delta")]
    choices = event.get("choices")
    if not isinstance(choices, list):
        return []
    found: list[Slot] = []
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        index = _hashable(choice.get("index"))
        found += [(("chat", index, f), delta, f) for f in _CHAT_FIELDS if isinstance(delta.get(f), str)]
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                found.append((("chat", index, "tool", _hashable(call.get("index"))), function, "arguments"))
    return found


def _hashable(value: Any) -> Any:
    """An index as a key: a recorded stream is the server's JSON, whatever it holds."""
    return value if isinstance(value, (str, int, float, type(None))) else json.dumps(value, sort_keys=True)


def _is_stream(body: str | bytes) -> bool:
    """Whether a response body is an SSE stream (an ``event:`` or ``data:`` line first)."""
    head = body[:64].lstrip()
    if isinstance(head, bytes):
        return head.startswith((b"event:", b"data:"))
    return head.startswith(("event:", "data:"))


def _fix_length(headers: dict[str, list[str]], body: str | bytes) -> None:
    """Make a recorded ``content-length`` match a body scrubbing changed."""
    size = len(body.encode("utf-8") if isinstance(body, str) else body)
    for key in [k for k in headers if k.lower() == "content-length"]:
        headers[key] = [str(size)]


def _cut(piece: bytes, start: int, spans: list[tuple[int, int]]) -> bytes:
    """A piece of joined text (at ``start``) with its share of each span cut out.

    The piece where a span starts gets ``[REDACTED]`` in its place; later pieces lose their share.
    """
    stop = start + len(piece)
    kept, at = [], start
    for a, b in spans:
        if b <= start or a >= stop:
            continue
        kept.append(piece[at - start:max(at, a) - start])
        if a >= start:
            kept.append(_REDACTED)
        at = min(b, stop)
    kept.append(piece[at - start:])
    return b"".join(kept)
