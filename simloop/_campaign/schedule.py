"""The schedule of a search: its stages, cut into bounded Hypothesis runs, with their settings and seeds.

A Hypothesis run keeps every example it tried (its cache of results and its tree of choice sequences, some
20 KB an example here), so one long run grows without bound; a long budget is therefore run as bounded
chunks, each a fresh Hypothesis run under the stage's database key with a seed derived from the stage and
the chunk number.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from hypothesis import HealthCheck, Phase, Verbosity, core
from hypothesis import settings as Settings
from hypothesis import strategies as st

__all__ = ["CHUNK", "FIRST_ROUND", "SUPPRESSED", "Chunk", "Stage", "chunk_settings", "chunks", "derived_seed",
           "fixed_seed", "schedule", "split", "test_settings"]

#: The most examples one Hypothesis run is given: its memory grows with every example it tries (the engine caches
#: each result and records each choice sequence), so a longer stage runs as several chunks and a run of 10,000
#: examples peaks no higher than one of a few hundred.
CHUNK = 100
#: Examples of each stage tried before any stage gets the rest of its budget: every kind of run comes within the
#: first ~20 examples whatever the budget (a stage's later chunks then start again from its simplest run).
FIRST_ROUND = 2
#: The health checks a loop's runs fail without anything being wrong: a run is slow next to a unit test's
#: example, and draws as much as the loop asks for.
SUPPRESSED = (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much)


class Stage(NamedTuple):
    """One kind of run a search makes certain: its name (part of its database key), its plans and its budget."""

    name: str
    strategy: st.SearchStrategy[Any]
    budget: int


class Chunk(NamedTuple):
    """One Hypothesis run of a stage: its ``number`` within the stage (0 replays the saved failures) and size."""

    stage: str
    strategy: st.SearchStrategy[Any]
    number: int
    size: int


def split(max_examples: int, parts: Sequence[tuple[str, st.SearchStrategy[Any], int]]) -> list[Stage]:
    """The budget over the stages by their shares (in twenty); small budgets go to the first stages first."""
    total = sum(share for _, _, share in parts)
    out, left = [], max_examples
    for name, strategy, share in parts:
        n = min(left, max(1, max_examples * share // total))
        out.append(Stage(name, strategy, n))
        left -= n
    return out


def chunks(budget: int, cap: int = CHUNK) -> list[int]:
    """A stage's budget as the sizes of its Hypothesis runs: at most ``cap`` each, none much smaller."""
    if budget < 1:
        return []
    count = -(-budget // cap)
    return [budget // count + (1 if k < budget % count else 0) for k in range(count)]


def schedule(
    searches: Sequence[tuple[str, st.SearchStrategy[Any], int]], max_examples: int, done: Callable[[], int],
    exhausted: set[str], *, cap: int = CHUNK,
) -> Iterator[Chunk]:
    """The Hypothesis runs of a search in the order they run.

    With several stages, a first round gives each its first `FIRST_ROUND` examples (chunk 0, which also
    replays the stage's saved failures), then each stage gets the rest of its share in chunks of at most
    ``cap``; the last stage gets what the others left (``done()`` is how many examples ran so far; a stage
    in ``exhausted``, whose space ran out, hands on its budget).
    """
    if len(searches) == 1:
        name, strategy, budget = searches[0]
        for n, size in enumerate(chunks(budget, cap)):
            if name in exhausted:
                return
            yield Chunk(name, strategy, n, size)
        return
    firsts = [min(share, FIRST_ROUND) for _, _, share in searches]
    for (name, strategy, _), first in zip(searches, firsts):
        if first:
            yield Chunk(name, strategy, 0, first)
    for i, ((name, strategy, share), first) in enumerate(zip(searches, firsts)):
        rest = share - first if i < len(searches) - 1 else max_examples - done()
        for n, size in enumerate(chunks(rest, cap), start=1):
            if name in exhausted:
                break
            yield Chunk(name, strategy, n, size)


def chunk_settings(base: Settings, size: int, *, first: bool) -> Settings:
    """The settings of one chunk: the caller's (profile, database, verbosity) with simloop's overrides."""
    # no explain phase: it re-runs many variants of the failure to annotate Hypothesis's own report, which
    # simloop replaces with the scenario file and timeline; the database is replayed by the first chunk only
    # (a saved failure is tried first; the entries that no longer fail are dropped there, so later chunks
    # would find nothing new), while every chunk still saves the failure it finds
    drop = {Phase.explain} if first else {Phase.explain, Phase.reuse}
    return Settings(
        base,
        max_examples=size,
        deadline=None,
        report_multiple_bugs=False,
        phases=[p for p in base.phases if p not in drop],
        verbosity=Verbosity.quiet if base.verbosity <= Verbosity.normal else base.verbosity,
        suppress_health_check=list(SUPPRESSED),
    )


def test_settings(base: Settings, max_examples: int | None = None) -> Settings:
    """The settings of a campaign run as one plain Hypothesis test: ``base`` (the caller's, or the loaded profile's)
    with ``max_examples`` when given, and without what a loop's runs cannot keep to.

    No deadline: a run's real time says nothing about the loop (its clock is virtual), and a busy machine stretches
    it, so a deadline would only make the test flaky; no explain phase (it re-runs variants of the failure for a
    note that simloop's report replaces); one failure reported, simloop's; the `SUPPRESSED` health checks off.
    """
    return Settings(
        base,
        max_examples=base.max_examples if max_examples is None else max_examples,
        deadline=None,
        report_multiple_bugs=False,
        phases=[p for p in base.phases if p is not Phase.explain],
        suppress_health_check=sorted({*base.suppress_health_check, *SUPPRESSED}, key=lambda h: h.value),
    )


def fixed_seed(base: Settings, digest: bytes) -> object | None:
    """What fixes the randomness of an unseeded run, if anything does (``derandomize``, ``--hypothesis-seed``)."""
    if base.derandomize:
        return hashlib.sha256(digest).hexdigest()
    return getattr(core, "global_force_seed", None)  # set by pytest's --hypothesis-seed


def derived_seed(root: object, stage: str, n: int) -> int:
    """The seed of chunk ``n`` of a stage (or of worker ``n``), from the run's seed: the same every time."""
    return int.from_bytes(hashlib.sha256(f"{root}/{stage}/{n}".encode()).digest()[:8], "big")
