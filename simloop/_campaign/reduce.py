"""`reduce`: a shrunk failure's script cut down further, by replaying it without what the failure does not need.

Hypothesis shrinks the choices a run was drawn from, within the stage that found it: a stage that makes a kind
of run certain also keeps it (the tool-faults stage's runs have at least one tool step, the slow and heavy
stages' at least two), so a failure that needs a refusal alone, found there, comes back with a tool call before
it.  The saved failure is a script, and a script can be cut where the choices could not: this pass replays the
failure's scenario without one of its follow-ups (the last), one of its replies, or one of its tool faults at a
time, and keeps each cut under which the loop breaks the same invariants, until no cut keeps them (at most
`MAX_REPLAYS` replays).  What it returns replays as the saved file does (a `Script` of the replies, ``then:``
as written), so the file, the timeline and the report stay one run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from simloop._runtime.netguard import NetworkPolicy
from simloop.invariants import Report
from simloop.scenario import Limits, Scenario
from simloop.sim import Drive, Sim

__all__ = ["MAX_REPLAYS", "Reduced", "reduce"]

#: The most replays one reduction makes (each is one run of the loop on the candidate script).
MAX_REPLAYS = 80


@dataclass(frozen=True)
class Reduced:
    """A smaller script that breaks the same invariants, with the run that showed it."""

    scenario: Scenario
    sim: Sim
    report: Report


def reduce(
    drive: Drive, scenario: Scenario, *, invariants: Sequence[str], broken: frozenset[str], seed: int,
    network: NetworkPolicy, limits: Limits, max_replays: int = MAX_REPLAYS,
) -> Reduced | None:
    """``scenario`` without the follow-ups, replies and faults the failure does not need, or None when none can go.

    A cut is kept when replaying it breaks exactly ``broken`` (the ids the shrunk failure broke) among
    ``invariants``; the first cut kept starts the next round, from the first candidate again.
    """
    best: Reduced | None = None
    current = scenario
    replays = 0
    progress = True
    while progress and replays < max_replays:
        progress = False
        for candidate in _cuts(current):
            if replays >= max_replays:
                break
            replays += 1
            tried = _replay(drive, candidate, invariants=invariants, seed=seed, network=network, limits=limits)
            if tried is not None and frozenset(v.invariant for v in tried.report.violations) == broken:
                best, current, progress = tried, candidate, True
                break
    return best


def _cuts(scenario: Scenario) -> Iterator[Scenario]:
    """The candidates one step smaller, the largest cuts first: the last follow-up, each reply (a repeated reply
    one use at a time), each tool fault."""
    if scenario.followups:
        yield scenario.model_copy(update={"followups": scenario.followups[:-1]})
    replies = list(scenario.model)
    for i, reply in enumerate(replies):
        if isinstance(reply.repeat, int) and reply.repeat > 1:
            fewer = reply.model_copy(update={"repeat": reply.repeat - 1})
            yield scenario.model_copy(update={"model": [*replies[:i], fewer, *replies[i + 1:]]})
        elif len(replies) > 1:
            yield scenario.model_copy(update={"model": replies[:i] + replies[i + 1:]})
    faults = list(scenario.faults)
    for i in range(len(faults)):
        yield scenario.model_copy(update={"faults": faults[:i] + faults[i + 1:]})


def _replay(
    drive: Drive, scenario: Scenario, *, invariants: Sequence[str], seed: int, network: NetworkPolicy, limits: Limits,
) -> Reduced | None:
    """One run of the loop on ``scenario``, checked; None when the run could not be checked (its script ran out,
    the loop used simloop wrongly): such a cut is not kept."""
    try:
        with Sim(scenario, seed=seed, network=network, limits=limits) as sim:
            sim.run(drive)
        report: Report = sim.check(invariants=invariants)
    except Exception:  # noqa: BLE001 (a candidate the loop cannot run is one not to keep; the shrunk failure stands)
        return None
    return Reduced(scenario, sim, report)
