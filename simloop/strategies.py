"""Hypothesis strategies for simloop's worlds: tools, replies, faults, latencies, whole scenarios.

Two ways to use them:

* static: ``scenarios()`` draws a complete `Scenario` up front (a script), for
  tests that want a file-shaped world, e.g. ``@given(simloop.strategies.scenarios())``;
* lazy: `simloop.verify` draws the model's replies and the tool faults *as the
  loop asks* (see `GeneratedModel`), so replies follow the request (the tools it
  defines, the calls it answered) and Hypothesis shrinks a failure to the few
  replies that matter.  `plans()` draws the model's behaviour over the run:
  finishing after k steps, stuck on one call, or wandering forever.

Every strategy takes keyword arguments to narrow or widen it.  The simplest
value of each (what Hypothesis shrinks towards) is the benign one: no fault,
no latency, a model that answers at once.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from hypothesis import strategies as st

from simloop._inputs import POOL, pool_for
from simloop.errors import UsageError
from simloop.scenario import (
    API_ERRORS,
    Fault,
    Limits,
    MaxTokensBody,
    PauseTurnBody,
    Reply,
    Scenario,
    ServerToolCall,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "DEFAULT_TOOLS",
    "Plan",
    "api_faults",
    "endings",
    "faults",
    "latencies",
    "plans",
    "rarely",
    "scenarios",
    "slow_latencies",
    "stages",
    "tool_calls",
    "tool_faults",
    "tool_inputs",
    "tool_specs",
    "turns",
    "usages",
    "weighted",
]

#: The tools `verify` gives a loop when it is not told which: one read, one write.
DEFAULT_TOOLS = (
    ToolSpec(
        name="search",
        kind="read",
        description="Search the knowledge base.",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    ),
    ToolSpec(
        name="send_email",
        kind="write",
        description="Send an email to a customer.",
        input_schema={
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to"],
        },
    ),
)

_WORDS = ("refund", "order", "status", "invoice", "customer", "shipping", "policy", "account")
_ENDINGS = ("end_turn", "stop_sequence", "refusal", "max_tokens", "max_tokens_tool", "pause_turn", "pause_turn_server")
# how often each ending is drawn: the plain answer is the simplest (what shrinking returns to), and the
# endings loops get wrong are drawn more often than a uniform choice would
_ENDING_WEIGHTS = {"end_turn": 2, "stop_sequence": 1, "refusal": 2, "max_tokens": 2, "max_tokens_tool": 3, "pause_turn": 2,
                   "pause_turn_server": 3}
ToolFaultKind = Literal["raise", "timeout", "slow", "huge_output", "commit_then_raise"]
T = TypeVar("T")


# -- codecs: a value drawn as one bytes choice ---------------------------------------------------
#
# The parts drawn on every reply and tool execution (latencies, usage, tool calls, faults) are each
# read from ONE drawn bytes value rather than from a tree of strategies: Hypothesis's bookkeeping
# is paid per choice and per draw (tens of microseconds each; a few per byte), and a reply used to
# take five to ten of them.  Every byte is one small choice, mapped in order onto a table, so that
# the zero byte is the table's first (simplest) entry and smaller bytes are simpler values:
# Hypothesis shrinks a bytes value towards zeros, byte by byte from the left, which shrinks each
# part towards its simplest.


class Digits:
    """A drawn bytes value read as a sequence of small choices, left to right."""

    __slots__ = ("at", "raw")

    def __init__(self, raw: bytes, at: int = 0) -> None:
        self.raw = raw
        self.at = at

    def pick(self, table: Sequence[T]) -> T:
        """One byte: an entry of ``table`` in proportion (zero is the first)."""
        byte = self.raw[self.at]
        self.at += 1
        return table[byte * len(table) >> 8]

    def fraction(self) -> float:
        """Two bytes: a number in [0, 1] (zero is 0.0)."""
        hi, lo = self.raw[self.at], self.raw[self.at + 1]
        self.at += 2
        return ((hi << 8) | lo) / 0xFFFF

    def below(self, n: int) -> int:
        """Two bytes: an integer in [0, n) in proportion (zero is 0)."""
        return min(int(self.fraction() * n), n - 1)


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """How a value is read from ``size`` drawn bytes (see `Digits`)."""

    size: int
    decode: Callable[[Digits], T]

    def strategy(self) -> st.SearchStrategy[T]:
        """The values, drawn as one bytes choice."""
        decode = self.decode
        return fixed_bytes(self.size).map(lambda raw: decode(Digits(raw)))

    def draw(self, draw: Callable[[st.SearchStrategy[bytes]], bytes]) -> T:
        """A value drawn with ``draw`` (e.g. ``data.draw``): what `strategy` gives, without a mapped strategy's cost."""
        return self.decode(Digits(draw(fixed_bytes(self.size))))


@functools.cache
def fixed_bytes(size: int) -> st.SearchStrategy[bytes]:
    """Bytes values of exactly ``size`` bytes (what a codec reads), built once per size."""
    return st.binary(min_size=size, max_size=size)


def joined(build: Callable[..., T], *parts: Codec[Any]) -> Codec[T]:
    """One codec reading ``parts`` in turn and passing their values to ``build``."""
    decoders = tuple(p.decode for p in parts)
    size = sum(p.size for p in parts)
    if len(decoders) == 3:  # a tool-calling reply's (latency, usage, calls), decoded on every reply: no list
        first, second, third = decoders
        return Codec(size, lambda digits: build(first(digits), second(digits), third(digits)))
    return Codec(size, lambda digits: build(*[d(digits) for d in decoders]))


def table(options: Sequence[tuple[Any, int]], *, most: int | None = 256) -> tuple[Any, ...]:
    """``(value, weight)`` pairs as a table in which each value appears ``weight`` times, in order.

    The weights are divided by their greatest common divisor.  A codec picks from the table with one
    byte, so it holds at most ``most`` entries.
    """
    divisor = math.gcd(*(weight for _, weight in options)) or 1
    values = tuple(value for value, weight in options for _ in range(weight // divisor))
    if not values or (most is not None and len(values) > most):
        raise UsageError(
            f"weights {[w for _, w in options]} must be positive and sum to at most {most}; scale them down"
        )
    return values


_TENTHS = tuple(range(10))
_SMALL = table([(0.0, 4), (0.05, 1), (0.4, 1), (1.5, 1), (3.0, 1)])


@functools.lru_cache(maxsize=64)
def latency_codec(max_s: float = 600.0, long_chance: int = 1) -> Codec[float]:
    """See `latencies`: three bytes (a gate, then a short latency or a long one's two bytes)."""
    if max_s <= 3.0:
        return Codec(1, lambda d: d.pick(_SMALL))

    def decode(d: Digits) -> float:
        if d.pick(_TENTHS) >= 10 - long_chance:
            return round(0.001 + d.fraction() * (max_s - 0.001), 3)
        short: float = d.pick(_SMALL)
        d.at += 1
        return short

    return Codec(3, decode)


@functools.lru_cache(maxsize=64)
def usage_codec(max_tokens: int = 400_000, chance: int = 1) -> Codec[Usage | None]:
    """See `usages`: a gate, then two bytes for each count."""
    max_out = min(max_tokens, 64_000)

    def decode(d: Digits) -> Usage | None:
        big = d.pick(_TENTHS) >= 10 - chance
        inp, out = 1 + d.below(max_tokens), 1 + d.below(max_out)
        return Usage(input_tokens=inp, output_tokens=out) if big else None

    return Codec(5, decode)


#: A call's input: valid in 19 draws of 20 (one byte, zero the simplest), else a realistic invalid one
#: (a required field left out, a value of the wrong type; see `simloop._inputs`), drawn apart from the
#: input itself so that shrinking turns an invalid input valid by lowering one byte.
_VALIDITY = table([(True, 19), (False, 1)])
#: How many calls a reply makes, and whether it repeats its first call word for word: weighted to one
#: call, up to `MAX_PARALLEL` (wide turns are where limits on results and cache breakpoints bite).
MAX_PARALLEL = 8
_SHAPES = {1: 16, 2: 5, 3: 3, 4: 2, 5: 1, 6: 1, 7: 1, 8: 1}
_DUPLICATE_SHAPES = {1: 2, 2: 1, 3: 1}
#: How many calls a reply cut off in a tool call holds: complete calls before the cut one are the common case,
#: so the simplest (first) is one complete call and the cut one (drawn bytes lean to zero: this comes often).
CUT_COUNTS = ((2, 2), (1, 1), (3, 1), (4, 1))
#: The schema of a tool known only by its name (what the simulated model asks of it).
QUERY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def tool_key(tools: Sequence[str | ToolSpec | dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """Tools as a hashable key for the codec caches: ``(name, input_schema as JSON)`` each (in the schema's own
    key order: inputs list their fields in it, as a model writes them).

    A name alone stands for a tool taking ``{"q": string}``; a dict is a tool as the API's ``tools``
    parameter takes it.
    """
    out = []
    for t in tools:
        if isinstance(t, str):
            name, schema = t, QUERY_SCHEMA
        elif isinstance(t, ToolSpec):
            name, schema = t.name, t.input_schema
        else:
            name, schema = str(t.get("name", "")), t.get("input_schema") or {"type": "object"}
        out.append((name, json.dumps(schema, separators=(",", ":"))))
    return tuple(out) or (("search", json.dumps(QUERY_SCHEMA, separators=(",", ":"))),)


@functools.lru_cache(maxsize=256)
def calls_codec(
    tools: tuple[str, ...] | tuple[tuple[str, str], ...], max_parallel: int = MAX_PARALLEL, duplicates: bool = True,
    *, counts: tuple[tuple[int, int], ...] | None = None, words: tuple[str, ...] | None = None,
) -> Codec[list[ToolCall]]:
    """See `tool_calls`: a byte for the shape, then three bytes for each call (validity, tool and input).

    ``tools`` are names, or `tool_key` pairs (the inputs then fit each tool's schema); ``counts`` weighs the
    number of calls as ``(count, weight)`` pairs instead (and then no reply repeats a call).  A call's number
    picks the tool and the input together (0 is the first tool with its simplest input; about half the
    numbers give the simplest, so equal calls across replies are common), so it shrinks to both at once.
    ``words``: what the inputs' free text is made of (`simloop._inputs.topic_words` of the task; default the
    refund story's).
    """
    keys = tuple((t, "") if isinstance(t, str) else t for t in tools)
    pools = tuple(pool_for(json.loads(schema) if schema else QUERY_SCHEMA, *(words,) if words else ())
                  for _, schema in keys)
    names = tuple(name for name, _ in keys)
    weights = dict(counts) if counts is not None else _SHAPES
    shapes = [((n, False), w) for n, w in weights.items() if n <= max_parallel]
    if duplicates and counts is None:
        shapes += [((n, True), w) for n, w in _DUPLICATE_SHAPES.items() if n < max_parallel]
    shape_table = table(shapes)
    span = len(names) * (2 * POOL - 1)

    # frozen: one instance a number, rather than a validation a draw.  The numbers that come back (the simplest,
    # a shrink's, a mutation's) are few; a large cache would only keep the new ones, and so grow with the search
    @functools.lru_cache(maxsize=512)
    def call(k: int, valid: bool) -> ToolCall:
        tool, j = k % len(names), k // len(names)
        index = max(0, j - (POOL - 1))
        pool = pools[tool]
        return ToolCall(name=names[tool], input=pool.valid(index) if valid else pool.invalid(index))

    shapes_n, validity_n = len(shape_table), len(_VALIDITY)

    def decode(d: Digits) -> list[ToolCall]:
        # `Digits.pick` and `Digits.below` written out (this runs on every reply): the same bytes, the same values
        raw, at = d.raw, d.at
        count, duplicate = shape_table[raw[at] * shapes_n >> 8]
        at += 1
        calls = []
        for _ in range(count):
            k = min(int((((raw[at] << 8) | raw[at + 1]) / 0xFFFF) * span), span - 1)  # below(span)
            calls.append(call(k, _VALIDITY[raw[at + 2] * validity_n >> 8]))
            at += 3
        d.at = at + 3 * (max_parallel - count)  # the unused calls' bytes
        if duplicate:
            calls.append(calls[0])  # two identical calls in one reply
        return calls

    return Codec(1 + 3 * max_parallel, decode)


_RETRY_AFTER = (1.0, 5.0, 30.0, 120.0)


@functools.lru_cache(maxsize=64)
def api_fault_codec(codes: tuple[int | str, ...] = tuple(API_ERRORS), max_burst: int = 4) -> Codec[Reply]:
    """See `api_faults`: the code, the burst length, a 429's ``retry_after``, the latency."""
    bursts = tuple(range(1, max_burst + 1))
    latency = latency_codec(30.0).decode

    def decode(d: Digits) -> Reply:
        code, repeat, retry_after = d.pick(codes), d.pick(bursts), d.pick(_RETRY_AFTER)
        extra: dict[str, Any] = {"retry_after": retry_after} if code == 429 else {}
        return Reply(error=code, repeat=repeat, latency=latency(d), **extra)  # type: ignore[arg-type]

    return Codec(6, decode)


_TOOL_ERRORS = ("ConnectionError", "ValueError", "PermissionError", "TimeoutError")
_TOOL_LATENCIES = (5.0, 30.0, 90.0, 400.0)


@functools.lru_cache(maxsize=256)
def tool_fault_codec(name: str, kind: str) -> Codec[Fault]:
    """One fault of a tool: its kind (commit_then_raise only for writes), then its error or latency."""
    kinds = ("raise", "timeout", "slow", "huge_output", *(("commit_then_raise",) if kind == "write" else ()))

    def decode(d: Digits) -> Fault:
        fault_kind, error, latency = d.pick(kinds), d.pick(_TOOL_ERRORS), d.pick(_TOOL_LATENCIES)
        if fault_kind == "raise":
            return Fault(tool=name, kind="raise", error=error)
        if fault_kind in ("timeout", "slow"):
            return Fault(tool=name, kind=fault_kind, latency=latency)
        return Fault(tool=name, kind=fault_kind)

    return Codec(3, decode)


def latencies(*, max_s: float = 600.0, long_chance: int = 1) -> st.SearchStrategy[float]:
    """Virtual seconds a reply or a tool takes: zero (the simplest) or milliseconds to seconds mostly,
    in ``long_chance`` of ten draws up to ``max_s`` (minutes: the latencies that blow deadlines)."""
    return latency_codec(max_s, long_chance).strategy()


@functools.lru_cache(maxsize=64)
def slow_latencies(deadline_s: float | None = None) -> st.SearchStrategy[float]:
    """The latencies of a slow run's replies and tool executions: in half the draws, long ones spread
    evenly up to twice ``deadline_s`` (the loop's declared deadline; ten minutes when unknown), so a
    long model call or tool started at zero is as likely to end before the deadline as after it."""
    return slow_latency_codec(deadline_s).strategy()


def slow_latency_codec(deadline_s: float | None = None) -> Codec[float]:
    """See `slow_latencies`."""
    return latency_codec(2 * deadline_s if deadline_s else 600.0, 5)


def usages(*, max_tokens: int = 400_000, chance: int = 1) -> st.SearchStrategy[Usage | None]:
    """Token usage overriding the computed counts: usually none (the simplest), in ``chance`` of ten
    draws large enough to break budgets."""
    return usage_codec(max_tokens, chance).strategy()


def tool_specs(
    *, min_size: int = 1, max_size: int = 3, kinds: Sequence[str] = ("read", "write")
) -> st.SearchStrategy[list[ToolSpec]]:
    """Tool lists with unique names, each read or write (the oracle treats writes specially)."""
    names = st.sampled_from(["search", "lookup", "send_email", "refund", "fetch", "update_ticket"])

    @st.composite
    def build(draw: st.DrawFn) -> list[ToolSpec]:
        chosen = draw(st.lists(names, min_size=min_size, max_size=max_size, unique=True))
        return [
            ToolSpec(
                name=n,
                kind=draw(st.sampled_from(list(kinds))),
                description=f"The {n} tool.",
                input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            )
            for n in chosen
        ]

    return build()


def tool_inputs(schema: dict[str, Any] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """Inputs that fit ``schema`` (default: ``{"q": string}``): half the time the simplest valid input
    (what shrinking returns to, and equal inputs across calls), else one of `POOL` others.

    One number a draw, mapped onto a pool of inputs built once per schema (see `simloop._inputs`): a
    draw per call of every reply should cost little.
    """
    pool = pool_for(schema or QUERY_SCHEMA)
    return st.integers(0, 2 * POOL - 2).map(lambda j: pool.valid(max(0, j - (POOL - 1))))


def tool_calls(
    tools: Sequence[str | ToolSpec], *, max_parallel: int = MAX_PARALLEL, duplicates: bool = True
) -> st.SearchStrategy[list[ToolCall]]:
    """One reply's tool calls: usually one, sometimes up to ``max_parallel`` in parallel (several of one
    tool with different inputs among them), sometimes two identical ones.  Inputs fit each tool's
    ``input_schema`` (a name alone stands for a tool taking ``{"q": string}``), one in twenty invalid."""
    keys = tool_key(tools) if any(isinstance(t, ToolSpec) for t in tools) else tuple(str(t) for t in tools) or ("search",)
    return _tool_calls(keys, max_parallel, duplicates)


@functools.lru_cache(maxsize=256)
def _tool_calls(
    tools: tuple[str, ...] | tuple[tuple[str, str], ...], max_parallel: int, duplicates: bool
) -> st.SearchStrategy[list[ToolCall]]:
    return calls_codec(tools, max_parallel, duplicates).strategy()


_CUT_INPUT = {"to": "ann@example.com", "body": "Your refund of $40 is on its way."}


def _cut_call(name: str, *, before: Sequence[ToolCall] = ()) -> Reply:
    call = ToolCall(name=name, input=_CUT_INPUT)
    return Reply(max_tokens=MaxTokensBody(text="Sending it now.", tool_use=[*before, call]))


# The endings a run may draw, built once (replies are frozen): a validation per run costs more than the draw.
# In a generated run the calls of a cut tool-call ending are drawn for the request's tools (see
# `simloop.generated.GeneratedModel`); these are what the static strategies (`endings`, `scenarios`) give.
_ENDING_REPLIES = {
    "end_turn": Reply(end_turn="The refund was processed and the customer was told."),
    "stop_sequence": Reply(stop_sequence="Here is the summary", sequence="###"),
    "refusal": Reply(refusal="I can't help with that request."),
    "max_tokens": Reply(max_tokens="The refund policy says that customers who"),
    "max_tokens_tool/send_email": _cut_call("send_email"),
    "max_tokens_tool/search": _cut_call("search"),
    "max_tokens_tool/multi": _cut_call("send_email", before=[ToolCall(name="search", input={"q": "refund"})]),
    "pause_turn": Reply(pause_turn="Searching the web for the policy."),
    # paused mid server call: a search ran (with its result), another is still running (no result yet)
    "pause_turn_server": Reply(
        server_tools=[ServerToolCall(name="web_search", input={"query": "refund policy"})],
        pause_turn=PauseTurnBody(
            text="One source so far; checking the current terms.",
            server_tool_use=ServerToolCall(name="web_search", input={"query": "refund policy 2026 changes"}),
        ),
    ),
}
_CUT_ENDINGS = ("max_tokens_tool/send_email", "max_tokens_tool/search", "max_tokens_tool/multi")


def endings(*, kinds: Sequence[str] = _ENDINGS) -> st.SearchStrategy[Reply]:
    """How a run's model stops asking for tools: a final answer (the simplest), or a stop sequence,
    a refusal, a ``max_tokens`` cut (in text, or mid tool input after none or some complete calls),
    a ``pause_turn`` (in text, or ``pause_turn_server``: in the middle of a server tool call, whose
    ``server_tool_use`` has no result yet)."""
    return _endings(tuple(kinds))


@functools.lru_cache(maxsize=64)
def _endings(kinds: tuple[str, ...]) -> st.SearchStrategy[Reply]:
    # Built once per set of kinds: ``plans`` draws an ending for every run.
    kind_of = weighted([(k, _ENDING_WEIGHTS.get(k, 1)) for k in kinds])
    cut_calls = st.sampled_from([_ENDING_REPLIES[key] for key in _CUT_ENDINGS])
    return kind_of.flatmap(lambda kind: cut_calls if kind == "max_tokens_tool" else st.just(_ENDING_REPLIES[kind]))


def api_faults(*, codes: Sequence[int | str] = API_ERRORS, max_burst: int = 4) -> st.SearchStrategy[Reply]:
    """An API failure in place of a reply: one error, or a burst (3+ in a row outlasts the SDK's 2 retries);
    429s carry ``retry_after``."""

    return api_fault_codec(tuple(codes), max_burst).strategy()


def tool_faults(tools: Sequence[ToolSpec], *, max_faults: int = 3) -> st.SearchStrategy[list[Fault]]:
    """Faults on the given tools: exceptions, timeouts, slowness, huge outputs, commit-then-raise on writes."""
    if not tools:
        return st.just([])

    @st.composite
    def one(draw: st.DrawFn) -> Fault:
        spec = draw(st.sampled_from(list(tools)))
        return fault_for(draw, spec, call=draw(st.one_of(st.none(), st.integers(1, 3))))

    return st.lists(one(), max_size=max_faults)


def faults(tools: Sequence[ToolSpec] = DEFAULT_TOOLS, *, max_faults: int = 3) -> st.SearchStrategy[list[Fault]]:
    """A scenario's ``faults:`` list (tool faults; API faults are replies, see `api_faults`)."""
    return tool_faults(tools, max_faults=max_faults)


def fault_for(draw: st.DrawFn, spec: ToolSpec, *, call: int | None) -> Fault:
    """Draw one fault that fits ``spec`` (commit_then_raise only for writes)."""
    fault = draw(_faults_of(spec.name, spec.kind))
    return fault if call is None else fault.model_copy(update={"call": call})


@functools.lru_cache(maxsize=256)
def _faults_of(name: str, kind: str) -> st.SearchStrategy[Fault]:
    """The faults of one tool, built once: strategies are costly to build and are drawn on every execution."""
    return tool_fault_codec(name, kind).strategy()


def turns(
    tools: Sequence[str | ToolSpec] = ("search", "send_email"), *, errors: bool = True
) -> st.SearchStrategy[Reply]:
    """One reply of the model: tool calls (often), an ending, or (when ``errors``) an API failure."""
    options: list[st.SearchStrategy[Reply]] = [
        st.builds(lambda calls, lat: Reply(tool_use=calls, latency=lat), tool_calls(tools), latencies()),
        endings(),
    ]
    if errors:
        options.append(api_faults())
    return st.one_of(options)


@dataclass(frozen=True, slots=True)
class Plan:
    """The model's behaviour over a whole run (drawn once; the replies are drawn as the loop asks).

    ``persona``: ``finishes`` (tool calls for ``steps`` replies, then ``ending``),
    ``stuck`` (the same call forever) or ``wanders`` (new calls forever).
    ``fault_rate``/``tool_fault_rate``: chance in ten of an API fault before a
    reply / a fault in a tool execution.  ``outage``: after ``steps`` replies,
    every request fails this way (an API that stays down).  ``slow``: replies
    and tool executions may take minutes, up to twice ``deadline_s`` (see
    `slow_latencies`): a tool still running when the deadline passes, often one
    of several in a parallel turn, is what deadline bugs need.  ``heavy``: replies
    may report budget-breaking token usage.  ``ending_repeats``: the model
    repeats its ending this many times in a row (cut off again when the loop
    retries with more room, paused again, refusing again) before it answers.
    ``long``: every tool output is large (a quarter of the model's context window, see `LONG_OUTPUT_SHARE`), so
    a history that keeps them all outgrows the window within a few steps: what a loop without trimming,
    summarizing or compaction meets in a long task.  ``fills``: in a long run, the reply to the first request whose
    history holds two large outputs (past half the window) fills the window as the model writes: a cut reply stopped
    with ``model_context_window_exceeded`` (Anthropic: truncated), whatever the ending.
    Hazards are per run, so most runs are plain and reach their ending.
    """

    persona: Literal["finishes", "stuck", "wanders"]
    steps: int
    ending: Reply
    fault_rate: int
    tool_fault_rate: int
    outage: Reply | None = None
    slow: bool = False
    heavy: bool = False
    deadline_s: float | None = None
    ending_repeats: int = 1
    long: bool = False
    fills: bool = False


#: A long run's tool output, as a share of the model's context window in characters (a quarter of the window in
#: tokens, at about four characters a token): a history keeping them all crosses the window within five rounds of
#: one call (a long run has five to eight), sooner with parallel calls.
LONG_OUTPUT_SHARE = 1.0


def weighted(options: Sequence[tuple[Any, int]]) -> st.SearchStrategy[Any]:
    """One of ``options`` (value, weight), drawn in proportion to the weights; shrinks towards the first.

    A single option is `st.just` it: no choice for Hypothesis to make, record and mutate.
    """
    choice = _choice(options)
    return st.just(choice) if len(options) == 1 else choice


def rarely(
    strategy: st.SearchStrategy[Any], *, otherwise: st.SearchStrategy[Any], chance: int = 1, of: int = 10
) -> st.SearchStrategy[Any]:
    """``strategy`` in ``chance`` of ``of`` draws, else ``otherwise`` (what shrinking goes back to)."""
    return st.integers(0, of - 1).flatmap(lambda i: strategy if i >= of - chance else otherwise)


_RATES = ((0, 4), (1, 2), (2, 1), (3, 1))
# how many times in a row the ending comes: mostly once; retry-once policies need two, pauses may run on
_REPEATS = ((1, 5), (2, 3), (3, 1), (4, 1))


def plans(
    *,
    max_steps: int = 6,
    min_steps: int = 0,
    personas: Sequence[tuple[str, int]] = (("finishes", 6), ("stuck", 1), ("wanders", 1)),
    faults: bool = True,
    ending_kinds: Sequence[str] = _ENDINGS,
    outages: Sequence[tuple[Reply | None, int]] = ((None, 9), (Reply(error=529), 1)),
    slow: Sequence[tuple[bool, int]] = ((False, 3), (True, 1)),
    heavy: Sequence[tuple[bool, int]] = ((False, 4), (True, 1)),
    fault_rates: Sequence[tuple[int, int]] = _RATES,
    tool_fault_rates: Sequence[tuple[int, int]] = _RATES,
    ending_repeats: Sequence[tuple[int, int]] = _REPEATS,
    deadline_s: float | None = None,
    long: Sequence[tuple[bool, int]] = ((False, 1),),
    fills: Sequence[tuple[bool, int]] = ((False, 1),),
) -> st.SearchStrategy[Plan]:
    """The model's behaviour for one run; shrinks towards a model that finishes at once with no faults.

    ``personas`` weighs the behaviours: by default six runs in eight finish (and so reach every
    ending: refusal, cut-off, pause, ...), one is stuck on one call, one wanders forever.
    ``ending_kinds`` narrows the endings (``end_turn``, ``stop_sequence``, ``refusal``,
    ``max_tokens``, ``max_tokens_tool``, ``pause_turn``, ``pause_turn_server``), e.g. to leave out a known finding.
    The generated model renders each ending as the request it answers allows (`simloop._offer`): a pause only
    when the request declares a server tool, a stop sequence only when it sets ``stop_sequences``, a cut tool
    call only of its own tools; otherwise the same text as a plain answer (or a cut text).
    The other keywords weigh the run-level hazards as ``(value, weight)`` pairs: an API outage,
    slow replies, budget-breaking usage, the chance in ten of API and tool faults, and how many times
    in a row the ending comes (``ending_repeats``), and long histories (``long``: large tool outputs).  ``faults=False`` turns every fault off.  ``deadline_s`` is the deadline the loop declares: slow
    runs aim their latencies at it (see `slow_latencies`).
    """

    fields = _plan_fields(
        personas=personas, faults=faults, outages=outages, slow=slow, heavy=heavy, min_steps=min_steps,
        max_steps=max_steps, ending_kinds=ending_kinds, fault_rates=fault_rates, tool_fault_rates=tool_fault_rates,
        ending_repeats=ending_repeats, long=long, fills=fills,
    )
    if not any(isinstance(f, st.SearchStrategy) for f in fields.values()):
        return st.just(Plan(**fields, deadline_s=deadline_s))  # nothing left to choose

    @st.composite
    def build(draw: st.DrawFn) -> Plan:
        drawn = {k: draw(f) if isinstance(f, st.SearchStrategy) else f for k, f in fields.items()}
        return Plan(**drawn, deadline_s=deadline_s)

    return build()


def _plan_fields(
    *, personas: Sequence[tuple[str, int]], faults: bool, outages: Sequence[tuple[Reply | None, int]],
    slow: Sequence[tuple[bool, int]], heavy: Sequence[tuple[bool, int]], min_steps: int, max_steps: int,
    ending_kinds: Sequence[str], fault_rates: Sequence[tuple[int, int]], tool_fault_rates: Sequence[tuple[int, int]],
    ending_repeats: Sequence[tuple[int, int]], long: Sequence[tuple[bool, int]], fills: Sequence[tuple[bool, int]],
) -> dict[str, Any]:
    """`plans`' fields, each a value (one option) or a strategy drawing it, in the order they are drawn."""
    # The run-level hazards are drawn first: Hypothesis keeps the first choices of new examples novel,
    # so every kind of run keeps coming up even when the engine is busy mutating long examples.  They
    # stay small integer choices (not a codec's bytes): Hypothesis enumerates the values of a small
    # range it has not tried yet, so every ending and persona comes up within a few examples.
    #
    # A field with one possible value (the ending too) is that value, not a strategy: a stage fixes most
    # of them, and each draw costs Hypothesis's bookkeeping even when there is nothing to choose.
    outage_of = _choice(outages) if faults else None
    persona_of, slow_of, heavy_of = _choice(personas), _choice(slow), _choice(heavy)
    steps_of = _choice([(n, 3 if n < 2 else 2 if n < 3 else 1) for n in range(min_steps, max_steps + 1)])
    kinds = tuple(ending_kinds)
    ending_of = _ENDING_REPLIES[kinds[0]] if len(kinds) == 1 and kinds[0] in _ENDING_REPLIES else endings(kinds=kinds)
    fault_rate_of = _choice(fault_rates) if faults else 0
    tool_fault_rate_of = _choice(tool_fault_rates) if faults else 0
    repeats_of = _choice(ending_repeats)
    long_of = _choice(long)
    fills_of = _choice(fills)

    # in the order they are drawn (a new field last, and a constant by default: the others' draws stay as they were)
    fields = {"outage": outage_of, "persona": persona_of, "slow": slow_of, "heavy": heavy_of, "steps": steps_of,
              "ending": ending_of, "ending_repeats": repeats_of, "fault_rate": fault_rate_of,
              "tool_fault_rate": tool_fault_rate_of, "long": long_of, "fills": fills_of}
    return fields


def _choice(options: Sequence[tuple[Any, int]]) -> Any:
    """The value of a single option, else a strategy drawing ``options`` by weight (see `weighted`)."""
    values = table(options, most=None)  # (which checks the weights either way)
    return options[0][0] if len(options) == 1 else st.integers(0, len(values) - 1).map(values.__getitem__)


def stages(**narrow: Any) -> list[tuple[str, st.SearchStrategy[Plan], int]]:
    """How `verify` splits its budget: ``(name, plans, share in 20)``.

    Each stage makes one kind of run certain: a search of 200 mixed examples can, by the luck of
    the engine, draw few stuck models or outages, while a defect that only such a run shows must be
    caught every time.  The last stage mixes everything, for the bugs that need several hazards (all but
    long histories, which have a stage of their own: their requests are large).
    ``narrow`` is passed to every `plans` call (e.g. ``ending_kinds=...``, or the loop's
    ``deadline_s``, which the slow runs aim their reply and tool latencies at).
    """
    none_ = ((None, 1),)
    calm: dict[str, Any] = {"outages": none_, "slow": ((False, 1),), "heavy": ((False, 1),),
                            "fault_rates": ((0, 1),), "tool_fault_rates": ((0, 1),)}
    finishing: dict[str, Any] = {**calm, "personas": (("finishes", 1),)}
    return [
        ("endings", plans(**{**finishing, **narrow}), 3),
        ("api faults", plans(**{**finishing, "fault_rates": ((1, 1), (2, 1), (3, 1)), **narrow}), 2),
        ("tool faults", plans(**{**finishing, "min_steps": 1, "tool_fault_rates": ((1, 1), (2, 1), (3, 1)), **narrow}), 3),
        ("slow", plans(**{**finishing, "min_steps": 2, "slow": ((True, 1),), **narrow}), 2),
        ("heavy", plans(**{**finishing, "min_steps": 2, "heavy": ((True, 1),), **narrow}), 2),
        ("stuck", plans(**{**calm, "personas": (("stuck", 1),), **narrow}), 1),
        ("wanders", plans(**{**calm, "personas": (("wanders", 1),), **narrow}), 1),
        ("outage", plans(**{**finishing, "outages": ((Reply(error=529), 1),), **narrow}), 1),
        ("long", plans(**{**finishing, "min_steps": 5, "max_steps": 8, "long": ((True, 1),),
                          "fills": ((False, 1), (True, 1)), **narrow}), 1),
        ("mixed", plans(**narrow), 4),
    ]


def scenarios(
    *,
    tools: Sequence[ToolSpec] | None = None,
    limits: Limits | None = None,
    max_replies: int = 8,
    errors: bool = True,
) -> st.SearchStrategy[Scenario]:
    """Whole scripted scenarios: tools, a few replies, tool faults, ``then``."""

    @st.composite
    def build(draw: st.DrawFn) -> Scenario:
        specs = list(tools) if tools is not None else draw(tool_specs())
        replies = draw(st.lists(turns(specs, errors=errors), min_size=1, max_size=max_replies))
        return Scenario(
            name="generated",
            task="Handle the customer's refund request.",
            tools=specs,
            model=replies,
            then=draw(st.sampled_from(["end_turn", "repeat_last", "fail"])),
            faults=draw(tool_faults(specs)),
            limits=limits or Limits(),
        )

    return build()
