"""What the Messages API refuses before the model reads a request: its rules, then its size (checked last, as
the real API does)."""

from __future__ import annotations

from typing import Any

from simloop.protocol.validate import (
    IMAGE_TOKENS,
    ConversationValidator,
    Rejection,
    context_window,
    opaque_bytes,
    prompt_too_long,
)
from simloop.transcript import Request
from simloop.wire.bodies import _BodyParser, _settings_bytes, estimate_tokens

__all__ = ["Checks"]


class Checks:
    """The run's checks of model requests: one validator resuming its walk over the shared history, and the
    input-token count of each request (``req.input_tokens``), its settings' bytes counted once per conversation."""

    __slots__ = ("_parser", "_validator")

    def __init__(self, parser: _BodyParser, *, sign_thinking: bool) -> None:
        self._parser = parser
        self._validator = ConversationValidator(signed_by_sim=sign_thinking, read_only=True)

    def check(
        self, req: Request, body: dict[str, Any], effective: dict[str, Any], nbytes: int, *, betas: str,
        rules: bool, sign_thinking: bool, truncates: bool = False,
    ) -> Rejection | None:
        """The refusal of ``effective`` (what ``body``, ``nbytes`` with its thread's history, stands for), if any.

        ``rules``: the Messages API's own rules apply (an OpenAI wire's were checked on its own request: cache
        breakpoints, thinking signatures, server tools, ... are not its API's).  ``truncates``: the API fits a
        request over the window by dropping its oldest input (the Responses API's ``truncation: "auto"``), so the
        model reads the window's worth and nothing is refused for size.
        """
        validator = self._validator
        if validator.signed_by_sim != sign_thinking:
            validator = self._validator = ConversationValidator(signed_by_sim=sign_thinking, read_only=True)
        rejection = validator.validate(effective) if rules else None
        if rejection is not None:
            return rejection
        # valid: then the size, as the real API checks it last
        req.input_tokens = estimate_tokens(nbytes - self.settings(body))
        window = context_window(effective.get("model"), betas)
        if req.input_tokens > window:  # by its bytes; then without what the model does not read as text
            opaque, sources = opaque_bytes(effective)
            read = req.input_tokens - opaque // 4 + sources * IMAGE_TOKENS
            if read > window and truncates:
                req.input_tokens = window
            elif read > window:
                return prompt_too_long(read, window)
        return None

    def settings(self, body: dict[str, Any]) -> int:
        """`_settings_bytes` of ``body``: the parser's latest body keeps its count (an extended body has the same)."""
        parser = self._parser
        if body is not parser.last:
            return _settings_bytes(body)
        if parser.settings_bytes < 0:
            parser.settings_bytes = _settings_bytes(body)
        return parser.settings_bytes
