"""Tool inputs from a tool's ``input_schema``: a deterministic pool per schema, indexed by a small number.

The generated model asks for tools the way a real model does: with inputs that fit each tool's JSON
schema (typed tools, such as the SDK's ``@beta_tool`` functions and pydantic-ai's typed tools, reject
anything else before it runs), and now and then with a realistic invalid one (a required field left
out, a value of the wrong type), so that a loop's handling of those is tested too.

Why a pool and not a Hypothesis strategy per schema: a reply's calls are decoded from a few drawn
bytes (see `simloop.strategies.Digits`), and a call's input is one small drawn number ``n``.
``valid(n)`` maps it onto inputs built deterministically from ``n`` (``random.Random(n)``) and
checked against the schema once, then cached: index 0 is the simplest valid input (required fields
only, each at its simplest value), so Hypothesis shrinks a call's number, and with it the input,
to that; other numbers give distinct inputs with optional fields, enums, bounded numbers, arrays and
nested objects.  Drawing stays one number a call, with no strategy to build or draw per schema.

hypothesis-jsonschema was the library of choice, but its latest release (0.23.1, and its main
branch) fails on every object schema with the installed Hypothesis 6.170 (``'many' object has no
attribute 'more'``: it reaches into Hypothesis internals that changed), and its per-draw cost is far
above the throughput budget of a reply.  So the values are built here, for the subset of JSON
Schema that tool schemas use (objects with required and optional properties, ``enum``/``const``,
numbers with bounds and ``multipleOf``, strings with lengths and common formats, arrays, nested
objects, ``$ref``/``$defs``, ``anyOf``/``oneOf``/``allOf``, type lists), and every value is checked
with ``jsonschema`` (python-jsonschema), which also resolves what the builder does not know: a value
the schema rejects is never served as a "valid" one.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import threading
from collections.abc import Mapping
from typing import Any

from jsonschema import validators  # type: ignore[import-untyped]  # (no stubs shipped)

__all__ = ["POOL", "InputPool", "pool_for", "topic_words"]

#: The pool of valid inputs per schema that strategies draw from (``valid(n)``, ``n < POOL``).
POOL = 64
# Valid inputs kept per schema: the pool, and the fresh inputs of a wandering model's first steps
# (``valid(POOL + 16 * step + i)``: each wandering run asks for the same ones again); beyond, built on demand.
_KEPT = 16 * POOL
_TRIES = 8  # seeds tried for one pool entry before it falls back to the simplest input
_MAX_DEPTH = 4  # nesting past this (recursive $refs) takes the simplest value: no optional fields, no items

_WORDS = ("refund", "order", "status", "invoice", "customer", "shipping", "policy", "account")
_NAMES = ("ann", "bob", "chen", "dana", "eve", "femi")
_DOMAINS = ("example.com", "example.org", "shop.example")
_SENTENCES = (
    "Your refund is on its way.",
    "We have received your order.",
    "The invoice is attached.",
    "Your account has been updated.",
)
_ANY_SENTENCES = (  # a message's text in a run whose task is not the refund story
    "Here are the details you asked for.",
    "It is done.",
    "Everything is confirmed.",
    "Please see the details below.",
)
_FORMATS: dict[str, tuple[str, ...]] = {
    "email": ("ann@example.com", "bob@example.org", "chen@shop.example"),
    "idn-email": ("ann@example.com", "bob@example.org"),
    "uri": ("https://example.com/", "https://example.com/orders/1234", "https://example.org/policy"),
    "url": ("https://example.com/", "https://example.com/orders/1234"),
    "uri-reference": ("/orders/1234", "https://example.com/"),
    "iri": ("https://example.com/",),
    "date": ("2024-05-01", "2025-01-31", "2026-11-30"),
    "date-time": ("2024-05-01T12:00:00Z", "2025-01-31T08:30:00+01:00"),
    "time": ("12:00:00", "08:30:00"),
    "uuid": ("123e4567-e89b-12d3-a456-426614174000", "9f8e7d6c-5b4a-4321-8765-0fedcba98765"),
    "ipv4": ("192.0.2.1", "198.51.100.7"),
    "ipv6": ("2001:db8::1",),
    "hostname": ("example.com", "api.example.org"),
    "duration": ("P1D", "PT30M"),
}
_EMAIL_HINTS = ("to", "email", "recipient", "cc", "bcc", "from", "sender")
_QUERY_HINTS = ("q", "query", "search", "term", "keyword", "keywords")
_TEXT_HINTS = ("body", "message", "text", "content", "note", "comment", "description", "reason")
# a value of the wrong type for each type, of the kind a model slips into (and that even lax validation rejects:
# pydantic turns "42" into 42, so the wrong numbers are words)
_WRONG = {"string": 42, "integer": "several", "number": "about 40", "boolean": "maybe", "array": "a, b",
          "object": "see above", "null": "none"}


class InputPool:
    """The inputs generated for one ``input_schema``: ``valid(n)`` (0 the simplest) and ``invalid(n)``.

    Thread-safe (a loop may run tools on threads while the model draws); the values are shared, so a
    caller copies one before changing it.
    """

    def __init__(self, schema: Mapping[str, Any], words: tuple[str, ...] = _WORDS) -> None:
        self.schema = dict(schema)
        self.words = words or _WORDS  # what free-text values (queries, names) are made of: the task's words
        cls = validators.validator_for(self.schema, default=validators.Draft202012Validator)
        try:
            cls.check_schema(self.schema)
            self._validator: Any = cls(self.schema)
        except Exception:  # noqa: BLE001 - a schema jsonschema cannot read: nothing to check against
            self._validator = None
        self._valid: dict[int, dict[str, Any]] = {}
        self._invalid: dict[int, dict[str, Any]] = {}
        self._lock = threading.RLock()

    def is_valid(self, value: Any) -> bool:
        """Whether ``value`` fits the schema (True when the schema itself could not be read)."""
        return self._validator is None or bool(self._validator.is_valid(value))

    def valid(self, n: int) -> dict[str, Any]:
        """The ``n``-th valid input: 0 is the simplest; each number gives the same input every time."""
        found = self._valid.get(n)
        if found is None:
            with self._lock:
                found = self._valid.get(n)
                if found is None:
                    found = self._build_valid(n)
                    if n < _KEPT:
                        self._valid[n] = found
        return found

    def invalid(self, n: int) -> dict[str, Any]:
        """The ``n``-th realistic invalid input: a valid one with a required field left out or a value
        of the wrong type.  A schema nothing can break (no properties) gets a valid input."""
        found = self._invalid.get(n % POOL)
        if found is None:
            with self._lock:
                found = self._invalid.get(n % POOL)
                if found is None:
                    found = self._build_invalid(n % POOL)
                    self._invalid[n % POOL] = found
        return found

    # -- building ----------------------------------------------------------------------------------

    def _build_valid(self, n: int) -> dict[str, Any]:
        simplest = self._object(None)
        if n == 0:
            return simplest
        for attempt in range(_TRIES):
            value = self._object(random.Random(n * _TRIES + attempt))
            if self.is_valid(value):
                return value
        return simplest

    def _build_invalid(self, n: int) -> dict[str, Any]:
        rng = random.Random(-1 - n)
        base = self.valid(n)
        root = self._resolve(self.schema)
        props: dict[str, Any] = root.get("properties") or {}
        required = [r for r in root.get("required") or [] if r in base]
        choices: list[dict[str, Any]] = []
        if required:  # a required field left out (the commonest model slip)
            missing = rng.choice(required)
            choices.append({k: v for k, v in base.items() if k != missing})
        typed = [k for k in (required or list(base)) if k in props]
        if typed:  # a value of the wrong type
            key = rng.choice(typed)
            kind = _types(self._resolve(props[key]))
            choices.append({**base, key: _WRONG.get(kind[0] if kind else "string", 42)})
        rng.shuffle(choices)
        for value in choices:
            if not self.is_valid(value):
                return value
        return base

    def _object(self, rng: random.Random | None) -> dict[str, Any]:
        value = self._value(self.schema, rng, 0, "")
        return value if isinstance(value, dict) else {}

    def _resolve(self, schema: Any) -> dict[str, Any]:
        """``schema`` with a local ``$ref`` followed and ``allOf`` merged in (shallowly)."""
        if not isinstance(schema, dict):
            return {}
        seen = 0
        while "$ref" in schema and seen < 16:
            target = _pointer(self.schema, str(schema["$ref"]))
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            seen += 1
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part = self._resolve(part)
                for k, v in part.items():
                    if k == "properties":
                        merged["properties"] = {**merged.get("properties", {}), **v}
                    elif k == "required":
                        merged["required"] = [*merged.get("required", []), *v]
                    else:
                        merged.setdefault(k, v)
            schema = merged
        resolved: dict[str, Any] = schema
        return resolved

    def _value(self, schema: Any, rng: random.Random | None, depth: int, hint: str) -> Any:
        s = self._resolve(schema)
        if depth > _MAX_DEPTH:
            rng = None
        if "const" in s:
            return s["const"]
        if s.get("enum"):
            options = s["enum"]
            return options[0] if rng is None else rng.choice(options)
        for key in ("anyOf", "oneOf"):
            branches = s.get(key)
            if branches:
                # the simplest is the first branch that is not null (pydantic writes Optional[X] as anyOf [X, null])
                real = [b for b in branches if self._resolve(b).get("type") != "null"] or branches
                branch = real[0] if rng is None else rng.choice(branches)
                rest = {k: v for k, v in s.items() if k != key}
                return self._value({**rest, **self._resolve(branch)}, rng, depth, hint)
        kinds = _types(s)
        kind = kinds[0] if rng is None or len(kinds) == 1 else rng.choice(kinds)
        if kind == "object":
            return self._object_value(s, rng, depth)
        if kind == "array":
            return self._array(s, rng, depth, hint)
        if kind in ("integer", "number"):
            return _number(s, rng, kind == "integer")
        if kind == "boolean":
            return False if rng is None else rng.random() < 0.5
        if kind == "null":
            return None
        return _string(s, rng, hint, self.words)

    def _object_value(self, s: dict[str, Any], rng: random.Random | None, depth: int) -> dict[str, Any]:
        props: dict[str, Any] = s.get("properties") or {}
        required = list(dict.fromkeys(s.get("required") or []))
        names = list(required)
        if rng is not None:
            names += [k for k in props if k not in required and rng.random() < 0.5]
        least = int(s.get("minProperties") or 0)
        for k in props:  # enough fields for minProperties
            if len(names) >= least:
                break
            if k not in names:
                names.append(k)
        extra = s.get("additionalProperties")
        out: dict[str, Any] = {}
        for name in names:
            sub = props.get(name, extra if isinstance(extra, dict) else {"type": "string"})
            out[name] = self._value(sub, rng, depth + 1, name)
        return out

    def _array(self, s: dict[str, Any], rng: random.Random | None, depth: int, hint: str) -> list[Any]:
        lo = int(s.get("minItems") or 0)
        hi = int(s["maxItems"]) if "maxItems" in s else lo + 3
        size = lo if rng is None else rng.randint(lo, max(lo, min(hi, lo + 3)))
        prefix = s.get("prefixItems") or (s["items"] if isinstance(s.get("items"), list) else [])
        items = s.get("items") if isinstance(s.get("items"), dict) else {}
        out: list[Any] = []
        base = rng.getrandbits(32) if rng is not None else 0
        for i in range(size):
            sub = prefix[i] if i < len(prefix) else items
            # each item from its own seed, so that items differ (uniqueItems); the simplest's first is the simplest
            item_rng = None if rng is None and i == 0 else random.Random(base * 64 + i)
            value = self._value(sub, item_rng, depth + 1, hint.rstrip("s"))
            if s.get("uniqueItems") and value in out:
                continue
            out.append(value)
        return out


def _pointer(root: dict[str, Any], ref: str) -> dict[str, Any]:
    """The local ``#/...`` JSON pointer ``ref`` in ``root`` ({} when it is not local or not found)."""
    if not ref.startswith("#"):
        return {}
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return dict(node) if isinstance(node, dict) else {}


def _types(s: dict[str, Any]) -> list[str]:
    kind = s.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind] or ["string"]
    if isinstance(kind, str):
        return [kind]
    if "properties" in s or "required" in s or "additionalProperties" in s:
        return ["object"]
    if "items" in s or "prefixItems" in s:
        return ["array"]
    if any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        return ["number"]
    return ["string"]


def _number(s: dict[str, Any], rng: random.Random | None, integer: bool) -> int | float:
    lo, hi = s.get("minimum"), s.get("maximum")
    xlo, xhi = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
    step = 1 if integer else 0.01
    if isinstance(xlo, (int, float)) and not isinstance(xlo, bool):
        lo = xlo + step if lo is None else max(lo, xlo + step)
    if isinstance(xhi, (int, float)) and not isinstance(xhi, bool):
        hi = xhi - step if hi is None else min(hi, xhi - step)
    low = float(lo) if lo is not None else (float(hi) - 100 if hi is not None and hi < 0 else 0.0)
    high = float(hi) if hi is not None else low + 100
    if rng is None:
        value = min(max(0.0, low), high)  # 0 when allowed, else the bound nearest to it
    else:
        value = rng.uniform(low, high)
    multiple = s.get("multipleOf")
    if isinstance(multiple, (int, float)) and multiple > 0:
        k = -(-low // multiple) if rng is None and value == low else round(value / multiple)
        value = min(max(k * multiple, -(-low // multiple) * multiple), (high // multiple) * multiple)
    if integer:
        return int(min(max(math.ceil(low), round(value)), math.floor(high)))
    return round(value, 2) if low <= round(value, 2) <= high else value


def _string(s: dict[str, Any], rng: random.Random | None, hint: str, words: tuple[str, ...] = _WORDS) -> str:
    fmt = s.get("format")
    name = hint.lower()
    if isinstance(fmt, str) and fmt in _FORMATS:
        options = _FORMATS[fmt]
        value = options[0] if rng is None else rng.choice(options)
    elif name in _EMAIL_HINTS or name.endswith("email"):
        value = "ann@example.com" if rng is None else f"{rng.choice(_NAMES)}@{rng.choice(_DOMAINS)}"
    elif name == "id" or name.endswith(("_id", "id")) and name not in ("paid", "valid"):
        value = "1234" if rng is None else str(rng.randint(1000, 99999))
    elif name in _TEXT_HINTS:
        sentences = _SENTENCES if words == _WORDS else _ANY_SENTENCES
        value = sentences[0] if rng is None else rng.choice(sentences)
    elif name in _QUERY_HINTS or rng is None:
        value = words[0] if rng is None else f"{rng.choice(words)} {rng.randint(1, 999)}"
    else:
        value = f"{rng.choice(words)} {rng.randint(1, 999)}"
    least, most = int(s.get("minLength") or 0), s.get("maxLength")
    if len(value) < least:
        value += "x" * (least - len(value))
    if isinstance(most, int) and len(value) > most:
        value = value[:most]
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        value = _fit_pattern(pattern, value, least, most)
    return value


def _fit_pattern(pattern: str, value: str, least: int, most: Any) -> str:
    """``value`` if it matches ``pattern``, else the shortest string the pattern describes (or ``value``)."""
    try:
        regex = re.compile(pattern)
    except re.error:
        return value
    candidates = [value, _regex_example(pattern), "a", "1", "abc", "123"]
    for candidate in candidates:
        if candidate is None:
            continue
        fits = least <= len(candidate) and (not isinstance(most, int) or len(candidate) <= most)
        if fits and regex.search(candidate):
            return candidate
    return value


def _regex_example(pattern: str) -> str | None:
    """The shortest string of a simple regular expression (literals, classes, repeats, groups, ``|``).

    Reads the parse tree of the standard library's regex compiler (``re._parser``, present since 3.11);
    a construct it does not know gives None and the caller falls back.
    """
    try:
        from re import _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern)
    except Exception:  # noqa: BLE001 - no parser, or a pattern it rejects: no example
        return None
    return _emit(list(tree))


def _emit(items: list[Any]) -> str | None:
    from re import _constants as c  # type: ignore[attr-defined]

    out = []
    for op, arg in items:
        if op is c.LITERAL:
            out.append(chr(arg))
        elif op is c.ANY:
            out.append("a")
        elif op is c.IN:
            char = _class_char(arg, c)
            if char is None:
                return None
            out.append(char)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            low, _high, sub = arg
            part = _emit(list(sub))
            if part is None:
                return None
            out.append(part * low)
        elif op is c.SUBPATTERN:
            part = _emit(list(arg[-1]))
            if part is None:
                return None
            out.append(part)
        elif op is c.BRANCH:
            part = _emit(list(arg[1][0]))
            if part is None:
                return None
            out.append(part)
        elif op is c.AT:
            continue
        else:
            return None
    return "".join(out)


def _class_char(items: Any, c: Any) -> str | None:
    """A character of a ``[...]`` class (or ``\\d``, ``\\w``, ``\\s``), or None for a negated one."""
    for op, arg in items:
        if op is c.NEGATE:
            return None
        if op is c.LITERAL:
            return chr(arg)
        if op is c.RANGE:
            return chr(arg[0])
        if op is c.CATEGORY:
            return {c.CATEGORY_DIGIT: "1", c.CATEGORY_WORD: "a", c.CATEGORY_SPACE: " "}.get(arg, None)
    return None


@functools.lru_cache(maxsize=256)
def _pool(key: str, words: tuple[str, ...]) -> InputPool:
    return InputPool(json.loads(key), words)


def pool_for(schema: Mapping[str, Any], words: tuple[str, ...] = _WORDS) -> InputPool:
    """The pool of ``schema`` whose free text is made of ``words`` (`topic_words`), built once per distinct pair."""
    return _pool(json.dumps(schema, separators=(",", ":")), words)


#: Words a task is not about.
_STOPWORDS = frozenset([
    "about", "after", "again", "also", "and", "any", "are", "before", "been", "but", "can", "check", "could",
    "does", "each", "email", "find", "from", "have", "into", "just", "like", "make", "more", "most", "much",
    "need", "only", "other", "over", "please", "same", "should", "some", "such", "than", "that", "their",
    "them", "then", "there", "these", "they", "this", "those", "what", "when", "where", "which", "while",
    "will", "with", "would", "your", "then", "tell", "show", "give", "list",
])


def topic_words(task: str, default: tuple[str, ...] = _WORDS) -> tuple[str, ...]:
    """The words generated free text (queries, names) is made of for ``task``: its own content words, so that a
    run about flight bookings searches for "flight 12", not "refund 12"; ``default`` when it has fewer than two."""
    found = dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z]{4,}", task) if w.lower() not in _STOPWORDS)
    words = tuple(found)[:8]
    return words if len(words) >= 2 else default
