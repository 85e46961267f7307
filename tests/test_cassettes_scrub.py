"""No secret reaches the disk: each way a secret slipped into a cassette, reproduced (issue 21 item 10).

The request URI (query keys, key-shaped values, listed secrets, the value of ``ANTHROPIC_API_KEY``)
and every encoding a secret takes in a body (raw, JSON-escaped, URL-encoded) are scrubbed; a listed
secret under 8 characters is refused with a message rather than silently ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx2
import pytest

import simloop
from simloop import Scenario
from simloop.cassettes import Scrubber, load_cassette, record
from simloop.wire import loopback

LISTED = 'tenant"quote\\slash-7731'  # a listed secret holding the characters JSON escapes
ENV_KEY = "local-proxy-key-4242"  # not key-shaped: found only because it is ANTHROPIC_API_KEY's value
SCENARIO = Scenario.model_validate({"name": "s", "task": "hi", "model": [{"end_turn": "one"}] * 4})


class FakeRequest:
    """The parts of ``vcr.request.Request`` the hook touches."""

    def __init__(self, uri: str, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.uri = uri
        self.body = body
        self.headers = headers or {}


def scrubbed_uri(uri: str, **kw: Any) -> str:
    return str(Scrubber(**kw).request(FakeRequest(uri)).uri)


def test_credential_named_query_parameters_are_scrubbed_whatever_their_value() -> None:
    uri = "https://api.example.com/v1/messages?beta=true&api_key=plainvalue123&X-Amz-Signature=abc&sig=1&q=ok"
    assert scrubbed_uri(uri) == (
        "https://api.example.com/v1/messages?beta=true&api_key=[REDACTED]&X-Amz-Signature=[REDACTED]"
        "&sig=[REDACTED]&q=ok"
    )


def test_key_shaped_values_listed_secrets_and_user_info_in_a_uri_are_scrubbed() -> None:
    key = "sk-ant-api03-" + "Q" * 30
    uri = f"https://me:hunter22@proxy.test/t/{quote(LISTED, safe='')}/v1/messages?q={key}&who={quote_plus(LISTED)}"
    assert scrubbed_uri(uri, secrets=[LISTED]) == (
        "https://REDACTED@proxy.test/t/[REDACTED]/v1/messages?q=[REDACTED]&who=[REDACTED]"
    )


def test_the_value_of_anthropic_api_key_is_scrubbed_from_the_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    assert scrubbed_uri(f"http://127.0.0.1:8/v1/messages?for={ENV_KEY}") == "http://127.0.0.1:8/v1/messages?for=[REDACTED]"


@pytest.mark.parametrize(
    "encoded",
    [
        LISTED.encode(),  # raw
        json.dumps(LISTED)[1:-1].encode(),  # JSON-escaped: \" and \\
        json.dumps({"k": LISTED}).encode(),  # inside a JSON document the SDK writes
        quote(LISTED, safe="").encode(),  # URL-encoded
        quote_plus("x " + LISTED).encode(),  # form-encoded
    ],
    ids=["raw", "json-escaped", "json-document", "url-encoded", "form-encoded"],
)
def test_every_encoding_of_a_listed_secret_is_scrubbed_from_a_body(encoded: bytes) -> None:
    request = Scrubber(secrets=[LISTED]).request(FakeRequest("http://h/v1/messages", b"before " + encoded + b" after"))
    assert b"tenant" not in request.body and b"[REDACTED]" in request.body


def test_a_non_ascii_secret_is_scrubbed_in_its_escaped_json_form() -> None:
    secret = "pässwörd-geheim-99"
    body = json.dumps({"note": secret}).encode()  # ensure_ascii: p\u00e4ssw\u00f6rd...
    assert Scrubber(secrets=[secret]).request(FakeRequest("http://h/", body)).body == b'{"note": "[REDACTED]"}'


def test_a_listed_secret_under_8_characters_is_refused_without_showing_it() -> None:
    with pytest.raises(simloop.UsageError) as exc:
        Scrubber(secrets=["long-enough-secret", "abc12"])
    assert str(exc.value) == (
        "secrets[1] is 5 characters: a secret to scrub must be a string of at least 8 characters (a shorter one "
        "would also scrub ordinary text). Pass the whole secret, or drop it if it is not one."
    )
    assert "abc12" not in str(exc.value)


def test_a_recording_keeps_no_secret_from_the_uri_or_the_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    path = tmp_path / "leaky.yaml"
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": f"my id is {LISTED}"}]}
    with loopback.serve(SCENARIO) as server, record(path, secrets=[LISTED]), httpx2.Client() as client:
        response = client.post(
            f"{server.base_url}/v1/messages?api_key=plainvalue123&k={ENV_KEY}&t={quote_plus(LISTED)}",
            json=body, headers={"x-api-key": ENV_KEY, "x-note": LISTED},
        )
    assert response.status_code == 200
    text = path.read_text(encoding="utf-8")
    for leak in ("plainvalue123", ENV_KEY, "tenant", quote_plus(LISTED)):
        assert leak not in text, leak
    (interaction,) = load_cassette(path)
    assert interaction.request.uri.endswith("/v1/messages?api_key=[REDACTED]&k=[REDACTED]&t=[REDACTED]")
    assert interaction.request.json()["messages"][0]["content"] == "my id is [REDACTED]"
