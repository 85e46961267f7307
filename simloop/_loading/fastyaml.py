"""A fast path for loading scenario files: libyaml's C parser, composed here into ruamel's tree.

ruamel (pure Python, YAML 1.2, line numbers for errors) reads about 2,500 values a second on a busy
machine: a 0.7 MB file near the caps took tens of seconds.  libyaml (PyYAML's C parser, a core
dependency for cassettes) parses the same file in a fraction of a second.  `load` composes its
events into the ``CommentedMap``/``CommentedSeq`` tree ruamel would build (with the lines the error
messages use), resolving plain scalars with ruamel's own YAML 1.2 resolver, and checks the caps as
it goes (`simloop._loading.fileguard.Guard`, the same checks and messages as ruamel's path).

Anything it does not reproduce exactly (a syntax error, a ``%YAML`` directive, a merge key, a
duplicate or complex key, an unusual number, a date, several documents) returns `DEFER`: the caller
loads the text with ruamel, which gives its own value or its own error at its own line.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.resolver import VersionedResolver

from simloop._loading.fileguard import Guard

#: Returned by `load` when ruamel must read the text instead.
DEFER: Final = object()

_STR = "tag:yaml.org,2002:str"
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_resolver: VersionedResolver | None = None


class _Defer(Exception):
    """Something the fast path does not reproduce: ruamel reads the text."""


# The first characters of the plain scalars YAML 1.2 may read as something other than text (numbers,
# true/false, null and ~, .inf/.nan, dates, the merge and value keys): any other plain scalar is a string.
_MAYBE_NOT_TEXT = frozenset("0123456789+-.~<=tfnTFN")


def _plain(value: str) -> Any:
    """A plain scalar as ruamel's YAML 1.2 resolver and constructor read it; `_Defer` when unsure."""
    if value and value[0] not in _MAYBE_NOT_TEXT:
        return value
    if _INT.fullmatch(value):
        return int(value)
    tag = _tag(value)
    if tag == _STR:
        return value
    if tag == "tag:yaml.org,2002:null":
        return None
    if tag == "tag:yaml.org,2002:bool":
        return value.lower() == "true"
    if tag == "tag:yaml.org,2002:float" and _FLOAT.fullmatch(value):
        return float(value)
    raise _Defer  # a hex or octal number, .inf, a date, a merge key: ruamel knows


@functools.lru_cache(maxsize=4096)
def _tag(value: str) -> str:
    """The tag ruamel's YAML 1.2 resolver gives a plain scalar."""
    global _resolver
    if _resolver is None:
        _resolver = VersionedResolver(version=(1, 2))
    return str(_resolver.resolve(ScalarNode, value, (True, False)))


def load(text: str) -> Any:
    """The document in ``text`` as ruamel's round-trip tree, or `DEFER`.

    Raises:
        FileRefused: the document goes past a cap or uses a tag JSON cannot carry (as ruamel's path would).
    """
    import yaml  # type: ignore[import-untyped, unused-ignore]

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None or "%YAML" in text or "%TAG" in text:
        return DEFER
    try:
        return _compose(yaml.parse(text, Loader=loader))
    except (_Defer, RecursionError, ValueError):
        return DEFER
    except Exception as e:
        if any(c.__name__ == "YAMLError" for c in type(e).__mro__):  # by name, as the events (see _compose)
            return DEFER
        raise


def _compose(events: Any) -> Any:
    """Build the tree from libyaml's events with an explicit stack (no recursion), checking the caps."""
    return _Composer().compose(events)


class _Composer:
    """`_compose`'s state: the caps' guard, the anchors, the open collections, the root and the documents seen."""

    def __init__(self) -> None:
        self.guard = Guard()
        self.anchors: dict[str, tuple[Any, int, int]] = {}
        # Open collections: [container, anchor, key waiting for its value (or _NO_KEY), key line, key column].
        self.stack: list[list[Any]] = []
        self.root: Any = DEFER
        self.documents = 0

    def compose(self, events: Any) -> Any:
        """The tree the events build (None for an empty stream)."""
        # events are told apart by their class's name, not by isinstance: libyaml's C module keeps the event classes
        # of the first `import yaml`, and a later re-import (pytest's pytester restores sys.modules after an
        # in-process run) makes new ones, which the old events are no instances of
        guard, stack, anchors = self.guard, self.stack, self.anchors
        for event in events:
            mark = event.start_mark
            line, column = mark.line, mark.column
            kind = type(event).__name__
            if kind == "ScalarEvent":
                self._scalar(event, line, column)
            elif kind in ("MappingStartEvent", "SequenceStartEvent"):
                self._start(event, kind, line, column)
            elif kind in ("MappingEndEvent", "SequenceEndEvent"):
                guard.end(line=line + 1)
                stack.pop()
            elif kind == "AliasEvent":
                guard.alias(event.anchor, line=line + 1)
                if event.anchor not in anchors:
                    raise _Defer  # an undefined alias: ruamel's error
                self._put(*anchors[event.anchor])  # at the anchored value's place, as ruamel shares the node
            elif kind == "DocumentStartEvent":
                self.documents += 1
                if self.documents > 1:
                    raise _Defer  # several documents: ruamel's error
        return None if self.root is DEFER else self.root

    def _scalar(self, event: Any, line: int, column: int) -> None:
        """A scalar: read as ruamel reads it (a plain one through the YAML 1.2 resolver), anchored, put in place."""
        plain = event.style in ("", None) and event.implicit[0]
        self.guard.scalar(event.value, anchor=event.anchor, tag=event.tag, plain=plain, line=line + 1)
        stack = self.stack
        key = bool(stack) and isinstance(stack[-1][0], CommentedMap) and stack[-1][2] is _NO_KEY
        if plain and key and event.value == "<<":
            raise _Defer  # a merge key
        value = _plain(event.value) if plain else event.value
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, line, column)
        self._put(value, line, column)

    def _start(self, event: Any, kind: str, line: int, column: int) -> None:
        """A mapping or a sequence opens: put in place, then the collection the next values go into."""
        self.guard.start(anchor=event.anchor, tag=event.tag, line=line + 1)
        container: Any = CommentedMap() if kind == "MappingStartEvent" else CommentedSeq()
        container._yaml_set_line_col(line, column)
        if event.anchor is not None:
            self.anchors[event.anchor] = (container, line, column)
        self._put(container, line, column)
        self.stack.append([container, event.anchor, _NO_KEY, 0, 0])

    def _put(self, value: Any, line: int, column: int) -> None:
        """Place a value: the root, the next item of a sequence, a mapping's key (held), or that key's value."""
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        container = top[0]
        if isinstance(container, CommentedSeq):
            container._yaml_set_idx_line_col(len(container), [line, column])
            container.append(value)
        elif top[2] is _NO_KEY:
            if isinstance(value, (CommentedMap, CommentedSeq)) or value == "<<" or value in container:
                raise _Defer  # a complex, merge or duplicate key
            top[2], top[3], top[4] = value, line, column
        else:
            container._yaml_set_kv_line_col(top[2], [top[3], top[4], line, column])
            container[top[2]] = value
            top[2] = _NO_KEY


_NO_KEY: Final = object()
