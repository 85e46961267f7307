"""Every recorded real response, taken apart and rendered again, parses into the same SDK Message.

For each 200 response of ``POST /v1/messages`` in the corpus (JSON bodies and SSE streams) the
recording is taken apart (`turn_from_message` / `turn_from_sse`), rendered again both as a JSON
body and as an SSE stream, and each rendering is parsed by the unmodified SDK with
``_strict_response_validation=True``.  Both must equal (``model_dump()``) the SDK's parse of the
recorded bytes.  So the simulator's bytes are indistinguishable, to the SDK, from real ones, in
either form, whatever form the original had.

Beta traffic (pydantic-ai records ``?beta=true`` requests) can carry block types and fields only the
beta models know (``mcp_tool_use``, ``compaction``, ``context_management``, ...), so those
interactions are parsed with ``client.beta.messages`` (BetaMessage): when the recorded request URL
has ``beta=true`` in its query, or the response has a block type or stop reason outside the
non-beta models.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import anthropic
import httpx2
from _report import Say
from corpus import CORPORA, describe, is_beta, messages_interactions, requires_corpus

from simloop.cassettes import Interaction
from simloop.protocol.render import render_json, render_sse, turn_from_message, turn_from_sse

pytestmark = requires_corpus

CREATE: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}
# Ignored by the renderers whenever the recording carries its own id, model and usage (it always does).
RENDER_ARGS: dict[str, Any] = {"id": "msg_unused", "model": "unused", "input_tokens": 0}


_is_beta = is_beta


def _parse(body: bytes, *, sse: bool, beta: bool, strict: bool) -> dict[str, Any]:
    """The SDK's Message for a 200 response with this body, as a dict."""
    content_type = "text/event-stream; charset=utf-8" if sse else "application/json"

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type, "request-id": "req_x"}, content=body)

    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://sim.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        _strict_response_validation=strict,
        max_retries=0,
    )
    api: Any = client.beta.messages if beta else client.messages
    if sse:
        with api.stream(**CREATE) as stream:
            message = stream.get_final_message()
    else:
        message = api.create(**CREATE)
    dumped: dict[str, Any] = message.model_dump()
    return dumped


def _differences(expected: Any, got: Any, path: str = "message") -> list[str]:
    """Where two parsed Messages differ, one line each: the path, and both values near the first difference."""
    if isinstance(expected, dict) and isinstance(got, dict):
        lines: list[str] = []
        for key in [*expected, *(k for k in got if k not in expected)]:
            if key not in got:
                lines.append(f"{path}.{key}: only in the recording: {_short(expected[key])}")
            elif key not in expected:
                lines.append(f"{path}.{key}: only in the rendering: {_short(got[key])}")
            else:
                lines.extend(_differences(expected[key], got[key], f"{path}.{key}"))
        return lines
    if isinstance(expected, list) and isinstance(got, list):
        lines = [f"{path}: {len(expected)} items recorded, {len(got)} rendered"] if len(expected) != len(got) else []
        for index, (left, right) in enumerate(zip(expected, got, strict=False)):
            lines.extend(_differences(left, right, f"{path}[{index}]"))
        return lines
    if expected == got and type(expected) is type(got):
        return []
    if isinstance(expected, str) and isinstance(got, str):
        at = next(
            (i for i, (x, y) in enumerate(zip(expected, got, strict=False)) if x != y), min(len(expected), len(got))
        )
        window = slice(max(0, at - 30), at + 30)
        return [
            (
                f"{path}: strings differ at char {at} (lengths {len(expected)} recorded, {len(got)} rendered): "
                f"recorded ...{expected[window]!r}... rendered ...{got[window]!r}..."
            )
        ]
    return [f"{path}: recorded {_short(expected)}, rendered {_short(got)}"]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _diff(expected: dict[str, Any], got: dict[str, Any]) -> str:
    lines = _differences(expected, got)
    shown = lines[:20] + ([f"... and {len(lines) - 20} more differences"] if len(lines) > 20 else [])
    return "\n".join(f"  {line}" for line in shown)


def _recorded_responses() -> list[tuple[Path, Interaction]]:
    return [
        (path, interaction)
        for path, interaction in messages_interactions()
        if interaction.request.path.rstrip("/") == "/v1/messages" and interaction.response.status == 200
    ]


def test_every_recorded_response_round_trips_through_the_renderers(say: Say) -> None:
    cases = _recorded_responses()
    assert cases, "the corpus is present but has no recorded 200 /v1/messages responses"

    ok: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    lenient: list[str] = []
    failures: list[str] = []
    for path, interaction in cases:
        name = describe(path, interaction)
        response = interaction.response
        sse = response.is_sse
        kinds["SSE" if sse else "JSON"] += 1
        turn = turn_from_sse(response.body) if sse else turn_from_message(response.json())
        beta = _is_beta(interaction, turn)
        kinds["beta"] += beta
        strict = True
        try:
            recorded = _parse(response.body, sse=sse, beta=beta, strict=True)
        except anthropic.APIResponseValidationError:
            # The SDK itself rejects this real recording under strict validation (in this corpus:
            # older `usage.server_tool_use` without `web_fetch_requests`, which SDK 2.x requires).
            # Its rendering carries the same fields verbatim, so both sides are compared leniently.
            strict = False
            recorded = _parse(response.body, sse=sse, beta=beta, strict=False)
            lenient.append(name)

        renderings = {
            "JSON": (render_json(turn, **RENDER_ARGS), False),
            "SSE": (b"".join(render_sse(turn, **RENDER_ARGS)), True),
        }
        for form, (body, as_sse) in renderings.items():
            try:
                got = _parse(body, sse=as_sse, beta=beta, strict=strict)
            except Exception as exc:  # noqa: BLE001 - report every failure, not just the first
                failures.append(f"{name} ({'SSE' if sse else 'JSON'} recording) rendered as {form}: {exc!r}")
                continue
            if got == recorded:
                ok[form] += 1
            else:
                failures.append(
                    f"{name} ({'SSE' if sse else 'JSON'} recording) rendered as {form} parses differently:\n"
                    + _diff(recorded, got)
                )

    total = len(cases)
    summary = (
        f"fidelity [{', '.join(map(str, CORPORA))}]: {ok['JSON']}/{total} recorded responses round-trip (JSON), "
        f"{ok['SSE']}/{total} (SSE); "
        f"recordings: {kinds['JSON']} JSON, {kinds['SSE']} SSE, {kinds['beta']} parsed with client.beta; "
        f"{len(lenient)} rejected by the SDK's strict validation itself, compared non-strict"
        + (":\n  " + "\n  ".join(lenient) if lenient else "")
    )
    say(summary)
    assert not failures, f"{len(failures)} mismatches\n\n" + "\n\n".join(failures[:8])
    assert ok["JSON"] == ok["SSE"] == total
