"""What a model call costs: list prices per million tokens, and the cost of one reply's ``usage``.

The `limits` invariant reads it for a declared ``max_cost_usd`` (docs/design.md, Limits), the timeline to show
the cost so far.  Pure data and arithmetic, no simulator: a transcript on disk is priced as a live one.

A scenario's ``prices:`` overrides the table for its run (per model name, name prefix, or ``"*"`` for every
model the table does not know); the transcript's header keeps the override, so a run is priced the same when
it is read back.

`cost_usd` reads the ``usage`` of every wire simloop serves: the Messages API's (``input_tokens``,
``output_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``), Chat Completions'
(``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``) and the Responses API's
(``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens`` / ``cache_write_tokens``); on the
OpenAI wires the input count includes the cached tokens, on the Messages API it does not.  A usage of none of
these shapes is a `simloop.UsageError`: a budget priced at $0.00 would never stop a loop.

Example::

    cost_usd({"input_tokens": 1_000, "output_tokens": 200}, "claude-sonnet-4-5")   # 0.006
    cost_usd({"prompt_tokens": 1_000, "completion_tokens": 200}, "gpt-4o-mini")    # 0.00027
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from simloop.errors import UsageError

__all__ = ["DEFAULT", "PRICES", "Price", "cost_usd", "price_for"]


class Price(NamedTuple):
    """USD per million tokens: uncached input, output, cache writes (the 5-minute ones), cache reads (hits)."""

    input: float
    output: float
    cache_write: float
    cache_read: float


# List prices of the Claude API (standard tier, no batch discount, a prompt under any long-context tier), as
# platform.claude.com/docs/en/about-claude/pricing and the models' overview pages gave them when read on
# 2026-12-02.  Keys are model-name prefixes: the longest that a name starts with wins (a dated snapshot name,
# ``claude-sonnet-4-5-20250929``, has its family's price).  Update the table, and that date, when prices move.
PRICES: dict[str, Price] = {
    "claude-fable-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-mythos-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-fable-5": Price(10.0, 50.0, 12.5, 1.0),
    "claude-mythos-5": Price(10.0, 50.0, 12.5, 1.0),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.2),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.5),
    "claude-opus-4": Price(15.0, 75.0, 18.75, 1.5),  # Opus 4 and 4.1
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.5, 0.2),
    "claude-sonnet-5": Price(2.0, 10.0, 2.5, 0.2),
    "claude-sonnet-4": Price(3.0, 15.0, 3.75, 0.3),  # Sonnet 4, 4.5, 4.6
    "claude-haiku-5-5": Price(0.1, 0.5, 0.125, 0.01),  # prompts up to 100k tokens
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.1),
    "claude-3-5-haiku": Price(0.8, 4.0, 1.0, 0.08),
}
# List prices of the OpenAI API (standard tier, no batch or flex discount, a prompt under any long-context tier):
# input, output, cache writes (no surcharge: the input price) and cached input, USD per million tokens, from
# developers.openai.com/api/docs/pricing as quoted, dated, by deploybase.ai/articles/openai-pricing (March 2026),
# chatgptpricing-akr.pages.dev/api-pricing and morphllm.com/openai-api-pricing (June 2026), read on 2026-12-06;
# cached-input prices the quotes omit are the family's published ratio (a half on gpt-4o and o3-mini, a quarter
# on gpt-4.1, o3 and o4-mini, a tenth on the gpt-5 family).  Update the table, and that date, when prices move.
PRICES.update({
    "gpt-5.5": Price(5.0, 30.0, 5.0, 0.5),
    "gpt-5.4-nano": Price(0.2, 1.25, 0.2, 0.02),
    "gpt-5.4-mini": Price(0.75, 4.5, 0.75, 0.075),
    "gpt-5.4": Price(2.5, 15.0, 2.5, 0.25),
    "gpt-5-nano": Price(0.05, 0.4, 0.05, 0.005),
    "gpt-5-mini": Price(0.25, 2.0, 0.25, 0.025),
    "gpt-5": Price(1.25, 10.0, 1.25, 0.125),  # gpt-5, gpt-5.1 and their snapshots
    "gpt-4.1-nano": Price(0.1, 0.4, 0.1, 0.025),
    "gpt-4.1-mini": Price(0.4, 1.6, 0.4, 0.1),
    "gpt-4.1": Price(2.0, 8.0, 2.0, 0.5),
    "gpt-4o-mini": Price(0.15, 0.6, 0.15, 0.075),
    "gpt-4o": Price(2.5, 10.0, 2.5, 1.25),
    "o4-mini": Price(1.1, 4.4, 1.1, 0.275),
    "o3-mini": Price(1.1, 4.4, 1.1, 0.55),
    "o3": Price(2.0, 8.0, 2.0, 0.5),
})
#: The price of a model the table does not know (and no ``"*"`` override names): a Sonnet's.
DEFAULT = PRICES["claude-sonnet-4"]


def price_for(model: str | None, prices: Mapping[str, Any] | None = None) -> Price:
    """The price of ``model``: the override's entry for it (exact name, then the longest prefix, then ``"*"``),
    else the table's (longest prefix), else `DEFAULT`.  An override entry is a `Price` or a mapping with the
    keys ``input``, ``output``, ``cache_write``, ``cache_read``."""
    name = model or ""
    for table in (prices or {}, PRICES):
        hit = table.get(name)
        if hit is None:
            keys = [k for k in table if k != "*" and name.startswith(k)]
            hit = table[max(keys, key=len)] if keys else table.get("*")
        if hit is not None:
            return hit if isinstance(hit, Price) else Price(**{f: float(hit.get(f, 0.0)) for f in Price._fields})
    return DEFAULT


def cost_usd(usage: Mapping[str, Any] | None, model: str | None, prices: Mapping[str, Any] | None = None) -> float:
    """What one reply cost, from its ``usage`` as the API sent it (any wire's shape, see the module): uncached
    input, output, cache writes and cache reads, each at its price per million tokens.  No usage (None) costs
    nothing; a usage of a shape this does not know raises `simloop.UsageError`."""
    if usage is None:
        return 0.0
    uncached, output, written, read = tokens_of(usage)
    p = price_for(model, prices)
    return (uncached * p.input + output * p.output + written * p.cache_write + read * p.cache_read) / 1_000_000


def tokens_of(usage: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """``usage`` as (uncached input, output, cache writes, cache reads) tokens, whichever wire's shape it has."""
    if not isinstance(usage, Mapping):
        raise UsageError(f"cost_usd(usage) takes a reply's usage as a mapping (reply.usage.model_dump()), got "
                         f"{type(usage).__name__}")
    if "prompt_tokens" in usage:  # Chat Completions: prompt_tokens includes the cached ones
        details = usage.get("prompt_tokens_details") or {}
        read = _int(details.get("cached_tokens"))
        written = _int(details.get("cache_write_tokens"))
        return _int(usage["prompt_tokens"]) - read - written, _int(usage.get("completion_tokens")), written, read
    if "input_tokens" in usage and "input_tokens_details" in usage:  # Responses: input_tokens includes the cached
        details = usage.get("input_tokens_details") or {}
        read = _int(details.get("cached_tokens"))
        written = _int(details.get("cache_write_tokens"))
        return _int(usage["input_tokens"]) - read - written, _int(usage.get("output_tokens")), written, read
    if "input_tokens" in usage or "output_tokens" in usage:  # the Messages API: cache tokens counted apart
        return (_int(usage.get("input_tokens")), _int(usage.get("output_tokens")),
                _int(usage.get("cache_creation_input_tokens")), _int(usage.get("cache_read_input_tokens")))
    raise UsageError(
        f"cost_usd cannot read this usage (keys: {', '.join(sorted(map(str, usage))) or 'none'}): it reads the "
        "Messages API's (input_tokens, output_tokens), Chat Completions' (prompt_tokens, completion_tokens) and the "
        "Responses API's (input_tokens, output_tokens, input_tokens_details); pass reply.usage.model_dump()"
    )


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
