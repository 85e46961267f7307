"""Scenarios: what the simulated world does, as plain data (docs/design.md, Scenario format v1).

A scenario names the task, the tools (read or write), the model's replies in
order, the tool faults, and the limits the loop declares.  It is a tree of
pydantic models so that Python users build it with keywords and file users
get precise errors: `load_scenario` reports a malformed file with its path,
the line and what was expected, never with a traceback.

YAML is read with ruamel.yaml (YAML 1.2, so ``no`` stays a string and line
numbers are kept for the error messages).  A file is data only: its size,
nesting, alias expansion and durations are capped, values JSON cannot carry
are refused, and a tool's ``function:`` import path needs the runner's opt-in
(``allow_functions=True``); `simloop._loading.fileguard` and docs/security.md.
"""

from __future__ import annotations

import io
import math
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
from ruamel.yaml.representer import RoundTripRepresenter

from simloop._loading import fastyaml as _fastyaml
from simloop._loading.fileguard import (
    MAX_COUNT,
    MAX_DEADLINE_S,
    MAX_FILE_BYTES,
    MAX_OUTPUT_CHARS,
    MAX_SECONDS,
    MAX_TOKENS,
    FileRefused,
    GuardedParser,
    check_text,
    to_plain,
)
from simloop.errors import ScenarioError, UsageError
from simloop.protocol.render import CUT_STOPS  # a fact of the wire's replies, still importable from here

__all__ = [
    "API_ERRORS",
    "CAPABILITIES",
    "CUT_STOPS",
    "ERROR_REPLIES",
    "LIMIT_NAMES",
    "REPLY_KINDS",
    "SERVER_TOOLS",
    "Abort",
    "Approval",
    "Expect",
    "Fault",
    "Limits",
    "MaxTokensBody",
    "PauseTurnBody",
    "PriceSpec",
    "Reply",
    "Scenario",
    "ServerToolCall",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "load_scenario",
    "load_tools",
]

#: The reply kinds, one of which every `Reply` carries (docs/design.md, Scenario format v1).
REPLY_KINDS = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "error")
#: The API faults of the world: a transient HTTP status, or a transport/stream fault (what `verify` draws).
API_ERRORS = (429, 500, 503, 529, "connection", "timeout", "stream_error", "stream_cut")
#: What ``error:`` accepts: the API faults, and the two answers a misconfigured client gets (401: the key was
#: refused, 404: no such model), which the simulator never gives unasked (it takes any key and any model).
ERROR_REPLIES = (401, 404, *API_ERRORS)
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
    "abort",
    "results_real",
    "approval",
    "subagent_honest",
)
#: The stop policies and limits a loop may declare: the fields of `Limits`.
LIMIT_NAMES = (
    "max_steps", "deadline_s", "max_total_tokens", "max_tool_errors", "max_writes", "max_repeats", "max_cost_usd",
)
#: What a scenario may need of the loop under test (``requires:``), named as `simloop.verify`'s arguments:
#: ``abort`` (a Stop button), ``restarts`` (a durable store that survives a crash), ``turns`` (follow-up user
#: turns), ``context`` (it keeps every request inside the model's context window: it trims, summarizes or
#: compacts its history) and each of `LIMIT_NAMES` (the loop honours that limit as the run declares it,
#: ``sim.limits``).  ``approvals``: the loop asks a person (``sim.approve``) before each call of a tool that
#: needs approval.
CAPABILITIES = ("abort", "restarts", "turns", "context", "approvals", *LIMIT_NAMES)
Capability = Literal[
    "abort", "restarts", "turns", "context", "approvals",
    "max_steps", "deadline_s", "max_total_tokens", "max_tool_errors", "max_writes", "max_repeats", "max_cost_usd",
]
#: The largest cost budget or price, in US dollars.
MAX_COST_USD = 1_000_000.0
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")

ApiError = Literal[401, 404, 429, 500, 503, 529, "connection", "timeout", "stream_error", "stream_cut"]
FaultKind = Literal["raise", "timeout", "slow", "huge_output", "commit_then_raise", "crash"]
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
    "abort",
    "results_real",
    "approval",
    "subagent_honest",
]


def _seconds(v: float | None, *, cap: float = MAX_SECONDS, what: str = "a number of seconds") -> float | None:
    """A duration in virtual seconds: finite and within the documented cap (docs/security.md)."""
    if v is not None and not (math.isfinite(v) and v <= cap):
        raise ValueError(f"{what} is a finite number up to {cap:,.0f} ({cap / 86_400:g} days), got {v!r}")
    return v


def _capped(v: int | None, cap: int, what: str) -> int | None:
    if v is not None and v > cap:
        raise ValueError(f"{what} is at most {cap:,}, got {v:,}")
    return v


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
    # Whether a call needs a person's yes first (``sim.approve``): None means a write does, a read does not,
    # once the run has the approval policy (docs/design.md, Approvals).
    needs_approval: bool | None = None

    @property
    def gated(self) -> bool:
        """Whether a call of this tool needs approval under the approval policy (a write, unless it says not)."""
        return self.needs_approval if self.needs_approval is not None else self.kind == "write"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TOOL_NAME.fullmatch(v):  # fullmatch: ``$`` would let a trailing newline through
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
    # prompt caching: the tokens written to the cache and read from it (0 when not given; priced apart)
    cache_creation_input_tokens: int | None = Field(default=None, ge=0)
    cache_read_input_tokens: int | None = Field(default=None, ge=0)

    @field_validator("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    @classmethod
    def _tokens(cls, v: int | None) -> int | None:
        return _capped(v, MAX_TOKENS, "a token count")


#: The server tools a reply may run (``server_tool_use`` names), and the error codes each one's result may carry.
SERVER_TOOLS: dict[str, tuple[str, ...]] = {
    "web_search": ("invalid_tool_input", "unavailable", "max_uses_exceeded", "too_many_requests", "query_too_long"),
    "web_fetch": (
        "invalid_tool_input", "url_too_long", "url_not_allowed", "url_not_accessible", "unsupported_content_type",
        "too_many_requests", "max_uses_exceeded", "unavailable",
    ),
    "code_execution": ("invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded"),
    "bash_code_execution": ("invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded"),
    "text_editor_code_execution": ("invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded"),
}  # fmt: skip
ServerToolName = Literal["web_search", "web_fetch", "code_execution", "bash_code_execution", "text_editor_code_execution"]


class ServerToolCall(_Model):
    """A server tool the model runs inside its reply (web search, web fetch, code execution).

    Rendered as a ``server_tool_use`` block followed by its result block (``web_search_tool_result``,
    ``web_fetch_tool_result``, ``code_execution_tool_result``, ...), as the real API returns them.
    ``result`` is that block's ``content`` exactly as the API sends it (omitted: a small, realistic
    canned result); ``error`` (an error code such as ``unavailable``) makes it the tool's error object.
    """

    name: ServerToolName
    input: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None

    @model_validator(mode="after")
    def _error(self) -> ServerToolCall:
        if self.error is not None:
            codes = SERVER_TOOLS[self.name]
            if self.error not in codes:
                raise ValueError(f"error for {self.name} is one of {', '.join(codes)}; got {self.error!r}")
            if self.result is not None:
                raise ValueError("a server tool call has a 'result' or an 'error', not both")
        return self


class PauseTurnBody(_Model):
    """A ``pause_turn`` reply paused in the middle of a server tool call.

    ``text`` comes first; ``server_tool_use`` is the call still running, sent without its result
    (the last block of the reply, as the real API pauses).  The loop must send the paused content
    back unchanged; the continuation then opens with that call's result.
    """

    text: str = ""
    server_tool_use: ServerToolCall

    @field_validator("server_tool_use")
    @classmethod
    def _pending(cls, v: ServerToolCall) -> ServerToolCall:
        if v.result is not None or v.error is not None:
            raise ValueError("the paused server_tool_use has no result yet: leave out 'result' and 'error'")
        return v



class MaxTokensBody(_Model):
    """A reply cut off at ``max_tokens``: its text, and tool calls of which the last is cut mid-input.

    ``stop_reason``: ``max_tokens`` (the request's limit), or ``model_context_window_exceeded`` (the response filled
    the model's context window: a long history left little room).  Either is a cut reply, never an answer.
    """

    text: str = ""
    tool_use: list[ToolCall] = Field(default_factory=list)
    stop_reason: Literal["max_tokens", "model_context_window_exceeded"] = "max_tokens"


class Reply(_Model):
    """One reply of the simulated model: exactly one kind key plus modifiers.

    Kinds: ``end_turn``, ``tool_use`` (with optional ``text`` before the calls),
    ``max_tokens``, ``stop_sequence`` (``sequence`` names it), ``refusal``,
    ``pause_turn`` (a text, or a `PauseTurnBody` paused mid server tool call), ``error``.
    Modifiers: ``latency`` (virtual seconds), ``repeat`` (a count or ``"forever"``),
    ``usage`` (an explicit override of the counts computed from the request and the reply),
    ``thinking``, ``retry_after`` (seconds, for a 429), ``server_tools`` (server tool calls
    with their results, before the reply's text and tool calls; with ``end_turn``,
    ``tool_use`` and ``pause_turn``), ``crash`` (the process dies while this reply is on its way:
    the request was sent and answered, the loop never reads the reply; see docs/design.md, Crash and restart).
    """

    end_turn: str | None = None
    tool_use: list[ToolCall] | None = None
    max_tokens: str | MaxTokensBody | None = None
    stop_sequence: str | None = None
    refusal: str | None = None
    pause_turn: PauseTurnBody | str | None = None  # the body first: a bad body is reported from its own fields
    error: ApiError | None = None

    text: str | None = None
    sequence: str | None = None
    latency: float = Field(default=0.0, ge=0)
    repeat: int | Literal["forever"] = 1
    usage: Usage | None = None
    thinking: str | None = None
    retry_after: float | None = Field(default=None, gt=0)
    server_tools: list[ServerToolCall] | None = None
    crash: bool = False

    @field_validator("repeat")
    @classmethod
    def _repeat(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("repeat is a positive number or 'forever'")
        if isinstance(v, int) and v > MAX_COUNT:
            raise ValueError(f"repeat is at most {MAX_COUNT:,}, got {v:,}; use 'forever' for a reply that never ends")
        return v

    @field_validator("latency", "retry_after")
    @classmethod
    def _reply_seconds(cls, v: float | None) -> float | None:
        return _seconds(v)

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
        if kind == "error" and self.crash:
            raise ValueError("'crash' goes with a reply the model sends, not an error (the process dies while it is on its way)")
        if self.server_tools is not None and kind not in ("end_turn", "tool_use", "pause_turn"):
            raise ValueError("'server_tools' goes with end_turn, tool_use or pause_turn")
        return self

    @property
    def kind(self) -> str:
        """The reply's kind, one of `REPLY_KINDS`."""
        fields = self.__dict__  # (read on every reply served: a loop over the fields, not a generator of getattr)
        for k in REPLY_KINDS:
            if fields.get(k) is not None:
                return k
        raise StopIteration  # pragma: no cover - a valid reply has exactly one kind (`_one_kind`)

    @property
    def calls(self) -> list[ToolCall]:
        """The tool calls this reply makes (a cut ``max_tokens`` reply included)."""
        if self.tool_use is not None:
            return list(self.tool_use)
        if isinstance(self.max_tokens, MaxTokensBody):
            return list(self.max_tokens.tool_use)
        return []


FaultKinds = ("raise", "timeout", "slow", "huge_output", "commit_then_raise", "crash")


class Fault(_Model):
    """A tool fault: on ``tool``'s ``call``-th execution (1-based; None: every execution)."""

    tool: str
    kind: FaultKind
    call: int | None = Field(default=None, ge=1)
    latency: float | None = Field(default=None, ge=0)
    error: str | None = None
    size: int | None = Field(default=None, ge=1)

    @field_validator("latency")
    @classmethod
    def _fault_seconds(cls, v: float | None) -> float | None:
        return _seconds(v)

    @field_validator("size")
    @classmethod
    def _size(cls, v: int | None) -> int | None:
        return _capped(v, MAX_OUTPUT_CHARS, "a huge_output size (characters)")

    @field_validator("call")
    @classmethod
    def _call(cls, v: int | None) -> int | None:
        return _capped(v, MAX_COUNT, "a call number")

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
    * ``max_repeats``: the same tool never runs with the same input more than N times (stop with ``repetition``);
    * ``max_cost_usd``: no model call once the replies cost N US dollars (`simloop.pricing`: each reply's
      ``usage`` at its model's list price; stop with ``cost_budget``).
    """

    max_steps: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_tool_errors: int | None = Field(default=None, ge=1)
    max_writes: int | None = Field(default=None, ge=1)
    max_repeats: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)

    @field_validator("max_cost_usd")
    @classmethod
    def _cost(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and v <= MAX_COST_USD):
            raise ValueError(f"max_cost_usd is a finite number of US dollars up to {MAX_COST_USD:,}, got {v!r}")
        return v

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, v: int | None) -> int | None:
        return _capped(v, MAX_COUNT, "max_steps")

    @field_validator("deadline_s")
    @classmethod
    def _deadline(cls, v: float | None) -> float | None:
        return _seconds(v, cap=MAX_DEADLINE_S, what="deadline_s")

    @field_validator("max_total_tokens")
    @classmethod
    def _budget(cls, v: int | None) -> int | None:
        return _capped(v, MAX_TOKENS, "max_total_tokens")


class PriceSpec(_Model):
    """A model's price in a scenario's ``prices:``: US dollars per million tokens of uncached input, output,
    cache writes and cache reads (`simloop.pricing.Price`)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(default=0.0, ge=0)
    cache_read: float = Field(default=0.0, ge=0)

    @field_validator("input", "output", "cache_write", "cache_read")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not (math.isfinite(v) and v <= MAX_COST_USD):
            raise ValueError(f"a price is a finite number of US dollars up to {MAX_COST_USD:,}, got {v!r}")
        return v


class Expect(_Model):
    """What every correct loop shows on this scenario.

    ``violations``: the invariant ids expected to be violated (usually none).  ``reason``: the outcome
    reason a correct loop gives, or a list of the reasons that are all honest here (a stuck model may be
    stopped by a step cap, ``max_steps``, or by repetition detection, ``repetition``); None: any reason.
    """

    violations: list[InvariantId] = Field(default_factory=list)
    reason: str | list[str] | None = None

    @field_validator("reason")
    @classmethod
    def _reasons(cls, v: str | list[str] | None) -> str | list[str] | None:
        from simloop.outcome import REASONS

        given = [v] if isinstance(v, str) else (v if v is not None else [])
        if v is not None and not given:
            raise ValueError(f"reason is an outcome reason or a non-empty list of them ({', '.join(REASONS)})")
        unknown = [r for r in given if r not in REASONS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not an outcome reason; expected one of {', '.join(REASONS)}")
        return v

    @property
    def reasons(self) -> tuple[str, ...] | None:
        """The acceptable outcome reasons, or None when any reason is."""
        if self.reason is None:
            return None
        return (self.reason,) if isinstance(self.reason, str) else tuple(self.reason)

    def allows(self, reason: str) -> bool:
        """Whether a loop that stopped with ``reason`` shows what this expects of the reason."""
        return self.reasons is None or reason in self.reasons

    def reason_text(self) -> str:
        """The expected reason(s) as a report says them: ``'max_steps'`` or ``one of 'max_steps', 'repetition'``."""
        reasons = self.reasons or ()
        return repr(reasons[0]) if len(reasons) == 1 else "one of " + ", ".join(map(repr, reasons))


class Abort(_Model):
    """When the user presses Stop (``sim.abort`` fires): exactly one of ``after_call`` (once the n-th model
    call's response has arrived), ``tool_call`` (while the n-th tool execution runs: its effect done, its
    result not yet returned) or ``at`` (at that many virtual seconds, a model call in flight included)."""

    after_call: int | None = Field(default=None, ge=1)
    tool_call: int | None = Field(default=None, ge=1)
    at: float | None = Field(default=None, ge=0)

    @field_validator("at")
    @classmethod
    def _at(cls, v: float | None) -> float | None:
        return _seconds(v)

    @model_validator(mode="after")
    def _one(self) -> Abort:
        given = [k for k in ("after_call", "tool_call", "at") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"abort takes exactly one of after_call, tool_call, at (found: {', '.join(given) or 'none'})")
        return self

    def describe(self) -> str:
        """Where the abort fires, as a timeline says it."""
        if self.after_call is not None:
            return f"after model call {self.after_call}"
        if self.tool_call is not None:
            return f"while tool execution {self.tool_call} runs"
        return f"at {self.at:g}s"


class Approval(_Model):
    """What the person at the permission gate answers (docs/design.md, Approvals).

    It answers the ``call``-th request to approve ``tool`` (1-based; counted over every tool when ``tool`` is
    left out; every request when ``call`` is): ``approve``, ``deny`` or ``away`` (no answer at all), ``after``
    virtual seconds after it was asked.  A request no entry matches is approved at once.
    """

    tool: str | None = None
    call: int | None = Field(default=None, ge=1)
    answer: Literal["approve", "deny", "away"] = "approve"
    after: float = Field(default=0.0, ge=0)

    @field_validator("after")
    @classmethod
    def _after(cls, v: float) -> float:
        _seconds(v, what="after")
        return v

    @field_validator("call")
    @classmethod
    def _call(cls, v: int | None) -> int | None:
        return _capped(v, MAX_COUNT, "call")

    def matches(self, tool: str, nth_of_tool: int, nth: int) -> bool:
        """Whether this entry answers a request for ``tool``, the ``nth_of_tool``-th for it and ``nth``-th in all."""
        if self.tool is not None and self.tool != tool:
            return False
        return self.call is None or self.call == (nth_of_tool if self.tool is not None else nth)


class Scenario(_Model):
    """A whole simulated world for one run (docs/design.md, Scenario format v1)."""

    version: Literal[1] = 1
    name: str = "scenario"
    task: str = "Do the task."
    followups: list[str] = Field(default_factory=list)
    system: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    model: list[Reply] = Field(default_factory=list)
    then: Literal["end_turn", "repeat_last", "fail"] = "fail"
    faults: list[Fault] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    # the models' prices for ``max_cost_usd``, over `simloop.pricing.PRICES`: model name (or prefix, or "*") -> price
    prices: dict[str, PriceSpec] = Field(default_factory=dict)
    abort: Abort | None = None
    # The person at the permission gate (docs/design.md, Approvals): given (even empty), the run has the approval
    # policy: each call of a tool that needs approval waits for a yes (``sim.approve``).
    approvals: list[Approval] | None = None
    expect: Expect | None = None
    # What the file needs of the loop (a Stop button, a durable store, follow-ups, a stop policy): a run whose
    # loop does not claim one of them skips the file instead of failing it.  `needs` adds what the rest implies.
    requires: list[Capability] = Field(default_factory=list)
    # A run of this file fails when a scripted reply is never served or a scripted fault never fires
    # (``simloop run``, `simloop.replay`, the pytest scenario items): the file proves something only if what
    # it declares happened.  ``strict: false`` opts out where leftovers are the point.
    strict: bool = True

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
        for i, a in enumerate(self.approvals or ()):
            if a.tool is not None and a.tool not in names:
                known = ", ".join(names) or "no tools are defined"
                raise ValueError(f"approvals[{i}].tool: {a.tool!r} is not in tools ({known})")
        return self

    @property
    def approval_policy(self) -> bool:
        """Whether the run has the approval policy: ``approvals:`` given, a tool that says ``needs_approval:
        true``, or ``requires: [approvals]``."""
        return self.approvals is not None or "approvals" in self.requires or any(t.needs_approval for t in self.tools)

    @property
    def gated_tools(self) -> tuple[str, ...]:
        """The tools whose calls need a yes first under the approval policy (`ToolSpec.gated`)."""
        return tuple(t.name for t in self.tools if t.gated)

    @property
    def needs(self) -> tuple[str, ...]:
        """What this scenario needs of the loop, in `CAPABILITIES` order: its ``requires:`` and what the rest
        implies (``followups:`` needs ``turns``, ``abort:`` needs ``abort``, a ``crash`` fault or reply ``restarts``,
        each declared limit the policy of the same name)."""
        given: set[str] = set(self.requires)
        if self.followups:
            given.add("turns")
        if self.abort is not None:
            given.add("abort")
        if any(f.kind == "crash" for f in self.faults) or any(r.crash for r in self.model):
            given.add("restarts")
        if self.approval_policy:
            given.add("approvals")
        given.update(k for k in LIMIT_NAMES if getattr(self.limits, k) is not None)
        return tuple(c for c in CAPABILITIES if c in given)

    def tool(self, name: str) -> ToolSpec:
        """The tool named ``name``; KeyError if there is none."""
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(name)

    # -- files ---------------------------------------------------------------

    @classmethod
    def from_yaml(cls, text: str, *, path: str | Path | None = None, allow_functions: bool = False) -> Scenario:
        """Parse a v1 scenario from YAML text; errors name ``path`` and the line.

        The text is data only: past the caps of docs/security.md (size, nesting, alias expansion),
        with a value JSON cannot carry, or naming a tool ``function:`` without ``allow_functions=True``,
        it is refused with a `ScenarioError` before anything is built from it.
        """
        return cls._from_data(_parse_yaml(text, path=path), path=path, allow_functions=allow_functions)

    @classmethod
    def from_json(cls, text: str, *, path: str | Path | None = None, allow_functions: bool = False) -> Scenario:
        """Parse a v1 scenario from JSON text (JSON is YAML 1.2, so lines are reported too)."""
        return cls.from_yaml(text, path=path, allow_functions=allow_functions)

    @classmethod
    def _from_data(cls, data: Any, *, path: str | Path | None, allow_functions: bool = False) -> Scenario:
        if not isinstance(data, dict):
            got = "an empty file" if data is None else ("a list" if isinstance(data, list) else repr(data))
            raise ScenarioError(
                f"a scenario is a mapping with keys task, tools, model, ...; got {got}", path=path, line=1
            )
        try:
            plain = to_plain(data)
        except FileRefused as e:
            raise ScenarioError(f"{_loc_text(e.loc)}: {e.message}", path=path, line=_line_of(data, e.loc)) from None
        version = plain.get("version", 1)
        if version != 1 or type(version) is not int:
            raise ScenarioError(
                f"scenario format version {version!r} is not supported by this simloop; it reads version 1. "
                "Upgrade simloop, or rewrite the file to version 1 (docs/design.md, Scenario format v1).",
                path=path,
                line=_line_of(data, ("version",)),
            )
        _bind_functions(plain, data, path=path, allow=allow_functions)
        try:
            return cls.model_validate(plain, strict=True)  # strict: a file's "2" is not a number, true not 1
        except ValidationError as e:
            err = e.errors()[0]
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and _TYPE_TAG.fullmatch(p)))
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
        """This scenario as a v1 YAML document (what `load_scenario` reads back).

        ruamel's emitter writes a few texts plainly that no parser reads back the same (``?0`` in a
        flow mapping, say): the document is read back once, and written with every string
        double-quoted when it differs.
        """
        from ruamel.yaml import YAML

        data = self.to_data()
        for representer in (_Representer, _QuotedRepresenter):
            yaml = YAML(typ="rt")
            yaml.Representer = representer
            yaml.default_flow_style = None
            yaml.width = 100
            buf = io.StringIO()
            yaml.dump(data, buf)
            text = buf.getvalue()
            if _reads_back(text, data):
                break
        return text

    def to_data(self) -> dict[str, Any]:
        """This scenario as plain data (defaults left out, kind keys first)."""
        # A callable is not JSON: tools' functions are written as their import paths.
        data = self.model_dump(mode="json", exclude_defaults=True, exclude={"tools": {"__all__": {"function"}}})
        data = {"version": 1, **data}
        if self.expect is not None and not data.get("expect"):
            data["expect"] = {"violations": []}  # said, not implied: a correct loop breaks no invariant here
        for t, spec in zip(data.get("tools", []), self.tools):
            if callable(spec.function):
                t["function"] = f"{spec.function.__module__}:{spec.function.__qualname__}"
            elif spec.function is not None:
                t["function"] = spec.function
        return data

    def dump(self, path: str | Path) -> Path:
        """Write this scenario to ``path`` as YAML; returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_yaml(), encoding="utf-8")
        return p


def _parse_yaml(text: str, *, path: str | Path | None) -> Any:
    """The YAML document ``text`` as data (ruamel's, with lines, where libyaml defers), past the caps of
    docs/security.md; a `ScenarioError` naming ``path`` and the line otherwise."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        raise ScenarioError(_too_big(size), path=path, line=None)
    try:
        check_text(text)
        data = _fastyaml.load(text)  # libyaml, with the same checks; DEFER for what only ruamel reads right
        if data is _fastyaml.DEFER:
            yaml = YAML(typ="rt")
            yaml.Parser = GuardedParser  # refuses deep nesting, alias bombs and non-JSON tags as it parses
            data = yaml.load(text)
    except FileRefused as e:
        raise ScenarioError(e.message, path=path, line=e.line) from None
    except RecursionError:  # GuardedParser bounds nesting first; this is a last line of defence
        raise ScenarioError("the document nests too deep to read", path=path, line=None) from None
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ScenarioError(f"not valid YAML: {e.problem or e.context}", path=path, line=line) from None
    except ReaderError as e:  # a character YAML does not allow (NUL, most other control characters)
        line, column = _line_col(text, e.position)
        raise ScenarioError(
            f"not valid YAML: the character U+{_code(e.character):04X} at column {column} is not allowed in a "
            "YAML file (control characters are not); remove it, or write it as an escape inside a double-quoted "
            'string ("\\u0000")',
            path=path,
            line=line,
        ) from None
    except YAMLError as e:
        raise ScenarioError(f"not valid YAML: {e}", path=path) from None
    except (ValueError, TypeError, OverflowError) as e:  # a scalar ruamel could not convert
        raise ScenarioError(f"not valid YAML: a value cannot be read ({e})", path=path) from None
    return data


def load_scenario(path: str | Path, *, allow_functions: bool = False) -> Scenario:
    """Load a v1 scenario file (``.yaml``, ``.yml`` or ``.json``).

    A file is data: a tool's ``function: "pkg.module:fn"`` is refused unless ``allow_functions=True``
    (the person running the file trusts it), and even then it must name a function of the user's own
    modules (docs/security.md).

    Raises `simloop.ScenarioError` naming the file and line when it is malformed, past a cap, or
    names a function it may not.

    Example::

        scenario = simloop.load_scenario("scenarios/stuck-search.yaml")
    """
    p = Path(path)
    return Scenario.from_yaml(_read_text(p), path=p, allow_functions=allow_functions)


def load_tools(path: str | Path, *, allow_functions: bool = False) -> list[ToolSpec]:
    """The loop's tools from a file: a YAML or JSON list in the scenario's ``tools:`` format, a mapping whose
    ``tools:`` lists them, or a whole scenario file (its ``tools:`` is taken, the rest left alone).

    What ``simloop verify --tools FILE`` (and ``--simloop-tools``) declares, so the generated runs call the
    tools the loop really has.  The file is data, read with `load_scenario`'s caps and checks (a tool's
    ``function:`` refused unless ``allow_functions=True``).

    Raises `simloop.ScenarioError` naming the file (and the line) when it is malformed or lists no tool.

    Example::

        simloop.verify(drive, tools=load_tools("tests/tools.yaml"))
    """
    p = Path(path)
    data = _parse_yaml(_read_text(p), path=p)
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list) or not data:
        got = ("an empty file" if data is None else "an empty list" if isinstance(data, list)
               else "a mapping with no tools: key" if isinstance(data, dict) else repr(data)[:80])
        raise ScenarioError(
            "a tools file is a list of tools in the scenario's tools: format (each a mapping with name, kind: "
            f"read|write, description, input_schema, results), or a scenario file whose tools: lists them; got {got}",
            path=p, line=1,
        )
    return Scenario._from_data({"tools": data}, path=p, allow_functions=allow_functions).tools


def _read_text(p: Path) -> str:
    """A scenario (or tools) file's text, refused before it is read when it is not a regular file or past the size cap."""
    try:
        if p.exists() and not p.is_file():  # a FIFO or a device (/dev/zero) would be read forever
            raise ScenarioError("not a regular file; a scenario is a .yaml, .yml or .json file", path=p)
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:  # refused before reading it
            raise ScenarioError(_too_big(size), path=p)
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ScenarioError("no such file", path=p) from None
    except OSError as e:
        raise ScenarioError(f"cannot read the file: {e}", path=p) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ScenarioError(
            f"not UTF-8: the byte {raw[e.start]:#04x} at column {column} (byte offset {e.start}) {e.reason}; "
            "save the file as UTF-8",
            path=p,
            line=line,
        ) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as read_text's universal newlines did
    return text


# Characters YAML counts as line breaks beyond \n and \r: ruamel writes them raw in plain and single-quoted
# text, where reading folds them into spaces; a double-quoted string escapes them (\N, \L, \P).
_BREAKS = re.compile("[\x85\u2028\u2029]")


def _represent_str(representer: Any, value: str) -> Any:
    if _BREAKS.search(value):
        return representer.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return RoundTripRepresenter.represent_str(representer, value)


class _Representer(RoundTripRepresenter):
    """ruamel's round-trip representer, writing text it would not read back the same double-quoted."""


_Representer.add_representer(str, _represent_str)


class _QuotedRepresenter(RoundTripRepresenter):
    """Every string double-quoted: YAML's one style that can hold any text."""


_QuotedRepresenter.add_representer(
    str, lambda representer, value: representer.represent_scalar("tag:yaml.org,2002:str", value, style='"')
)


def _reads_back(text: str, data: Any) -> bool:
    """Whether YAML text reads back as ``data``."""
    from ruamel.yaml import YAML

    try:
        loaded = _fastyaml.load(text)
        if loaded is _fastyaml.DEFER:
            loaded = YAML(typ="rt").load(text)
        return bool(to_plain(loaded) == data)
    except Exception:  # noqa: BLE001 - whatever the reason, this text is not the one to write
        return False


def _code(character: int | str) -> int:
    """A character's code point (ruamel's reader errors give the code, or the character)."""
    return ord(character) if isinstance(character, str) else int(character)


def _line_col(text: str, position: int) -> tuple[int, int]:
    """The 1-based line and column of a character offset in ``text``."""
    return text.count("\n", 0, position) + 1, position - (text.rfind("\n", 0, position) + 1) + 1


def _too_big(size: int) -> str:
    return (
        f"the file is {size:,} bytes; a scenario file is at most {MAX_FILE_BYTES:,} bytes "
        f"({MAX_FILE_BYTES // (1024 * 1024)} MiB). Split it, or shorten its texts"
    )


def _bind_functions(plain: dict[str, Any], data: Any, *, path: str | Path | None, allow: bool) -> None:
    """Refuse the tools' ``function:`` import paths, or (opted in) resolve them into the user's callables."""
    from simloop._loading.functions import FUNCTIONS_OPT_IN, resolve_function

    tools = plain.get("tools")
    if not isinstance(tools, list):
        return
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("function") is None:
            continue
        fn, name = tool["function"], tool.get("name")
        line = _line_of(data, ("tools", i, "function"))
        if not allow:
            raise ScenarioError(
                f"tools[{i}].function: a scenario file cannot name code to run ({fn!r}). Bind the tool in Python "
                f"instead: Sim(scenario, tools={{{name!r}: fn}}); or, if you trust this file, opt in with "
                f"{FUNCTIONS_OPT_IN} (see docs/security.md)",
                path=path,
                line=line,
            )
        if not isinstance(fn, str):
            continue  # the model's validation says what a function is
        try:
            tool["function"] = resolve_function(fn, tool=str(name))
        except UsageError as e:
            raise ScenarioError(f"tools[{i}].function: {e}", path=path, line=line) from None


# -- error reporting -----------------------------------------------------------


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


#: The parts of a pydantic error location that name a type tried, not a key of the file.
_TYPE_TAG = re.compile(r"int|str|float|bool|none|[A-Z]\w*|(?:literal|list|dict|union|tagged-union)\[.*\]|function-.*")


def _loc_text(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "scenario"


_EXPECTED = {
    "error": f"one of {', '.join(map(str, ERROR_REPLIES))}",
    "kind": "one of " + ", ".join(FaultKinds),
    "tools.kind": "one of read, write",  # a tool's kind, not a fault's
    "then": "one of end_turn, repeat_last, fail",
    "requires": "one of abort, restarts, turns, context, approvals, " + ", ".join(LIMIT_NAMES),
}


def _explain(err: Any) -> str:
    kind = err["type"]
    loc = err["loc"]
    field = next((p for p in reversed(loc) if isinstance(p, str) and not _TYPE_TAG.fullmatch(p)), "")
    got = err.get("input")
    if kind == "extra_forbidden":
        return f"unknown key {field!r}; check the spelling against the scenario format (docs/design.md, Scenario format v1)"
    if kind == "missing":
        return "this key is required"
    if kind in ("literal_error", "enum") and field in _EXPECTED:
        key = "tools.kind" if field == "kind" and loc and loc[0] == "tools" else field
        return f"expected {_EXPECTED[key]}, got {got!r}"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if kind == "string_type" and isinstance(got, (int, float)):
        shown = "true" if got is True else "false" if got is False else repr(got)
        return f"expected text, got the {type(got).__name__} {shown}; quote it to make it text: \"{shown}\""
    if got is not None and kind not in ("value_error", "assertion_error"):
        shown = repr(got)
        msg = f"{msg}, got {shown if len(shown) < 60 else shown[:57] + '...'}"
    return msg[0].lower() + msg[1:] if msg else msg
