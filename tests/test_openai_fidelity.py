"""Fidelity of the OpenAI wire against recorded Chat Completions traffic of others (optional: a corpus outside the repo).

Point ``SIMLOOP_OPENAI_CORPUS`` at a folder of VCR-style YAML cassettes (for instance pydantic-ai's
``tests/models/cassettes/test_openai/*.yaml``, MIT; never copied into this repository).  Every recorded request
to ``api.openai.com/v1/chat/completions`` the real API accepted must pass `validate_chat` and translate; every
recorded ``chat.completion`` must have no top-level or message field the simulator does not render.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from simloop.wire import openai_chat
from simloop.wire.render import Turn

CORPUS = os.environ.get("SIMLOOP_OPENAI_CORPUS")
pytestmark = pytest.mark.skipif(not CORPUS, reason="set SIMLOOP_OPENAI_CORPUS to a folder of recorded OpenAI cassettes")


def _body(part: dict[str, Any]) -> Any:
    if "parsed_body" in part:
        return part["parsed_body"]
    body = part.get("body")
    text = body.get("string") if isinstance(body, dict) else body
    try:
        return json.loads(text) if text else None
    except (TypeError, ValueError):
        return None


def _interactions() -> list[tuple[str, Any, int, Any]]:
    out = []
    for path in sorted(Path(str(CORPUS)).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for k, it in enumerate(data.get("interactions") or []):
            request, response = it.get("request") or {}, it.get("response") or {}
            if not str(request.get("uri", "")).startswith("https://api.openai.com/v1/chat/completions"):
                continue
            out.append((f"{path.name}#{k}", _body(request), int((response.get("status") or {}).get("code", 0)),
                        _body(response)))
    return out


def test_every_accepted_request_passes_and_translates() -> None:
    accepted = [(name, body) for name, body, status, _ in _interactions() if status == 200 and isinstance(body, dict)]
    assert accepted, "the corpus holds no accepted Chat Completions request"
    refused = {name: openai_chat.validate_chat(body) for name, body in accepted}
    assert {name: r.message for name, r in refused.items() if r is not None} == {}
    for _, body in accepted:
        internal = openai_chat.to_internal(body)
        assert len(internal["messages"]) == sum(m["role"] not in ("system", "developer") for m in body["messages"])
    print(f"\n{len(accepted)} accepted requests: 0 refused")


#: Fields a completion carries only when its request asked for them (audio output, a moderation, the legacy
#: ``functions``): features of the model the simulator does not offer.
ASKED_FOR = frozenset({"audio", "function_call", "moderation"})


def test_recorded_completions_hold_no_field_the_simulator_lacks() -> None:
    ours = openai_chat.render_completion(
        Turn([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}], "tool_use"),
        {"id": "msg_01x", "usage": {"input_tokens": 1, "output_tokens": 1}}, model="m", created=0)
    top, message = set(ours), set(ours["choices"][0]["message"])
    seen = 0
    missing: dict[str, set[str]] = {}
    for name, _, status, body in _interactions():
        if status != 200 or not isinstance(body, dict) or body.get("object") != "chat.completion":
            continue
        seen += 1
        extra = set(body) - top - ASKED_FOR
        for choice in body["choices"]:
            extra |= set(choice["message"]) - message - ASKED_FOR
        if extra:
            missing[name] = extra
    assert seen and missing == {}
    print(f"\n{seen} recorded completions: every field rendered")
