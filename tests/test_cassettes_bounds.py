"""A cassette cannot make simloop hang or run out of memory (issue 41 items 4, 5): a YAML alias bomb in a
request's ``parsed_body`` or ``body`` mapping is refused with its line, before anything expands it; a whole
``.yaml.gz`` or a ``!!binary`` gzip body inflates a megabyte at a time and is refused past the cap."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml

import simloop
from simloop.cassettes import CassetteError, _bounds, convert, load_cassette
from simloop.cli import main

REPLY = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
         "content": [{"type": "text", "text": "Paris."}], "stop_reason": "end_turn", "stop_sequence": None,
         "usage": {"input_tokens": 5, "output_tokens": 2}}


def _laughs(levels: int, indent: str) -> str:
    """The "billion laughs": ``levels`` anchors, each a list of ten aliases of the one before (10**levels strings)."""
    lines = [f'{indent}l0: &l0 "lol"']
    for level in range(1, levels + 1):
        lines.append(f"{indent}l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    return "\n".join(lines)


def _bomb_cassette(path: Path, levels: int = 9, *, key: str = "parsed_body") -> Path:
    """A vcrpy cassette whose one request's ``key`` mapping holds the bomb (the aliases start at line 9)."""
    text = (
        "interactions:\n"
        "- request:\n"
        "    method: POST\n"
        "    uri: https://api.anthropic.com/v1/messages\n"
        "    headers: {}\n"
        f"    {key}:\n"
        "      model: claude-sonnet-4-6\n"
        "      messages: [{role: user, content: hi}]\n"
        + _laughs(levels, " " * 6) + "\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        "    headers: {content-type: [application/json]}\n"
        f"    body: {{string: '{json.dumps(REPLY)}'}}\n"
        "version: 1\n"
    )
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("key", ["parsed_body", "body"])
def test_a_billion_laughs_in_a_request_is_refused_with_its_line(tmp_path: Path, key: str) -> None:
    # before: PyYAML built it by reference in a moment, then the reader's json.dumps wrote out 10**9 strings
    path = _bomb_cassette(tmp_path / "bomb.yaml", key=key)
    assert len(path.read_bytes()) < 2048
    with pytest.raises(CassetteError) as caught:
        load_cassette(path)
    message = str(caught.value)
    assert path.read_text().splitlines()[16].startswith("      l8: &l8 [*l7, ")  # 10**8 strings: past the cap
    assert message.startswith(f"{path}:17: refused: with its aliases written out, the file holds more than")
    assert "(an alias bomb?)" in message


def test_the_cap_holds_for_a_small_bomb_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bounds, "MAX_EXPANDED", 10_000)
    path = _bomb_cassette(tmp_path / "small.yaml", levels=5)  # 10**5 strings: loaded whole before the fix
    with pytest.raises(CassetteError, match=r"small\.yaml:13: refused: with its aliases written out"):
        load_cassette(path)
    assert len(load_cassette(_bomb_cassette(tmp_path / "tiny.yaml", levels=2))) == 1  # under the cap: read


def test_convert_and_verify_refuse_the_bomb_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _bomb_cassette(tmp_path / "bomb.yaml")
    assert main(["convert", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
    assert f"simloop: error: {path}:17: refused: with its aliases written out" in capsys.readouterr().err
    with pytest.raises(CassetteError, match=r"bomb\.yaml:\d+: refused"):
        convert(path, tmp_path / "out.yaml")
    with pytest.raises(CassetteError, match=r"bomb\.yaml:\d+: refused"):
        simloop.verify(lambda sim: simloop.Outcome("final"), recorded=path, max_examples=1, out_dir=tmp_path)


def test_an_alias_inside_its_own_value_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("interactions:\n- request: &r\n    method: POST\n    uri: https://h/v1/messages\n    parsed_body:\n"
                    "      again: *r\n  response: {status: {code: 200}}\n")
    with pytest.raises(CassetteError, match=r"loop\.yaml:6: refused: an alias refers to a value that contains it"):
        load_cassette(path)


def test_aliases_yaml_writes_for_shared_values_still_load(tmp_path: Path) -> None:
    headers = {"content-type": ["application/json"]}  # one object in both: yaml.dump writes an anchor and an alias
    request = {"method": "POST", "uri": "https://api.anthropic.com/v1/messages", "headers": headers,
               "body": json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})}
    response = {"status": {"code": 200, "message": "OK"}, "headers": headers, "body": {"string": json.dumps(REPLY)}}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.dump({"interactions": [{"request": request, "response": response}] * 3, "version": 1}))
    assert "*id001" in path.read_text()
    assert [i.response.json()["content"][0]["text"] for i in load_cassette(path)] == ["Paris."] * 3


# -- gzip ------------------------------------------------------------------------------------------------------------


def _members(total_mib: int) -> bytes:
    """Gzip data inflating to ``total_mib`` MiB of YAML comment, as members of 1 MiB each (small to make)."""
    member = gzip.compress(b"#" + b" " * (1024 * 1024 - 2) + b"\n", compresslevel=9)
    return member * total_mib


def _cassette_text() -> bytes:
    request = {"method": "POST", "uri": "https://api.anthropic.com/v1/messages", "headers": {},
               "body": json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})}
    response = {"status": {"code": 200, "message": "OK"}, "headers": {}, "body": {"string": json.dumps(REPLY)}}
    return yaml.dump({"interactions": [{"request": request, "response": response}], "version": 1}).encode()


def _peak_while(load: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        try:
            result: Any = load()
        except CassetteError as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_whole_yaml_gz_that_inflates_past_the_cap_is_refused_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_bounds, "MAX_INFLATED_BYTES", 4 * 1024 * 1024)
    path = tmp_path / "bomb.yaml.gz"
    path.write_bytes(_members(32) + gzip.compress(_cassette_text()))  # a valid cassette after 32 MiB of comment
    assert path.stat().st_size < 100_000
    error, peak = _peak_while(lambda: load_cassette(path))
    assert isinstance(error, CassetteError), error  # before: read whole (32 MiB in memory), and loaded
    assert str(error).startswith(f"{path}: refused: it inflates to more than 4,194,304 bytes (a compression bomb?)")
    assert peak < 12 * 1024 * 1024
    small = tmp_path / "fine.yaml.gz"
    small.write_bytes(_members(2) + gzip.compress(_cassette_text()))  # under the cap, several members: read
    assert len(load_cassette(small)) == 1


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_that_inflates_past_the_cap_is_refused_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    monkeypatch.setattr(_bounds, "MAX_INFLATED_BYTES", 4 * 1024 * 1024)
    reply = json.dumps(REPLY).encode() + b" " * (32 * 1024 * 1024)  # JSON, then 32 MiB of whitespace
    packed = gzip.compress(reply, compresslevel=9) if encoding == "gzip" else zlib.compress(reply, 9)
    request = {"method": "POST", "uri": "https://api.anthropic.com/v1/messages", "headers": {},
               "body": json.dumps({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})}
    response = {"status": {"code": 200, "message": "OK"}, "headers": {"content-encoding": [encoding]},
                "body": {"string": packed}}
    path = tmp_path / "body.yaml"
    path.write_text(yaml.dump({"interactions": [{"request": request, "response": response}], "version": 1}))
    error, peak = _peak_while(lambda: load_cassette(path))
    assert isinstance(error, CassetteError), error  # before: inflated whole, and loaded
    assert str(error).startswith(f"{path}: interaction 0: response: the body (content-encoding {encoding}) is "
                                 "refused: it inflates to more than")
    assert peak < 12 * 1024 * 1024
