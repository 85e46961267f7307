"""Reading cassettes: every layout recorded Anthropic traffic is found in, normalised to `Interaction`."""

from __future__ import annotations

import base64
import binascii
import json
import os
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml  # type: ignore[import-untyped, unused-ignore]

from simloop.cassettes._bounds import Inflation, Refused, check_expansion
from simloop.errors import UsageError

_ANTHROPIC_HOST = "api.anthropic.com"
_MESSAGES = "/v1/messages"
_MESSAGES_PATHS = frozenset({_MESSAGES, "/v1/messages/count_tokens"})
_FIX = " The file was probably edited by hand: fix that entry or re-record the cassette."
_SafeLoader: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
#: What other recorders write (for the message when a file is none of the layouts read).
_OTHER_LAYOUTS = (
    "VCR.py's (interactions:), its in-memory one (requests:/responses:), Ruby VCR's, R vcr's and betamax's "
    "(http_interactions:) and HAR (log: entries:)"
)


class _Loader(_SafeLoader):  # type: ignore[misc]
    """YAML's safe loader plus the tags recorders put in cassettes, each read as plain data, never as code:
    VCR.py through aiohttp writes header names as ``!!python/object/apply:multidict._multidict.istr [Name]``
    (a case-insensitive string; multidict's pure-Python build gives ``!!python/object/new:...istr``), Python 2's
    VCR.py wrote text as ``!!python/unicode``, and Ruby's YAML writes binary bodies as ``!binary`` (base64)."""


def _istr_of(kind: str) -> Any:
    def construct(loader: Any, suffix: str, node: Any) -> str:
        value = node.value if isinstance(node, yaml.SequenceNode) else None
        if isinstance(node, yaml.MappingNode) and kind == "new":  # object/new's long form: {args: [Name], state: ...}
            value = next((v.value for k, v in node.value if k.value == "args" and isinstance(v, yaml.SequenceNode)),
                         None)
        if not (suffix == "istr" or suffix.endswith(".istr")) or value is None or len(value) != 1 or not isinstance(value[0], yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None, None, f"a Python object (python/object/{kind}:{suffix}) is not data a cassette holds",
                node.start_mark,
            )
        return str(loader.construct_scalar(value[0]))

    return construct


def _ruby_binary(loader: Any, node: Any) -> bytes:
    try:
        return base64.b64decode("".join(str(loader.construct_scalar(node)).split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise yaml.constructor.ConstructorError(None, None, f"a !binary value that is not base64 ({exc})",
                                                node.start_mark) from exc


_Loader.add_multi_constructor("tag:yaml.org,2002:python/object/apply:multidict.", _istr_of("apply"))
_Loader.add_multi_constructor("tag:yaml.org,2002:python/object/new:multidict.", _istr_of("new"))
_Loader.add_constructor("!binary", _ruby_binary)
# Python 2's VCR.py tagged text (header names and values too) ``!!python/unicode`` / ``!!python/str``: plain strings.
_Loader.add_constructor("tag:yaml.org,2002:python/unicode", _SafeLoader.construct_yaml_str)
_Loader.add_constructor("tag:yaml.org,2002:python/str", _SafeLoader.construct_yaml_str)


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
    def uri_hidden(self) -> bool:
        """True when the recorder replaced the URI (``uri: '**REDACTED**'``, as newer langchain cassettes do)."""
        uri = self.request.uri
        return "://" not in uri and not uri.startswith("/")

    @property
    def is_anthropic_messages(self) -> bool:
        """True for ``POST api.anthropic.com/v1/messages`` and ``…/v1/messages/count_tokens`` (query ignored).

        A call whose URI was redacted is recognised by its body and response (`endpoint_by_content`).
        """
        if self.request.method.upper() != "POST":
            return False
        if self.uri_hidden:
            return endpoint_by_content(self) in _MESSAGES_PATHS
        parts = urlsplit(self.request.uri)
        return (parts.hostname or "").lower() == _ANTHROPIC_HOST and parts.path.rstrip("/") in _MESSAGES_PATHS

    @property
    def is_model_call(self) -> bool:
        """True for ``POST …/v1/messages`` on any host (a recording made against ``simloop serve`` included).

        A call whose URI was redacted counts when its body and response are a Messages call.
        """
        if self.request.method.upper() != "POST":
            return False
        if self.uri_hidden:
            return endpoint_by_content(self) == _MESSAGES
        return self.request.path.rstrip("/") == _MESSAGES


def endpoint_by_content(interaction: Interaction) -> str | None:
    """The Anthropic endpoint a call was made to, told from its request body and response alone.

    ``/v1/messages`` for a body with ``model``, ``max_tokens`` and a ``messages`` list whose answer
    is a Message (JSON or a stream) or an error envelope; ``/v1/messages/count_tokens`` for a
    ``messages`` body answered ``{"input_tokens": …}``; ``/v1/complete`` for the legacy Text
    Completions API (a ``prompt`` body); None when the call is none of these.  Used for redacted URIs.
    """
    body = interaction.request.json()
    if not isinstance(body, dict):
        return None
    response = interaction.response
    answer = response.json()
    if "prompt" in body and "messages" not in body:
        return "/v1/complete"
    if not isinstance(body.get("messages"), list) or not isinstance(body.get("model"), str):
        return None
    if isinstance(answer, dict) and set(answer) == {"input_tokens"}:
        return "/v1/messages/count_tokens"
    if "max_tokens" not in body:
        return None
    is_message = isinstance(answer, dict) and answer.get("type") in ("message", "error")
    if is_message or (response.is_sse and b"message_start" in response.body):
        return _MESSAGES
    return None


def load_cassette(path: str | os.PathLike[str]) -> list[Interaction]:
    """Read every interaction of a VCR.py cassette, whatever its layout; a gzip-compressed file too.

    Layouts read: vcrpy's file layout (``interactions:``, each a ``request`` and a ``response``),
    with vcrpy's bodies or pydantic-ai's ``parsed_body``, aiohttp's header names included; the layout vcrpy
    holds in memory (parallel ``requests:`` and ``responses:`` lists), which langchain writes as
    ``*.yaml.gz``; the ``http_interactions:`` layout of Ruby VCR, R vcr and betamax (bodies as ``string``,
    ``!binary`` or ``base64_string``); and HAR files (``log: entries:``, JSON), as browsers and proxies save them.

    Raises `CassetteError` when the file is missing, is not YAML, or has neither shape.
    """
    name = os.fspath(path)
    inflation = Inflation()
    try:
        with open(name, "rb") as handle:
            raw = handle.read()
        if raw[:2] == b"\x1f\x8b":  # a whole gzip-compressed cassette (langchain ships *.yaml.gz)
            raw = inflation.inflate(raw, gzip=True)
        data = yaml.load(raw, Loader=_Loader)
        check_expansion(raw, data)
    except Refused as exc:
        where = f"{name}:{exc.line}" if exc.line is not None else name
        raise CassetteError(f"{where}: refused: {exc.message}; a recorded cassette never does this, so the file "
                            "was made to: do not use it.") from None
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
    if type(data) is dict and "interactions" not in data and {"requests", "responses"} <= set(data):
        data = {"interactions": _paired(name, data["requests"], data["responses"])}
    elif type(data) is dict and "interactions" not in data and "http_interactions" in data:
        data = {"interactions": _from_http_interactions(name, data["http_interactions"])}
    elif type(data) is dict and type(data.get("log")) is dict and "entries" in data["log"]:
        data = {"interactions": _from_har(name, data["log"]["entries"])}
    if type(data) is not dict or "interactions" not in data:
        raise CassetteError(
            f"{name}: not a cassette simloop reads: expected a mapping with an 'interactions' list at the top, "
            f"found {_describe(data)}. The layouts read are {_OTHER_LAYOUTS}; re-record with VCR.py (or "
            "pytest-recording), or save the traffic as HAR."
        )
    items = data["interactions"]
    if type(items) is not list:
        raise CassetteError(
            f"{name}: 'interactions' must be a list of request/response pairs, found {_describe(items)}.{_FIX}"
        )
    return [_interaction(name, index, _older_httpx(f"{name}: interaction {index}", item), inflation)
            for index, item in enumerate(items)]


def _older_httpx(where: str, item: Any) -> Any:
    """VCR.py's older httpx layout (before 4.x's ``status``/``body``; vcrpy still reads it) as today's: the response
    as ``status_code``, ``http_version``, ``headers`` and ``content``, the body httpx had already decoded (so a
    ``content-encoding`` it kept no longer applies; a ``base64encoded: true`` variant holds it as base64)."""
    response = item.get("response") if type(item) is dict else None
    if type(response) is not dict or "status_code" not in response or "status" in response:
        return item
    content = response.get("content")
    if response.get("base64encoded") is True and isinstance(content, (str, bytes)):
        content = {"base64_string": content.decode() if isinstance(content, bytes) else content}
    headers = response.get("headers")
    if type(headers) is dict:
        headers = {k: v for k, v in headers.items() if str(k).lower() != "content-encoding"}
    status = response.get("status_code")
    return {**item, "response": {"status": {"code": status}, "headers": headers,
                                 "body": {"string": _body_of(f"{where}: response", content)}}}


def _paired(name: str, requests: Any, responses: Any) -> list[dict[str, Any]]:
    """vcrpy's in-memory layout (parallel lists) as the file layout's interactions."""
    if type(requests) is not list or type(responses) is not list:
        raise CassetteError(
            f"{name}: 'requests' and 'responses' must both be lists (found {_describe(requests)} and "
            f"{_describe(responses)}).{_FIX}"
        )
    if len(requests) != len(responses):
        raise CassetteError(
            f"{name}: {len(requests)} requests but {len(responses)} responses; in this layout the n-th "
            f"response answers the n-th request.{_FIX}"
        )
    return [{"request": q, "response": r} for q, r in zip(requests, responses, strict=True)]


def _from_http_interactions(name: str, items: Any) -> list[Any]:
    """Ruby VCR's, R vcr's and betamax's layout as vcrpy's: the same request/response pairs, with the method in
    lower case and a body as ``{encoding, string}`` (``string`` may be ``!binary``) or ``{base64_string}``."""
    if type(items) is not list:
        raise CassetteError(f"{name}: 'http_interactions' must be a list, found {_describe(items)}.{_FIX}")
    out: list[Any] = []
    for index, item in enumerate(items):
        if type(item) is not dict or type(item.get("request")) is not dict or type(item.get("response")) is not dict:
            out.append(item)  # _interaction names what is missing
            continue
        where = f"{name}: interaction {index}"
        request, response = dict(item["request"]), dict(item["response"])
        if type(request.get("method")) is str:
            request["method"] = request["method"].upper()
        request["body"] = _body_of(f"{where}: request", request.get("body"))
        response["body"] = {"string": _body_of(f"{where}: response", response.get("body"))}
        out.append({"request": request, "response": response})
    return out


def _body_of(where: str, body: Any) -> Any:
    if type(body) is not dict:
        return body
    if "base64_string" in body:
        try:
            return base64.b64decode("".join(str(body["base64_string"]).split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CassetteError(f"{where}: 'base64_string' is not base64 ({exc}).{_FIX}") from exc
    return body.get("string")


def _from_har(name: str, entries: Any) -> list[Any]:
    """A HAR file's entries as vcrpy's interactions.  HAR keeps bodies decoded (``content.text``, base64 when
    ``content.encoding`` says so), so a ``content-encoding`` header it kept no longer applies."""
    if type(entries) is not list:
        raise CassetteError(f"{name}: HAR 'log.entries' must be a list, found {_describe(entries)}.{_FIX}")
    out: list[Any] = []
    for index, entry in enumerate(entries):
        request = entry.get("request") if type(entry) is dict else None
        response = entry.get("response") if type(entry) is dict else None
        if type(request) is not dict or type(response) is not dict:
            out.append(entry)
            continue
        where = f"{name}: entry {index}"
        post = request.get("postData")
        content = response.get("content")
        text = content.get("text") if type(content) is dict else None
        if type(content) is dict and content.get("encoding") == "base64" and isinstance(text, str):
            text = _body_of(f"{where}: response", {"base64_string": text})
        headers = _har_headers(f"{where}: response", response.get("headers"))
        headers.pop("content-encoding", None)
        out.append({
            "request": {"method": request.get("method"), "uri": request.get("url"),
                        "headers": _har_headers(f"{where}: request", request.get("headers")),
                        "body": post.get("text") if type(post) is dict else None},
            "response": {"status": {"code": response.get("status")}, "headers": headers, "body": {"string": text}},
        })
    return out


def _har_headers(where: str, raw: Any) -> dict[str, list[str]]:
    if raw is None:
        return {}
    if type(raw) is not list or not all(type(h) is dict and "name" in h for h in raw):
        raise CassetteError(f"{where}: HAR headers must be a list of {{name, value}}, found {_describe(raw)}.{_FIX}")
    headers: dict[str, list[str]] = {}
    for h in raw:
        headers.setdefault(str(h["name"]).lower(), []).append(str(h.get("value", "")))
    return headers


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:5])
        return f"a mapping with keys {keys}" if keys else "an empty mapping"
    return f"a {type(value).__name__}"


def _interaction(name: str, index: int, item: Any, inflation: Inflation) -> Interaction:
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
    return Interaction(index, _request(where, item["request"]), _response(where, item["response"], inflation))


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
    elif type(raw.get("body")) in (dict, list):  # VCR.py through aiohttp keeps a request's json= as it was given
        body = _compact_json(raw["body"])
    else:
        body = _to_bytes(where, raw.get("body"))
    return RecordedRequest(method, uri, headers, body)


def _response(where: str, raw: dict[str, Any], inflation: Inflation) -> RecordedResponse:
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
    if any("redacted" in e for e in encodings):
        # The recorder hid the header's value (langchain redacts them all): tell gzip by its magic bytes.
        encodings = ["gzip"] if isinstance(raw_body, bytes) and body[:2] == b"\x1f\x8b" else []
        headers.pop("content-encoding", None)
    if encodings:
        if isinstance(raw_body, bytes):
            body = _decompress(where, body, encodings, inflation)
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


def _decompress(where: str, body: bytes, encodings: list[str], inflation: Inflation) -> bytes:
    # Encodings apply in the order listed, so undo them last to first; every body of a file shares one budget.
    for encoding in reversed(encodings):
        try:
            if encoding in ("gzip", "x-gzip", "deflate"):
                body = inflation.inflate(body, gzip=encoding != "deflate")
            elif encoding != "identity":
                raise CassetteError(
                    f"{where}: content-encoding {encoding!r} is not supported (gzip, deflate and identity are); "
                    "re-record with decode_compressed_response=True."
                )
        except Refused as exc:
            raise CassetteError(f"{where}: the body (content-encoding {encoding}) is refused: {exc.message}; a "
                                "recorded cassette never does this, so the file was made to: do not use it.") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise CassetteError(
                f"{where}: the body says content-encoding {encoding} but does not decode ({exc}); "
                "the cassette is corrupt or was edited by hand: re-record it."
            ) from exc
    return body
