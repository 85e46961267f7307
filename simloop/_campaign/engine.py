"""`Campaign`: one `simloop.verify`, run: the schedule of Hypothesis runs, one example a run, and the verdict.

A campaign is a drive, a `World` (what each run is made of) and a `Search` (how the runs are searched).  It
runs the world's stages as the schedule's chunks, each a Hypothesis test whose example draws one run's world,
plays it in a fresh `Sim`, checks the invariants and tallies what the run showed; the first failure is
shrunk by Hypothesis and reported as a `Failure`.  With several workers, each process runs a campaign of
its own on its share of the budget (`simloop._workers`).  `Campaign.as_test` gives the same example as one plain
Hypothesis test instead (`simloop.property`), for pytest, HypoFuzz and a shared example database to run.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import unittest
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hypothesis import Phase, given
from hypothesis import core as hypothesis_core
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import Flaky
from hypothesis.internal.reflection import function_digest

from simloop._campaign.failure import Failure, not_routed, not_wired, undeclared
from simloop._campaign.reduce import reduce
from simloop._campaign.schedule import Chunk, Stage, chunk_settings, derived_seed, fixed_seed, schedule, test_settings
from simloop._campaign.search import Search
from simloop._campaign.world import Run, World
from simloop._runtime.heap import ours_to_freeze
from simloop._runtime.stack import on_fresh_stack
from simloop._workers import Share, on_failure, on_run, run_workers
from simloop.errors import UsageError
from simloop.generated import Draw
from simloop.invariants import Report
from simloop.sim import Drive, Sim
from simloop.transcript import Response, ToolStart

__all__ = ["PLAIN_STAGE", "WIRING_CHECK", "Campaign", "Tally"]

#: The stage name in a plain test's database key (`Campaign.as_test`): its one strategy holds every stage's plans.
PLAIN_STAGE = "property"
#: The runs after which a plain test whose runs proved nothing fails (`verify` says so at its end; a plain test,
#: run example by example by pytest or HypoFuzz, has no end to say it at).
WIRING_CHECK = 10


class _Failed(Exception):
    """Raised inside an example so that Hypothesis shrinks it; its message lists the run's violations, which is
    what a fuzzer that keeps the traceback of any failing example (HypoFuzz) shows."""


@dataclass
class Tally:
    """What a campaign's runs showed so far: how many ran, reached the model, asked for tools, ran one, ran one
    the world declares (and the undeclared ones run, by name), and the last failure (with the number of the first
    failing example: shrinking runs more after it)."""

    examples: int = 0
    reached: int = 0
    asked: int = 0
    ran: int = 0
    known: int = 0
    unknown: Counter[str] = dataclasses.field(default_factory=Counter)
    declared: tuple[str, ...] = ()
    first_failure: int | None = None
    failure: Failure | None = None

    def done(self) -> int:
        """How many runs finished so far."""
        return self.examples

    def count(self, sim: Sim) -> None:
        """Add a finished run."""
        self.examples += 1
        if sim.server.calls:
            self.reached += 1
        asked = False
        starts: list[ToolStart] = []
        for e in sim.transcript.events:  # (one walk, after every run)
            if isinstance(e, ToolStart):
                starts.append(e)
            elif not asked and isinstance(e, Response) and e.tool_uses:
                asked = True
        if asked:
            self.asked += 1  # the model asked for a tool: did any execution reach the ledger?
        if starts:
            self.ran += 1
            names = {t.name for t in sim.scenario.tools}
            if any(s.tool in names for s in starts):
                self.known += 1
            elif not self.known:  # (the names are for the message, which only a campaign with none known gives)
                self.unknown.update(s.tool for s in starts)
                self.declared = tuple(t.name for t in sim.scenario.tools)

    def problem(self, name: str, *, by: str = "verify") -> str | None:
        """Why the runs of drive ``name`` (run ``by`` verify or a plain test) proved nothing, if they did not: none
        reached the model or a tool."""
        if self.examples and not self.reached:
            return not_wired(
                f"{by} ran {self.examples} example(s) of {name} and not one made a model call to the simulated API"
            )
        if self.asked and not self.ran:
            return not_routed(
                f"in {self.asked} of the {self.examples} example(s) of {name} the model asked for tools, and not one "
                "tool execution reached simloop's ledger"
            )
        return self.undeclared(name)

    def undeclared(self, name: str) -> str | None:
        """Why the runs of drive ``name`` tested none of the loop's tools, if so: every tool it ran was undeclared."""
        if not self.ran or self.known:
            return None
        ran = sorted(self.unknown)[:6]
        return undeclared(
            f"in {self.ran} of the {self.examples} example(s) of {name} the loop ran tools", ran, self.declared
        )


class Campaign:
    """One search of a drive's loop: the world it draws, the schedule it runs, the failure it reports.

    Example::

        Campaign(drive, World.of(drive, ...), Search.of(...)).run()
    """

    def __init__(self, drive: Drive, world: World, search: Search) -> None:
        self.drive = drive
        self.world = world
        self.search = search
        self.tally = Tally()
        self.plain: Callable[[], None] | None = None  # the test `as_test` made, which reports its own failure
        self._unwired: str | None = None  # in a plain test, once checked: why its runs prove nothing ("" if they do)

    def run(self) -> Report:
        """Search, in this process or over ``search.workers`` processes: the `Report` when every run holds.

        Raises:
            InvariantViolation: the minimal failing run, written as a scenario file (see `Failure`).
            UsageError: no run reached the model, or none of the tools the model asked for, or every tool the loop
                ran was undeclared (also instead of a failure found meanwhile: it would blame the declaration).
        """
        if self.search.workers > 1:
            return run_workers(self.drive, self.shares())
        stages = self.world.stages(self.search.max_examples)
        replayed = self.search.replays_saved()
        with _heap_frozen():
            if replayed:
                self._replay_saved(stages)
            self._search(stages, replayed=replayed)
        problem = self.tally.problem(self.world.name)
        if problem is not None:
            raise UsageError(problem)
        return Report(violations=[], checked=self.search.invariants, examples=self.tally.examples)

    def shares(self) -> list[Share]:
        """The campaign split over its workers: each a campaign of its own, with its share and a seed of its own."""
        workers, budget, seed = self.search.workers, self.search.max_examples, self.search.seed
        out = []
        for i in range(workers):
            size = budget // workers + (1 if i < budget % workers else 0)
            if size < 1:
                continue
            mine = derived_seed(seed, "worker", i) if seed is not None else None
            search = dataclasses.replace(self.search, max_examples=size, seed=mine, workers=1)
            out.append(Share(index=i, examples=size, seed=mine, search=Campaign(self.drive, self.world, search).run))
        return out

    def as_test(self, *, max_examples: int | None = None) -> Callable[[], None]:
        """The campaign as one plain Hypothesis test, made of the same example as its chunks (`simloop.property`).

        Its one strategy holds every stage's plans (`World.strategy`); its settings are the search's, with
        ``max_examples`` when given (else the profile's) and without what a loop's run cannot keep to (see
        `schedule.test_settings`); set on the test, not applied, so a ``@settings`` can still be applied on top.
        Its runs replay the database's saved failures first (Hypothesis's reuse phase), save the failures
        they find, and the final run of the shrunk failure raises its `InvariantViolation` report.
        """
        if self.search.workers > 1:
            raise UsageError(
                f"property(workers={self.search.workers}): a plain Hypothesis test runs in one process; run it on "
                "many machines with `hypothesis fuzz` sharing one database, or use simloop.verify(drive, workers=N) "
                "on one machine"
            )
        example = self._example(self.world.strategy(), self.world.key(PLAIN_STAGE, self.search.invariants))
        test: Any = given(st.data())(example)
        test._hypothesis_internal_use_settings = test_settings(self.search.settings, max_examples)
        if self.search.seed is not None:  # (as with any @seed, Hypothesis leaves its database out of seeded runs)
            test = hypothesis_seed(self.search.seed)(test)
        self.plain = test
        return test  # type: ignore[no-any-return]

    # -- the schedule ----------------------------------------------------------------------------------

    def _replay_saved(self, stages: Sequence[Stage]) -> None:
        """Replay every stage's saved failures before any stage searches, so what was found anywhere (a campaign's
        other workers, another machine sharing the database) is tried first."""
        base = self.search.settings
        phases = [p for p in base.phases if p in (Phase.reuse, Phase.shrink)]
        for stage in stages:
            example = self._example(stage.strategy, self.world.key(stage.name, self.search.invariants))
            saved = Settings(chunk_settings(base, self.search.chunk, first=True), phases=phases)
            try:
                self._hypothesis(saved(_given(example)))
            except unittest.SkipTest:  # Hypothesis's way of saying this stage has nothing saved to replay
                pass

    def _search(self, stages: Sequence[Stage], *, replayed: bool) -> None:
        """Run the schedule's chunks; a stage whose chunk ran short (its space exhausted) gets no more."""
        collected_at = 0  # tally.examples when the last finished runs were collected
        exhausted: set[str] = set()
        done = self.tally.done
        for chunk in schedule(stages, self.search.max_examples, done, exhausted, cap=self.search.chunk):
            if self.tally.examples - collected_at >= self.search.chunk:
                # a finished Hypothesis run is freed only by a full collection (its engine sits in reference
                # cycles through the frames its tracebacks keep), which CPython runs ever more rarely as the
                # heap grows: without this, the finished runs of a long budget pile up
                gc.collect()
                collected_at = self.tally.examples
            before = self.tally.examples
            self._hypothesis(self._chunk_test(chunk, first=chunk.number == 0 and not replayed))
            if self.tally.examples - before < chunk.size:
                exhausted.add(chunk.stage)  # its space ran out (or its phases generate nothing): more repeats it

    def _chunk_test(self, chunk: Chunk, *, first: bool) -> Callable[[], None]:
        """One chunk as a Hypothesis test: its settings, its database key, and its seed."""
        base, seed = self.search.settings, self.search.seed
        digest = self.world.key(chunk.stage, self.search.invariants)
        test: Callable[[], None] = chunk_settings(base, chunk.size, first=first)(
            _given(self._example(chunk.strategy, digest))
        )
        if seed is not None:  # (as with any @seed, Hypothesis leaves its database out of seeded runs)
            test = hypothesis_seed(seed if chunk.number == 0 else derived_seed(seed, chunk.stage, chunk.number))(test)
        elif chunk.number > 0 and (root := fixed_seed(base, digest)) is not None:
            # every chunk would repeat the first; hypothesis.seed would also turn the database off, which
            # derandomize (with a database given) keeps on, so the seed is set as it sets it, minus that
            derived = derived_seed(root, chunk.stage, chunk.number)
            test._hypothesis_internal_use_seed = derived  # type: ignore[attr-defined]
        return test

    def _hypothesis(self, test: Callable[[], None]) -> None:
        """Run one Hypothesis test; its shrunk failure is raised as the `InvariantViolation` that reports it."""
        try:
            on_fresh_stack(test)  # the engine and every example on stack space of their own (see _stack)
        except Flaky as flaky:
            if self.tally.failure is None:
                raise
            raise self.tally.failure.raised_flaky(
                self.drive, type(flaky).__name__, out_dir=self.search.out_dir, seed=self.search.seed,
                examples=self.tally.examples,
            ) from None
        except _Failed:
            if self.tally.failure is None:  # (the example that raised _Failed kept its failure first)
                raise
            problem = self.tally.undeclared(self.world.name)
            if problem is not None:  # the failure would blame the loop for the tools verify was not told of
                found = ", ".join(sorted({v.invariant for v in self.tally.failure.report.violations}))
                raise UsageError(f"{problem}. (The run that failed broke {found}; declare the tools, then verify again.)")
            raise self._reduced(self.tally.failure).raised(
                self.drive, out_dir=self.search.out_dir, seed=self.search.seed, examples=self.tally.examples
            ) from None

    def _reduced(self, failure: Failure) -> Failure:
        """The shrunk failure cut down as a script (`simloop._campaign.reduce`): what a stage kept and the failure
        does not need goes (a tool step before a refusal found in the tool-faults stage, say)."""
        found = reduce(
            self.drive, failure.scenario(self.drive), invariants=self.search.invariants,
            broken=frozenset(v.invariant for v in failure.report.violations),
            seed=self.search.seed if self.search.seed is not None else 0, network=self.search.network,
            limits=self.world.limits,
        )
        if found is None:
            return failure
        return dataclasses.replace(failure, report=found.report, sim=found.sim, script=found.scenario)

    # -- one example: one run ------------------------------------------------------------------------

    def _example(self, strategy: st.SearchStrategy[Any], digest: bytes) -> Callable[[st.DataObject], None]:
        """The body of a chunk's test: one run of a world drawn with ``strategy``'s plans, keyed by ``digest``."""

        # Hypothesis keys its example database (and seeds a derandomized run) by this function's source and the
        # digest: kept this small, the keys of saved failures change only with the world's key, not with the code
        def example(data: st.DataObject) -> None:
            __tracebackhide__ = True  # a failing plain test's traceback under pytest: simloop's report, not its frames
            self._run(data, strategy)

        example._hypothesis_internal_add_digest = digest  # type: ignore[attr-defined]
        return example

    def _run(self, data: st.DataObject, strategy: st.SearchStrategy[Any]) -> None:
        """Draw a world, play it in a fresh Sim, check it and tally it; a failing run raises for Hypothesis.

        In a search, the young garbage of the runs before is collected first (`_collect_young`): they are over,
        their objects freed, so the collection walks only what outlives them, instead of the live run that a
        collection started by the allocations in the middle of it would walk.
        """
        __tracebackhide__ = True
        _collect_young()
        on_run()  # in a campaign of several workers: stop when another one failed
        run = self.world.draw(_run_draw(data), strategy)
        sim = self._play(run)
        if run.faults.stopped is not None:
            raise run.faults.stopped  # Hypothesis's own stop, met in a tool execution (see GeneratedFaults)
        report: Report = sim.check(invariants=self.search.invariants)
        self.tally.count(sim)
        if not report.ok:
            self._failed(Failure(report, sim, run.model, run.faults))
        if self.plain is not None:
            self._check_wired(self.plain)

    def _play(self, run: Run) -> Sim:
        """The drive's run of the drawn world, in a fresh Sim."""
        seed = self.search.seed if self.search.seed is not None else 0
        with Sim(
            run.scenario, seed=seed, model=run.model, fault_source=run.faults, network=self.search.network,
            limits=self.world.limits,
        ) as sim:
            self.world.attach(run, sim)
            sim.run(self.drive)
        return sim

    def _failed(self, failure: Failure) -> None:
        """Keep a failing run (and the number of the first one), stop the other workers, and fail the example."""
        __tracebackhide__ = True
        if self.tally.first_failure is None:
            self.tally.first_failure = self.tally.examples
        on_failure()
        self.tally.failure = dataclasses.replace(failure, first=self.tally.first_failure)
        if self.plain is not None and current_build_context().is_final:  # a plain test's shrunk failure, run last
            # (no seed: its report's "re-run the search" line names verify's search; the test re-runs itself)
            raise self.tally.failure.raised(self.drive, out_dir=self.search.out_dir, seed=None,
                                            examples=self.tally.examples)
        raise _Failed("\n".join(str(v) for v in failure.report.violations))

    def _check_wired(self, test: Callable[[], None]) -> None:
        """In a plain test: once `WIRING_CHECK` runs (or the test's budget, if smaller) proved nothing, fail them."""
        if self._unwired is None:
            budget: int = getattr(test, "_hypothesis_internal_use_settings", self.search.settings).max_examples
            if self.tally.examples < min(WIRING_CHECK, budget):
                return
            self._unwired = self.tally.problem(self.world.name, by="simloop.property") or ""
        if self._unwired:  # (said as it was first found: the runs Hypothesis's shrinking adds prove nothing more)
            raise UsageError(self._unwired)


def _given(example: Callable[[st.DataObject], None]) -> Callable[[], None]:
    """``given(st.data())(example)`` with its example-database key computed once per digest in this process.

    Hypothesis keys a test's database by `function_digest` of its function (its source, read and tokenized
    with `inspect`, its signature and the digest `_example` adds), anew each time a test runs: `verify` runs
    one test per stage and chunk, and the source of `_example`'s function never changes in a process.  The
    key is the very one Hypothesis computes (so a saved failure replays as before); it is left to Hypothesis
    when a forced seed (``--hypothesis-seed``) turns the database off.
    """
    test: Any = given(st.data())(example)
    digest = getattr(example, "_hypothesis_internal_add_digest", None)
    if isinstance(digest, bytes) and getattr(hypothesis_core, "global_force_seed", None) is None:
        key = _DATABASE_KEYS.get(digest)
        if key is None:
            if len(_DATABASE_KEYS) >= 4096:  # (a long session's many worlds: a few bytes each, bounded anyway)
                _DATABASE_KEYS.clear()
            key = _DATABASE_KEYS[digest] = function_digest(example)
        test._hypothesis_internal_database_key = key
    return test  # type: ignore[no-any-return]


_DATABASE_KEYS: dict[bytes, bytes] = {}  # a world's digest -> its test's example-database key (see _given)


def _run_draw(data: st.DataObject) -> Draw:
    """How a run draws its replies and faults: straight from the example's choices.

    ``data.draw`` adds, per draw, a check that the strategy left the global ``random`` alone (two
    copies of its state) and a note for Hypothesis's printout of a falsifying example, which `verify`
    replaces with its own report: a good part of a reply's cost, paid on every reply of every run.
    ``data.conjecture_data`` is what ``data.draw`` draws from (Hypothesis keeps it "semi-stable");
    should it go, runs draw through ``data.draw``.
    """
    choices = getattr(data, "conjecture_data", None)
    draw = getattr(choices, "draw", None)
    if not callable(draw):
        draw = data.draw
    lock = threading.Lock()  # the choices are one sequence: a draw from a tool thread waits its turn

    def locked(strategy: st.SearchStrategy[Any]) -> Any:
        with lock:
            return draw(strategy)

    return locked


# Searches running in this process, whether the first of them froze the heap, the collector's thresholds it found
# (restored when the last one ends; None: none running), and the runs ended since (see `_collect_young`).
_FREEZE: dict[str, Any] = {"searches": 0, "froze": False, "thresholds": None, "runs": 0}
_FREEZE_LOCK = threading.Lock()
#: The young generation's threshold while a search runs: no collection in the middle of a run (a 10-call run
#: allocates some 1,000 objects that live as long as it does), and a runaway run's garbage is still collected.
YOUNG_THRESHOLD = 20_000
#: Every how many runs `_collect_young` collects the middle generation too (CPython's own ratio: its default
#: second threshold).
MIDDLE_EVERY = 10


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """What the heap held before the search left out of its garbage collections, and handed back after; and the
    young generation collected between runs rather than during them.

    A full collection walks every tracked object: with the SDK and pydantic loaded that is some 170k
    objects, 190 ms here, and a search runs one after every hundred examples (see `schedule.CHUNK`) besides
    CPython's own.  None of those objects is the search's garbage, so a search freezes them
    (`gc.freeze`) and `gc.unfreeze` returns them to the collector when the last search ends.  A process
    that froze its own heap keeps it as it is (what Python 3.12 keeps frozen of its own does not count:
    `simloop._runtime.heap`).

    CPython collects the young generation after every 700 net allocations: about once a run, in the middle of it,
    walking and promoting the run's live objects (its transcript, the parsed requests, the loop's history), some
    150 µs a run.  While a search runs that threshold is `YOUNG_THRESHOLD`, and each run starts with a collection
    of the young generation (every `MIDDLE_EVERY` runs, of the middle one too), when the runs before it have
    ended and their objects are freed: a run's cyclic garbage (a loop's exceptions, say) is collected when the
    next run starts, and cannot pile up over runs.  (The higher threshold alone, without the collection after each run, was tried
    before: it let a 10,000-example search's garbage pile up to 2.7 times the memory of a short one.)
    """
    with _FREEZE_LOCK:
        _FREEZE["searches"] += 1
        if _FREEZE["searches"] == 1:
            _FREEZE["froze"] = ours_to_freeze()
            if _FREEZE["froze"]:
                gc.freeze()
            young, *older = gc.get_threshold()
            if gc.isenabled() and 0 < young < YOUNG_THRESHOLD:  # (a process that tuned or disabled its own: as is)
                _FREEZE["thresholds"] = (young, *older)
                gc.set_threshold(YOUNG_THRESHOLD, *older)
    try:
        yield
    finally:
        with _FREEZE_LOCK:
            _FREEZE["searches"] -= 1
            if _FREEZE["searches"] == 0:
                if _FREEZE["froze"]:
                    gc.unfreeze()
                thresholds = _FREEZE["thresholds"]
                if thresholds is not None:
                    _FREEZE["thresholds"] = None
                    if gc.get_threshold()[0] == YOUNG_THRESHOLD:  # (unless the process set its own meanwhile)
                        gc.set_threshold(*thresholds)


def _collect_young() -> None:
    """Before a run of a search that raised the young threshold (`_heap_frozen`): collect the young generation, and
    every `MIDDLE_EVERY` runs the middle one, as CPython would have during the runs before."""
    if _FREEZE["thresholds"] is None:
        return
    _FREEZE["runs"] += 1
    gc.collect(1 if _FREEZE["runs"] % MIDDLE_EVERY == 0 else 0)
