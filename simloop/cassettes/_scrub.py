"""Scrubbing: the hooks that keep secrets off the disk when a cassette is recorded."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus, urlsplit, urlunsplit

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
# ``sk-`` + 20 characters of other providers.
_KEY_PATTERN = re.compile(rb"(?<![A-Za-z0-9])(?:sk-ant-[A-Za-z0-9_\-]{6,}|sk-[A-Za-z0-9_\-]{20,})")
_REDACTED = b"[REDACTED]"
_ENV_SECRETS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
#: Shorter listed secrets are refused: scrubbing them would also rewrite ordinary text.
MIN_SECRET_LENGTH = 8
# Query parameters whose value is a credential whatever it looks like (``?api_key=…``, ``&X-Amz-Signature=…``):
# a name containing one of these words, or equal to one of the short ones.
_SECRET_PARAM_WORDS = ("key", "token", "secret", "password", "passwd", "signature", "credential", "auth")
_SECRET_PARAM_NAMES = frozenset({"sig", "pwd", "code", "session", "sessionid", "sid"})


def _secret_param(name: str) -> bool:
    name = unquote_plus(name).lower()
    return name in _SECRET_PARAM_NAMES or any(word in name for word in _SECRET_PARAM_WORDS)


def _encodings(secret: str) -> set[bytes]:
    """Every form a secret takes on the wire: raw, JSON-escaped (ASCII or not), URL-encoded (both ways)."""
    forms = {
        secret,
        json.dumps(secret)[1:-1],  # what json.dumps / the SDK write: \" \\ and \uXXXX escapes
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quote(secret, safe=""),
        quote(secret),  # "/" kept, as in a URL path
        quote_plus(secret),
    }
    return {form.encode("utf-8") for form in forms}


class Scrubber:
    """The before-record hooks that keep secrets off the disk (vcrpy's ``before_record_*``).

    Drops credential and account headers (`SECRET_REQUEST_HEADERS`, `SECRET_RESPONSE_HEADERS`),
    replaces key-shaped strings (``sk-ant-…``) and every literal in ``secrets`` (plus the values of
    ``ANTHROPIC_API_KEY``/``ANTHROPIC_AUTH_TOKEN``/``OPENAI_API_KEY`` when set) by ``[REDACTED]`` in
    the request URI, the remaining headers and the bodies, in every encoding a secret takes there:
    raw, JSON-escaped and URL-encoded.  In the URI, the values of credential-named query parameters
    (``api_key``, ``token``, ``secret``, ``signature``, ...) and any user:password are replaced too.
    vcrpy runs the request hook on every incoming request before matching, so recording and replay
    must share one `Scrubber` (`vcr_config` does).

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
        forms = {form for value in values for form in _encodings(value)}
        self.secrets = tuple(sorted(forms, key=len, reverse=True))

    def _text(self, value: bytes) -> bytes:
        for secret in self.secrets:
            value = value.replace(secret, _REDACTED)
        return _KEY_PATTERN.sub(_REDACTED, value)

    def _str(self, value: str) -> str:
        return self._text(value.encode("utf-8")).decode("utf-8")

    def uri(self, uri: str) -> str:
        """The URI with credentials in its query, its user info and anywhere else replaced."""
        parts = urlsplit(uri)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "[REDACTED]@" + netloc.rsplit("@", 1)[1]
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
                body["string"] = self._str(value)
            elif isinstance(value, bytes):
                body["string"] = self._text(value)
        return response
