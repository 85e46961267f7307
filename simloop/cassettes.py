"""Recorded HTTP traffic (VCR.py cassettes): read, record, replay as a model, convert, fuzz.

Users want regression tests from real runs without paying for the API on every CI run, and want to
know what their loop would have done had call 3 of that run failed.  This module is that bridge:

* **read** (`load_cassette`): both dialects found in the wild.  vcrpy's own (``request.body`` a
  string, ``response.body.string`` a string or ``!!binary`` bytes, gzip when the response says
  ``content-encoding: gzip``) and pydantic-ai's (JSON bodies stored as YAML under ``parsed_body``;
  streams stay raw SSE text).  Files are read with PyYAML's safe loader (vcrpy's fails on
  ``parsed_body``); a whole gzip-compressed file (``.yaml.gz``) is read too.  Everything is
  normalised: header names lower-cased, bodies as bytes (``parsed_body`` re-serialised as compact
  JSON, gzip decompressed), the then-stale ``content-length``/``content-encoding`` dropped.
* **record** (`record`, `vcr_config`, `configure_vcr`, `cassette_path`): vcrpy (>= 9.4, the first
  that sees httpx2) underneath, writing pytest-recording's layout (``cassettes/{module}/{test}.yaml``).
  JSON bodies are stored parsed (``parsed_body``) when that re-serialises to the exact bytes sent,
  SSE streams as their exact text, and secrets never reach the disk: the same scrubbing hooks run
  at record and at replay, as vcrpy needs (research ``libs.md`` §2.4).
* **replay as a model** (`Recorded`): a cassette answers the simulated API's model requests in
  order; a request that differs from the recorded one fails with a readable JSON diff naming the
  call, the message and the block (`RecordingDiverged`), or, tolerant, is served by position and
  the drift collected.
* **convert** (`to_scenario`, `convert`): a recording as a v1 scenario, so a real run becomes an
  editable, reviewable test.
* **fuzz** (`fault_plans`, `FaultedRecording`): keep the recorded replies and let Hypothesis inject
  API errors, tool faults, latencies and cut-offs; a failure shrinks to "the recording plus these
  faults".

Why not vcrpy for replay: it matches whole requests (a changed loop gives "no match"), buffers SSE
into one chunk, and the SDK turns its misses into retried ``APIConnectionError``s.  Replay through
the simulator keeps virtual time, chunked streams, the request validator and the invariants.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped, unused-ignore]
from hypothesis import strategies as st

from simloop.errors import UsageError
from simloop.models import ModelRequest, ScriptExhausted
from simloop.scenario import (
    API_ERRORS,
    SERVER_TOOLS,
    Fault,
    MaxTokensBody,
    PauseTurnBody,
    Reply,
    Scenario,
    ServerToolCall,
    ToolCall,
    ToolSpec,
    Usage,
)
from simloop.strategies import Plan, api_faults, latencies
from simloop.wire.render import Turn, turn_from_message, turn_from_sse
from simloop.wire.validate import thinking_signature

if TYPE_CHECKING:
    from vcr.cassette import Cassette  # type: ignore[import-untyped, unused-ignore]

__all__ = [
    "MATCH_ON",
    "RECORD_MODES",
    "CassetteError",
    "CassetteSerializer",
    "Drift",
    "FaultPlan",
    "FaultedRecording",
    "Interaction",
    "Recorded",
    "RecordedCall",
    "RecordedRequest",
    "RecordedResponse",
    "Recording",
    "RecordingDiverged",
    "RecordingExhausted",
    "Scrubber",
    "cassette_path",
    "configure_vcr",
    "convert",
    "fault_plans",
    "guess_kind",
    "load_cassette",
    "load_recording",
    "record",
    "reply_of_turn",
    "request_diff",
    "to_scenario",
    "vcr_config",
]

_ANTHROPIC_HOST = "api.anthropic.com"
_MESSAGES = "/v1/messages"
_MESSAGES_PATHS = frozenset({_MESSAGES, "/v1/messages/count_tokens"})
_FIX = " The file was probably edited by hand: fix that entry or re-record the cassette."
_Loader: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


class CassetteError(UsageError):
    """A cassette file cannot be read; the message names the file, the place and the fix."""


def _json_or_none(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


# =========================================================================== reading


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One recorded HTTP request.  ``body`` is bytes (JSON for JSON requests)."""

    method: str
    uri: str
    headers: dict[str, list[str]]
    body: bytes

    @property
    def path(self) -> str:
        """The URL path without the query (``/v1/messages`` for ``…/v1/messages?beta=true``)."""
        return urlsplit(self.uri).path

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON."""
        return _json_or_none(self.body)


@dataclass(frozen=True, slots=True)
class RecordedResponse:
    """One recorded HTTP response, body decompressed."""

    status: int
    headers: dict[str, list[str]]
    body: bytes

    @property
    def is_sse(self) -> bool:
        """True for a server-sent-event stream (by content type, or a body that starts with ``event:``)."""
        for value in self.headers.get("content-type", ()):
            if value.lower().startswith("text/event-stream"):
                return True
        return self.body.lstrip().startswith(b"event:")

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON (an SSE stream, say)."""
        return _json_or_none(self.body)


@dataclass(frozen=True, slots=True)
class Interaction:
    """A request and its response, ``index`` being the 0-based position in the cassette."""

    index: int
    request: RecordedRequest
    response: RecordedResponse

    @property
    def is_anthropic_messages(self) -> bool:
        """True for ``POST api.anthropic.com/v1/messages`` and ``…/v1/messages/count_tokens`` (query ignored)."""
        if self.request.method.upper() != "POST":
            return False
        parts = urlsplit(self.request.uri)
        return (parts.hostname or "").lower() == _ANTHROPIC_HOST and parts.path.rstrip("/") in _MESSAGES_PATHS

    @property
    def is_model_call(self) -> bool:
        """True for ``POST …/v1/messages`` on any host (a recording made against ``simloop serve`` included)."""
        return self.request.method.upper() == "POST" and self.request.path.rstrip("/") == _MESSAGES


def load_cassette(path: str | os.PathLike[str]) -> list[Interaction]:
    """Read every interaction of a VCR.py cassette (vcrpy or pydantic-ai dialect; a gzip file too).

    Raises `CassetteError` when the file is missing, is not YAML, or does not have the
    cassette shape (``interactions:`` with ``request`` and ``response`` mappings).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            raw = handle.read()
        if raw[:2] == b"\x1f\x8b":  # a whole gzip-compressed cassette (langchain ships *.yaml.gz)
            raw = gzip.decompress(raw)
        data = yaml.load(raw, Loader=_Loader)
    except OSError as exc:
        raise CassetteError(f"{name}: cannot read the cassette file ({exc.strerror or exc}).") from exc
    except (EOFError, zlib.error) as exc:
        raise CassetteError(f"{name}: the gzip-compressed cassette is truncated or corrupt ({exc}).") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CassetteError(
            f"{where}: not valid YAML ({problem}); a cassette is the YAML file VCR.py writes, "
            "check that the file is one and is not truncated."
        ) from exc
    if type(data) is not dict or "interactions" not in data:
        raise CassetteError(
            f"{name}: not a VCR.py cassette: expected a mapping with an 'interactions' list at the top, "
            f"found {_describe(data)}. Pass a file recorded by VCR.py (or pytest-recording)."
        )
    items = data["interactions"]
    if type(items) is not list:
        raise CassetteError(
            f"{name}: 'interactions' must be a list of request/response pairs, found {_describe(items)}.{_FIX}"
        )
    return [_interaction(name, index, item) for index, item in enumerate(items)]


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:5])
        return f"a mapping with keys {keys}" if keys else "an empty mapping"
    return f"a {type(value).__name__}"


def _interaction(name: str, index: int, item: Any) -> Interaction:
    where = f"{name}: interaction {index}"
    if type(item) is not dict:
        raise CassetteError(
            f"{where}: expected a mapping with 'request' and 'response', found {_describe(item)}.{_FIX}"
        )
    for key in ("request", "response"):
        if type(item.get(key)) is not dict:
            raise CassetteError(
                f"{where}: missing the '{key}' mapping (found {_describe(item.get(key))}); "
                f"each interaction needs both 'request' and 'response'.{_FIX}"
            )
    return Interaction(index, _request(where, item["request"]), _response(where, item["response"]))


def _headers(where: str, raw: Any) -> dict[str, list[str]]:
    if raw is None:
        return {}
    if type(raw) is not dict:
        raise CassetteError(
            f"{where}: 'headers' must be a mapping of name to list of values, found {_describe(raw)}.{_FIX}"
        )
    headers: dict[str, list[str]] = {}
    for key, value in raw.items():
        values = value if type(value) is list else [value]
        headers.setdefault(str(key).lower(), []).extend(str(v) for v in values)
    return headers


def _compact_json(value: Any) -> bytes:
    # The SDK's own encoding (anthropic._utils._json, httpx2's json=): compact, UTF-8, insertion order.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _request(where: str, raw: dict[str, Any]) -> RecordedRequest:
    where = f"{where}: request"
    method, uri = raw.get("method"), raw.get("uri")
    if type(method) is not str or type(uri) is not str:
        raise CassetteError(
            f"{where}: needs string 'method' and 'uri' fields (found method={method!r}, uri={uri!r}).{_FIX}"
        )
    headers = _headers(where, raw.get("headers"))
    if "parsed_body" in raw:
        body = _compact_json(raw["parsed_body"])
        headers.pop("content-length", None)
    else:
        body = _to_bytes(where, raw.get("body"))
    return RecordedRequest(method, uri, headers, body)


def _response(where: str, raw: dict[str, Any]) -> RecordedResponse:
    where = f"{where}: response"
    status = raw.get("status")
    code = status.get("code") if type(status) is dict else status
    if type(code) is not int:
        raise CassetteError(f"{where}: needs 'status: {{code: <int>}}' (found {status!r}).{_FIX}")
    headers = _headers(where, raw.get("headers"))
    if "parsed_body" in raw:
        body = _compact_json(raw["parsed_body"])
        headers.pop("content-length", None)
        headers.pop("content-encoding", None)  # pydantic-ai stores the decoded body
        return RecordedResponse(code, headers, body)
    raw_body = raw.get("body")
    if type(raw_body) is dict:
        raw_body = raw_body.get("string")
    body = _to_bytes(where, raw_body)
    encodings = [e.strip().lower() for v in headers.get("content-encoding", ()) for e in v.split(",") if e.strip()]
    if encodings:
        if isinstance(raw_body, bytes):
            body = _decompress(where, body, encodings)
        headers.pop("content-encoding", None)  # a text body was already decoded by the recorder
        headers.pop("content-length", None)
    return RecordedResponse(code, headers, body)


def _to_bytes(where: str, value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise CassetteError(f"{where}: the body must be a string or !!binary, found {_describe(value)}.{_FIX}")


def _decompress(where: str, body: bytes, encodings: list[str]) -> bytes:
    # Encodings apply in the order listed, so undo them last to first.
    for encoding in reversed(encodings):
        try:
            if encoding in ("gzip", "x-gzip"):
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding != "identity":
                raise CassetteError(
                    f"{where}: content-encoding {encoding!r} is not supported (gzip, deflate and identity are); "
                    "re-record with decode_compressed_response=True."
                )
        except (OSError, EOFError, zlib.error) as exc:
            raise CassetteError(
                f"{where}: the body says content-encoding {encoding} but does not decode ({exc}); "
                "the cassette is corrupt or was edited by hand: re-record it."
            ) from exc
    return body


# =========================================================================== recording

#: The record modes: vcrpy's four, and pytest-recording's ``rewrite`` (delete the file, record afresh).
RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")
#: How vcrpy matches a request to a recorded one when it replays (``body`` compares parsed JSON).
MATCH_ON = ("method", "scheme", "host", "port", "path", "query", "body")

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


def vcr_config(*, secrets: Iterable[str] = (), match_on: Sequence[str] = MATCH_ON) -> dict[str, Any]:
    """The ``use_cassette`` options simloop records with; return it from pytest-recording's ``vcr_config``.

    Pair it with `configure_vcr` (pytest-recording's ``pytest_recording_configure`` hook), which makes
    the ``yaml`` serializer write parsed JSON bodies.  Example (``conftest.py``)::

        @pytest.fixture
        def vcr_config():
            return simloop.cassettes.vcr_config()

        def pytest_recording_configure(config, vcr):
            simloop.cassettes.configure_vcr(vcr)
    """
    scrubber = Scrubber(secrets)
    return {
        "before_record_request": scrubber.request,
        "before_record_response": scrubber.response,
        # Store decoded bodies: JSON then reads (and diffs) as JSON, and the reader needs no gzip.
        "decode_compressed_response": True,
        "match_on": tuple(match_on),
    }


def configure_vcr(vcr: Any) -> Any:
    """Register simloop's serializer as the ``yaml`` serializer of a ``vcr.VCR`` instance; returns it.

    Registered under ``yaml`` (not a new name) so that pytest-recording keeps the ``.yaml`` suffix;
    it reads every cassette vcrpy's own serializer reads, and pydantic-ai's ``parsed_body`` ones.
    """
    vcr.register_serializer("yaml", CassetteSerializer())
    return vcr


def cassette_path(test_file: str | os.PathLike[str], test_name: str, *, cls: type | str | None = None) -> Path:
    """Where pytest-recording keeps a test's cassette: ``<test dir>/cassettes/<module>/<test>.yaml``.

    ``cls`` is the test's class (its name prefixes the test's, as pytest-recording does); characters
    a file name cannot hold are replaced by ``-``.  Example: ``cassette_path("tests/test_a.py",
    "test_b[x]")`` is ``tests/cassettes/test_a/test_b[x].yaml``.
    """
    file = Path(test_file)
    name = f"{cls if isinstance(cls, str) else cls.__name__}.{test_name}" if cls is not None else test_name
    for ch in "<>?%*:|\"'/\\":
        name = name.replace(ch, "-")
    return file.parent / "cassettes" / file.stem / f"{name}.yaml"


@contextlib.contextmanager
def record(
    path: str | os.PathLike[str],
    *,
    mode: str = "once",
    secrets: Iterable[str] = (),
    match_on: Sequence[str] = MATCH_ON,
) -> Iterator[Cassette]:
    """Record the HTTP traffic of the block into a cassette (vcrpy underneath); yields the vcrpy cassette.

    ``mode``: ``once`` (record when the file is absent, else replay it), ``new_episodes``, ``none``
    (replay only), ``all`` (always record), ``rewrite`` (delete the file, then record).  Secrets are
    scrubbed (`Scrubber`; add literal values with ``secrets``).  JSON bodies are stored parsed,
    streams as their exact text.  Recording talks to a real server, so it runs in real time: it
    refuses to run on simloop's virtual clock (inside ``Sim.run``).  A cassette miss under ``none``
    reaches the SDK as ``APIConnectionError`` (whose ``__cause__`` is vcrpy's report), retried.

    Raises:
        UsageError: an unknown ``mode``, or the block runs on the virtual clock.

    Example::

        with simloop.cassettes.record("tests/cassettes/test_agent/test_refund.yaml"):
            run_agent(anthropic.Anthropic(), ...)
    """
    if mode not in RECORD_MODES:
        raise UsageError(
            f"record(mode={mode!r}): the record modes are {', '.join(RECORD_MODES)}; use 'once' to record a "
            "cassette that does not exist yet and replay it afterwards, 'rewrite' to record it again."
        )
    if _on_virtual_clock():
        raise UsageError(
            "record() runs in real time: recording talks to a real server over a socket, and on simloop's "
            "virtual clock (inside Sim.run) the client's timeouts fire at once. Record outside the Sim, then "
            "replay the cassette in one with Recorded(path)."
        )
    import vcr as vcrpy  # type: ignore[import-untyped, unused-ignore]

    name = os.fspath(path)
    if mode == "rewrite":
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
        mode = "new_episodes"
    recorder = configure_vcr(vcrpy.VCR(record_mode=mode, **vcr_config(secrets=secrets, match_on=match_on)))
    with recorder.use_cassette(name) as cassette:
        yield cassette


def _on_virtual_clock() -> bool:
    from simloop import clock

    threads: Mapping[int, Any] = getattr(clock, "_threads", {})
    return threading.get_ident() in threads


class CassetteSerializer:
    """A vcrpy serializer writing JSON bodies as YAML (``parsed_body``) and streams as literal text.

    A body is stored parsed only when its compact re-serialisation gives back the exact bytes (what
    the SDK sends and the API answers), so a cassette always replays the recorded bytes; any other
    body stays a string (``!!binary`` when it is not UTF-8).  Multi-line strings (SSE streams) are
    written as literal blocks when YAML can hold them exactly.  Reading accepts vcrpy's format,
    pydantic-ai's and this one.
    """

    @staticmethod
    def serialize(cassette_dict: dict[str, Any]) -> str:
        """vcrpy's cassette dict (``version``, ``interactions``) -> YAML text."""
        data = dict(cassette_dict)
        data["interactions"] = [_to_disk(item) for item in cassette_dict.get("interactions", [])]
        text = _dump(data, literal=True)
        if yaml.load(text, Loader=_Loader) != data:  # pragma: no cover - a YAML emitter corner case
            text = _dump(data, literal=False)
        return text

    @staticmethod
    def deserialize(cassette_string: str) -> dict[str, Any]:
        """YAML text -> vcrpy's cassette dict (``parsed_body`` turned back into body strings)."""
        from vcr.serializers import yamlserializer  # type: ignore[import-untyped, unused-ignore]

        data: Any = yamlserializer.deserialize(cassette_string)
        if isinstance(data, dict) and isinstance(data.get("interactions"), list):
            data["interactions"] = [_from_disk(item) for item in data["interactions"]]
        return data  # type: ignore[no-any-return]


def _exact_json(body: Any) -> tuple[bool, Any]:
    """(True, parsed) when ``body`` is JSON that re-serialises compactly to the same bytes."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if not isinstance(raw, bytes) or raw[:1] not in (b"{", b"["):
        return False, None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return False, None
    return _compact_json(parsed) == raw, parsed


def _to_disk(item: dict[str, Any]) -> dict[str, Any]:
    request = dict(item["request"])
    response = dict(item["response"])
    ok, parsed = _exact_json(request.get("body"))
    out_request = {k: request[k] for k in ("method", "uri", "headers") if k in request}
    if ok:
        out_request["parsed_body"] = parsed
    else:
        out_request["body"] = request.get("body")
    body = response.get("body")
    string = body.get("string") if isinstance(body, dict) else None
    ok, parsed = _exact_json(string)
    out_response = {k: response[k] for k in ("status", "headers") if k in response}
    if ok:
        out_response["parsed_body"] = parsed
    else:
        out_response["body"] = body
    return {**{k: v for k, v in item.items() if k not in ("request", "response")},
            "request": out_request, "response": out_response}


def _from_disk(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    request, response = item.get("request"), item.get("response")
    if isinstance(request, dict) and "parsed_body" in request:
        request = dict(request)
        request["body"] = _compact_json(request.pop("parsed_body")).decode("utf-8")
    if isinstance(response, dict) and "parsed_body" in response:
        response = dict(response)
        body = _compact_json(response.pop("parsed_body"))
        headers = {k: v for k, v in (response.get("headers") or {}).items() if k.lower() != "content-encoding"}
        for key in [k for k in headers if k.lower() == "content-length"]:
            if headers[key] != [str(len(body))]:
                del headers[key]  # pydantic-ai keeps the stale length of the encoded body
        response["headers"] = headers
        response["body"] = {"string": body.decode("utf-8")}
    return {**item, "request": request, "response": response}


def _dump(data: Any, *, literal: bool) -> str:
    base: Any = getattr(yaml, "CSafeDumper", None) or yaml.SafeDumper
    dumper: Any = type("_CassetteDumper", (base,), {})
    if literal:
        def text(dumper: Any, value: str) -> Any:
            style = "|" if "\n" in value else None
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

        dumper.add_representer(str, text)
    result: str = yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=120)
    return result


# =========================================================================== the recording as calls


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One recorded ``POST /v1/messages``: the request body and what the API answered.

    ``answer`` is what a replay serves: the exact `Turn` for a 200, or a `Reply` error for an error
    status or a stream that failed mid-way.  ``reply`` is the same answer in the scenario format
    (None when v1 scenarios cannot script it: a 4xx other than 429).  ``latency`` comes from the
    recorded timing headers (``x-envoy-upstream-service-time``, ``server-timing``), 0.0 without them.
    """

    interaction: int
    request: dict[str, Any]
    answer: Turn | Reply
    reply: Reply | None
    latency: float = 0.0

    @property
    def kind(self) -> str:
        """The answer's kind: a stop reason, ``error <status>``, or ``cut``."""
        if isinstance(self.answer, Turn):
            return str(self.answer.stop_reason or "cut")
        return f"error {self.answer.error}"


@dataclass(slots=True)
class Recording:
    """A cassette's model calls, and the scenario it amounts to (see `load_recording`).

    ``notes`` lists what the scenario approximates (blocks v1 replies cannot express, dropped calls).
    """

    source: str
    calls: list[RecordedCall]
    scenario: Scenario
    notes: list[str] = field(default_factory=list)
    other: int = 0  # interactions that are not model calls (count_tokens, other hosts)

    def with_kinds(self, kinds: Mapping[str, str]) -> Recording:
        """The same recording, its tools' kinds set from ``kinds`` (name -> ``read``/``write``)."""
        tools = [t.model_copy(update={"kind": kinds.get(t.name, t.kind)}) for t in self.scenario.tools]
        scenario = Scenario.model_validate({**self.scenario.model_dump(), "tools": tools})
        return Recording(self.source, self.calls, scenario, list(self.notes), self.other)

    def __repr__(self) -> str:
        return f"Recording({self.source!r}, {len(self.calls)} model calls)"


Source = Union[str, "os.PathLike[str]", Sequence[Interaction], Recording]

# A tool whose name starts with one of these verbs is taken for a write (``send_email``, ``issueRefund``).
_WRITE_VERBS = frozenset({
    "send", "write", "create", "delete", "remove", "update", "post", "pay", "refund", "charge", "transfer", "book",
    "cancel", "submit", "email", "insert", "upload", "publish", "deploy", "issue", "purchase", "save", "set", "put",
    "patch", "move", "rename", "approve", "reply", "add", "edit", "execute", "place", "schedule", "notify",
})


def guess_kind(name: str) -> str:
    """``write`` when the tool's name starts with a verb that changes the world (``send_email``), else ``read``."""
    first = re.split(r"[_\-\s.]|(?<=[a-z0-9])(?=[A-Z])", name, maxsplit=1)[0].lower()
    return "write" if first in _WRITE_VERBS else "read"


def load_recording(
    source: Source, *, kinds: Mapping[str, str] | None = None, name: str | None = None
) -> Recording:
    """Read a cassette's model calls and derive its scenario.

    ``source`` is a cassette path, a list of `Interaction`, or a `Recording` (returned as is).
    ``kinds`` maps tool names to ``read``/``write`` (the oracle treats writes specially); tools not
    named are guessed from their names (``send_email``, ``issue_refund`` are writes).

    Raises:
        CassetteError: the file cannot be read, or a 200 answer is not a Message.
    """
    bad = {k: v for k, v in (kinds or {}).items() if v not in ("read", "write")}
    if bad:
        raise UsageError(f"kinds={bad!r}: a tool's kind is 'read' or 'write' (a completed write must never run twice)")
    if isinstance(source, Recording):
        return source.with_kinds(kinds) if kinds else source
    if isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        interactions = load_cassette(source)
    else:
        interactions = list(source)
        label = "<interactions>"
    calls: list[RecordedCall] = []
    notes: list[str] = []
    for item in interactions:
        if item.is_model_call:
            calls.append(_call(label, item, notes))
    other = len(interactions) - len(calls)
    scenario = _scenario(label, calls, notes, kinds=kinds or {}, name=name)
    return Recording(source=label, calls=calls, scenario=scenario, notes=notes, other=other)


def _call(label: str, item: Interaction, notes: list[str]) -> RecordedCall:
    where = f"{label}: interaction {item.index}"
    request = item.request.json()
    if not isinstance(request, dict):
        request = {}
    response = item.response
    latency = _latency(response.headers)
    answer: Turn | Reply
    if response.status != 200:
        answer, reply = _error_answer(response.status, response.headers, latency)
        if reply is None:
            notes.append(
                f"interaction {item.index}: the recorded {response.status} is not a v1 scenario reply "
                "(the simulator answers invalid requests itself); left out"
            )
        return RecordedCall(item.index, request, answer, reply, latency)
    if response.is_sse:
        if re.search(rb"^event:\s*error\s*$", response.body, re.MULTILINE):
            answer = Reply(error="stream_error", latency=latency)
            return RecordedCall(item.index, request, answer, answer, latency)
        try:
            turn = turn_from_sse(response.body)
        except (ValueError, KeyError, IndexError) as exc:
            raise CassetteError(f"{where}: the recorded stream is not a Messages stream ({exc}).{_FIX}") from exc
    else:
        message = response.json()
        if not isinstance(message, dict) or message.get("type") != "message":
            raise CassetteError(
                f"{where}: a 200 answer to POST /v1/messages must be a Message JSON object, found "
                f"{_describe(message)}.{_FIX}"
            )
        turn = turn_from_message(message)
    reply = reply_of_turn(turn, latency=latency, notes=notes, where=f"interaction {item.index}")
    return RecordedCall(item.index, request, turn, reply, latency)


def _latency(headers: Mapping[str, list[str]]) -> float:
    for value in headers.get("x-envoy-upstream-service-time", ()):
        with contextlib.suppress(ValueError):
            return round(max(0.0, float(value)) / 1000.0, 3)
    for value in headers.get("server-timing", ()):
        found = re.search(r"dur=([0-9.]+)", value)
        if found:
            return round(float(found.group(1)) / 1000.0, 3)
    return 0.0


def _error_answer(status: int, headers: Mapping[str, list[str]], latency: float) -> tuple[Reply, Reply | None]:
    scripted = [code for code in API_ERRORS if isinstance(code, int)]
    if status in scripted:
        retry_after: float | None = None
        if status == 429:
            for value in headers.get("retry-after", ()):
                with contextlib.suppress(ValueError):
                    retry_after = float(value) if float(value) > 0 else None
        reply = Reply(error=status, latency=latency, retry_after=retry_after)  # type: ignore[arg-type]
        return reply, reply
    # v1 scenarios script only transient statuses, but the server renders any status with the real
    # error envelope (simloop.wire.errors), so the replay answers the recorded status and error type.
    answer = Reply.model_construct(error=status, latency=latency)
    if status >= 500:
        return answer, Reply(error=500, latency=latency)
    return answer, None


_SERVER_BLOCK_HINT = "v1 replies carry text, client tool calls and web search, fetch and code execution calls only"


def reply_of_turn(
    turn: Turn, *, latency: float = 0.0, notes: list[str] | None = None, where: str = "a reply"
) -> Reply:
    """A recorded `Turn` as a v1 scenario reply (kinds, text, tool calls, thinking, usage, latency).

    Text blocks are joined with a blank line; server tool calls with their results become
    ``server_tools`` (before the text), a paused server call the ``pause_turn``'s
    ``server_tool_use``; a result answering a call of an earlier reply is left to the replay (the
    simulator answers a paused call first); MCP, compaction and other blocks v1 replies cannot
    express are left out (noted in ``notes``).
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: str | None = None
    dropped: list[str] = []
    server_uses: dict[str, tuple[str, Any]] = {}  # server calls without their result yet, by id
    server_calls: list[ServerToolCall] = []
    for block in turn.content:
        kind = block.get("type")
        if kind == "server_tool_use" and block.get("name") in SERVER_TOOLS:
            server_uses[str(block.get("id"))] = (str(block.get("name")), block.get("input"))
            continue
        if isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result":
            use = server_uses.pop(str(block.get("tool_use_id")), None)
            if use is not None and kind == f"{use[0]}_tool_result":
                args = use[1] if isinstance(use[1], dict) else {}
                server_calls.append(
                    ServerToolCall.model_validate({"name": use[0], "input": args, "result": _without_none(block.get("content"))})
                )
                continue
            if use is None and block.get("tool_use_id") is not None:
                continue  # the continuation's answer to an earlier reply's paused call: the replay makes it
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            value = block.get("input")
            if "partial_json" in block:
                value = _partial(block["partial_json"])
            calls.append(ToolCall(name=str(block.get("name")), input=value if isinstance(value, dict) else {}))
        elif kind == "thinking":
            if thinking is None:
                thinking = str(block.get("thinking") or "")
        else:
            dropped.append(str(kind))
    paused = None
    if server_uses and turn.stop_reason == "pause_turn":  # the call the turn paused in
        name, args = server_uses.pop(list(server_uses)[-1])
        paused = ServerToolCall.model_validate({"name": name, "input": args if isinstance(args, dict) else {}})
    dropped.extend("server_tool_use" for _ in server_uses)
    if dropped and notes is not None:
        notes.append(f"{where}: {', '.join(sorted(set(dropped)))} block(s) left out ({_SERVER_BLOCK_HINT})")
    text = "\n\n".join(t for t in texts if t)
    usage = _usage(turn.usage)
    common: dict[str, Any] = {"latency": latency, "usage": usage, "thinking": thinking or None}
    if server_calls and turn.stop_reason in ("end_turn", "tool_use", "pause_turn"):
        common["server_tools"] = server_calls
    elif server_calls and notes is not None:
        notes.append(f"{where}: server tool calls left out (a {turn.stop_reason} reply has none in v1)")
    if paused is not None:
        return Reply(pause_turn=PauseTurnBody(text=text.rstrip(), server_tool_use=paused), **common)
    stop = turn.stop_reason
    if stop is None:
        return Reply(error="stream_cut", latency=latency)
    if stop == "tool_use" and calls:
        return Reply(tool_use=calls, text=text or None, **common)
    if stop == "max_tokens":
        body: str | MaxTokensBody = MaxTokensBody(text=text, tool_use=calls) if calls else text
        return Reply(max_tokens=body, **common)
    if stop == "stop_sequence":
        return Reply(stop_sequence=text, sequence=turn.stop_sequence, **common)
    if stop == "refusal":
        return Reply(refusal=text, **common)
    if stop == "pause_turn":
        return Reply(pause_turn=text.rstrip(), **common)
    if stop not in ("end_turn", "tool_use") and notes is not None:
        notes.append(f"{where}: stop_reason {stop!r} has no v1 reply kind; written as end_turn")
    return Reply(end_turn=text, **common)


def _without_none(value: Any) -> Any:
    """A result without its null fields (they carry nothing, and a parse and dump adds them)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _partial(text: str) -> Any:
    import jiter

    try:
        return jiter.from_json(text.encode(), partial_mode=True) if text else {}
    except ValueError:
        return {}


def _usage(usage: Mapping[str, Any] | None) -> Usage | None:
    if not usage:
        return None
    inp, out = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(inp, int) and not isinstance(out, int):
        return None
    return Usage(input_tokens=inp if isinstance(inp, int) else None, output_tokens=out if isinstance(out, int) else None)


# --------------------------------------------------------------------------- the scenario


def _scenario(
    label: str, calls: list[RecordedCall], notes: list[str], *, kinds: Mapping[str, str], name: str | None
) -> Scenario:
    first = calls[0].request if calls else {}
    task = _task(first, notes)
    system = _system(first.get("system"))
    tools = _tools(first.get("tools"), calls, notes, kinds)
    names = {t.name for t in tools}
    faults = [f for f in _tool_faults(calls) if f.tool in names]
    replies = [c.reply for c in calls if c.reply is not None]
    stem = _stem(label)
    return Scenario(
        name=name or stem, task=task, system=system, tools=tools, model=replies, then="fail", faults=faults,
    )


def _stem(path: str | os.PathLike[str]) -> str:
    """``test_x[claude-4.5]`` for ``…/test_x[claude-4.5].yaml.gz``."""
    return Path(path).name.removesuffix(".gz").removesuffix(".yaml").removesuffix(".yml") or "recording"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(str(b.get("text")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _task(request: Mapping[str, Any], notes: list[str]) -> str:
    messages = request.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        first = messages[0]
        text = _text_of(first.get("content")) if first.get("role") == "user" else ""
        if text:
            return text
    if request:
        notes.append("the first request does not start with a user text message; the task is a placeholder")
    return "Do the task."


def _system(system: Any) -> str | None:
    text = _text_of(system)
    return text or None


def _tools(
    raw: Any, calls: list[RecordedCall], notes: list[str], kinds: Mapping[str, str]
) -> list[ToolSpec]:
    results = _tool_results(calls)
    specs: list[ToolSpec] = []
    skipped: list[str] = []
    for tool in raw if isinstance(raw, list) else []:
        if not isinstance(tool, dict):
            continue
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not isinstance(schema, dict) or schema.get("type") != "object":
            skipped.append(str(tool.get("name") or tool.get("type")))
            continue
        kind = kinds.get(name) or guess_kind(name)
        try:
            specs.append(ToolSpec(
                name=name, kind=kind,  # type: ignore[arg-type]
                description=str(tool.get("description") or ""), input_schema=schema,
                results=results.get(name) or None,
            ))
        except ValueError:
            skipped.append(name)
    if skipped:
        notes.append(f"tools without an input schema left out: {', '.join(skipped)} (server tools, built-in client tools)")
    return specs


def _executions(calls: list[RecordedCall]) -> list[tuple[str, str | None, bool]]:
    """Every client tool call the recording answers, in order: (tool, output, is_error)."""
    results: dict[str, tuple[str | None, bool]] = {}
    for call in calls:
        for message in call.request.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    raw = block.get("content")
                    text = raw if isinstance(raw, str) else (_text_of(raw) if isinstance(raw, list) else None)
                    results[str(block.get("tool_use_id"))] = (text, bool(block.get("is_error")))
    out: list[tuple[str, str | None, bool]] = []
    for call in calls:
        if isinstance(call.answer, Turn) and call.answer.stop_reason == "tool_use":
            for block in call.answer.content:
                if block.get("type") == "tool_use" and str(block.get("id")) in results:
                    text, is_error = results[str(block.get("id"))]
                    out.append((str(block.get("name")), text, is_error))
    return out


def _tool_results(calls: list[RecordedCall]) -> dict[str, list[str]]:
    by_tool: dict[str, list[str]] = {}
    for tool, text, _ in _executions(calls):
        by_tool.setdefault(tool, []).append(text or "")
    return by_tool


def _tool_faults(calls: list[RecordedCall]) -> list[Fault]:
    faults: list[Fault] = []
    nth: dict[str, int] = {}
    for tool, _, is_error in _executions(calls):
        nth[tool] = nth.get(tool, 0) + 1
        if is_error:
            faults.append(Fault(tool=tool, kind="raise", call=nth[tool]))
    return faults


def to_scenario(source: Source, *, kinds: Mapping[str, str] | None = None, name: str | None = None) -> Scenario:
    """A recording as a v1 scenario that reproduces its replies (see `load_recording`).

    The task is the first user message, the tools come from the first request (with the outputs the
    recording shows, and a ``raise`` fault where a result was an error), the replies are the recorded
    answers in order with their latencies, usage and thinking, ``then: fail``.

    Example::

        scenario = simloop.cassettes.to_scenario("tests/cassettes/test_agent/test_refund.yaml")
        with simloop.Sim(scenario) as sim: ...
    """
    return load_recording(source, kinds=kinds, name=name).scenario


def convert(
    source: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *, kinds: Mapping[str, str] | None = None
) -> Path:
    """Write a cassette's scenario as a YAML file (default: next to it, ``.scenario.yaml``); returns the path.

    The file starts with a comment naming the cassette and what the scenario approximates.
    """
    recording = load_recording(source, kinds=kinds)
    src = Path(source)
    target = Path(out) if out is not None else src.with_name(_stem(src) + ".scenario.yaml")
    header = [f"# Converted by simloop from the cassette {src.name} ({len(recording.calls)} model calls)."]
    header += [f"#   note: {line}" for line in recording.notes]
    header.append("# Replay it with simloop.replay(drive, this_file), or edit it into the test you want.")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(header) + "\n" + recording.scenario.to_yaml(), encoding="utf-8")
    return target


# =========================================================================== replay as a model


@dataclass(frozen=True, slots=True)
class Drift:
    """How one request differed from the recorded one (a tolerant replay collects them)."""

    call: int
    interaction: int
    lines: tuple[str, ...]

    def __str__(self) -> str:
        return f"model call {self.call} (cassette interaction {self.interaction}):\n" + "\n".join(
            f"  {line}" for line in self.lines
        )


class RecordingDiverged(ScriptExhausted):
    """The loop sent a request that differs from the recorded one (strict replay).

    A `BaseException`, like `ScriptExhausted`: neither the SDK's retries nor the loop's own
    ``except Exception`` may turn it into an API error, and `Sim.run` reports it to the user.
    ``drift`` holds the call and the diff lines.
    """

    def __init__(self, message: str, drift: Drift) -> None:
        super().__init__(message)
        self.drift = drift


class RecordingExhausted(ScriptExhausted):
    """The loop asked for more model calls than the recording holds."""


class Recorded:
    """A model policy that answers with a cassette's recorded replies, in order.

    Each ``POST /v1/messages`` the loop sends is matched to the next recorded one (retries
    included; ``count_tokens`` is answered by the simulator).  The recorded answer is served
    exactly (content, ids, usage), as JSON or as a stream, whichever the loop asks for.  When the
    request differs from the recorded one, ``strict`` (the default) stops the run with
    `RecordingDiverged`: which call, which message, which block, what changed; ``strict=False``
    serves by position and appends a `Drift` to ``drift``.  Top-level keys in ``ignore`` are not
    compared (default: ``stream``, a transport choice).  Thinking blocks are re-signed with the
    simulator's signature, so the simulator still checks that the loop sends them back unchanged.

    Example::

        with simloop.Sim(to_scenario(path), model=Recorded(path)) as sim:
            sim.run(drive)
    """

    def __init__(
        self,
        source: Source,
        *,
        strict: bool = True,
        ignore: Iterable[str] = ("stream",),
        resign_thinking: bool = True,
    ) -> None:
        if isinstance(source, (bytes, bytearray)) or not isinstance(source, (str, os.PathLike, Recording, Sequence)):
            raise UsageError(
                f"Recorded(source): give a cassette path, a list of Interaction or a Recording; got "
                f"{type(source).__name__}"
            )
        self.recording = load_recording(source)
        self.strict = strict
        self.ignore = frozenset(ignore)
        self.resign_thinking = resign_thinking
        self.drift: list[Drift] = []
        self.served = 0

    @property
    def calls(self) -> list[RecordedCall]:
        """The recorded model calls, in order."""
        return self.recording.calls

    def reply(self, request: ModelRequest) -> Reply | Turn:
        """The next recorded answer; raises `RecordingDiverged` / `RecordingExhausted` (BaseExceptions)."""
        calls = self.recording.calls
        if self.served >= len(calls):
            raise RecordingExhausted(
                f"the recording {self.recording.source} has {len(calls)} model call(s) and the loop asked for "
                f"another: model call {request.call} (attempt {request.attempt}). The loop now makes more calls "
                "than when it was recorded: re-record the cassette, or convert it (to_scenario) and add replies."
            )
        call = calls[self.served]
        self.served += 1
        lines = request_diff(self._expected(call.request), self._sent(call.request, request))
        if lines:
            drift = Drift(call=request.call, interaction=call.interaction, lines=tuple(lines))
            if self.strict:
                raise RecordingDiverged(self._explain(request, call, drift), drift)
            self.drift.append(drift)
        return self._serve(call.answer)

    def leftovers(self) -> list[str]:
        """The recorded calls the run never reached."""
        return [
            f"{self.recording.source}: interaction {c.interaction} (recorded model call {n}, {c.kind}) was never "
            "played back"
            for n, c in enumerate(self.recording.calls[self.served:], start=self.served + 1)
        ]

    def __repr__(self) -> str:
        return f"Recorded({self.recording.source!r}, strict={self.strict})"

    # -- internals ---------------------------------------------------------------------------

    def _serve(self, answer: Turn | Reply) -> Turn | Reply:
        if isinstance(answer, Reply) or not self.resign_thinking:
            return answer
        return _resigned(answer)

    def _expected(self, body: dict[str, Any]) -> dict[str, Any]:
        expected = {k: v for k, v in body.items() if k not in self.ignore}
        if self.resign_thinking and isinstance(expected.get("messages"), list):
            expected["messages"] = [_resign_message(m) for m in expected["messages"]]
        return expected

    def _sent(self, recorded: dict[str, Any], request: ModelRequest) -> dict[str, Any]:
        body = request.body
        thread = recorded.get("thread")
        if isinstance(thread, dict) and thread.get("type") == "continue":
            # The request stands for its whole thread: compare what the recording sent, the new messages.
            new = recorded.get("messages")
            tail = request.conversation[-len(new):] if isinstance(new, list) and new else []
            sent = {k: body[k] for k in recorded if k in body and k != "messages" and k not in self.ignore}
            sent["messages"] = tail
            return sent
        return {k: v for k, v in body.items() if k not in self.ignore}

    def _explain(self, request: ModelRequest, call: RecordedCall, drift: Drift) -> str:
        where = f"{self.recording.source}, interaction {call.interaction}"
        return "\n".join([
            f"the loop's request for model call {request.call} differs from the recording ({where}):",
            *(f"  {line}" for line in drift.lines),
            (
                "If the change is intended, re-record the cassette (record(path, mode='rewrite')); to replay anyway, "
                "serving the recorded replies by position and collecting the drift, use Recorded(path, strict=False)."
            ),
        ])


def _resigned(turn: Turn) -> Turn:
    if not any(b.get("type") == "thinking" for b in turn.content):
        return turn
    content = [_resign_block(b) for b in turn.content]
    return Turn(
        content=content, stop_reason=turn.stop_reason, stop_sequence=turn.stop_sequence,
        stop_details=turn.stop_details, usage=turn.usage, id=turn.id, model=turn.model, extra=turn.extra,
    )


def _resign_block(block: Any) -> Any:
    if isinstance(block, dict) and block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
        return {**block, "signature": thinking_signature(block["thinking"])}
    return block


def _resign_message(message: Any) -> Any:
    if isinstance(message, dict) and message.get("role") == "assistant" and isinstance(message.get("content"), list):
        return {**message, "content": [_resign_block(b) for b in message["content"]]}
    return message


# --------------------------------------------------------------------------- the diff


def request_diff(recorded: Any, sent: Any, *, limit: int = 12) -> list[str]:
    """Where a request differs from the recorded one, one line each (empty when they are equal).

    Each line gives the path (``messages[2].content[0].content``), what it is (``user message,
    tool_result block for toolu_…``) and the change, e.g. ``recorded 'shipped', sent 'lost'``.
    """
    found: list[tuple[list[str | int], str]] = []
    _walk(recorded, sent, [], found)
    lines = [_line(path, what, recorded, sent) for path, what in found[:limit]]
    if len(found) > limit:
        lines.append(f"... and {len(found) - limit} more difference(s)")
    return lines


def _walk(a: Any, b: Any, path: list[str | int], out: list[tuple[list[str | int], str]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                out.append(([*path, key], f"only in the recording: {_short(a[key])}"))
            else:
                _walk(a[key], b[key], [*path, key], out)
        for key in b:
            if key not in a:
                out.append(([*path, key], f"only in the loop's request: {_short(b[key])}"))
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            what = "messages" if path == ["messages"] else "items"
            out.append((path, f"the recording has {len(a)} {what}, the loop's request {len(b)}"))
        for index, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, [*path, index], out)
        if len(b) > len(a):
            out.append(([*path, len(a)], f"only in the loop's request: {_short(b[len(a)])}"))
        elif len(a) > len(b):
            out.append(([*path, len(b)], f"only in the recording: {_short(a[len(b)])}"))
        return
    if a == b and type(a) is type(b):
        return
    if isinstance(a, str) and isinstance(b, str):
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lo = max(0, at - 24)
        pre = "..." if lo else ""
        out.append((path, f"recorded {pre}{a[lo:at + 36]!r}, sent {pre}{b[lo:at + 36]!r} (they differ at character {at})"))
        return
    out.append((path, f"recorded {_short(a)}, sent {_short(b)}"))


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _line(path: list[str | int], what: str, recorded: Any, sent: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    context = _context(path, recorded, sent)
    return f"{text or 'the body'}{f' ({context})' if context else ''}: {what}"


def _context(path: list[str | int], recorded: Any, sent: Any) -> str:
    if len(path) < 2 or path[0] != "messages" or not isinstance(path[1], int):
        return ""
    index = path[1]
    message = _at(sent, ["messages", index]) or _at(recorded, ["messages", index])
    role = message.get("role") if isinstance(message, dict) else None
    parts = [f"message {index}" + (f", {role}" if role else "")]
    if len(path) >= 4 and path[2] == "content" and isinstance(path[3], int):
        block = _at(recorded, path[:4]) or _at(sent, path[:4])
        if isinstance(block, dict):
            kind = str(block.get("type"))
            ref = block.get("tool_use_id") or block.get("id")
            name = block.get("name")
            detail = f" {name}" if name else ""
            detail += f" {ref}" if ref else ""
            parts.append(f"block {path[3]}: {kind}{detail}")
        else:
            parts.append(f"block {path[3]}")
    return "; ".join(parts)


def _at(value: Any, path: Sequence[str | int]) -> Any:
    for part in path:
        found = (isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value)) or (
            isinstance(part, str) and isinstance(value, dict) and part in value
        )
        if not found:
            return None
        value = value[part]
    return value


# =========================================================================== fault mutation

Draw = Callable[[st.SearchStrategy[Any]], Any]
_GATE = st.integers(0, 9)
_API_FAULTS = api_faults()
_LATENCIES = latencies(max_s=120.0)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """How hard one fuzzed replay of a recording is hit: chances in ten, per recorded reply or tool run.

    ``api_fault_rate``: an API failure (one error or a burst, `simloop.strategies.api_faults`) before
    the reply; ``latency_rate``: the reply takes a drawn latency; ``cutoff_rate``: the reply is cut
    at ``max_tokens``; ``tool_fault_rate``: a tool execution fails (`tool_plan` feeds
    `simloop.generated.GeneratedFaults`).  All zero is the recording itself, what a failure shrinks to.
    """

    api_fault_rate: int = 0
    tool_fault_rate: int = 0
    latency_rate: int = 0
    cutoff_rate: int = 0

    @property
    def tool_plan(self) -> Plan:
        """The `Plan` `simloop.generated.GeneratedFaults` reads (only its ``tool_fault_rate`` matters)."""
        return Plan(
            persona="finishes", steps=0, ending=Reply(end_turn="Done."), fault_rate=0,
            tool_fault_rate=self.tool_fault_rate,
        )


def fault_plans(
    *, api_faults: bool = True, tool_faults: bool = True, latencies: bool = True, cutoffs: bool = True
) -> st.SearchStrategy[FaultPlan]:
    """Fault plans for fuzzing a recording; each kind of fault can be switched off.

    Shrinks towards the plan with no fault at all.  Use with `FaultedRecording`::

        plan = data.draw(fault_plans())
        model = FaultedRecording(recording, data.draw, plan)
        faults = GeneratedFaults(data.draw, plan.tool_plan)
    """
    def rate(on: bool) -> st.SearchStrategy[int]:
        return st.integers(0, 3) if on else st.just(0)

    return st.builds(
        FaultPlan, api_fault_rate=rate(api_faults), tool_fault_rate=rate(tool_faults),
        latency_rate=rate(latencies), cutoff_rate=rate(cutoffs),
    )


class FaultedRecording:
    """A recording's replies with faults drawn as the loop runs (a `simloop.models.ModelPolicy`).

    Before each recorded reply it may serve an API failure (a burst of them, which does not use the
    reply up: the reply comes once the API recovers); the reply itself may take a latency or be cut
    at ``max_tokens``.  Replies are served in the scenario form (`RecordedCall.reply`), so ``served``
    is exactly the script that replays the run (`simloop.generated.to_scenario`).  Past the end of
    the recording it answers ``end_turn: "Done."``; requests are not compared (faults change them).
    """

    def __init__(self, source: Source, draw: Draw, plan: FaultPlan) -> None:
        self.recording = load_recording(source)
        self.replies = [c.reply for c in self.recording.calls if c.reply is not None]
        self.draw = draw
        self.plan = plan
        self.served: list[Reply] = []
        self._burst: list[Reply] = []
        self._pos = 0

    def reply(self, request: ModelRequest) -> Reply:
        reply = self._next()
        self.served.append(reply)
        return reply

    def leftovers(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return f"FaultedRecording({self.recording.source!r}, {self.plan!r})"

    def _gate(self, rate: int) -> bool:
        return bool(rate) and self.draw(_GATE) >= 10 - rate

    def _next(self) -> Reply:
        if self._burst:
            return self._burst.pop()
        if self._gate(self.plan.api_fault_rate):
            fault: Reply = self.draw(_API_FAULTS)
            one = fault.model_copy(update={"repeat": 1})
            self._burst = [one] * (int(fault.repeat) - 1)
            return one
        if self._pos >= len(self.replies):
            return Reply(end_turn="Done.")
        reply = self.replies[self._pos]
        self._pos += 1
        if reply.kind == "error":
            return reply
        if self._gate(self.plan.cutoff_rate):
            reply = _cut(reply)
        if self._gate(self.plan.latency_rate):
            reply = reply.model_copy(update={"latency": self.draw(_LATENCIES)})
        return reply


def _cut(reply: Reply) -> Reply:
    """The reply cut off at max_tokens: its text, and its tool calls with the last one cut mid-input."""
    paused = reply.pause_turn.text if isinstance(reply.pause_turn, PauseTurnBody) else reply.pause_turn
    text = reply.text or reply.end_turn or reply.stop_sequence or reply.refusal or paused or ""
    if isinstance(reply.max_tokens, (str, MaxTokensBody)):
        return reply
    body: str | MaxTokensBody = MaxTokensBody(text=text, tool_use=reply.calls) if reply.calls else text[: len(text) // 2]
    return Reply(max_tokens=body, latency=reply.latency, usage=reply.usage, thinking=reply.thinking)
