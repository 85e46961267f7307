"""``simloop run``: replay scenario files through a loop, one line a file, and hold each to its ``expect:``.

A file that needs what the loop does not claim (``--abort``, ``--restarts``, ``--turns``, ``--context``,
``--claims``) is skipped with its reason; a file that cannot be run is reported and the batch goes on.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from simloop.cli._options import (
    DRIVE_HELP,
    HARD_TIMEOUT,
    LIMIT_NAMES,
    MAX_COUNT,
    NETWORK,
    TOOLS,
    console,
    load_drive,
    load_tools,
)
from simloop.cli._stopping import ends_commands
from simloop.errors import SimloopInternalError, UsageError

if TYPE_CHECKING:
    from simloop._claims import Claims
    from simloop.transcript import Transcript

__all__ = ["NOTHING_TESTED", "run"]

#: The exit code of a run that tested nothing (every file selected was skipped): pytest's for "no tests ran".
NOTHING_TESTED = 5


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--drive", "drive_spec", default=None, metavar="DRIVE", help=DRIVE_HELP + ".")
@click.option(
    "--command", "command", default=None, metavar="CMD",
    help="Replay through a loop in any language instead of a DRIVE (see simloop verify --command).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The seed of every run (ids, retry jitter).")
@click.option(
    "--trace",
    "trace",
    type=click.Path(),
    default=None,
    help="Write each run's transcript (JSONL): to this file for one scenario, else into this folder as NAME.jsonl.",
)
@click.option("-v", "--verbose", is_flag=True, help="Show the timeline of every failing run.")
@click.option(
    "--allow-functions",
    is_flag=True,
    help="Let the files' tool 'function: pkg.module:fn' paths import and run functions of your own modules "
    "(refused by default: a scenario file is data; see docs/security.md).",
)
@click.option("--abort", is_flag=True, default=False, help="Your loop has a Stop button (wired to sim.abort).")
@click.option(
    "--restarts",
    type=click.IntRange(min=0, max=MAX_COUNT),
    default=0,
    show_default=True,
    help="Your loop survives N crashes (1 or more: it resumes from sim.store after one).",
)
@click.option(
    "--turns",
    type=click.IntRange(min=1, max=MAX_COUNT),
    default=1,
    show_default=True,
    help="Your loop takes conversations of up to N user turns (2 or more: it takes follow-ups, sim.user_turns).",
)
@click.option(
    "--context",
    is_flag=True,
    default=False,
    help="Your loop keeps every request inside the model's context window (trims, summarizes or compacts).",
)
@click.option(
    "--claims",
    "claimed",
    multiple=True,
    metavar="NAMES",
    help="The stop policies your loop honours as sim.limits declares them, comma-separated: "
    + ", ".join(LIMIT_NAMES) + " (abort, restarts, turns and context are accepted too).",
)
@TOOLS
@NETWORK
@HARD_TIMEOUT
@ends_commands
def run(
    paths: Sequence[str], drive_spec: str | None, command: str | None, seed: int, trace: str | None, verbose: bool,
    allow_functions: bool, abort: bool, restarts: int, turns: int, context: bool, claimed: tuple[str, ...],
    tools_file: str | None,
    network: str,
) -> int:
    """Replay scenario files (or folders of *.yaml) through DRIVE, one line each.

    Each run is checked against every invariant and the file's expect: block (expected violations and
    outcome reason). A file that needs what your loop does not claim (a Stop button, restarts, follow-up
    turns, a stop policy: see 'simloop scenarios') is skipped with the reason and the flag to pass. A file
    that cannot be run is reported and the others still run. Exits 1 if any file fails, 2 if a file cannot
    be run (malformed, or the loop asked for more replies than the file scripts), 5 if every file was skipped
    (nothing was tested), else 0. A file of your own is skipped only by what its requires: names. With --tools FILE, a
    file that declares no tools: runs with your loop's tools from FILE (a file's own tools: are kept).

    Example: simloop run scenarios/ --drive examples.correct_sync:drive --claims max_steps,deadline_s
    """
    fn = _loop(drive_spec, command)
    claims = _claims(abort=abort, restarts=restarts, turns=turns, context=context, claimed=claimed)
    tools = load_tools(tools_file)
    files = _scenario_files(paths)
    if not files:
        raise click.UsageError(f"no scenario files (*.yaml, *.yml, *.json) under {', '.join(paths)}")
    trace_dir = Path(trace) if trace and (len(files) > 1 or Path(trace).is_dir()) else None
    names = _trace_names(files)
    wide = max(len(str(p)) for p in files)
    tally: Counter[str] = Counter()
    for path in files:
        result = _attempt(fn, path, wide, seed, network, allow_functions=allow_functions, claims=claims, tools=tools)
        if isinstance(result, str):
            tally[result] += 1
            continue
        transcript, problems, line = result
        if trace:
            transcript.write(trace_dir / names[path] if trace_dir else Path(trace))
        if problems:
            tally["failed"] += 1
            _show_failure(path, wide, transcript, problems, verbose=verbose)
        else:
            click.echo(f"ok    {path!s:<{wide}}  {line}")
    return _totals(len(files), tally)


def _loop(drive_spec: str | None, command: str | None) -> Callable[..., Any]:
    """The loop to replay the files through: the ``--drive`` imported, or a drive running ``--command``."""
    if drive_spec is None and command is None:
        raise click.UsageError("Missing option '--drive': give --drive package.module:function, or --command CMD")
    if drive_spec is not None and command is not None:
        raise click.UsageError("give --drive DRIVE or --command CMD, not both")
    if command is not None:
        from simloop.command import command_drive

        return command_drive(command)
    assert drive_spec is not None
    return load_drive(drive_spec)


def _attempt(
    drive: Callable[..., Any], path: Path, wide: int, seed: int, network: str, *, allow_functions: bool,
    claims: Claims, tools: Sequence[Any] | None,
) -> tuple[Transcript, list[str], str] | str:
    """Run one file (`_run_one`): its transcript, problems and summary; or, once its line is printed, ``"skipped"``
    (it needs what the loop does not claim) or ``"errors"`` (it cannot be run), and the batch goes on."""
    try:
        result = _run_one(drive, path, seed, network, allow_functions=allow_functions, claims=claims, tools=tools)
    except UsageError as e:
        click.echo(f"ERROR {path!s:<{wide}}  {e}")
        return "errors"
    except SimloopInternalError as e:  # a simloop bug on one file: reported, and the batch goes on
        click.echo(f"ERROR {path!s:<{wide}}  simloop internal error (please report it): {e}")
        return "errors"
    if isinstance(result, str):
        click.echo(f"skip  {path!s:<{wide}}  {result}")
        return "skipped"
    return result


def _show_failure(path: Path, wide: int, transcript: Transcript, problems: list[str], *, verbose: bool) -> None:
    """A failing file's FAIL line naming the invariants, its problems, and with ``-v`` its timeline."""
    ids = ", ".join(dict.fromkeys(p.split("]", 1)[0].lstrip("[") for p in problems))
    click.echo(f"FAIL  {path!s:<{wide}}  {ids}")
    for p in problems:
        click.echo(f"        {p}")
    if verbose:
        from simloop.invariants import check
        from simloop.report import print_timeline

        print_timeline(transcript, check(transcript).violations, console=console())


def _totals(files: int, tally: Counter[str]) -> int:
    """The closing line (passed, failed, skipped, errors) and the exit status (5: every file was skipped)."""
    failed, errors, skipped = tally["failed"], tally["errors"], tally["skipped"]
    passed = files - failed - errors - skipped
    click.echo(
        f"{passed} passed, {failed} failed"
        + (f", {skipped} skipped (they need what the loop does not claim)" if skipped else "")
        + (f", {errors} error(s)" if errors else "")
    )
    if skipped == files:
        from simloop._claims import nothing_tested

        click.echo(f"simloop: {nothing_tested(skipped)}")
        return NOTHING_TESTED
    return 2 if errors else 1 if failed else 0


def _trace_names(files: Sequence[Path]) -> dict[Path, Path]:
    """A distinct trace file per scenario file, under the ``--trace`` folder.

    ``NAME.jsonl`` for a file whose name is the only one with its stem; files whose stems collide
    (``a/x.yaml`` and ``b/x.yaml``) keep their path below the folder the files share
    (``a/x.jsonl``), and their suffix too when that is not enough (``x.yaml.jsonl``, ``x.json.jsonl``).
    """
    stems = Counter(p.stem for p in files)
    top = Path(os.path.commonpath([str(p.resolve().parent) for p in files]))
    names = {p: Path(f"{p.stem}.jsonl") if stems[p.stem] == 1 else p.resolve().relative_to(top).with_suffix(".jsonl")
             for p in files}
    taken = Counter(names.values())
    return {p: name if taken[name] == 1 else name.with_name(p.name + ".jsonl") for p, name in names.items()}


def _claims(*, abort: bool, restarts: int, turns: int, context: bool, claimed: Sequence[str]) -> Claims:
    """What ``simloop run``'s flags claim of the loop: --abort, --restarts N, --turns N, --context and --claims
    NAMES."""
    from simloop._claims import Claims, claimed_names

    try:
        names = claimed_names(claimed, where="--claims")
    except UsageError as e:
        raise click.UsageError(str(e)) from None
    return Claims(
        abort=abort or "abort" in names,
        restarts=max(restarts, 1 if "restarts" in names else 0),
        turns=max(turns, 2 if "turns" in names else 1),
        context=context or "context" in names,
        limits=frozenset(n for n in names if n in LIMIT_NAMES),
        approvals="approvals" in names,
    )


def _run_one(
    drive: Callable[..., Any], path: Path, seed: int, network: str, *, allow_functions: bool = False,
    claims: Claims | None = None, tools: Sequence[Any] | None = None,
) -> tuple[Transcript, list[str], str] | str:
    """Run one scenario file (with ``tools`` when it declares none); returns the transcript, the problems
    (violations, unmet expectations) and a summary, or, when the file needs what ``claims`` lacks, why it is
    skipped."""
    from simloop._claims import other_wire, skip_reason
    from simloop.scenario import load_scenario
    from simloop.sim import Sim
    from simloop.verify import unreached_model

    scenario = load_scenario(path, allow_functions=allow_functions)
    if tools and not scenario.tools:
        scenario = scenario.model_copy(update={"tools": list(tools)})
    unclaimed = claims.missing(scenario, path) if claims is not None else ()
    if unclaimed:
        return skip_reason(scenario, unclaimed, surface="cli")
    with Sim(scenario, seed=seed, network=network, allow_functions=allow_functions) as sim:  # type: ignore[arg-type]
        outcome = sim.run(drive)
    elsewhere = other_wire(scenario, sim.transcript.requests)
    if elsewhere:
        return elsewhere
    report = sim.check()
    expect = scenario.expect
    expected = set(expect.violations) if expect else set()
    problems = [str(v) for v in report.violations if v.invariant not in expected]
    missing = expected - {v.invariant for v in report.violations}
    if missing:
        problems.append(f"[expect] expected violation(s) did not happen: {', '.join(sorted(missing))}")
    if expect and not expect.allows(outcome.reason):
        problems.append(
            f"[expect] the loop stopped with reason {outcome.reason!r}; the file expects {expect.reason_text()}"
        )
    unreached = unreached_model(sim)
    if unreached:
        problems.append(unreached)
    if scenario.strict:
        from simloop.verify import leftovers_problem

        problems += leftovers_problem(sim.leftovers())
    t = sim.transcript
    known = f", {len(report.violations)} expected violation(s)" if report.violations and not problems else ""
    calls = t.model_calls
    return (
        t,
        problems,
        f"{outcome.reason}, {calls} model call{'' if calls == 1 else 's'}, {sim.clock.now():.3f}s virtual{known}",
    )


def _scenario_files(paths: Sequence[str]) -> list[Path]:
    """The files ``simloop run`` replays: each file given, and a folder's *.yaml, *.yml and *.json, sorted."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml", ".json")))
        else:
            out.append(p)
    return out
