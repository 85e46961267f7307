"""Error envelopes, statuses and headers as the real Messages API sends them (research/wire.md §5).

Every error the simulated API answers goes through `error_body` and
`error_headers`, so that the SDK raises the same exception class, with the
same ``request_id``, ``type`` and message, as it would against the real API.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["STATUS_ERRORS", "error_body", "error_headers"]

#: status -> (error.type, message) of the real API for the statuses a scenario can script.
STATUS_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request"),
    401: ("authentication_error", "invalid x-api-key"),
    404: ("not_found_error", "Not found"),
    408: ("timeout_error", "Request timed out"),
    413: ("request_too_large", "Request exceeds the maximum size"),
    429: (
        "rate_limit_error",
        (
            "This request would exceed the rate limit for your organization of 50,000 input tokens per minute. "
            "For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers "
            "for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."
        ),
    ),
    500: ("api_error", "Internal server error"),
    502: ("api_error", "Bad gateway"),
    503: ("api_error", "Service unavailable"),
    504: ("timeout_error", "Gateway timeout"),
    529: ("overloaded_error", "Overloaded"),
}


def error_body(
    status: int,
    *,
    request_id: str,
    message: str | None = None,
    type: str | None = None,
    details: dict[str, Any] | None = None,
) -> bytes:
    """The JSON error envelope: ``{"type": "error", "error": {...}, "request_id": ...}``."""
    default_type, default_message = STATUS_ERRORS.get(status, ("api_error", "Internal server error"))
    error: dict[str, Any] = {"type": type or default_type, "message": message or default_message}
    if details:
        error["details"] = details
    return json.dumps(
        {"type": "error", "error": error, "request_id": request_id}, separators=(",", ":"), ensure_ascii=False
    ).encode()


def error_headers(status: int, *, request_id: str, retry_after: float | None = None) -> list[tuple[str, str]]:
    """Response headers of an error: ``request-id`` always; ``retry-after`` on a 429;
    ``x-should-retry: false`` on the 4xx the SDK must not retry, as the real API sends."""
    headers = [("content-type", "application/json"), ("request-id", request_id)]
    if status == 429:
        headers.append(("retry-after", _seconds(retry_after if retry_after is not None else 1.0)))
    elif 400 <= status < 500 and status not in (408, 409):
        headers.append(("x-should-retry", "false"))
    return headers


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
