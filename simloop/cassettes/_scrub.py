"""Scrubbing: the hooks that keep secrets off the disk when a cassette is recorded."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

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


class Scrubber:
    """The before-record hooks that keep secrets off the disk (vcrpy's ``before_record_*``).

    Drops credential and account headers (`SECRET_REQUEST_HEADERS`, `SECRET_RESPONSE_HEADERS`),
    replaces key-shaped strings (``sk-ant-…``) and every literal in ``secrets`` (plus the values of
    ``ANTHROPIC_API_KEY``/``ANTHROPIC_AUTH_TOKEN``/``OPENAI_API_KEY`` when set) by ``[REDACTED]`` in
    the remaining headers and in the bodies.  vcrpy runs the request hook on every incoming request
    before matching too, so recording and replay must share one `Scrubber` (`vcr_config` does).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        found = [os.environ.get(name, "") for name in _ENV_SECRETS]
        self.secrets = tuple(sorted({s.encode() for s in (*secrets, *found) if len(s) >= 8}, key=len, reverse=True))

    def _text(self, value: bytes) -> bytes:
        for secret in self.secrets:
            value = value.replace(secret, _REDACTED)
        return _KEY_PATTERN.sub(_REDACTED, value)

    def _str(self, value: str) -> str:
        return self._text(value.encode("utf-8")).decode("utf-8")

    def request(self, request: Any) -> Any:
        """Scrub a ``vcr.request.Request`` (vcrpy passes a deep copy)."""
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
