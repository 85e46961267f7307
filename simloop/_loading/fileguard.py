"""What a scenario file may hold, checked before anything is built from it (docs/security.md).

A scenario file is data: JSON-shaped values (strings, numbers, booleans, null, lists, mappings) of a
bounded size.  This module holds the documented caps and the two checks the loader runs:

* `GuardedParser` watches the YAML parser's events as ruamel composes the document, so a file that
  nests too deep, or whose aliases would expand past the caps (a "billion laughs" file), or that uses
  a YAML tag JSON cannot carry (``!!set``, ``!!binary``, ``!!omap``, ``!foo``) is refused at the line
  where it goes wrong, before it is expanded.
* `to_plain` turns the loaded YAML tree into plain dicts and lists, refusing the values JSON cannot
  carry that YAML reads without a tag (dates and timestamps, ``.inf``/``.nan``, keys that are not
  strings, lone surrogates), with the path of the value for the error's line.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

from ruamel.yaml.comments import TaggedScalar
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    NodeEvent,
    ScalarEvent,
)
from ruamel.yaml.parser import RoundTripParser
from ruamel.yaml.scalarbool import ScalarBoolean

__all__ = [
    "MAX_COUNT",
    "MAX_DEADLINE_S",
    "MAX_DEPTH",
    "MAX_EXPANDED_CHARS",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "MAX_OUTPUT_CHARS",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "FileRefused",
    "Guard",
    "GuardedParser",
    "check_text",
    "to_plain",
]

#: A scenario file is at most this many bytes (4 MiB; the curated files are a few hundred bytes).
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Lists and mappings nest at most this deep (aliases expanded).
MAX_DEPTH = 64
#: Values (scalars, lists, mappings) in the document with every alias expanded.
MAX_NODES = 100_000
#: Characters of scalar text in the document with every alias expanded.
MAX_EXPANDED_CHARS = 8 * 1024 * 1024
#: Virtual seconds a latency, a fault's latency or a ``retry_after`` may take (30 days).
MAX_SECONDS = 30 * 86_400.0
#: The longest ``deadline_s`` a loop may declare (7 days).
MAX_DEADLINE_S = 7 * 86_400.0
#: The most characters a ``huge_output`` fault may return (10 million: past any context window).
MAX_OUTPUT_CHARS = 10_000_000
#: The largest ``repeat``, fault ``call`` number and ``max_steps``.
MAX_COUNT = 10_000
#: The largest token count (``usage``, ``max_total_tokens``).
MAX_TOKENS = 100_000_000

#: The tags a scenario may spell out: ``!!str`` (to keep ``2026-12-01`` text), ``!!map``, ``!!seq`` and the
#: non-specific ``!``.  The others either make what JSON cannot carry or convert text to numbers in ways
#: that fail (``!!int abc``): write values plainly.
_ALLOWED_TAGS = frozenset({"!", "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})
#: A plain scalar that YAML would read as a number with this many digits or more (Python refuses past 4,300).
_MAX_DIGITS = 1000
# What YAML 1.2 reads as a number: decimal digits, or hex/octal/binary behind their prefix.  (Not a bare
# run of hex digits: ``deadbeef…`` is text, however long.)
_NUMBER_LIKE = re.compile(r"[-+]?(?:0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+|[0-9_]*\.?[0-9_]+(?:[eE][-+]?[0-9]+)?|[0-9_]+\.)")


class FileRefused(Exception):
    """A scenario file goes past a cap or holds what JSON cannot carry.

    ``line`` is 1-based when known; ``loc`` is the path of the value (for `to_plain`'s refusals).
    """

    def __init__(self, message: str, *, line: int | None = None, loc: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.loc = loc


class _Frame:
    __slots__ = ("anchor", "chars", "depth", "nodes")

    def __init__(self, anchor: str | None) -> None:
        self.anchor = anchor
        self.nodes = 1
        self.chars = 0
        self.depth = 0  # how deep the collection nests below itself


class Guard:
    """The caps, checked on a YAML parser's events as they go by (ruamel's, or libyaml's in `simloop._loading.fastyaml`).

    Each event is seen once, so the check costs one pass and never expands an alias: an alias adds
    the recorded size of its anchor's value.  The running totals make each event O(1), whatever
    the nesting.  Each method raises `FileRefused` at ``line`` (1-based) past a cap.
    """

    def __init__(self) -> None:
        self._stack: list[_Frame] = [_Frame(None)]
        self._sizes: dict[str, tuple[int, int, int]] = {}  # anchor -> (nodes, chars, depth)
        self._aliases = 0
        self._nodes = 1  # the sums of the open frames' counts
        self._chars = 0

    def tag(self, tag: str | None, line: int | None) -> None:
        if tag is not None and tag not in _ALLOWED_TAGS:
            raise FileRefused(
                f"the YAML tag {_short_tag(tag)} is not part of the scenario format: a scenario holds only strings, "
                "numbers, booleans, null, lists and mappings, written plainly (use a list for a set, quote a date)",
                line=line,
            )

    def alias(self, anchor: str, line: int | None) -> None:
        if any(f.anchor == anchor for f in self._stack):
            raise FileRefused(f"the alias *{anchor} refers to a value that contains it", line=line)
        self._aliases += 1
        nodes, chars, depth = self._sizes.get(anchor, (1, 0, 0))
        self._add(nodes, chars, depth, line)

    def start(self, *, anchor: str | None, tag: str | None, line: int | None) -> None:
        self.tag(tag, line)
        if len(self._stack) > MAX_DEPTH:
            raise FileRefused(
                f"lists and mappings nest deeper than {MAX_DEPTH} levels; a scenario never needs that much",
                line=line,
            )
        self._stack.append(_Frame(anchor))
        self._nodes += 1

    def end(self, line: int | None) -> None:
        if len(self._stack) <= 1:
            return
        frame = self._stack.pop()
        self._nodes -= frame.nodes
        self._chars -= frame.chars
        if frame.anchor is not None:
            self._sizes[frame.anchor] = (frame.nodes, frame.chars, frame.depth + 1)
        self._add(frame.nodes, frame.chars, frame.depth + 1, line)

    def scalar(self, value: str, *, anchor: str | None, tag: str | None, plain: bool, line: int | None) -> None:
        self.tag(tag, line)
        chars = len(value)
        if chars > _MAX_DIGITS and plain and _NUMBER_LIKE.fullmatch(value):
            raise FileRefused(f"a number of {chars:,} digits; numbers in a scenario are far shorter", line=line)
        if anchor is not None:
            self._sizes[anchor] = (1, chars, 0)
        self._add(1, chars, 0, line)

    def _add(self, nodes: int, chars: int, depth: int, line: int | None) -> None:
        """Count a finished value into every open collection, refusing the document past a cap."""
        top = self._stack[-1]
        top.nodes += nodes
        top.chars += chars
        top.depth = max(top.depth, depth)
        self._nodes += nodes
        self._chars += chars
        if len(self._stack) - 1 + depth > MAX_DEPTH:
            raise FileRefused(
                f"with its aliases expanded, the document nests deeper than {MAX_DEPTH} levels", line=line
            )
        if self._nodes > MAX_NODES or self._chars > MAX_EXPANDED_CHARS:
            what = f"{MAX_NODES:,} values" if self._nodes > MAX_NODES else f"{MAX_EXPANDED_CHARS:,} characters"
            if self._aliases:
                raise FileRefused(
                    f"with its aliases expanded, the document holds more than {what} (an alias bomb?); "
                    "write the values out, or split the scenario",
                    line=line,
                )
            raise FileRefused(f"the document holds more than {what}; split the scenario", line=line)


class GuardedParser(RoundTripParser):
    """ruamel's round-trip parser, refusing a document past the caps as its events go by (`Guard`)."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self._guard = Guard()

    def get_event(self) -> Any:
        event = super().get_event()
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        if isinstance(event, AliasEvent):
            self._guard.alias(event.anchor, line)
        elif isinstance(event, CollectionStartEvent):
            self._guard.start(anchor=event.anchor, tag=event.tag, line=line)
        elif isinstance(event, ScalarEvent):
            self._guard.scalar(event.value, anchor=event.anchor, tag=event.tag, plain=event.style is None, line=line)
        elif isinstance(event, NodeEvent):
            self._guard.tag(getattr(event, "tag", None), line)
        elif isinstance(event, CollectionEndEvent):
            self._guard.end(line)
        return event


_BRACKETS = re.compile(r"[\[\]{}]")


def check_text(text: str) -> None:
    """Refuse, before parsing, text whose flow brackets open far deeper than `MAX_DEPTH`.

    ruamel's scanner reads a run of opening brackets to its end before the parser sees the first, at
    a cost that grows with the square of the run (50,000 ``[`` take minutes).  Brackets inside
    strings are counted too, so the bound is four times the nesting cap: no real scenario comes near.
    """
    depth = 0
    for m in _BRACKETS.finditer(text):
        if m.group() in "[{":
            depth += 1
            if depth > 4 * MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise FileRefused(
                    f"lists and mappings nest deeper than {MAX_DEPTH} levels; a scenario never needs that much",
                    line=line,
                )
        elif depth:
            depth -= 1


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def to_plain(node: Any, loc: tuple[Any, ...] = ()) -> Any:
    """The loaded YAML tree as plain JSON data; `FileRefused` (with ``loc``) for what JSON cannot carry.

    Aliases were bounded by `GuardedParser`, so copying shared values here stays within the caps; the
    depth is checked again for data that did not come through it (a dict given to ``Sim``).
    """
    if len(loc) >= MAX_DEPTH and isinstance(node, (dict, list)):
        raise FileRefused(f"lists and mappings nest deeper than {MAX_DEPTH} levels; a scenario never needs that much",
                          loc=loc)
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                shown = repr(key) if not isinstance(key, (list, tuple, dict)) else "a list or mapping"
                raise FileRefused(
                    f"a mapping key must be a string (JSON has no other keys), got {shown}; quote it", loc=loc
                )
            out[str(key)] = to_plain(value, (*loc, str(key)))
        return out
    if isinstance(node, list):
        return [to_plain(v, (*loc, i)) for i, v in enumerate(node)]
    if isinstance(node, TaggedScalar) and node.tag is not None and str(node.tag) == "tag:yaml.org,2002:str":
        node = str(node.value)  # ``!!str 2026-12-01``: the text, as the tag asks
    if isinstance(node, str):
        text = str(node)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise FileRefused("this text holds a lone surrogate (\\ud800-\\udfff), which is not valid Unicode",
                              loc=loc) from None
        return text
    if isinstance(node, (bool, ScalarBoolean)) or node is None:
        return None if node is None else bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        if not math.isfinite(node):
            raise FileRefused(
                f"{_yaml_float(node)} is not a number JSON can carry; give a finite number", loc=loc
            )
        return float(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        raise FileRefused(
            f"YAML read this as a date ({node}), which JSON cannot carry; quote it to make it a string", loc=loc
        )
    raise FileRefused(
        f"a {type(node).__name__} value is not JSON data; a scenario holds only strings, numbers, booleans, null, "
        "lists and mappings",
        loc=loc,
    )


def _yaml_float(x: float) -> str:
    return ".nan" if math.isnan(x) else (".inf" if x > 0 else "-.inf")
