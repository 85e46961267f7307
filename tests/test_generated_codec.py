"""The generated model's reply codec, written out for speed, decodes every tape as the plain form did.

`simloop.strategies.calls_codec` reads its digits inline, `joined` calls three decoders without a list, and
`simloop.generated._tool_reply_of` builds the drawn reply without pydantic's generic copy: each is pinned here
to the form it replaced (`Digits.pick` / `Digits.below`, ``build(*[...])``, ``model_copy(update=...)``), so the
same drawn bytes give the same runs (and the same searches and shrinks) as before.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simloop import generated, strategies
from simloop._inputs import POOL, pool_for
from simloop.scenario import REPLY_KINDS, Reply, ToolCall, Usage
from simloop.strategies import _SHAPES, _VALIDITY, CUT_COUNTS, MAX_PARALLEL, Codec, Digits, table, tool_key

_KEYS = [
    tool_key(strategies.DEFAULT_TOOLS),
    tool_key(["search"]),
    tool_key([{"name": "lookup", "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}}},
              "search", {"name": "refund", "input_schema": {"type": "object"}}]),
]


def _plain_calls_codec(tools: Any, max_parallel: int = MAX_PARALLEL, duplicates: bool = True, *,
                       counts: Any = None) -> Codec[list[ToolCall]]:
    """`calls_codec` as it was written before (`Digits.pick` and `Digits.below`), the reference."""
    keys = tuple((t, "") if isinstance(t, str) else t for t in tools)
    pools = tuple(pool_for(json.loads(schema) if schema else strategies.QUERY_SCHEMA) for _, schema in keys)
    names = tuple(name for name, _ in keys)
    weights = dict(counts) if counts is not None else _SHAPES
    shapes = [((n, False), w) for n, w in weights.items() if n <= max_parallel]
    if duplicates and counts is None:
        shapes += [((n, True), w) for n, w in strategies._DUPLICATE_SHAPES.items() if n < max_parallel]
    shape_table = table(shapes)
    span = len(names) * (2 * POOL - 1)

    @functools.lru_cache(maxsize=512)
    def call(k: int, valid: bool) -> ToolCall:
        tool, j = k % len(names), k // len(names)
        index = max(0, j - (POOL - 1))
        pool = pools[tool]
        return ToolCall(name=names[tool], input=pool.valid(index) if valid else pool.invalid(index))

    def decode(d: Digits) -> list[ToolCall]:
        count, duplicate = d.pick(shape_table)
        calls = [call(d.below(span), d.pick(_VALIDITY)) for _ in range(count)]
        d.at += 3 * (max_parallel - count)
        if duplicate:
            calls.append(calls[0])
        return calls

    return Codec(1 + 3 * max_parallel, decode)


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(_KEYS), max_parallel=st.integers(1, MAX_PARALLEL), duplicates=st.booleans(),
    cut=st.booleans(), raw=st.binary(min_size=3 * (1 + 3 * MAX_PARALLEL), max_size=3 * (1 + 3 * MAX_PARALLEL)),
    at=st.integers(0, 1 + 3 * MAX_PARALLEL),
)
def test_the_calls_codec_reads_every_tape_as_pick_and_below_did(
    key: Any, max_parallel: int, duplicates: bool, cut: bool, raw: bytes, at: int
) -> None:
    counts = CUT_COUNTS if cut else None
    fast = strategies.calls_codec(key, max_parallel, duplicates, counts=counts)
    plain = _plain_calls_codec(key, max_parallel, duplicates, counts=counts)
    assert fast.size == plain.size
    mine, theirs = Digits(raw, at), Digits(raw, at)
    assert fast.decode(mine) == plain.decode(theirs)
    assert mine.at == theirs.at  # the next reply's bytes start at the same place


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(min_size=30, max_size=30), slow=st.booleans(), heavy=st.booleans(), key=st.sampled_from(_KEYS))
def test_a_drawn_tool_reply_is_the_model_copy_it_replaced(raw: bytes, slow: bool, heavy: bool, key: Any) -> None:
    codec = generated._tool_reply(key, slow, 30.0 if slow else None, heavy)
    latency = strategies.slow_latency_codec(30.0) if slow else generated._SHORT
    usage = generated._HEAVY if heavy else generated._NONE
    calls = strategies.calls_codec(key)
    reference = strategies.Codec(  # `joined` as it was: build(*[d(digits) for d in decoders]) with model_copy
        latency.size + usage.size + calls.size,
        lambda d: generated._TOOL_REPLY.model_copy(
            update=dict(zip(("latency", "usage", "tool_use"), [c.decode(d) for c in (latency, usage, calls)]))
        ),
    )
    raw = (raw * 4)[: codec.size]
    fast, plain = Digits(raw), Digits(raw)
    mine, theirs = codec.decode(fast), reference.decode(plain)
    assert fast.at == plain.at == codec.size
    assert mine == theirs
    assert mine.__dict__ == theirs.__dict__
    assert mine.model_fields_set == theirs.model_fields_set
    assert (mine.__pydantic_extra__, mine.__pydantic_private__) == (theirs.__pydantic_extra__, theirs.__pydantic_private__)
    assert mine.kind == "tool_use" and mine.model_dump() == theirs.model_dump()
    assert Reply.model_validate(mine.model_dump()) == mine  # a valid reply, as drawn
    assert mine.model_copy(update={"crash": True}).crash  # and one the model may still copy (a crash, a cut)


def test_the_built_replies_share_no_state() -> None:
    """Each drawn reply has its own fields and its own fields-set (a copy's update changes only the copy)."""
    first = generated._tool_reply_of(0.0, None, [ToolCall(name="search", input={"q": "a"})])
    second = generated._tool_reply_of(1.5, Usage(input_tokens=1, output_tokens=2), [ToolCall(name="search")])
    assert first.__dict__ is not second.__dict__
    assert first.__pydantic_fields_set__ is not second.__pydantic_fields_set__
    assert (first.latency, first.usage, second.latency) == (0.0, None, 1.5)
    assert second.usage == Usage(input_tokens=1, output_tokens=2)


@given(kind=st.sampled_from(["end_turn", "tool_use", "refusal", "error", "max_tokens"]))
def test_a_replys_kind_is_its_one_kind_field(kind: str) -> None:
    values: dict[str, Any] = {"end_turn": "Done.", "tool_use": [ToolCall(name="search")], "refusal": "No.",
                              "error": 500, "max_tokens": "cut"}
    reply = Reply(**{kind: values[kind]})
    assert reply.kind == kind == next(k for k in REPLY_KINDS if getattr(reply, k) is not None)
