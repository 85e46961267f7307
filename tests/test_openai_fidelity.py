"""Fidelity of the OpenAI wire against recorded traffic of others (optional: a corpus outside the repo).

Point ``SIMLOOP_OPENAI_CORPUS`` at a folder of VCR-style YAML cassettes (for instance pydantic-ai's
``tests/models/cassettes/test_openai/*.yaml`` and ``test_openai_responses/*.yaml``, MIT; never copied into this
repository).  Chat Completions: every recorded request to ``api.openai.com/v1/chat/completions`` the real API
accepted must pass `validate_chat` and translate; every recorded ``chat.completion`` must have no top-level or
message field the simulator does not render.  Responses: every accepted ``POST /v1/responses`` must pass
`validate_responses` (its ``previous_response_id`` chain rebuilt from the same cassette's recorded responses) and
translate; every recorded ``response`` must have no top-level, ``message``, ``function_call`` or ``output_text``
field the simulator does not render.  Each suite skips when the corpus holds none of its traffic.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from simloop.wire import openai_chat, openai_responses
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


def _interactions(endpoint: str = "chat/completions") -> list[tuple[str, Any, int, Any]]:
    out = []
    for path in sorted(Path(str(CORPUS)).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for k, it in enumerate(data.get("interactions") or []):
            request, response = it.get("request") or {}, it.get("response") or {}
            uri = str(request.get("uri", "")).split("?", 1)[0]
            if uri != f"https://api.openai.com/v1/{endpoint}" or request.get("method", "POST") != "POST":
                continue
            out.append((f"{path.name}#{k}", _body(request), int((response.get("status") or {}).get("code", 0)),
                        _body(response)))
    return out


def test_every_accepted_request_passes_and_translates() -> None:
    accepted = [(name, body) for name, body, status, _ in _interactions() if status == 200 and isinstance(body, dict)]
    if not accepted:
        pytest.skip("the corpus holds no accepted Chat Completions request")
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
    if not seen:
        pytest.skip("the corpus holds no recorded chat.completion")
    assert missing == {}
    print(f"\n{seen} recorded completions: every field rendered")


# -- the Responses API ----------------------------------------------------------------------------------------------


def test_every_accepted_responses_request_passes_and_translates() -> None:
    """Each accepted request, its ``previous_response_id`` chain rebuilt from what its cassette recorded before it
    (the request's items, then the response's output).  A chain the cassette does not hold (a response made in
    another recording, or a server-side ``conversation``) cannot be rebuilt: counted apart, not checked."""
    stored: dict[str, list[Any]] = {}
    checked, unchained = 0, 0
    refused: dict[str, str] = {}
    for name, body, status, answer in _interactions("responses"):
        if status != 200 or not isinstance(body, dict):
            continue
        items, missing = openai_responses.expand(body, stored)
        if missing is not None or body.get("conversation") is not None:
            unchained += 1
            continue
        checked += 1
        rejection = openai_responses.validate_responses(body, items)
        if rejection is not None:
            refused[name] = rejection.message
            continue
        internal = openai_responses.to_internal(body, items)
        assert internal["model"] == body["model"]
        if isinstance(answer, dict) and answer.get("object") == "response":
            stored[str(answer["id"])] = [*items, *answer.get("output", [])]
    if not checked:
        pytest.skip("the corpus holds no accepted Responses request")
    assert refused == {}
    print(f"\n{checked} accepted Responses requests: 0 refused ({unchained} chained to a response not recorded)")


#: Fields a recorded ``response`` carries that the simulator does not render, each for a feature it does not offer:
#: built-in tools' usage (``tool_usage``), the Conversations API (``conversation``), a moderation, and the fields of
#: newer models (``phase`` of a message; ``status_details``, ``tool_calls`` and ``total_tokens`` at the top, null or
#: a copy of ``usage``).
NOT_OFFERED = frozenset({"tool_usage", "conversation", "moderation", "phase", "status_details", "tool_calls",
                         "total_tokens"})


def test_recorded_responses_hold_no_field_the_simulator_lacks() -> None:
    turn = Turn([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}], "tool_use")
    ours = openai_responses.render_response(turn, {"id": "msg_01x", "usage": {}}, {}, model="m", created=0)
    fields = {item["type"]: set(item) for item in ours["output"]}
    part = set(ours["output"][0]["content"][0])
    refusal = set(openai_responses.render_response(Turn([{"type": "text", "text": "no"}], "refusal"),
                                                   {"id": "msg_01y", "usage": {}}, {}, model="m",
                                                   created=0)["output"][0]["content"][0])
    seen, items = 0, 0
    missing: dict[str, set[str]] = {}
    for name, _, status, body in _interactions("responses"):
        if status != 200 or not isinstance(body, dict) or body.get("object") != "response":
            continue
        seen += 1
        extra = set(body) - set(ours) - NOT_OFFERED
        for item in body.get("output") or []:
            if item.get("type") not in fields:  # reasoning, built-in tool calls: items the simulator never makes
                continue
            items += 1
            extra |= set(item) - fields[item["type"]] - NOT_OFFERED
            for p in item.get("content") or []:
                extra |= set(p) - (refusal if p.get("type") == "refusal" else part)
        if extra:
            missing[name] = extra
    if not seen:
        pytest.skip("the corpus holds no recorded response")
    assert missing == {}
    print(f"\n{seen} recorded responses ({items} message and function_call items): every field rendered")


def test_recorded_event_streams_hold_no_field_the_simulator_lacks() -> None:
    """Each recorded streamed event of a kind the simulator sends (``response.created`` ... ``response.completed``)
    has no field the simulator's event of that kind lacks; the kinds of features it does not offer (reasoning
    summaries, built-in tool calls, annotations, ``response.queued`` of background mode) are counted apart."""
    ours: dict[str, set[str]] = {}
    for turn in (Turn([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}],
                      "tool_use"), Turn([{"type": "text", "text": "no"}], "refusal")):
        for raw in openai_responses.render_events(turn, {"id": "msg_01x", "usage": {}}, {}, model="m", created=0):
            event = json.loads(raw.split(b"data: ", 1)[1])
            ours.setdefault(event["type"], set()).update(event)
    streams, checked, other = 0, 0, 0
    missing: dict[str, set[str]] = {}
    for path in sorted(Path(str(CORPUS)).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for k, it in enumerate(data.get("interactions") or []):
            body = (it.get("response") or {}).get("body")
            text = body.get("string") if isinstance(body, dict) else body
            if not isinstance(text, str) or "event: response." not in text:
                continue
            streams += 1
            for line in text.splitlines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event.get("type") not in ours:
                    other += 1
                    continue
                checked += 1
                extra = set(event) - ours[event["type"]]
                if extra:
                    missing.setdefault(f"{path.name}#{k}", set()).update(f"{event['type']}.{f}" for f in extra)
    if not streams:
        pytest.skip("the corpus holds no recorded Responses event stream")
    assert missing == {}
    print(f"\n{streams} recorded streams: {checked} events of the kinds the simulator sends, every field rendered "
          f"({other} events of features it does not offer)")
