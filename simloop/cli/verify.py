"""``simloop verify``: the property search over a loop (a DRIVE, or a ``--command`` in any language).

The command turns its flags into `simloop.verify`'s arguments, shows the search (`simloop.cli._progress`)
and reports: a summary table per invariant, the minimal failing scenario and, with ``--trace``, a transcript.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import click

from simloop.cli._options import (
    HARD_TIMEOUT,
    MAX_COST_USD,
    MAX_COUNT,
    MAX_DEADLINE_S,
    MAX_TIMEOUT_S,
    MAX_TOKENS,
    NETWORK,
    TOOLS,
    Finite,
    Seconds,
    console,
    load_drive,
    load_tools,
)
from simloop.cli._progress import ProgressBar, RunCounter
from simloop.cli._stopping import ends_commands
from simloop.errors import UsageError, WorkerDied

if TYPE_CHECKING:
    from rich.console import Console

    from simloop.errors import InvariantViolation
    from simloop.invariants import Report
    from simloop.transcript import Transcript

__all__ = ["verify"]


@click.command()
@click.argument("drive", required=False)
@click.option(
    "--command",
    "command",
    default=None,
    metavar="CMD",
    help="Verify a loop in any language instead of a DRIVE: run CMD per example against the loopback server "
    "(ANTHROPIC_BASE_URL, SIMLOOP_MCP_URL, ... in its environment; docs/design.md, Loops in any language).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=Seconds(MAX_TIMEOUT_S),
    default=60.0,
    show_default=True,
    help="With --command: real seconds a run may take before the command is killed (a runaway).",
)
@click.option(
    "--max-examples",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="How many generated runs to try before shrinking.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Search with N processes sharing the budget and the example database; the first failure stops the "
    "others and is shrunk once.",
)
@click.option(
    "--database",
    default=None,
    metavar="DIR|URL",
    help="Hypothesis's example database: a directory or a redis:// URL shared by several machines (what one "
    "finds, the others replay first) [default: the profile's, .hypothesis/examples].",
)
@click.option("--seed", type=int, default=None, help="Make the search deterministic (same runs, same order).")
@click.option(
    "--profile",
    default=None,
    metavar="NAME",
    help="Start from this registered Hypothesis settings profile (e.g. 'ci').",
)
@click.option(
    "--turns",
    type=click.IntRange(min=1, max=MAX_COUNT),
    default=1,
    show_default=True,
    help="Generate conversations of up to N user turns (the drive runs each of sim.user_turns).",
)
@click.option("--abort", is_flag=True, default=False, help="Press the user's Stop (sim.abort) once a run, at a drawn point.")
@click.option(
    "--approvals", is_flag=True, default=False,
    help="Put a person at the permission gate (sim.approve): a drawn no, late answer or no answer each run.",
)
@click.option(
    "--restarts",
    type=click.IntRange(min=0, max=MAX_COUNT),
    default=0,
    show_default=True,
    help="Kill the process up to N times a run on a write (its effect committed); the drive runs again with sim.store.",
)
@TOOLS
@click.option(
    "--server-tools",
    type=click.Choice(["request", "on", "off"]),
    default="request",
    show_default=True,
    help="Whether the model runs server tools (server_tool_use blocks, pause_turn): when the request declares one, "
    "whatever it declares (for server tools added on the way, e.g. by a gateway), or never.",
)
@click.option(
    "--context",
    is_flag=True,
    default=False,
    help="Your loop keeps every request inside the model's context window (it trims, summarizes or compacts): "
    "a prompt the API refuses as too long is then a violation.",
)
@click.option(
    "--max-steps", type=click.IntRange(min=1, max=MAX_COUNT), default=None, help="The step cap your loop declares."
)
@click.option(
    "--deadline",
    "deadline_s",
    type=Seconds(MAX_DEADLINE_S),
    default=None,
    help="The deadline your loop declares, in (virtual) seconds.",
)
@click.option(
    "--max-total-tokens", type=click.IntRange(min=1, max=MAX_TOKENS), default=None, help="The token budget your loop declares."
)
@click.option(
    "--max-tool-errors",
    type=click.IntRange(min=1),
    default=None,
    help="The error budget your loop declares: after N failed tool runs it stops (reason error_budget).",
)
@click.option(
    "--max-writes",
    type=click.IntRange(min=1),
    default=None,
    help="The write budget your loop declares: after N successful writes it stops (1: one write).",
)
@click.option(
    "--max-repeats",
    type=click.IntRange(min=1),
    default=None,
    help="Your loop runs a tool with the same input at most N times (then stops: reason repetition).",
)
@click.option(
    "--max-cost-usd",
    type=Finite(MAX_COST_USD, unit="US dollars", example="0.25"),
    default=None,
    help="The cost budget your loop declares, in US dollars at the model's list price (then it stops: cost_budget).",
)
@click.option(
    "--price",
    "price_specs",
    multiple=True,
    metavar="MODEL=IN,OUT[,CACHE_WRITE,CACHE_READ]",
    help="A price your loop pays, in US dollars per million tokens, over the list price (repeatable; MODEL: a name, "
    "a name prefix or '*'). Example: --price gpt-4o-mini=0.15,0.6,0.15,0.075",
)
@click.option(
    "-i",
    "--invariant",
    "invariants",
    multiple=True,
    metavar="ID",
    help="Check only this invariant (repeatable); default: all of them.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=".simloop/failures",
    show_default=True,
    help="Where the minimal failing scenario is written.",
)
@click.option(
    "--trace",
    "trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the failing run's transcript (JSONL) here (the last run's when none fails), for 'simloop show' "
    "and 'simloop report'.",
)
@click.option(
    "--progress/--no-progress", default=None, help="Show a progress bar on stderr [default: when stderr is a terminal]."
)
@NETWORK
@HARD_TIMEOUT
@ends_commands
def verify(
    drive: str | None, command: str | None, timeout_s: float, max_examples: int, workers: int,
    database: str | None, seed: int | None, profile: str | None, turns: int, abort: bool, approvals: bool,
    restarts: int, tools_file: str | None, server_tools: str, context: bool, max_steps: int | None,
    deadline_s: float | None, max_total_tokens: int | None, max_tool_errors: int | None, max_writes: int | None,
    max_repeats: int | None, max_cost_usd: float | None, price_specs: tuple[str, ...], invariants: tuple[str, ...],
    out_dir: str, trace: str | None, progress: bool | None, network: str,
) -> int:
    """Property-test the loop behind DRIVE under generated model, API, tool and timing behaviour.

    DRIVE is package.module:function. Runs until a run breaks an invariant (then Hypothesis shrinks it to a
    minimal scenario, written under --out, and the report shows its timeline and the command that replays
    it) or until --max-examples runs held. Prints a summary table; exits 1 on violations, 0 when clean.

    With --command CMD instead of DRIVE, each run starts the loopback server on the generated world and runs
    CMD against it (a loop in any language; it prints {"reason": ..., "text": ...} as its last JSON line).

    Example: simloop verify examples.correct_sync:drive --max-steps 10 --seed 0

    Example: simloop verify --command "node agent.mjs" --tools tools.yaml --max-examples 20

    Example: simloop verify examples.correct_sync:drive --workers 2 --max-examples 5000 --database redis://ci:6379/0
    """
    import simloop

    _one_loop(drive, command)
    tools = load_tools(tools_file)
    label, fn = _loop(drive, command, timeout_s)
    limits = simloop.Limits(
        max_steps=max_steps, deadline_s=deadline_s, max_total_tokens=max_total_tokens,
        max_tool_errors=max_tool_errors, max_writes=max_writes, max_repeats=max_repeats,
        max_cost_usd=max_cost_usd,
    )
    base = _profile(profile)
    checked = list(invariants) or None
    show = progress if progress is not None else sys.stderr.isatty()
    bar = ProgressBar(max_examples, label) if show else None
    counter = RunCounter(fn, checked, bar.update if bar else None)
    started = time.monotonic()
    try:
        with bar or nullcontext():
            report = _search(
                counter, price_specs, tools=tools, limits=limits, max_examples=max_examples, seed=seed,
                invariants=checked, out_dir=out_dir, settings=base, turns=turns, abort=abort, approvals=approvals,
                restarts=restarts, context=context, workers=workers, database=database, network=network,
                server_tools=server_tools,
            )
    except simloop.InvariantViolation as e:
        return _failed(e, counter, checked, workers, trace, time.monotonic() - started)
    except UsageError as e:
        raise click.UsageError(str(e)) from None
    except WorkerDied as e:  # a verdict on the campaign, not a simloop bug: no traceback
        click.echo(str(e))
        console().print(f"[bold red]FAILED[/]: a worker died; {e.examples} runs ({time.monotonic() - started:.1f}s)")
        return 1
    return _held(report, counter, checked, label, trace, time.monotonic() - started)


def _one_loop(drive: str | None, command: str | None) -> None:
    """A usage error unless exactly one loop is named: a DRIVE or ``--command CMD``."""
    if drive is None and command is None:
        raise click.UsageError(
            "Missing argument 'DRIVE': give package.module:function, or --command CMD for a loop in any language"
        )
    if drive is not None and command is not None:
        raise click.UsageError(f"give DRIVE or --command CMD, not both (got {drive} and --command {command!r})")


def _loop(drive: str | None, command: str | None, timeout_s: float) -> tuple[str, Callable[..., Any]]:
    """The loop to search and how the report names it: the imported DRIVE, or a drive running ``--command``."""
    if command is not None:
        from simloop.command import command_drive

        return f"--command {command!r}", command_drive(command, timeout_s=timeout_s)
    assert drive is not None
    return drive, load_drive(drive)


def _search(counter: RunCounter, price_specs: tuple[str, ...], **options: Any) -> Report:
    """`simloop.verify` over the counted drive; the counter settles its count however the search ends."""
    from simloop.verify import verify as run_verify

    try:
        return run_verify(counter.wrapped(), prices=_prices(price_specs), **options)
    finally:
        counter.settle()


def _held(
    report: Report, counter: RunCounter, checked: list[str] | None, drive: str, trace: str | None, elapsed: float
) -> int:
    """Every run held: the summary, the ok line and, with ``--trace``, the last run's transcript; exit 0."""
    import simloop

    ids = checked or list(simloop.invariants.CATALOGUE)
    out = console()
    _summary(out, ids, [], report.examples or counter.runs, elapsed)
    out.print(f"[green]ok[/]: {report.examples} runs of {drive}, {len(ids)} invariants hold ({elapsed:.1f}s)")
    if trace and counter.last is not None:  # no failing run to keep: the last run, so show/report have one
        click.echo(f"no run failed; the last run's transcript written to {counter.last.transcript.write(trace)}")
    return 0


def _failed(
    failure: InvariantViolation, counter: RunCounter, checked: list[str] | None, workers: int, trace: str | None,
    elapsed: float,
) -> int:
    """A run broke an invariant: the shrunk report, the summary, the failing run's transcript (``--trace``); exit 1."""
    import simloop

    ids = checked or list(simloop.invariants.CATALOGUE)
    out = console()
    click.echo(str(failure))
    click.echo()
    runs = counter.runs if workers == 1 else (failure.examples or 0)
    _summary(out, ids, failure.violations, runs, elapsed)
    if trace:
        transcript = _failing_transcript(failure, counter)
        if transcript is None:
            click.echo("simloop: --trace: could not tell which run failed; no transcript written", err=True)
        else:
            click.echo(f"transcript of the failing run written to {transcript.write(trace)}")
    broken = sorted({v.invariant for v in failure.violations})
    out.print(f"[bold red]FAILED[/]: {', '.join(broken)} broken; {runs} runs ({elapsed:.1f}s)")
    return 1


def _profile(name: str | None) -> Any:
    """``--profile NAME``: the registered Hypothesis settings profile (a usage error listing them otherwise)."""
    if name is None:
        return None
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    try:
        return settings.get_profile(name)
    except InvalidArgument:
        known = ", ".join(sorted(settings._profiles))  # Hypothesis has no public list of profiles
        raise click.UsageError(
            f"--profile {name!r} is not a registered Hypothesis profile; registered: {known}"
        ) from None


def _failing_transcript(failure: Any, counter: RunCounter) -> Transcript | None:
    """The failing run's transcript: from the exception when it carries one, else the last run if it matches."""
    carried = getattr(failure, "transcript", None)
    if carried is not None:
        return carried  # type: ignore[no-any-return]
    sim = counter.last
    if sim is None:
        return None
    found = [str(v) for v in sim.check(invariants=counter.invariants).violations]
    return sim.transcript if found == [str(v) for v in failure.violations] else None


def _summary(out: Console, ids: list[str], violations: Sequence[Any], runs: int, elapsed: float) -> None:
    """The summary table: one row per checked invariant, whether it held, how often and where it broke first."""
    from rich.table import Table

    table = Table(title=f"simloop verify: {runs} runs in {elapsed:.1f}s", title_justify="left", show_edge=False)
    table.add_column("invariant")
    table.add_column("result")
    table.add_column("violations", justify="right")
    table.add_column("first at step", justify="right")
    for inv in ids:
        found = [v for v in violations if v.invariant == inv]
        steps = [v.step for v in found if v.step is not None]
        table.add_row(
            inv,
            "[bold red]VIOLATED[/]" if found else "[green]holds[/]",
            str(len(found)) if found else "",
            str(min(steps)) if steps else "",
        )
    out.print(table)


def _prices(specs: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """``--price MODEL=IN,OUT[,CACHE_WRITE,CACHE_READ]`` options as `simloop.verify`'s ``prices``."""
    out: dict[str, dict[str, float]] = {}
    for spec in specs:
        model, _, numbers = spec.partition("=")
        try:
            values = [float(x) for x in numbers.split(",")]
        except ValueError:
            values = []
        if not model or len(values) not in (2, 4):
            raise click.BadParameter(
                f"{spec!r}: give MODEL=IN,OUT or MODEL=IN,OUT,CACHE_WRITE,CACHE_READ, US dollars per million tokens "
                "(e.g. gpt-4o-mini=0.15,0.6,0.15,0.075)", param_hint="--price")
        out[model] = dict(zip(("input", "output", "cache_write", "cache_read"), values, strict=False))
    return out
