"""What a cassette may expand to: compressed bytes inflated, YAML aliases expanded (docs/security.md, Cassettes).

A cassette is data from elsewhere (another tool's recording, a download), read by `simloop convert`,
`verify(recorded=...)` and replay.  Two things in it grow far past the file: gzip (a 2 MB ``.yaml.gz`` can
inflate to 2 GB, as can a ``!!binary`` body under ``content-encoding: gzip``) and YAML aliases (nine levels
of ten aliases, about 1 KB, are 10^9 values once written out as the JSON body of a request).  Each is
refused past its cap, at once: inflation is incremental (`Inflation`), and the aliases' expansion is
measured on the loaded tree, whose shared values are counted once (`check_expansion`).
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

__all__ = ["MAX_EXPANDED", "MAX_INFLATED_BYTES", "Inflation", "Refused", "check_expansion"]

#: Bytes a cassette inflates to at most, the whole file and every compressed body in it together (256 MiB: a
#: recorded API call is kilobytes, the largest cassettes known a few megabytes).
MAX_INFLATED_BYTES = 256 * 1024 * 1024
#: The size of a cassette's values (one per value, plus the characters of its text) with every alias written
#: out, past which a file whose aliases make it larger than its own text is refused (64 Mi).
MAX_EXPANDED = 64 * 1024 * 1024
_CHUNK = 1024 * 1024
# An anchor (``&name``) and an alias (``*name``) as YAML writes them: a file without both has no alias to expand.
_ANCHOR = re.compile(rb"(?:^|[\s\[{,])&[^\s,\[\]{}]")
_ALIAS = re.compile(rb"(?:^|[\s\[{,])\*[^\s,\[\]{}]")


class Refused(Exception):
    """Past a cap: ``message`` says which, ``line`` (1-based) where in the file when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class Inflation:
    """The bytes one cassette may still inflate to (`MAX_INFLATED_BYTES` at first), shared by all its parts."""

    def __init__(self, budget: int | None = None) -> None:
        self.left = MAX_INFLATED_BYTES if budget is None else budget

    def inflate(self, data: bytes, *, gzip: bool) -> bytes:
        """``data`` (gzip, every member, or zlib's deflate) inflated a megabyte at a time, refused past the budget.

        Raises:
            Refused: it would inflate past what is left of the budget.
            zlib.error: it is not what it says, or is truncated.
        """
        out = bytearray()
        while True:
            stream = zlib.decompressobj(31 if gzip else 15)
            pending = data
            while not stream.eof:
                room = min(_CHUNK, self.left - len(out) + 1)
                piece = stream.decompress(pending, room)
                out += piece
                if len(out) > self.left:
                    raise Refused(f"it inflates to more than {self.left:,} bytes (a compression bomb?)")
                pending = stream.unconsumed_tail
                if not piece and not pending:
                    raise zlib.error("the compressed data is truncated")
            data = stream.unused_data.lstrip(b"\0")  # gzip.decompress's rule: zero padding after the last member
            if not gzip or not data:
                break
        self.left -= len(out)
        return bytes(out)


def check_expansion(raw: bytes, data: Any) -> None:
    """Refuse a loaded cassette whose aliases write out to more than `MAX_EXPANDED` (and more than its own text).

    PyYAML builds an alias by reference, so the tree is small; what expands it is a later walk (the JSON
    of a request's ``parsed_body``).  Its size is measured here once per distinct value.

    Raises:
        Refused: the aliases expand past the cap, or an alias refers to a value that contains it; with the
            line of the alias in the file.
    """
    if not (_ANCHOR.search(raw) and _ALIAS.search(raw)):
        return
    cap = max(MAX_EXPANDED, 4 * len(raw))
    size = _expanded_size(data)
    if size is None:
        raise Refused("an alias refers to a value that contains it (a value cannot hold itself)", _alias_line(raw, 0))
    if size > cap:
        raise Refused(
            f"with its aliases written out, the file holds more than {cap:,} values and characters (an alias "
            "bomb?)", _alias_line(raw, cap))


def _expanded_size(root: Any) -> int | None:
    """The values plus characters of ``root`` with every shared value counted each time it is referred to;
    None when a value contains itself.  Iterative (a deep file must not overflow the stack), each distinct
    list or mapping visited once."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        value, done = stack.pop()
        key = id(value)
        children = _children(value)
        if children is None or (key in sizes and not done):
            continue
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] if isinstance(c, (dict, list)) else _leaf(c) for c in children)
            continue
        if key in open_:
            return None
        open_.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in sizes)
    return sizes.get(id(root), _leaf(root))


def _children(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, list):
        return value
    return None


def _leaf(value: Any) -> int:
    return 1 + len(value) if isinstance(value, (str, bytes)) else 1


def _alias_line(raw: bytes, cap: int) -> int | None:
    """The line of the alias past which the file's written-out size passes ``cap`` (or, for ``cap`` 0, of the
    alias inside its own anchor's value), found on the parser's events without expanding anything."""
    sizes: dict[str, int] = {}
    frames: list[list[Any]] = [[None, 0]]  # [anchor, size] of each open list or mapping
    total = 0
    for event in yaml.parse(raw, Loader=getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader):
        kind = type(event).__name__  # by name: see simloop._loading.fastyaml
        if kind in ("SequenceStartEvent", "MappingStartEvent"):
            frames.append([event.anchor, 1])
            total += 1
            continue
        if kind in ("SequenceEndEvent", "MappingEndEvent") and len(frames) > 1:
            anchor, size = frames.pop()
            if anchor is not None:
                sizes[anchor] = size
            frames[-1][1] += size
            continue
        if kind == "ScalarEvent":
            add = 1 + len(event.value)
            if event.anchor is not None:
                sizes[event.anchor] = add
        elif kind == "AliasEvent":
            if cap == 0 and any(f[0] == event.anchor for f in frames):
                return int(event.start_mark.line) + 1
            add = sizes.get(event.anchor, 1)
        else:
            continue
        frames[-1][1] += add
        total += add
        if cap and total > cap and kind == "AliasEvent":
            return int(event.start_mark.line) + 1
    return None
