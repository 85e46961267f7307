"""`verify`, `property` and `replay`: property-test a loop, as a search or as a plain Hypothesis test; re-run a failure.

`verify(drive)` runs the loop in a fresh `Sim` per Hypothesis example.  The
model's replies and the tool faults are drawn as the loop asks (see
`simloop.generated`), the invariants are checked, and on failure Hypothesis
shrinks the run; the minimal one is written as a v1 scenario file and raised
as `InvariantViolation` with its timeline and the line that replays it.  It is
a thin function: its arguments become a `World` (what each run is made of) and
a `Search` (how the runs are searched), and a `Campaign` runs them (see
`simloop._campaign`).

`property(drive)` is the same search as one plain Hypothesis test (``@given``) that pytest runs, HypoFuzz fuzzes
and an example database feeds, raising the same report.

`replay(drive, path)` re-runs such a file and re-checks it, so a failure
becomes a regression test by committing the file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from hypothesis import settings as Settings
from hypothesis import strategies as st

from simloop._campaign import Campaign, Search, World
from simloop._campaign.failure import not_routed, not_wired, replay_line
from simloop._campaign.schedule import CHUNK as _CHUNK  # read at each call: a test may lower it to see chunks
from simloop._campaign.schedule import FIRST_ROUND as _FIRST_ROUND  # noqa: F401 - imported from here by tests
from simloop._campaign.schedule import chunks as _chunks  # noqa: F401
from simloop._campaign.schedule import schedule as _schedule  # noqa: F401
from simloop._campaign.schedule import split as _split  # noqa: F401
from simloop._campaign.schedule import test_settings
from simloop._campaign.search import DEFAULT_OUT, REDIS_TIMEOUT_S, example_database, invariant_ids
from simloop._campaign.world import DEFAULT_TASK, FOLLOWUPS
from simloop._claims import Claims, limit_names, other_wire, skip_reason
from simloop._offer import ServerTools
from simloop._runtime.netguard import NetworkPolicy
from simloop.errors import InvariantViolation, UsageError
from simloop.invariants import Report, Violation
from simloop.outcome import Outcome
from simloop.scenario import LIMIT_NAMES, Limits, Scenario, ToolSpec, load_scenario
from simloop.sim import Drive, Sim
from simloop.strategies import Plan
from simloop.timeline import render_timeline

__all__ = [
    "DEFAULT_TASK", "FOLLOWUPS", "REDIS_TIMEOUT_S", "example_database", "leftovers_problem", "not_routed", "not_wired",
    "property", "replay", "unreached_model", "verify",
]


def verify(
    drive: Drive, *, tools: Sequence[ToolSpec | dict[str, Any]] | None = None,
    limits: Limits | dict[str, Any] | None = None, max_examples: int = 200, seed: int | None = None,
    invariants: Iterable[str] | None = None, task: str = DEFAULT_TASK, plan: st.SearchStrategy[Plan] | None = None,
    out_dir: str | Path = DEFAULT_OUT, settings: Settings | None = None,
    recorded: str | Path | Any = None, turns: int = 1, abort: bool = False, restarts: int = 0, workers: int = 1,
    database: str | Path | Any = None, network: NetworkPolicy = "block", server_tools: ServerTools = "request",
    approvals: bool = False, context: bool = False, prices: Mapping[str, Any] | None = None,
) -> Report:
    """Property-test ``drive`` under generated model behaviours, API faults, tool faults, latencies and timings.

    ``drive`` (sync or ``async def``) runs the loop in the `Sim` it is given and returns an `Outcome`.  Each run is
    a fresh Sim whose world Hypothesis draws as the loop asks.  What each run is made of:

    * ``tools`` (default: a read ``search`` and a write ``send_email``), the user's ``task``, and the ``limits`` the
      loop declares (``max_steps``, ``deadline_s``, ``max_total_tokens`` and the stop policies ``max_tool_errors``,
      ``max_writes``, ``max_repeats``: see `simloop.Limits`), to which the ``limits`` invariant holds it;
    * ``plan``: a strategy of model behaviours (`simloop.strategies.plans`) for the whole budget; by default the
      budget is split over `simloop.strategies.stages`, interleaved so that every kind of run (faults, outages,
      stuck models, slow and heavy runs, long histories) comes within the first ~20 examples at any budget;
    * ``recorded``: a cassette (a path or a `simloop.cassettes.Recording`) whose real replies, tools and task are
      kept and faulted; a failure shrinks to "the recording, plus these faults";
    * ``turns``: one to that many user turns a run, through one history (docs/design.md, Conversations); ``abort``: the
      user's Stop, pressed once a run at a drawn point (Abort); ``restarts``: up to that many process deaths a run on
      drawn writes, the drive run again with ``sim.store`` kept (Crash and restart); ``approvals``: the loop asks
      ``sim.approve`` before each call that needs a person's yes, and a person who approves, denies, answers late or is
      away is drawn each run (Approvals); ``context``: the loop claims it keeps every request inside the model's context
      window (it trims, summarizes or compacts), so a request the API refuses as too long is a violation (Claims);
      without it, a run whose history outgrows the window may end with the API's 400 and an honest ``error``.
    * ``prices``: what the loop prices its replies at for a declared ``max_cost_usd`` (model name, name prefix or
      ``"*"`` -> a `simloop.pricing.Price` or ``{input, output, cache_write, cache_read}`` in USD per million tokens),
      over `simloop.pricing.PRICES`: ``limits`` counts the cost as the loop does; a saved failure keeps them.
    * ``server_tools``: whether the model runs server tools (``server_tool_use`` blocks, ``pause_turn``):
      ``"request"`` (the default) only when the request declares one, ``"on"`` whatever it declares (its declared
      kind, else ``web_search``: for server tools added on the way, e.g. by a gateway), ``"off"`` never (the
      staged budget is kept; ``plan=`` is not needed).

    How the runs are searched: ``max_examples`` of them (as Hypothesis runs of at most a hundred, so memory stays
    flat), the same ones in the same order for a ``seed``, from the Hypothesis ``settings`` given (default: the
    loaded profile's); ``invariants``: the ids checked (default: all; docs/design.md, Invariants); ``out_dir``:
    where the minimal failing scenario is written; ``workers``: processes sharing the budget, and ``database``:
    the example database, a directory or a ``redis://`` URL (Campaigns); ``network``: ``"block"`` (a connection or
    host-name lookup from the loop fails the run), ``"loopback"`` (this machine only) or ``"allow"``.  Returns a
    `Report` (``violations`` empty) when every run holds.

    Raises:
        InvariantViolation: with ``.violations``, ``.scenario`` (minimal), ``.scenario_path``, ``.timeline``,
            ``.replay`` and ``.examples_before_failure`` (the examples that passed before the first failing one).
        UsageError: an argument is wrong, or no run reached the model or a tool (the drive is not wired to the Sim),
            or every tool the loop ran is one ``tools`` does not declare (the loop has tools of its own: declare them).

    Example::

        simloop.verify(drive, limits=simloop.Limits(max_steps=10), max_examples=100)
    """
    return _campaign("verify", drive, tools=tools, limits=limits, max_examples=max_examples, seed=seed,
                     invariants=invariants, task=task, plan=plan, out_dir=out_dir, settings=settings, recorded=recorded,
                     turns=turns, abort=abort, restarts=restarts, workers=workers, database=database, network=network,
                     server_tools=server_tools, approvals=approvals, context=context, prices=prices).run()


#: A plain Hypothesis test of a loop, as `property` returns it (it takes no arguments: ``@given`` draws them).
PropertyTest = Callable[[], None]


@overload
def property(drive: Drive, /, **options: Any) -> PropertyTest: ...
@overload
def property(drive: None = None, /, **options: Any) -> Callable[[Drive], PropertyTest]: ...
def property(drive: Drive | None = None, /, **options: Any) -> PropertyTest | Callable[[Drive], PropertyTest]:
    """``verify(drive, **options)`` as a plain Hypothesis test: ``@given`` over the same example, the same report.

    Assign it to a ``test_`` name (or put ``@simloop.property(...)`` on the drive) and pytest runs it like any
    Hypothesis test: the loaded profile and ``--hypothesis-seed`` apply, ``@settings(...)`` can be applied on top,
    the example database (the profile's, or ``database=``: a directory or a ``redis://`` URL) replays its saved
    failures first and keeps the ones it finds, and ``hypothesis fuzz`` (HypoFuzz) can fuzz it for hours, saving
    what it finds to that database for the next CI run to replay first.

    The options are `verify`'s.  ``max_examples`` left out is the profile's; ``workers`` is 1 (a test runs in one
    process: ``hypothesis fuzz`` spreads one over many); ``seed`` also fixes Hypothesis's seed (and so, as any
    ``@seed``, leaves the database out).  Under simloop's pytest plugin the test's database key is its pytest
    node id, the one HypoFuzz uses, and a ``@settings`` applied on top keeps the deadline off.

    Returns the test (or, called without a drive, a decorator that makes one of the drive it decorates).

    Raises (when the test runs):
        InvariantViolation: as `verify` raises it: the violations, the minimal scenario written under ``out_dir``,
            the timeline of the failing run and the line that replays it.
        UsageError: an option is wrong (raised at once), or the first runs (ten, or the budget if smaller) proved
            nothing: none reached the model or a tool (the drive is not wired to the Sim).

    Example::

        test_my_loop = simloop.property(drive, limits=simloop.Limits(max_steps=10), max_examples=100)
    """
    if drive is None:
        return lambda decorated: property(decorated, **options)
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise UsageError(
            f"property(drive, {', '.join(f'{k}=...' for k in unknown)}): not an option; the options are verify's: "
            + ", ".join(_OPTIONS)
        )
    max_examples = options.pop("max_examples", None)
    campaign = _campaign("property", drive, max_examples=max_examples or 0, **options)
    test: Any = campaign.as_test(max_examples=max_examples)
    name = getattr(drive, "__name__", "drive")  # how pytest's and Hypothesis's reports name the test
    test.__name__ = test.__qualname__ = test.hypothesis.inner_test.__name__ = test.hypothesis.inner_test.__qualname__ = name
    test.simloop_drive = drive  # what a replay line naming this test runs (`simloop run --drive module:test_x`)
    test._simloop_settle = lambda nodeid: _settle(test, nodeid)  # called by the pytest plugin as it collects it
    return test  # type: ignore[no-any-return]


#: `verify`'s options (and so `property`'s), by name.
_OPTIONS = (
    "tools", "limits", "max_examples", "seed", "invariants", "task", "plan", "out_dir", "settings", "recorded",
    "turns", "abort", "restarts", "workers", "database", "network", "server_tools", "approvals",
    "context", "prices",
)


def _campaign(
    name: str, drive: Drive, *, tools: Sequence[ToolSpec | dict[str, Any]] | None = None,
    limits: Limits | dict[str, Any] | None = None, max_examples: int = 200, seed: int | None = None,
    invariants: Iterable[str] | None = None, task: str = DEFAULT_TASK, plan: st.SearchStrategy[Plan] | None = None,
    out_dir: str | Path = DEFAULT_OUT, settings: Settings | None = None,
    recorded: str | Path | Any = None, turns: int = 1, abort: bool = False, restarts: int = 0, workers: int = 1,
    database: str | Path | Any = None, network: NetworkPolicy = "block", server_tools: ServerTools = "request",
    approvals: bool = False, context: bool = False, prices: Mapping[str, Any] | None = None,
) -> Campaign:
    """The `Campaign` of ``name`` (`verify` or `property`) with these options, checked."""
    if not callable(drive):
        raise UsageError(f"{name}(drive): drive must be a function taking a Sim, got {drive!r}")
    search = Search.of(
        max_examples=max_examples, seed=seed, invariants=invariants, out_dir=out_dir, settings=settings,
        network=network, workers=workers, database=database, chunk=_CHUNK,
    )
    world = World.of(
        drive, tools=tools, limits=limits, task=task, plan=plan, recorded=recorded, turns=turns, abort=abort,
        restarts=restarts, server_tools=server_tools, approvals=approvals, context=context, prices=prices,
    )
    return Campaign(drive, world, search)


def _settle(test: Any, nodeid: str) -> None:
    """What simloop's pytest plugin does to a `property` test it collects (in ``pytest`` and ``hypothesis fuzz``).

    The database key becomes the node id, as HypoFuzz makes it: a failure saved by ``hypothesis fuzz`` is then
    replayed by pytest first.  A ``@settings`` applied on top replaced the test's settings: simloop's part of
    them (no deadline, no explain phase, its health checks off: `schedule.test_settings`) is put back.
    """
    test.hypothesis.inner_test._hypothesis_internal_add_digest = nodeid.encode()
    test._hypothesis_internal_use_settings = test_settings(test._hypothesis_internal_use_settings)


def replay(
    drive: Drive,
    path: str | Path,
    *,
    seed: int = 0,
    invariants: Iterable[str] | None = None,
    allow_functions: bool = False,
    network: NetworkPolicy = "block",
    abort: bool | None = None,
    restarts: int | None = None,
    turns: int | None = None,
    limits: Limits | Mapping[str, Any] | Iterable[str] | None = None,
    approvals: bool | None = None,
    context: bool | None = None,
) -> Report:
    """Re-run a saved scenario and re-check it; raises `InvariantViolation` if the loop still breaks it.

    The file's ``expect: {violations: [...]}`` lists violations that are expected
    (a documented known bug): those do not fail the replay, any other does, and
    so does an expected one that no longer happens; ``expect: {reason: ...}``
    must match the reason the loop gives.  Unless the file says ``strict: false``,
    a scripted reply never served or a scripted fault that never fired fails the
    replay too (the file would prove nothing).  ``allow_functions=True`` lets the
    file's tool ``function:`` paths name functions of your own modules
    (docs/security.md); ``network`` is `Sim`'s.

    ``abort``, ``restarts``, ``turns``, ``context`` and ``limits`` say what the loop has, with `verify`'s names: a
    Stop button (``abort=True``), a store it resumes from after a crash (``restarts >= 1``), follow-up turns
    (``turns >= 2``), context management (``context=True``), a permission gate wired to ``sim.approve``
    (``approvals=True``), the stop policies it honours as ``sim.limits`` declares them (``limits``: names, or a
    `Limits` whose declared fields count).  A file that needs one of them (its ``requires:``, see
    `Scenario.needs`) that the loop does not have is not run: the returned report's ``skipped`` says why and
    what to pass.  Left out (None), the file's need is taken as met: you chose to replay this file.

    Example::

        simloop.replay(drive, "scenarios/one-write.yaml", abort=False, limits=["max_steps"])  # skipped: a write budget
    """
    scenario = load_scenario(path, allow_functions=allow_functions)
    unclaimed = _claims(
        abort=abort, restarts=restarts, turns=turns, context=context, limits=limits, approvals=approvals,
    ).missing(scenario, path)
    if unclaimed:
        reason = skip_reason(scenario, unclaimed, surface="python")
        return Report(violations=[], checked=tuple(invariant_ids(invariants)), skipped=reason)
    with Sim(scenario, seed=seed, network=network, allow_functions=allow_functions) as sim:
        outcome = sim.run(drive)
    elsewhere = other_wire(scenario, sim.transcript.requests)
    if elsewhere:
        return Report(violations=[], checked=tuple(invariant_ids(invariants)), skipped=elsewhere)
    report: Report = sim.check(invariants=invariants)
    unexpected, problems = _mismatches(sim, report, outcome)
    if unexpected or problems:
        raise _replay_failed(
            drive, path, scenario, sim, report, unexpected, problems, seed=seed, allow_functions=allow_functions,
        )
    return report


def _replay_failed(
    drive: Drive, path: str | Path, scenario: Scenario, sim: Sim, report: Report, unexpected: list[Violation],
    problems: list[str], *, seed: int, allow_functions: bool,
) -> InvariantViolation:
    """`replay`'s failure: the violations it did not expect and the file's other problems, with the timeline of the
    run (of ``scenario``, the file as loaded) and the line that replays it again."""
    timeline = render_timeline(sim.transcript, report.violations)
    broke = f" the loop broke {len(unexpected)} invariant(s)" if unexpected else ""
    lines = [f"replaying {path}:{broke}"]
    lines += [f"  {v}" for v in unexpected] + [f"  {p}" for p in problems] + ["", "timeline:", timeline]
    return InvariantViolation(
        "\n".join(lines), violations=unexpected, scenario=scenario, scenario_path=str(path), timeline=timeline,
        replay=replay_line(drive, str(path), seed, allow_functions=allow_functions, scenario=scenario),
        transcript=sim.transcript,
    )


def _claims(
    *, abort: bool | None, restarts: int | None, turns: int | None, context: bool | None,
    limits: Limits | Mapping[str, Any] | Iterable[str] | None, approvals: bool | None = None,
) -> Claims:
    """What `replay`'s caller says the loop has; what is left out (None) is taken as there."""
    return Claims(
        abort=True if abort is None else bool(abort),
        restarts=1 if restarts is None else restarts,
        turns=2 if turns is None else turns,
        context=True if context is None else bool(context),
        limits=frozenset(LIMIT_NAMES) if limits is None else limit_names(limits, where="replay(limits=...)"),
        approvals=True if approvals is None else bool(approvals),
    )


def _mismatches(sim: Sim, report: Report, outcome: Outcome) -> tuple[list[Violation], list[str]]:
    """How a replay differs from its file: the violations it does not expect, and the other problems, each a line."""
    scenario, expect = sim.scenario, sim.scenario.expect
    expected = set(expect.violations) if expect else set()
    unexpected = [v for v in report.violations if v.invariant not in expected]
    problems = []
    missing = expected - {v.invariant for v in report.violations}
    if missing:
        problems.append(f"expected but did not happen: {', '.join(sorted(missing))} (update the file's expect: block)")
    if expect is not None and not expect.allows(outcome.reason):
        problems.append(
            f"the loop stopped with reason {outcome.reason!r}; the file expects {expect.reason_text()} "
            "(if this reason is honest here too, add it to the file's expect: reason: list)"
        )
    unreached = unreached_model(sim)
    if unreached:
        problems.append(unreached)
    problems += leftovers_problem(sim.leftovers() if scenario.strict else [])
    return unexpected, problems


# -- runs that never reach the model, and leftovers ------------------------------------------------------


def unreached_model(sim: Sim) -> str | None:
    """Why a scenario run proves nothing when its loop made no model call although the file scripts replies."""
    if sim.server.calls or not sim.scenario.model:
        return None
    n = len(sim.scenario.model)
    return "[unreached] " + not_wired(
        f"the scenario scripts {n} repl{'y' if n == 1 else 'ies'} but the loop made no model call to the simulated API"
    )


def leftovers_problem(leftovers: Sequence[str]) -> list[str]:
    """The strict-file failure, one line: what the file scripted that the run never used, and the way out."""
    if not leftovers:
        return []
    return [(
        f"[strict] the run left scripted behaviour unused: {'; '.join(leftovers)}. A scenario file tests something "
        "only if what it scripts happens: trim the script, or add 'strict: false' to the file if leftovers are "
        "the point"
    )]
