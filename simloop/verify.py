"""`verify` and `replay`: property-test a loop, and re-run a saved failure.

`verify(drive)` runs the loop in a fresh `Sim` per Hypothesis example.  The
model's replies and the tool faults are drawn as the loop asks (see
`simloop.generated`), the invariants are checked, and on failure Hypothesis
shrinks the run; the minimal one is written as a v1 scenario file and raised
as `InvariantViolation` with its timeline and the line that replays it.

`replay(drive, path)` re-runs such a file and re-checks it, so a failure
becomes a regression test by committing the file.

A Hypothesis run keeps every example it tried (its cache of results and its
tree of choice sequences, some 20 KB an example here), so one long run grows
without bound; a long budget is therefore run as bounded chunks, each a fresh
Hypothesis run under the stage's database key with a seed derived from the
stage and the chunk number, and the finished runs are collected as it goes.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import re
import threading
import unittest
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, core, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from simloop._claims import Claims, claim_flags, limit_names, skip_reason
from simloop._runtime.netguard import NetworkPolicy, check_policy
from simloop._runtime.stack import on_fresh_stack
from simloop._workers import on_failure, on_run
from simloop.errors import InvariantViolation, UsageError
from simloop.generated import GeneratedFaults, GeneratedModel, to_scenario
from simloop.invariants import CATALOGUE, Report, Violation
from simloop.scenario import LIMIT_NAMES, Abort, Limits, Scenario, ToolSpec, load_scenario
from simloop.sim import Drive, Sim
from simloop.strategies import DEFAULT_TOOLS, Plan, stages
from simloop.timeline import render_timeline
from simloop.transcript import AbortEvent, Response, ToolStart

__all__ = ["DEFAULT_TASK", "FOLLOWUPS", "leftovers_problem", "not_wired", "replay", "unreached_model", "verify"]

DEFAULT_TASK = "The customer asks for a refund of order 1234. Check the policy, then email them the outcome."
#: The user's follow-up messages of a generated conversation (`verify(turns=N)`), in order.
FOLLOWUPS = (
    "Thanks. Did the customer get the email?",
    "Also check the shipping status of order 1234.",
    "Please summarise what you did for the ticket.",
    "One more thing: is the refund policy the same for gift cards?",
)
DEFAULT_OUT = Path(".simloop") / "failures"
# The most examples one Hypothesis run is given: its memory grows with every example it tries (the
# engine caches each result and records each choice sequence), so a longer stage runs as several
# chunks and a run of 10,000 examples peaks no higher than one of a few hundred.
_CHUNK = 100
REDIS_TIMEOUT_S = 5.0  # real seconds a redis:// database has to answer the PING made before a search


class _Failed(Exception):
    """Raised inside an example so that Hypothesis shrinks it."""


def verify(
    drive: Drive,
    *,
    tools: Sequence[ToolSpec | dict[str, Any]] | None = None,
    limits: Limits | dict[str, Any] | None = None,
    max_examples: int = 200,
    seed: int | None = None,
    invariants: Iterable[str] | None = None,
    task: str = DEFAULT_TASK,
    plan: st.SearchStrategy[Plan] | None = None,
    out_dir: str | Path = DEFAULT_OUT,
    settings: Settings | None = None,
    recorded: str | Path | Any = None,
    turns: int = 1,
    abort: bool = False,
    restarts: int = 0,
    workers: int = 1,
    database: str | Path | Any = None,
    network: NetworkPolicy = "block",
) -> Report:
    """Property-test ``drive`` under generated model behaviours, API faults, tool faults and latencies.

    Args:
        drive: the adapter (sync or ``async def``) that runs the loop in a `Sim` and returns an `Outcome`.
        tools: the tools the loop gets (default: a read ``search`` and a write ``send_email``).
        limits: the limits the loop declares, checked by the ``limits`` invariant: ``max_steps``, ``deadline_s``,
            ``max_total_tokens`` and the stop policies ``max_tool_errors`` (error budget), ``max_writes`` ("one
            write" is 1) and ``max_repeats`` (see `simloop.Limits`).
        max_examples: how many runs Hypothesis tries (a long budget is tried as several Hypothesis runs of
            at most a hundred examples, so memory stays flat however many are asked for).
        seed: makes the search deterministic (the same runs in the same order).
        invariants: ids to check (default: all 14; see docs/design.md, Invariants: stops, pairing, request_valid,
            no_rerun, truncation, refusal, honest_outcome, limits, tool_errors, no_work_after_return, crash,
            results_sent, results_together, abort).
        plan: a strategy of model behaviours (`simloop.strategies.plans(...)`) for the whole budget;
            by default the budget is split over `simloop.strategies.stages()`, so that every kind of
            run (faults, outages, stuck models, slow and heavy runs) is certainly tried; the stages are
            interleaved (each stage's first two examples run before any stage's rest), so every kind of run
            comes within the first ~20 examples at any budget.
        out_dir: where the minimal failing scenario is written.
        settings: Hypothesis settings to start from (default: the loaded profile, so its database,
            derandomize and verbosity apply).
        recorded: a cassette (path or `simloop.cassettes.Recording`): keep its real replies and let
            Hypothesis inject API errors, tool faults, latencies and cut-offs into them; a failure
            shrinks to "the recording, plus these faults".  Its tools and task are used.
        network: ``"block"`` (default): a real network connection or host-name lookup from the loop is
            blocked and fails the run (``stops``: the loop bypassed the simulator); ``"loopback"`` allows
            connections to this machine, for a loop that uses a local service; ``"allow"``: no guard.
        turns: the most user turns of a generated conversation: each run has one to ``turns`` turns (the task,
            then follow-ups in ``sim.user_turns``), each with a model behaviour of its own; the invariants hold
            over every request of the conversation, ``honest_outcome`` and ``limits`` per turn.  Shrinking
            removes turns.  The drive runs every turn through one history (see docs/design.md, Conversations).
        abort: each run presses the user's Stop once, at a drawn point (after a model call, while a tool runs,
            or at a virtual time): the ``abort`` invariant holds the loop to it (see docs/design.md, Abort).
        restarts: the process dies up to ``restarts`` times a run, each time on a drawn write execution (its
            effect committed, the result lost); simloop runs the drive again with ``sim.store`` kept, and the
            model asks again for what it never saw answered (see docs/design.md, Crash and restart).

    Returns a `Report` (``violations`` empty) when every example holds.

    Raises:
        InvariantViolation: with ``.violations``, ``.scenario`` (minimal), ``.scenario_path``,
            ``.timeline``, ``.replay`` and ``.examples_before_failure`` (the examples that passed before
            the first failing one).
        UsageError: when no example made a single model call (the drive is not wired to the Sim).

    Example::

        simloop.verify(drive, limits=simloop.Limits(max_steps=10), max_examples=100)
    """
    if not callable(drive):
        raise UsageError(f"verify(drive): drive must be a function taking a Sim, got {drive!r}")
    check_policy(network)
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise UsageError(f"verify(turns=...) is the most user turns of a conversation, an int >= 1; got {turns!r}")
    if turns > 1 and recorded is not None:
        raise UsageError("verify(turns=...) generates conversations; a recording has its own turns: leave turns=1")
    turn_counts = st.integers(1, turns)
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise UsageError(f"verify(restarts=...) is the most simulated process deaths a run, an int >= 0; got {restarts!r}")
    crash_points = st.frozensets(st.integers(1, 3), min_size=1, max_size=restarts) if restarts else None
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1):
        raise UsageError(f"verify(workers=...): a number of processes, 1 or more; got {workers!r}")
    if database is not None:
        settings = Settings(settings or Settings(), database=example_database(database))
    if workers > 1:
        from simloop._workers import run_workers

        return run_workers(verify, drive, {
            "tools": tools, "limits": limits, "max_examples": max_examples, "seed": seed, "invariants": invariants,
            "task": task, "plan": plan, "out_dir": out_dir, "settings": settings, "recorded": recorded,
            "turns": turns, "abort": abort, "restarts": restarts, "network": network,
        }, workers=workers, derived_seed=_derived_seed)
    specs = _tools(tools)
    declared = limits if isinstance(limits, Limits) else Limits.model_validate(limits or {})
    checked = _invariant_ids(invariants)
    state: dict[str, Any] = {"examples": 0, "reached": 0, "asked": 0, "ran": 0}
    run_seed = seed if seed is not None else 0
    base = Scenario(name=_name(drive), task=task, tools=specs, limits=declared)
    world: Any = None
    if recorded is not None:
        from simloop import cassettes

        kinds = {t.name: t.kind for t in specs} if tools is not None else None
        world = cassettes.load_recording(recorded, kinds=kinds)
        base = world.scenario.model_copy(update={"name": _name(drive), "limits": declared, "expect": None})
        specs = list(base.tools)
    if plan is not None:
        searches: list[tuple[str, st.SearchStrategy[Any], int]] = [("plan", plan, max_examples)]
    elif world is not None:
        searches = [("recording", cassettes.fault_plans(), max_examples)]
    else:  # the budget split over stages, each making one kind of run certain (see strategies.stages)
        searches = _split(max_examples, stages())
    base_settings = settings or Settings()

    def make_example(strategy: st.SearchStrategy[Any]) -> Callable[[st.DataObject], None]:
        def example(data: st.DataObject) -> None:
            on_run()  # in a campaign of several workers: stop when another one failed
            draw = _run_draw(data)
            scenario = base
            if turns > 1:  # drawn first: the shrinker lowers it to remove turns
                scenario = base.model_copy(update={"followups": _followups(draw(turn_counts) - 1)})
            if abort:
                scenario = scenario.model_copy(update={"abort": draw(_ABORT_POINTS)})
            chosen = draw(strategy)
            if world is not None:
                model: Any = cassettes.FaultedRecording(world, draw, chosen)
                faults = GeneratedFaults(draw, chosen.tool_plan, specs)
            elif turns > 1:
                model = GeneratedModel(draw, chosen, next_plan=strategy)
                faults = GeneratedFaults(draw, chosen, specs)
            else:
                model = GeneratedModel(draw, chosen)
                faults = GeneratedFaults(draw, chosen, specs)
            if crash_points is not None:
                faults.crash_at = draw(crash_points)
            with Sim(
                scenario, seed=run_seed, model=model, fault_source=faults, network=network, limits=declared
            ) as sim:
                faults.transcript = sim.transcript
                if crash_points is not None and isinstance(model, GeneratedModel):
                    model.lives = functools.partial(getattr, sim, "lives")
                if turns > 1:
                    model.turn = functools.partial(getattr, sim.user_turns, "started")
                sim.run(drive)
            if faults.stopped is not None:
                raise faults.stopped  # Hypothesis's own stop, met in a tool execution (see GeneratedFaults)
            report = sim.check(invariants=checked)
            state["examples"] += 1
            if sim.server.calls:
                state["reached"] += 1
            if any(r.tool_uses for r in sim.transcript.of(Response)):
                state["asked"] += 1  # the model asked for a tool: did any execution reach the ledger?
            if sim.transcript.of(ToolStart):
                state["ran"] += 1
            if not report.ok:
                state.setdefault("first_failure", state["examples"])  # (shrinking runs more after it)
                on_failure()
                state["failure"] = (report, sim, model, faults)
                raise _Failed(", ".join(sorted({v.invariant for v in report.violations})))

        return example

    def digest_of(stage: str) -> bytes:
        # the example database is keyed by this: the same loop, world and stage find their failures again
        source = world.source if world is not None else None
        return repr(
            (_name(drive), specs, declared, checked, task, source, stage)
            + ((turns,) if turns > 1 else ()) + (("abort",) if abort else ()) + ((restarts,) if restarts else ())
        ).encode()

    def run_test(test: Callable[[], None]) -> None:
        try:
            on_fresh_stack(test)  # the engine and every example on stack space of their own (see simloop._runtime.stack)
        except Flaky as flaky:
            if "failure" not in state:
                raise
            report, sim, model, faults = state["failure"]
            error = _violation(drive, report, sim, model, faults, out_dir=Path(out_dir), seed=seed,
                               first_failure=state.get("first_failure"))
            error.examples = state["examples"]
            raise InvariantViolation(
                f"{error}\n\nnote: this run broke the invariants once, and its replay did not (Hypothesis: "
                f"{type(flaky).__name__}); the loop's behaviour depends on more than the run's draws, e.g. "
                "identical tool calls run concurrently whose results simloop could not tell apart; pass each "
                "call's tool_use id (sim.run_tool(name, input, tool_use_id=block.id), the x-simloop-tool-use-id "
                "header, or _meta.tool_use_id over MCP) so that every execution is bound exactly",
                violations=error.violations, scenario=error.scenario, scenario_path=error.scenario_path,
                timeline=error.timeline, replay=error.replay, transcript=error.transcript,
                examples=state["examples"], examples_before_failure=error.examples_before_failure,
            ) from None
        except _Failed:
            report, sim, model, faults = state["failure"]
            error = _violation(
                drive, report, sim, model, faults, out_dir=Path(out_dir), seed=seed,
                first_failure=state.get("first_failure"),
            )
            error.examples = state["examples"]
            raise error from None

    # A shared database (a campaign's, another machine's) may hold a failure of any stage: every stage's saved
    # failures are replayed before any stage searches, so what was found anywhere is tried first.
    replayed = seed is None and base_settings.database is not None and Phase.reuse in base_settings.phases
    with _heap_frozen():
        if replayed:
            for stage, strategy, _ in searches:
                example = make_example(strategy)
                example._hypothesis_internal_add_digest = digest_of(stage)  # type: ignore[attr-defined]
                phases = [p for p in base_settings.phases if p in (Phase.reuse, Phase.shrink)]
                saved = Settings(_chunk_settings(base_settings, _CHUNK, first=True), phases=phases)
                try:
                    run_test(saved(given(st.data())(example)))
                except unittest.SkipTest:  # Hypothesis's way of saying this stage has nothing saved to replay
                    pass
        collected_at = 0  # state["examples"] when the last finished runs were collected
        exhausted: set[str] = set()
        for stage, strategy, n, size in _schedule(searches, max_examples, lambda: int(state["examples"]), exhausted):
            digest = digest_of(stage)
            if state["examples"] - collected_at >= _CHUNK:
                # a finished Hypothesis run is freed only by a full collection (its engine sits in reference
                # cycles through the frames its tracebacks keep), which CPython runs ever more rarely as the
                # heap grows: without this, the finished runs of a long budget pile up
                gc.collect()
                collected_at = state["examples"]
            example = make_example(strategy)
            example._hypothesis_internal_add_digest = digest  # type: ignore[attr-defined]
            test = _chunk_settings(base_settings, size, first=n == 0 and not replayed)(given(st.data())(example))
            if seed is not None:  # (as with any @seed, Hypothesis leaves its database out of seeded runs)
                test = hypothesis_seed(seed if n == 0 else _derived_seed(seed, stage, n))(test)
            elif n > 0 and (root := _fixed_seed(base_settings, digest)) is not None:
                # every chunk would repeat the first; hypothesis.seed would also turn the database off, which
                # derandomize (with a database given) keeps on, so the seed is set as it sets it, minus that
                test._hypothesis_internal_use_seed = _derived_seed(root, stage, n)  # type: ignore[attr-defined]
            before = state["examples"]
            run_test(test)
            if state["examples"] - before < size:
                exhausted.add(stage)  # the stage's space is exhausted (or its phases generate nothing): more only repeat it
    if state["examples"] and not state["reached"]:
        raise UsageError(not_wired(
            f"verify ran {state['examples']} example(s) of {_name(drive)} and not one made a model call to the "
            "simulated API"
        ))
    if state["asked"] and not state["ran"]:
        raise UsageError(not_routed(
            f"in {state['asked']} of the {state['examples']} example(s) of {_name(drive)} the model asked for "
            "tools, and not one tool execution reached simloop's ledger"
        ))
    return Report(violations=[], checked=tuple(checked), examples=state["examples"])


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

    ``abort``, ``restarts``, ``turns`` and ``limits`` say what the loop has, with `verify`'s names: a Stop
    button (``abort=True``), a store it resumes from after a crash (``restarts >= 1``), follow-up turns
    (``turns >= 2``), the stop policies it honours as ``sim.limits`` declares them (``limits``: names, or a
    `Limits` whose declared fields count).  A file that needs one of them (its ``requires:``, see
    `Scenario.needs`) that the loop does not have is not run: the returned report's ``skipped`` says why and
    what to pass.  Left out (None), the file's need is taken as met: you chose to replay this file.

    Example::

        simloop.replay(drive, "scenarios/one-write.yaml", abort=False, limits=["max_steps"])  # skipped: a write budget
    """
    scenario = load_scenario(path, allow_functions=allow_functions)
    claims = Claims(
        abort=True if abort is None else bool(abort),
        restarts=1 if restarts is None else restarts,
        turns=2 if turns is None else turns,
        limits=frozenset(LIMIT_NAMES) if limits is None else limit_names(limits, where="replay(limits=...)"),
    )
    unclaimed = claims.missing(scenario)
    if unclaimed:
        reason = skip_reason(scenario, unclaimed, surface="python")
        return Report(violations=[], checked=tuple(_invariant_ids(invariants)), skipped=reason)
    with Sim(scenario, seed=seed, network=network, allow_functions=allow_functions) as sim:
        outcome = sim.run(drive)
    report: Report = sim.check(invariants=invariants)
    expected = set(scenario.expect.violations) if scenario.expect else set()
    found = {v.invariant for v in report.violations}
    unexpected = [v for v in report.violations if v.invariant not in expected]
    missing = expected - found
    expect = scenario.expect
    wrong_reason = expect is not None and not expect.allows(outcome.reason)
    unreached = unreached_model(sim)
    leftovers = sim.leftovers() if scenario.strict else []
    if unexpected or missing or wrong_reason or unreached or leftovers:
        timeline = render_timeline(sim.transcript, report.violations)
        lines = [f"replaying {path}: the loop broke {len(unexpected)} invariant(s)" if unexpected else f"replaying {path}:"]
        lines += [f"  {v}" for v in unexpected]
        if missing:
            lines.append(f"  expected but did not happen: {', '.join(sorted(missing))} (update the file's expect: block)")
        if wrong_reason and expect is not None:
            lines.append(
                f"  the loop stopped with reason {outcome.reason!r}; the file expects {expect.reason_text()} "
                "(if this reason is honest here too, add it to the file's expect: reason: list)"
            )
        if unreached:
            lines.append(f"  {unreached}")
        lines += [f"  {line}" for line in leftovers_problem(leftovers)]
        lines += ["", "timeline:", timeline]
        raise InvariantViolation(
            "\n".join(lines), violations=unexpected, scenario=scenario, scenario_path=str(path), timeline=timeline,
            replay=_replay_line(drive, str(path), seed, allow_functions=allow_functions, scenario=scenario),
            transcript=sim.transcript,
        )
    return report


def example_database(database: str | Path | Any) -> Any:
    """Hypothesis's example database for ``database``: a directory path, a ``redis://`` URL or a database as is.

    A Redis URL uses Hypothesis's own ``RedisExampleDatabase`` (``hypothesis.extra.redis``; needs the
    ``redis`` package): a fleet of CI machines pointed at one server replays what each of them found.

    Checked before any search starts: a path must be a directory or creatable as one, and a Redis server
    must answer a PING within `REDIS_TIMEOUT_S` seconds; otherwise `UsageError` says what to fix.
    """
    from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

    if isinstance(database, ExampleDatabase):
        return database
    if isinstance(database, (str, Path)):
        text = str(database)
        if text.startswith(("redis://", "rediss://", "unix://")):
            return _redis_database(text)
        _check_directory(Path(text))
        return DirectoryBasedExampleDatabase(text)
    raise UsageError(
        f"database: give a directory, a redis:// URL or a hypothesis ExampleDatabase; got {type(database).__name__}"
    )


def _redis_database(url: str) -> Any:
    """A `RedisExampleDatabase` on ``url``, once its server answered a PING."""
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise UsageError(f"database {url!r} is a Redis URL, which needs the redis package: pip install redis") from None
    try:
        probe = redis.Redis.from_url(url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
        try:
            probe.ping()
        finally:
            probe.close()
    except (redis.RedisError, ValueError, OSError) as e:
        raise UsageError(
            f"database {url!r}: the Redis server did not answer ({type(e).__name__}: {e}); start it, or check the "
            "URL (redis://HOST:PORT/DB), or leave the database out to use the local .hypothesis/examples"
        ) from None
    return RedisExampleDatabase(redis.Redis.from_url(url))


def _check_directory(path: Path) -> None:
    """``path`` is a directory, or one can be made there (its nearest existing parent is a writable directory)."""
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError(f"database {str(path)!r} is a directory simloop cannot write to: give one you can write")
        return
    if path.exists():
        raise UsageError(
            f"database {str(path)!r} is a file, not a directory: give a directory (made if missing) or a redis:// URL"
        )
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"database {str(path)!r} cannot be made: {str(parent)!r} is not a directory simloop can write to; give a "
            "directory (made if missing) or a redis:// URL"
        )


# -- runs that never reach the model ------------------------------------------------------------------------


def not_wired(what: str) -> str:
    """The message for runs that never reached the simulated API (``what`` says which): how to wire a loop to the Sim."""
    return (
        f"{what}: the drive is probably not wired to the Sim, so nothing was tested. Build the loop's client from "
        "the Sim: sim.client (anthropic.Anthropic), sim.async_client (anthropic.AsyncAnthropic), or sim.http_client / "
        "sim.async_http_client for a framework that takes an httpx client; run the tools through sim.run_tool / "
        "sim.arun_tool. A client the loop builds itself (anthropic.Anthropic()) talks to the real API, not to simloop."
    )


def not_routed(what: str) -> str:
    """The message for runs whose model asked for tools that never ran through simloop (``what`` says which)."""
    return (
        f"{what}: the loop's tools are not routed through sim.run_tool, so nothing about them was tested (and the "
        "loop's own tools, real ones, may have run instead). Pass sim.run_tool (or await sim.arun_tool) to the loop "
        "as the function that runs a tool call, or point a loop in another language or process at the tools "
        "endpoint (POST $SIMLOOP_TOOLS_URL/NAME) or the MCP server (sim.mcp_server(), $SIMLOOP_MCP_URL)."
    )


def unreached_model(sim: Sim) -> str | None:
    """Why a scenario run proves nothing when its loop made no model call although the file scripts replies."""
    if sim.server.calls or not sim.scenario.model:
        return None
    n = len(sim.scenario.model)
    return "[unreached] " + not_wired(
        f"the scenario scripts {n} repl{'y' if n == 1 else 'ies'} but the loop made no model call to the simulated API"
    )


# -- helpers ------------------------------------------------------------------------------


def leftovers_problem(leftovers: Sequence[str]) -> list[str]:
    """The strict-file failure, one line: what the file scripted that the run never used, and the way out."""
    if not leftovers:
        return []
    return [(
        f"[strict] the run left scripted behaviour unused: {'; '.join(leftovers)}. A scenario file tests something "
        "only if what it scripts happens: trim the script, or add 'strict: false' to the file if leftovers are "
        "the point"
    )]



def _run_draw(data: st.DataObject) -> Callable[[st.SearchStrategy[Any]], Any]:
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


# Searches running in this process, and whether the first of them froze the heap.
_FREEZE: dict[str, Any] = {"searches": 0, "froze": False}
_FREEZE_LOCK = threading.Lock()


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """What the heap held before the search left out of its garbage collections, and handed back after.

    A full collection walks every tracked object: with the SDK and pydantic loaded that is some 170k
    objects, 190 ms here, and a search runs one after every hundred examples (see `_CHUNK`) besides
    CPython's own.  None of those objects is the search's garbage, so a search freezes them
    (`gc.freeze`) and `gc.unfreeze` returns them to the collector when the last search ends.  A process
    that froze its own heap keeps it as it is.  (A higher young-generation threshold was tried too: it
    made examples some 2% faster and let a 10,000-example search's garbage pile up to 2.7 times the
    memory of a short one.)
    """
    with _FREEZE_LOCK:
        _FREEZE["searches"] += 1
        if _FREEZE["searches"] == 1:
            _FREEZE["froze"] = gc.get_freeze_count() == 0
            if _FREEZE["froze"]:
                gc.freeze()
    try:
        yield
    finally:
        with _FREEZE_LOCK:
            _FREEZE["searches"] -= 1
            if _FREEZE["searches"] == 0 and _FREEZE["froze"]:
                gc.unfreeze()


def _violation(
    drive: Drive, report: Report, sim: Sim, model: Any, faults: GeneratedFaults, *, out_dir: Path,
    seed: int | None, first_failure: int | None = None,
) -> InvariantViolation:
    halted = sim.transcript.halt is not None
    scenario = to_scenario(
        name=f"{_name(drive)}-{report.violations[0].invariant}",
        task=sim.task,
        tools=sim.scenario.tools,
        limits=sim.limits,
        served=model.served,
        faults=faults.fired,
        halted=halted,
        followups=sim.scenario.followups[: max(sim.user_turns.started - 1, 0)],
        abort=sim.scenario.abort if sim.transcript.of(AbortEvent) else None,
    )
    path = out_dir / f"{_slug(scenario.name)}-{_short_hash(scenario)}.yaml"
    functions = any(t.function is not None for t in scenario.tools)  # named by import path: replay opts in
    header = _file_header(report.violations, functions=functions)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + scenario.to_yaml(), encoding="utf-8")
    timeline = render_timeline(sim.transcript, report.violations)
    replay_line = _replay_line(drive, str(path), sim.seed, allow_functions=functions, scenario=scenario)
    n = len(scenario.model)
    shape = f"{n} repl{'y' if n == 1 else 'ies'}"
    if scenario.then == "repeat_last":
        shape += ", then repeat_last"
    if scenario.faults:
        shape += f", {len(scenario.faults)} tool fault(s)"
    found_at = (
        f"first failing run: example {first_failure} of the search ({first_failure - 1} passed before it); "
        "then shrunk to the run below"
        if first_failure is not None else None
    )
    lines = [
        f"simloop found {len(report.violations)} violation(s) of the loop's invariants:",
        *(f"  {v}" for v in report.violations),
        *([found_at] if found_at else []),
        "",
        f"minimal scenario ({shape}), written to {path}:",
        *("  " + line for line in scenario.to_yaml().rstrip().splitlines()),
        "",
        "timeline of the failing run:",
        *("  " + line for line in timeline.splitlines()),
        "",
        f"replay it: {replay_line}",
    ]
    if seed is not None:
        lines.append(f"or re-run the search: simloop.verify(..., seed={seed})")
    return InvariantViolation(
        "\n".join(lines), violations=report.violations, scenario=scenario, scenario_path=str(path),
        timeline=timeline, replay=replay_line, transcript=sim.transcript,
        examples_before_failure=first_failure - 1 if first_failure is not None else None,
    )


def _file_header(violations: Sequence[Violation], *, functions: bool = False) -> str:
    out = ["# Found by simloop.verify: the minimal run that breaks the loop's invariants."]
    out += [f"#   {str(v)[:200]}" for v in violations]
    how = "simloop.replay(drive, this_file, allow_functions=True)" if functions else "simloop.replay(drive, this_file)"
    out.append("# After these replies the model ends the run (then:), and expect: says the invariants hold, so the")
    out.append(f"# fixed loop replays it cleanly: {how}; commit it as a regression test.")
    return "\n".join(out) + "\n"


def _replay_line(
    drive: Drive, path: str, seed: int = 0, *, allow_functions: bool = False, scenario: Scenario | None = None
) -> str:
    """The command that replays ``path``; with the opt-in when its tools name functions (docs/security.md), and
    the claims the file needs (``--abort``, ``--claims max_steps``...: `simloop run` skips it without them)."""
    claims = claim_flags(scenario) if scenario is not None else ""
    hint = getattr(drive, "simloop_replay", None)
    if isinstance(hint, str):  # a drive that is not a Python function (simloop.command): it says how
        return hint.format(path=path) + (f" --seed {seed}" if seed else "") + claims
    module = getattr(drive, "__module__", None)
    qual = getattr(drive, "__qualname__", None)
    if module and qual and "<" not in qual and module != "__main__":
        return (
            f"simloop run {path} --drive {module}:{qual}"
            + (f" --seed {seed}" if seed else "")
            + (" --allow-functions" if allow_functions else "")
            + claims
        )
    return f"simloop.replay(drive, {path!r}" + (f", seed={seed}" if seed else "") + (
        ", allow_functions=True)" if allow_functions else ")"
    )


def _chunks(budget: int) -> list[int]:
    """A stage's budget as the sizes of its Hypothesis runs: at most `_CHUNK` each, none much smaller."""
    if budget < 1:
        return []
    count = -(-budget // _CHUNK)
    return [budget // count + (1 if k < budget % count else 0) for k in range(count)]


#: Examples of each stage tried before any stage gets the rest of its budget: every kind of run comes within
#: the first ~20 examples whatever the budget (a stage's later chunks then start again from its simplest run).
_FIRST_ROUND = 2


def _schedule(
    searches: Sequence[tuple[str, st.SearchStrategy[Any], int]], max_examples: int, done: Callable[[], int],
    exhausted: set[str],
) -> Iterator[tuple[str, st.SearchStrategy[Any], int, int]]:
    """The Hypothesis runs of a search in the order they run: ``(stage, strategy, chunk number, size)``.

    With several stages, a first round gives each its first `_FIRST_ROUND` examples (chunk 0, which also
    replays the stage's saved failures), then each stage gets the rest of its share in chunks; the last
    stage gets what the others left (a stage in ``exhausted``, whose space ran out, hands on its budget).
    """
    if len(searches) == 1:
        name, strategy, budget = searches[0]
        for n, size in enumerate(_chunks(budget)):
            if name in exhausted:
                return
            yield name, strategy, n, size
        return
    firsts = [min(share, _FIRST_ROUND) for _, _, share in searches]
    for (name, strategy, _), first in zip(searches, firsts):
        if first:
            yield name, strategy, 0, first
    for i, ((name, strategy, share), first) in enumerate(zip(searches, firsts)):
        rest = share - first if i < len(searches) - 1 else max_examples - done()
        for n, size in enumerate(_chunks(rest), start=1):
            if name in exhausted:
                break
            yield name, strategy, n, size


def _chunk_settings(base: Settings, size: int, *, first: bool) -> Settings:
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
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def _fixed_seed(base: Settings, digest: bytes) -> object | None:
    """What fixes the randomness of an unseeded run, if anything does (``derandomize``, ``--hypothesis-seed``)."""
    if base.derandomize:
        return hashlib.sha256(digest).hexdigest()
    return getattr(core, "global_force_seed", None)  # set by pytest's --hypothesis-seed


def _derived_seed(root: object, stage: str, n: int) -> int:
    """The seed of chunk ``n`` of a stage, from the run's seed: the same every time, different per chunk."""
    return int.from_bytes(hashlib.sha256(f"{root}/{stage}/{n}".encode()).digest()[:8], "big")


def _split(
    max_examples: int, parts: Sequence[tuple[str, st.SearchStrategy[Any], int]]
) -> list[tuple[str, st.SearchStrategy[Any], int]]:
    """The budget over the stages by their shares (in twenty); small budgets go to the first stages first."""
    total = sum(share for _, _, share in parts)
    out, left = [], max_examples
    for name, strategy, share in parts:
        n = min(left, max(1, max_examples * share // total))
        out.append((name, strategy, n))
        left -= n
    return out


# Where `verify(abort=True)` presses Stop: after the n-th model call, while the n-th tool execution runs, or at a
# virtual time (a model call or a tool in flight, often); the first of each is the simplest.
_ABORT_POINTS = st.one_of(
    st.integers(1, 4).map(lambda n: Abort(after_call=n)),
    st.integers(1, 3).map(lambda n: Abort(tool_call=n)),
    st.sampled_from((0.5, 2.0, 10.0, 60.0)).map(lambda t: Abort(at=t)),
)


def _followups(n: int) -> list[str]:
    """The first ``n`` follow-up messages of a generated conversation."""
    return [FOLLOWUPS[i % len(FOLLOWUPS)] + (f" ({i // len(FOLLOWUPS) + 1})" if i >= len(FOLLOWUPS) else "")
            for i in range(n)]


def _tools(tools: Sequence[ToolSpec | dict[str, Any]] | None) -> list[ToolSpec]:
    if tools is None:
        return list(DEFAULT_TOOLS)
    out = []
    for t in tools:
        out.append(t if isinstance(t, ToolSpec) else ToolSpec.model_validate(t))
    if not out:
        raise UsageError("verify(tools=[]): give the loop at least one tool, or leave tools out for the defaults")
    return out


def _invariant_ids(invariants: Iterable[str] | None) -> list[str]:
    if invariants is None:
        return list(CATALOGUE)
    ids = list(invariants)
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown:
        raise UsageError(f"unknown invariant id(s) {', '.join(unknown)}; the ids are: {', '.join(CATALOGUE)}")
    return ids


def _name(drive: Any) -> str:
    module = getattr(drive, "__module__", "") or ""
    name = module.rsplit(".", 1)[-1] if module not in ("", "__main__") else ""
    qual = getattr(drive, "__qualname__", "drive")
    return name if name and qual == "drive" else (f"{name}.{qual}" if name else str(qual))


def _short_hash(scenario: Scenario) -> str:
    """Eight hex digits of the scenario's content: distinct failures of one invariant keep distinct files."""
    return hashlib.sha256(scenario.to_yaml().encode("utf-8")).hexdigest()[:8]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "failure"
