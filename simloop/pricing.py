"""What a model call costs: list prices per million tokens, and the cost of one reply's ``usage``.

The `limits` invariant reads it for a declared ``max_cost_usd`` (docs/design.md, Limits), the timeline to show
the cost so far.  Pure data and arithmetic, no simulator: a transcript on disk is priced as a live one.

A scenario's ``prices:`` overrides the table for its run (per model name, name prefix, or ``"*"`` for every
model the table does not know); the transcript's header keeps the override, so a run is priced the same when
it is read back.

Example::

    cost_usd({"input_tokens": 1_000, "output_tokens": 200}, "claude-sonnet-4-5")   # 0.006
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

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
    """What one reply cost, from its ``usage`` (the API's keys): uncached input, output, cache writes and cache
    reads, each at its price per million tokens."""
    u = usage or {}
    p = price_for(model, prices)
    return (
        int(u.get("input_tokens") or 0) * p.input
        + int(u.get("output_tokens") or 0) * p.output
        + int(u.get("cache_creation_input_tokens") or 0) * p.cache_write
        + int(u.get("cache_read_input_tokens") or 0) * p.cache_read
    ) / 1_000_000
