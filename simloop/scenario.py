"""Scenarios: what the simulated world does, as plain data (DESIGN §5, format v1).

A scenario names the task, the tools (read or write), the model's replies in
order, the tool faults, and the limits the loop declares.  It is a tree of
pydantic models so that Python users build it with keywords and file users
get precise errors: `load_scenario` reports a malformed file with its path,
the line and what was expected, never with a traceback.

YAML is read with ruamel.yaml (YAML 1.2, so ``no`` stays a string and line
numbers are kept for the error messages).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from simloop.errors import ScenarioError

__all__ = [
    "API_ERRORS",
    "REPLY_KINDS",
    "Expect",
    "Fault",
    "Limits",
    "MaxTokensBody",
    "Reply",
    "Scenario",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "load_scenario",
]

#: The reply kinds, one of which every `Reply` carries (DESIGN §5).
REPLY_KINDS = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "error")
#: What ``error:`` accepts: an HTTP status, or a transport/stream fault.
API_ERRORS = (429, 500, 503, 529, "connection", "timeout", "stream_error", "stream_cut")
INVARIANT_IDS = (
    "stops",
    "pairing",
    "request_valid",
    "no_rerun",
    "truncation",
    "refusal",
    "honest_outcome",
    "limits",
    "tool_errors",
    "no_work_after_return",
    "crash",
    "results_sent",
    "results_together",
)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")

ApiError = Literal[429, 500, 503, 529, "connection", "timeout", "stream_error", "stream_cut"]
FaultKind = Literal["raise", "timeout", "slow", "huge_output", "commit_then_raise"]
InvariantId = Literal[
    "stops",
    "pairing",
    "request_valid",
    "no_rerun",
    "truncation",
    "refusal",
    "honest_outcome",
    "limits",
    "tool_errors",
    "no_work_after_return",
    "crash",
    "results_sent",
    "results_together",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolSpec(_Model):
    """A tool the loop may call.

    ``kind`` matters to the oracle: a completed ``write`` must never run twice.
    ``results`` are canned outputs, cycled; ``function`` (a callable, or an
    import path ``"pkg.module:fn"`` in files) computes the output instead.
    """

    name: str
    kind: Literal["read", "write"] = "read"
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    results: list[str] | None = None
    function: str | Callable[..., Any] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TOOL_NAME.match(v):
            raise ValueError("a tool name is 1 to 128 letters, digits, '_' or '-' (the API's rule)")
        return v

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError("input_schema must be a JSON schema with type: object")
        return v

    def schema_dict(self) -> dict[str, Any]:
        """The tool as the API's ``tools`` parameter takes it."""
        d: dict[str, Any] = {"name": self.name}
        if self.description:
            d["description"] = self.description
        d["input_schema"] = self.input_schema
        return d


class ToolCall(_Model):
    """One tool call in a reply: the tool's name and its input."""

    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class Usage(_Model):
    """Token counts that override the computed ones for a reply."""

    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)


class MaxTokensBody(_Model):
    """A reply cut off at ``max_tokens``: its text, and tool calls of which the last is cut mid-input."""

    text: str = ""
    tool_use: list[ToolCall] = Field(default_factory=list)


class Reply(_Model):
    """One reply of the simulated model: exactly one kind key plus modifiers.

    Kinds: ``end_turn``, ``tool_use`` (with optional ``text`` before the calls),
    ``max_tokens``, ``stop_sequence`` (``sequence`` names it), ``refusal``,
    ``pause_turn``, ``error``.  Modifiers: ``latency`` (virtual seconds),
    ``repeat`` (a count or ``"forever"``), ``usage``, ``thinking``,
    ``retry_after`` (seconds, for a 429).
    """

    end_turn: str | None = None
    tool_use: list[ToolCall] | None = None
    max_tokens: str | MaxTokensBody | None = None
    stop_sequence: str | None = None
    refusal: str | None = None
    pause_turn: str | None = None
    error: ApiError | None = None

    text: str | None = None
    sequence: str | None = None
    latency: float = Field(default=0.0, ge=0)
    repeat: int | Literal["forever"] = 1
    usage: Usage | None = None
    thinking: str | None = None
    retry_after: float | None = Field(default=None, gt=0)

    @field_validator("repeat")
    @classmethod
    def _repeat(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("repeat is a positive number or 'forever'")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Reply:
        kinds = [k for k in REPLY_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            raise ValueError(f"a reply has exactly one of {', '.join(REPLY_KINDS)} (found: {found})")
        kind = kinds[0]
        if self.text is not None and kind != "tool_use":
            raise ValueError("'text' goes with tool_use only (it is the text before the calls)")
        if self.sequence is not None and kind != "stop_sequence":
            raise ValueError("'sequence' goes with stop_sequence only")
        if self.retry_after is not None and self.error != 429:
            raise ValueError("'retry_after' goes with error: 429 only")
        if kind == "tool_use" and not self.tool_use:
            raise ValueError("tool_use needs at least one call: [{name: ..., input: {...}}]")
        if kind == "error" and self.thinking is not None:
            raise ValueError("an error reply has no thinking")
        return self

    @property
    def kind(self) -> str:
        """The reply's kind, one of `REPLY_KINDS`."""
        return next(k for k in REPLY_KINDS if getattr(self, k) is not None)

    @property
    def calls(self) -> list[ToolCall]:
        """The tool calls this reply makes (a cut ``max_tokens`` reply included)."""
        if self.tool_use is not None:
            return list(self.tool_use)
        if isinstance(self.max_tokens, MaxTokensBody):
            return list(self.max_tokens.tool_use)
        return []


FaultKinds = ("raise", "timeout", "slow", "huge_output", "commit_then_raise")


class Fault(_Model):
    """A tool fault: on ``tool``'s ``call``-th execution (1-based; None: every execution)."""

    tool: str
    kind: FaultKind
    call: int | None = Field(default=None, ge=1)
    latency: float | None = Field(default=None, ge=0)
    error: str | None = None
    size: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _fits(self) -> Fault:
        if self.latency is not None and self.kind not in ("slow", "timeout"):
            raise ValueError("'latency' goes with kind slow or timeout")
        if self.size is not None and self.kind != "huge_output":
            raise ValueError("'size' goes with kind huge_output")
        return self


class Limits(_Model):
    """The limits and stop policies the loop under test declares and must honour (the ``limits`` invariant).

    Each is checked only when declared:

    * ``max_steps``: no model call beyond the N-th;
    * ``deadline_s``: no model call starting at or after N virtual seconds;
    * ``max_total_tokens``: no model call once N tokens (input + output) were used;
    * ``max_tool_errors``: after N failed tool executions, no further model call (stop with ``error_budget``);
    * ``max_writes``: after N successful write executions, no further write and no further model call
      (the write is terminal; ``max_writes=1`` is "one write");
    * ``max_repeats``: the same tool never runs with the same input more than N times (stop with ``repetition``).
    """

    max_steps: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_tool_errors: int | None = Field(default=None, ge=1)
    max_writes: int | None = Field(default=None, ge=1)
    max_repeats: int | None = Field(default=None, ge=1)


class Expect(_Model):
    """What a correct loop shows on this scenario: the invariant ids expected to be violated (usually none)."""

    violations: list[InvariantId] = Field(default_factory=list)
    reason: str | None = None


class Scenario(_Model):
    """A whole simulated world for one run (DESIGN §5, version 1)."""

    version: Literal[1] = 1
    name: str = "scenario"
    task: str = "Do the task."
    system: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    model: list[Reply] = Field(default_factory=list)
    then: Literal["end_turn", "repeat_last", "fail"] = "fail"
    faults: list[Fault] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    expect: Expect | None = None

    @model_validator(mode="after")
    def _cross(self) -> Scenario:
        names = [t.name for t in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            i = names.index(dupes[0], names.index(dupes[0]) + 1)
            raise ValueError(f"tools[{i}].name: tool names must be unique; repeated: {', '.join(dupes)}")
        for i, f in enumerate(self.faults):
            if f.tool not in names:
                known = ", ".join(names) or "no tools are defined"
                raise ValueError(f"faults[{i}].tool: {f.tool!r} is not in tools ({known})")
            if f.kind == "commit_then_raise" and self.tool(f.tool).kind != "write":
                raise ValueError(f"faults[{i}].kind: commit_then_raise needs a write tool; {f.tool!r} is kind read")
        return self

    def tool(self, name: str) -> ToolSpec:
        """The tool named ``name``; KeyError if there is none."""
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(name)

    # -- files ---------------------------------------------------------------

    @classmethod
    def from_yaml(cls, text: str, *, path: str | Path | None = None) -> Scenario:
        """Parse a v1 scenario from YAML text; errors name ``path`` and the line."""
        from ruamel.yaml import YAML
        from ruamel.yaml.error import MarkedYAMLError, YAMLError

        yaml = YAML(typ="rt")
        try:
            data = yaml.load(text)
        except MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark is not None else None
            raise ScenarioError(f"not valid YAML: {e.problem or e.context}", path=path, line=line) from None
        except YAMLError as e:
            raise ScenarioError(f"not valid YAML: {e}", path=path) from None
        return cls._from_data(data, path=path)

    @classmethod
    def from_json(cls, text: str, *, path: str | Path | None = None) -> Scenario:
        """Parse a v1 scenario from JSON text (JSON is YAML 1.2, so lines are reported too)."""
        return cls.from_yaml(text, path=path)

    @classmethod
    def _from_data(cls, data: Any, *, path: str | Path | None) -> Scenario:
        if not isinstance(data, dict):
            got = "an empty file" if data is None else ("a list" if isinstance(data, list) else repr(data))
            raise ScenarioError(
                f"a scenario is a mapping with keys task, tools, model, ...; got {got}", path=path, line=1
            )
        version = data.get("version", 1)
        if version != 1:
            raise ScenarioError(
                f"scenario format version {version!r} is not supported by this simloop; it reads version 1. "
                "Upgrade simloop, or rewrite the file to version 1 (DESIGN §5).",
                path=path,
                line=_line_of(data, ("version",)),
            )
        try:
            return cls.model_validate(_plain(data))
        except ValidationError as e:
            err = e.errors()[0]
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "union["))))
            if not loc:  # a cross-field check: its message starts with the location, e.g. "faults[0].tool: ..."
                m = re.match(r"(?:Value error, )?(\w+)\[(\d+)\](?:\.(\w+))?: ", str(err["msg"]))
                if m:
                    loc = tuple(x for x in (m[1], int(m[2]), m[3]) if x is not None)
                    err = {**err, "msg": str(err["msg"])[m.end():]}
            more = f" (and {e.error_count() - 1} more error(s))" if e.error_count() > 1 else ""
            raise ScenarioError(
                f"{_loc_text(loc)}: {_explain(err)}{more}", path=path, line=_line_of(data, loc)
            ) from None

    def to_yaml(self) -> str:
        """This scenario as a v1 YAML document (what `load_scenario` reads back)."""
        from ruamel.yaml import YAML

        yaml = YAML(typ="rt")
        yaml.default_flow_style = None
        yaml.width = 100
        buf = io.StringIO()
        yaml.dump(self.to_data(), buf)
        return buf.getvalue()

    def to_data(self) -> dict[str, Any]:
        """This scenario as plain data (defaults left out, kind keys first)."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        data = {"version": 1, **data}
        for t, spec in zip(data.get("tools", []), self.tools):
            if callable(spec.function):
                t["function"] = f"{spec.function.__module__}:{spec.function.__qualname__}"
        return data

    def dump(self, path: str | Path) -> Path:
        """Write this scenario to ``path`` as YAML; returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_yaml(), encoding="utf-8")
        return p


def load_scenario(path: str | Path) -> Scenario:
    """Load a v1 scenario file (``.yaml``, ``.yml`` or ``.json``).

    Raises `simloop.ScenarioError` naming the file and line when it is malformed.

    Example::

        scenario = simloop.load_scenario("scenarios/stuck-search.yaml")
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError("no such file", path=p) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"cannot read the file: {e}", path=p) from None
    return Scenario.from_yaml(text, path=p)


# -- error reporting -----------------------------------------------------------


def _plain(node: Any) -> Any:
    """ruamel's commented containers as plain dicts and lists (pydantic then sees ordinary data)."""
    if isinstance(node, dict):
        return {str(k) if not isinstance(k, (int, float)) else k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, str):
        return str(node)
    return node


def _line_of(data: Any, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest node of ``loc`` that the YAML tree knows."""
    line: int | None = None
    node = data
    for key in loc:
        lc = getattr(node, "lc", None)
        try:
            if isinstance(node, dict) and key in node:
                if lc is not None:
                    line = lc.key(key)[0] + 1
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                if lc is not None:
                    line = lc.item(key)[0] + 1
                node = node[key]
            else:
                break
        except (KeyError, TypeError, IndexError):
            break
    if line is None and getattr(data, "lc", None) is not None:
        line = data.lc.line + 1
    return line


def _loc_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "scenario"


_EXPECTED = {
    "error": f"one of {', '.join(map(str, API_ERRORS))}",
    "kind": "one of " + ", ".join(FaultKinds),
    "then": "one of end_turn, repeat_last, fail",
}


def _explain(err: Any) -> str:
    kind = err["type"]
    loc = err["loc"]
    field = next((p for p in reversed(loc) if isinstance(p, str) and not p.startswith(("function-", "union["))), "")
    got = err.get("input")
    if kind == "extra_forbidden":
        return f"unknown key {field!r}; check the spelling against the scenario format (DESIGN §5)"
    if kind == "missing":
        return "this key is required"
    if kind in ("literal_error", "enum") and field in _EXPECTED:
        return f"expected {_EXPECTED[field]}, got {got!r}"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if got is not None and kind not in ("value_error", "assertion_error"):
        shown = repr(got)
        msg = f"{msg}, got {shown if len(shown) < 60 else shown[:57] + '...'}"
    return msg[0].lower() + msg[1:] if msg else msg
