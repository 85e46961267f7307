"""Recording: vcrpy underneath, pytest-recording's layout, JSON bodies stored parsed."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from simloop.cassettes._read import _compact_json, _Loader
from simloop.cassettes._scrub import Scrubber

if TYPE_CHECKING:
    from vcr.cassette import Cassette  # type: ignore[import-untyped, unused-ignore]
from simloop.errors import UsageError

# =========================================================================== recording

#: The record modes: vcrpy's four, and pytest-recording's ``rewrite`` (delete the file, record afresh).
RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")
#: How vcrpy matches a request to a recorded one when it replays (``body`` compares parsed JSON).
MATCH_ON = ("method", "scheme", "host", "port", "path", "query", "body")
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
    scrubbed from the URI, the headers and the bodies (`Scrubber`; add literal values of at least 8
    characters with ``secrets``).  JSON bodies are stored parsed,
    streams as their exact text.  Recording talks to a real server, so it runs in real time: it
    refuses to run on simloop's virtual clock (inside ``Sim.run``).  A cassette miss under ``none``
    reaches the SDK as ``APIConnectionError`` (whose ``__cause__`` is vcrpy's report), retried.

    Raises:
        UsageError: an unknown ``mode``, a listed secret under 8 characters, or the block runs on the
            virtual clock.

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
    from simloop._runtime import registry

    threads: Mapping[int, Any] = registry.threads
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
        if isinstance(data, dict) and "interactions" not in data and {"requests", "responses"} <= set(data):
            # vcrpy's in-memory layout written as is (langchain's cassettes): pair the lists up.
            pairs = zip(data["requests"] or [], data["responses"] or [], strict=False)
            data = {"version": 1, "interactions": [{"request": q, "response": r} for q, r in pairs]}
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
