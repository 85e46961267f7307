"""The ``simloop`` command: verify a loop, replay scenario files, look at a run, serve the simulated API.

::

    simloop demo
    simloop scenarios --copy scenarios
    simloop verify examples.correct_sync:drive --max-examples 200 --seed 0
    simloop run scenarios/ --drive examples.correct_sync:drive --trace traces/
    simloop show traces/stuck-search.jsonl
    simloop report traces/stuck-search.jsonl -o report.html
    simloop serve --scenario scenarios/outage.yaml --port 0
    simloop convert recorded.yaml -o scenario.yaml

Exit codes: 0 clean, 1 invariant violations, 2 usage errors (bad flags, a
drive that cannot be imported, a malformed scenario or transcript file).

rich is imported only by the commands that print with it, and the
simulator's modules by the commands that run it (``import simloop`` never
imports rich or this module).
"""

from __future__ import annotations

import functools
import inspect
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import click

from simloop.errors import SimloopInternalError, UsageError, WorkerDied

if TYPE_CHECKING:
    from rich.console import Console

    from simloop._claims import Claims
    from simloop.sim import Sim
    from simloop.transcript import Transcript

__all__ = ["cli", "load_drive", "main"]

# The scenario format's caps (simloop._loading.fileguard, docs/security.md) and its limit names, repeated here so that loading the CLI
# does not load the YAML reader; a test checks that they agree.
_MAX_COUNT = 10_000
_MAX_DEADLINE_S = 7 * 86_400.0
_MAX_TOKENS = 100_000_000
_LIMIT_NAMES = ("max_steps", "deadline_s", "max_total_tokens", "max_tool_errors", "max_writes", "max_repeats")
_MAX_TIMEOUT_S = 604_800.0  # simloop.command.MAX_TIMEOUT_S (a test checks that they agree)

_DRIVE_HELP = (
    "package.module:function, the adapter that runs your loop in a Sim (importable from the current directory)"
)


def load_drive(spec: str) -> Callable[..., Any]:
    """``pkg.module:function`` -> the function (a `click.UsageError` naming what is wrong otherwise)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.UsageError(f"DRIVE takes 'package.module:function', got {spec!r}")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the current directory's packages are importable
    from simloop._library import import_drive_module

    try:
        target: Any = import_drive_module(module_name)  # examples.* falls back to the installed simloop.examples
    except Exception as e:  # noqa: BLE001 - any failure to import the user's module is a usage error, said plainly
        raise click.UsageError(f"cannot import {module_name!r} for drive {spec}: {type(e).__name__}: {e}") from None
    try:
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise click.UsageError(f"module {module_name!r} has no {attr!r} (from drive {spec})") from None
    if not callable(target):
        raise click.UsageError(f"drive {spec} is {type(target).__name__}, not a function taking a Sim")
    return target  # type: ignore[no-any-return]


def _console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A rich console; 120 columns when not a terminal (or $COLUMNS), so logs and pipes get whole lines."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if width is None and not stream.isatty():
        width = int(os.environ.get("COLUMNS", "120") or 120)
    return Console(file=stream, width=width, stderr=stderr)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="simloop")
def cli() -> None:
    """Test and simulate LLM agent loops against a simulated Anthropic Messages API.

    Exit codes: 0 clean, 1 invariant violations, 2 usage errors.
    """


# -- verify ----------------------------------------------------------------------------------------------------------


class _Seconds(click.FloatRange):
    """Seconds above 0 and at most ``most``; unlike a plain FloatRange, ``nan`` is refused too."""

    def __init__(self, most: float) -> None:
        super().__init__(min=0, min_open=True, max=most)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        try:
            float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds (e.g. 30 or 2.5)", param, ctx)
        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):  # every comparison with nan is false, so the range let it through
            self.fail(f"{value!r} is not a number of seconds: give a finite number in the range 0<x<={self.max:g}",
                      param, ctx)
        return seconds


def _hard_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``--hard-timeout`` arms the last-resort bound of every run (`simloop._runtime.process.bounded`)."""
    from simloop._runtime import process as _process

    _process.LAST_RESORT_S[:] = [value]
    return value


_HARD_TIMEOUT = click.option(
    "--hard-timeout",
    type=_Seconds(_MAX_TIMEOUT_S),
    default=300.0,
    show_default=True,
    callback=_hard_timeout,
    expose_value=False,
    help="Real seconds one run may last, whatever the loop does: past them simloop prints where every thread is "
    "and exits with status 1 (a last resort for a loop stuck in C, e.g. a catastrophic regex, that the watchdog "
    "cannot unwind).",
)


_NETWORK = click.option(
    "--network",
    type=click.Choice(["block", "loopback", "allow"]),
    default="block",
    show_default=True,
    help="Real network connections from the loop: block them (a loop that bypasses the simulator fails the run), "
    "allow loopback ones (a loop that uses a local service), or allow all.",
)


class _Stopping:
    """SIGTERM arrived (set by `_sigterm_ends_commands`), and how many running commands it ended."""

    terminated = False
    ended = 0


@contextmanager
def _sigterm_ends_commands() -> Iterator[None]:
    """SIGTERM (what ``kill``, CI runners and container runtimes send) ends the commands simloop runs, then simloop.

    While ``simloop verify`` or ``simloop run`` works, the handler ends every live ``--command`` process tree at
    once (nothing it started outlives simloop), then stops simloop as a Ctrl-C does; `_main` exits 143
    (128 + SIGTERM).  On the way out, whatever a run left (a Ctrl-C leaves the command's thread behind) is ended.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        _end_commands()
        return

    def stop(signum: int, frame: object) -> None:
        _Stopping.ended = _end_commands(final=True)
        _Stopping.terminated = True
        raise KeyboardInterrupt  # (an Exception would be read by Hypothesis as the example failing)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _end_commands()


def _ends_commands(command: Callable[..., int]) -> Callable[..., int]:
    """Run a command's callback under `_sigterm_ends_commands` (innermost decorator: click's see the wrapper)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        with _sigterm_ends_commands():
            return command(*args, **kwargs)

    return wrapper


def _end_commands(*, final: bool = False) -> int:
    """End every live command's processes (``final``: and those started from now on); how many were running."""
    tree = sys.modules.get("simloop._runtime.proctree")  # loaded only when a command ran
    return int(tree.end_all(final=final)) if tree is not None else 0


class _Counter:
    """Wraps verify's drive to count runs for the progress display and keep the last run's Sim.

    With a display, every finished run is checked until the first failure (cheap next to the run) so the
    display can switch from "fuzzing" to "shrinking".  The last Sim is the failing run Hypothesis replays at
    the end: its transcript is what ``--trace`` writes, until `InvariantViolation` carries it.
    """

    def __init__(
        self, drive: Callable[..., Any], invariants: list[str] | None, on_run: Callable[[int, bool], None] | None
    ) -> None:
        self.drive = drive
        self.invariants = invariants
        self.on_run = on_run
        self.runs = 0
        self.first_failure: int | None = None
        self.last: Sim | None = None

    def wrapped(self) -> Callable[..., Any]:
        import functools

        if inspect.iscoroutinefunction(self.drive):

            @functools.wraps(self.drive)
            async def adrive(sim: Sim) -> Any:
                self._started(sim)
                return await self.drive(sim)

            return adrive

        @functools.wraps(self.drive)
        def drive(sim: Sim) -> Any:
            self._started(sim)
            return self.drive(sim)

        return drive

    def _started(self, sim: Sim) -> None:
        self.settle()
        self.last = sim
        self.runs += 1

    def settle(self) -> None:
        """Look at the previous run (its outcome is recorded by now) and tell the display."""
        if self.last is None or self.on_run is None:
            return
        failed = False
        if self.first_failure is None:
            failed = not self.last.check(invariants=self.invariants).ok
            if failed:
                self.first_failure = self.runs
        self.on_run(self.runs, failed)


@cli.command()
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
    type=_Seconds(_MAX_TIMEOUT_S),
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
    type=click.IntRange(min=1, max=_MAX_COUNT),
    default=1,
    show_default=True,
    help="Generate conversations of up to N user turns (the drive runs each of sim.user_turns).",
)
@click.option("--abort", is_flag=True, default=False, help="Press the user's Stop (sim.abort) once a run, at a drawn point.")
@click.option(
    "--restarts",
    type=click.IntRange(min=0, max=_MAX_COUNT),
    default=0,
    show_default=True,
    help="Kill the process up to N times a run on a write (its effect committed); the drive runs again with sim.store.",
)
@click.option(
    "--max-steps", type=click.IntRange(min=1, max=_MAX_COUNT), default=None, help="The step cap your loop declares."
)
@click.option(
    "--deadline",
    "deadline_s",
    type=_Seconds(_MAX_DEADLINE_S),
    default=None,
    help="The deadline your loop declares, in (virtual) seconds.",
)
@click.option(
    "--max-total-tokens", type=click.IntRange(min=1, max=_MAX_TOKENS), default=None, help="The token budget your loop declares."
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
@_NETWORK
@_HARD_TIMEOUT
@_ends_commands
def verify(
    drive: str | None,
    command: str | None,
    timeout_s: float,
    max_examples: int,
    workers: int,
    database: str | None,
    seed: int | None,
    profile: str | None,
    turns: int,
    abort: bool,
    restarts: int,
    max_steps: int | None,
    deadline_s: float | None,
    max_total_tokens: int | None,
    max_tool_errors: int | None,
    max_writes: int | None,
    max_repeats: int | None,
    invariants: tuple[str, ...],
    out_dir: str,
    trace: str | None,
    progress: bool | None,
    network: str,
) -> int:
    """Property-test the loop behind DRIVE under generated model, API, tool and timing behaviour.

    DRIVE is package.module:function. Runs until a run breaks an invariant (then Hypothesis shrinks it to a
    minimal scenario, written under --out, and the report shows its timeline and the command that replays
    it) or until --max-examples runs held. Prints a summary table; exits 1 on violations, 0 when clean.

    With --command CMD instead of DRIVE, each run starts the loopback server on the generated world and runs
    CMD against it (a loop in any language; it prints {"reason": ..., "text": ...} as its last JSON line).

    Example: simloop verify examples.correct_sync:drive --max-steps 10 --seed 0

    Example: simloop verify --command "node agent.mjs" --max-examples 20

    Example: simloop verify examples.correct_sync:drive --workers 2 --max-examples 5000 --database redis://ci:6379/0
    """
    import simloop
    from simloop.verify import verify as run_verify

    if drive is None and command is None:
        raise click.UsageError(
            "Missing argument 'DRIVE': give package.module:function, or --command CMD for a loop in any language"
        )
    if drive is not None and command is not None:
        raise click.UsageError(f"give DRIVE or --command CMD, not both (got {drive} and --command {command!r})")
    if command is not None:
        from simloop.command import command_drive

        fn: Callable[..., Any] = command_drive(command, timeout_s=timeout_s)
        drive = f"--command {command!r}"
    else:
        assert drive is not None
        fn = load_drive(drive)
    limits = simloop.Limits(
        max_steps=max_steps, deadline_s=deadline_s, max_total_tokens=max_total_tokens,
        max_tool_errors=max_tool_errors, max_writes=max_writes, max_repeats=max_repeats,
    )
    base = _profile(profile)
    checked = list(invariants) or None
    show = progress if progress is not None else sys.stderr.isatty()
    bar = _ProgressBar(max_examples, drive) if show else None
    counter = _Counter(fn, checked, bar.update if bar else None)
    started = time.monotonic()
    failure: simloop.InvariantViolation | None = None
    try:
        with bar or _Null():
            try:
                report = run_verify(
                    counter.wrapped(),
                    limits=limits,
                    max_examples=max_examples,
                    seed=seed,
                    invariants=checked,
                    out_dir=out_dir,
                    settings=base,
                    turns=turns,
                    abort=abort,
                    restarts=restarts,
                    workers=workers,
                    database=database,
                    network=network,  # type: ignore[arg-type]
                )
            finally:
                counter.settle()
    except simloop.InvariantViolation as e:
        failure = e
    except UsageError as e:
        raise click.UsageError(str(e)) from None
    except WorkerDied as e:  # a verdict on the campaign, not a simloop bug: no traceback
        click.echo(str(e))
        _console().print(f"[bold red]FAILED[/]: a worker died; {e.examples} runs ({time.monotonic() - started:.1f}s)")
        return 1
    elapsed = time.monotonic() - started
    ids = checked or list(simloop.invariants.CATALOGUE)
    out = _console()
    if failure is None:
        _summary(out, ids, [], report.examples or counter.runs, elapsed)
        out.print(f"[green]ok[/]: {report.examples} runs of {drive}, {len(ids)} invariants hold ({elapsed:.1f}s)")
        if trace and counter.last is not None:  # no failing run to keep: the last run, so show/report have one
            click.echo(f"no run failed; the last run's transcript written to {counter.last.transcript.write(trace)}")
        return 0
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


def _failing_transcript(failure: Any, counter: _Counter) -> Transcript | None:
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


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _ProgressBar:
    """A rich progress bar on stderr: runs out of --max-examples, then an open-ended count while shrinking."""

    def __init__(self, total: int, drive: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(f"fuzzing {drive}", total=total)
        self.total = total
        self.shrinking = False
        self.lock = threading.Lock()

    def update(self, runs: int, failed: bool) -> None:
        with self.lock:
            if failed:
                self.shrinking = True
                self.progress.update(self.task, description=f"shrinking the failure found at run {runs}")
                for task in self.progress.tasks:  # open-ended from here: rich's update() reads total=None as "keep"
                    if task.id == self.task:
                        task.total = None
            elif not self.shrinking and runs > self.total:  # Hypothesis may try a few more than asked
                self.total = runs
                self.progress.update(self.task, total=runs)
            self.progress.update(self.task, completed=runs)

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


# -- run -------------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--drive", "drive_spec", default=None, metavar="DRIVE", help=_DRIVE_HELP + ".")
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
    type=click.IntRange(min=0, max=_MAX_COUNT),
    default=0,
    show_default=True,
    help="Your loop survives N crashes (1 or more: it resumes from sim.store after one).",
)
@click.option(
    "--turns",
    type=click.IntRange(min=1, max=_MAX_COUNT),
    default=1,
    show_default=True,
    help="Your loop takes conversations of up to N user turns (2 or more: it takes follow-ups, sim.user_turns).",
)
@click.option(
    "--claims",
    "claimed",
    multiple=True,
    metavar="NAMES",
    help="The stop policies your loop honours as sim.limits declares them, comma-separated: "
    + ", ".join(_LIMIT_NAMES) + " (abort, restarts and turns are accepted too).",
)
@_NETWORK
@_HARD_TIMEOUT
@_ends_commands
def run(
    paths: Sequence[str], drive_spec: str | None, command: str | None, seed: int, trace: str | None, verbose: bool,
    allow_functions: bool, abort: bool, restarts: int, turns: int, claimed: tuple[str, ...], network: str,
) -> int:
    """Replay scenario files (or folders of *.yaml) through DRIVE, one line each.

    Each run is checked against every invariant and the file's expect: block (expected violations and
    outcome reason). A file that needs what your loop does not claim (a Stop button, restarts, follow-up
    turns, a stop policy: see 'simloop scenarios') is skipped with the reason and the flag to pass. A file
    that cannot be run is reported and the others still run. Exits 1 if any file fails, 2 if a file cannot
    be run (malformed, or the loop asked for more replies than the file scripts), else 0.

    Example: simloop run scenarios/ --drive examples.correct_sync:drive --claims max_steps,deadline_s
    """
    if drive_spec is None and command is None:
        raise click.UsageError("Missing option '--drive': give --drive package.module:function, or --command CMD")
    if drive_spec is not None and command is not None:
        raise click.UsageError("give --drive DRIVE or --command CMD, not both")
    if command is not None:
        from simloop.command import command_drive

        fn = command_drive(command)
    else:
        assert drive_spec is not None
        fn = load_drive(drive_spec)
    claims = _claims(abort=abort, restarts=restarts, turns=turns, claimed=claimed)
    files = _scenario_files(paths)
    if not files:
        raise click.UsageError(f"no scenario files (*.yaml, *.yml, *.json) under {', '.join(paths)}")
    trace_dir = Path(trace) if trace and (len(files) > 1 or Path(trace).is_dir()) else None
    names = _trace_names(files)
    wide = max(len(str(p)) for p in files)
    failed = errors = skipped = 0
    for path in files:
        try:
            result = _run_one(fn, path, seed, network, allow_functions=allow_functions, claims=claims)
            if isinstance(result, str):
                skipped += 1
                click.echo(f"skip  {path!s:<{wide}}  {result}")
                continue
            transcript, problems, line = result
        except UsageError as e:
            errors += 1
            click.echo(f"ERROR {path!s:<{wide}}  {e}")
            continue
        except SimloopInternalError as e:  # a simloop bug on one file: reported, and the batch goes on
            errors += 1
            click.echo(f"ERROR {path!s:<{wide}}  simloop internal error (please report it): {e}")
            continue
        if trace:
            transcript.write(trace_dir / names[path] if trace_dir else Path(trace))
        if not problems:
            click.echo(f"ok    {path!s:<{wide}}  {line}")
            continue
        failed += 1
        ids = ", ".join(dict.fromkeys(p.split("]", 1)[0].lstrip("[") for p in problems))
        click.echo(f"FAIL  {path!s:<{wide}}  {ids}")
        for p in problems:
            click.echo(f"        {p}")
        if verbose:
            from simloop.invariants import check
            from simloop.report import print_timeline

            print_timeline(transcript, check(transcript).violations, console=_console())
    passed = len(files) - failed - errors - skipped
    click.echo(
        f"{passed} passed, {failed} failed"
        + (f", {skipped} skipped (they need what the loop does not claim)" if skipped else "")
        + (f", {errors} error(s)" if errors else "")
    )
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


def _claims(*, abort: bool, restarts: int, turns: int, claimed: Sequence[str]) -> Claims:
    """What ``simloop run``'s flags claim of the loop: --abort, --restarts N, --turns N and --claims NAMES."""
    from simloop._claims import Claims, claimed_names

    try:
        names = claimed_names(claimed, where="--claims")
    except UsageError as e:
        raise click.UsageError(str(e)) from None
    return Claims(
        abort=abort or "abort" in names,
        restarts=max(restarts, 1 if "restarts" in names else 0),
        turns=max(turns, 2 if "turns" in names else 1),
        limits=frozenset(n for n in names if n in _LIMIT_NAMES),
    )


def _run_one(
    drive: Callable[..., Any], path: Path, seed: int, network: str, *, allow_functions: bool = False,
    claims: Claims | None = None,
) -> tuple[Transcript, list[str], str] | str:
    """Run one scenario file; returns the transcript, the problems (violations, unmet expectations) and a summary,
    or, when the file needs what ``claims`` lacks, why it is skipped."""
    from simloop._claims import skip_reason
    from simloop.scenario import load_scenario
    from simloop.sim import Sim
    from simloop.verify import unreached_model

    scenario = load_scenario(path, allow_functions=allow_functions)
    unclaimed = claims.missing(scenario) if claims is not None else ()
    if unclaimed:
        return skip_reason(scenario, unclaimed, surface="cli")
    with Sim(scenario, seed=seed, network=network, allow_functions=allow_functions) as sim:  # type: ignore[arg-type]
        outcome = sim.run(drive)
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
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml", ".json")))
        else:
            out.append(p)
    return out


# -- show, report ----------------------------------------------------------------------------------------------------


def _read(path: str) -> Transcript:
    from simloop.transcript import Transcript, TranscriptError

    try:
        return Transcript.read(path)
    except TranscriptError as e:
        raise click.UsageError(str(e)) from None


@cli.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--plain", is_flag=True, help="Print the stable plain-text timeline (as failure reports show it).")
@click.option(
    "--width",
    type=click.IntRange(min=40),
    default=None,
    help="Columns to fit [default: the terminal's, or 120 when not a terminal].",
)
def show(trace: str, plain: bool, width: int | None) -> int:
    """Show a transcript (.jsonl) as a timeline, one model call a line.

    Per step: virtual time, input/output tokens with a bar for the input size, the reply kind, the tools
    run and their outcome (ok, raised, slow, committed-then-lost...), SDK retries, and the violations
    (re-checked from the transcript) marked where they happened.

    Exits 1 when the run broke an invariant, 0 when it is clean.

    Example: simloop show trace.jsonl
    """
    from simloop.invariants import check

    transcript = _read(trace)
    violations = check(transcript).violations
    if plain:
        from simloop.timeline import render_timeline

        click.echo(render_timeline(transcript, violations, width=width or 100))
        return 1 if violations else 0
    from simloop.report import print_timeline

    print_timeline(transcript, violations, console=_console(width=width))
    return 1 if violations else 0  # the documented exit codes: 1 when the run broke an invariant


@cli.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="The HTML file to write [default: TRACE with the suffix .html].",
)
def report(trace: str, output: str | None) -> int:
    """Write a transcript (.jsonl) as one self-contained HTML page.

    The page needs no network to view: the timeline, a per-step bar chart of input tokens, every request
    and reply expandable, and the violations (re-checked from the transcript) with their evidence.

    Exits 1 when the run broke an invariant (the page is written either way), 0 when it is clean.

    Example: simloop report trace.jsonl -o report.html
    """
    from simloop.invariants import check
    from simloop.report import write_html

    transcript = _read(trace)
    violations = check(transcript).violations
    path = write_html(transcript, output or Path(trace).with_suffix(".html"), violations)
    click.echo(f"wrote {path}: {transcript.model_calls} model calls, {len(violations)} violation(s)")
    return 1 if violations else 0  # the page is written either way; the exit code says whether the run was clean


# -- serve, convert --------------------------------------------------------------------------------------------------


def _wait_for_interrupt() -> None:
    """Block until Ctrl-C or SIGTERM (a seam the tests replace)."""
    threading.Event().wait()


class _Terminated(Exception):
    """SIGTERM arrived: stop serving as on Ctrl-C, so the transcript is still written."""


@contextmanager
def _sigterm_stops() -> Iterator[None]:
    """While serving, SIGTERM (what `kill`, systemd and container runtimes send) stops like Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def stop(signum: int, frame: object) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@cli.command()
@click.option(
    "--scenario",
    "scenario_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The scenario file whose simulated API to serve.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to bind (both ports). Anything but loopback makes the API and the tools reachable from "
    "other machines: simloop warns on stderr and in every response's x-simloop-warning header.",
)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=0,
    show_default=True,
    help="The port to bind; 0 picks a free one.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The seed of the run (ids, retry jitter).")
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="On stop (Ctrl-C or SIGTERM), write the session's transcript (JSONL; times are real seconds) here.",
)
@click.option(
    "--mcp",
    is_flag=True,
    help="Also serve the scenario's tools (faults and ledger included) over MCP streamable HTTP; its URL is the "
    "second line of stdout (needs pip install 'simloop[mcp]').",
)
def serve(scenario_path: str, host: str, port: int, seed: int, trace: str | None, mcp: bool) -> int:
    """Serve a scenario's simulated Anthropic API on a loopback socket until Ctrl-C (or SIGTERM).

    Prints the base URL alone on the first line of stdout, for loops in other processes or languages:
    set ANTHROPIC_BASE_URL to it (any API key is accepted). The server answers at once (real time):
    scripted latencies are reported in the x-envoy-upstream-service-time header, not waited out.

    With --mcp the scenario's tools are served too, over MCP streamable HTTP (the URL on the second line of
    stdout; set SIMLOOP_MCP_URL to it) and as plain JSON at POST BASE_URL/simloop/tools/NAME; every tool call
    lands in the transcript matched to the tool_use it answers.

    Example: simloop serve --scenario scenarios/outage.yaml --port 0

    Example: simloop serve --scenario scenarios/happy-path.yaml --mcp
    """
    from simloop.scenario import load_scenario
    from simloop.wire.loopback import KEPT_TEXT
    from simloop.wire.loopback import serve as serve_loopback

    scenario = load_scenario(scenario_path)
    if mcp:
        from simloop.mcp import require_mcp

        require_mcp()
    how = ""
    # SIGTERM is handled before the base URL is printed: a client may stop the server as soon as it reads it
    server = None
    with _sigterm_stops():
        try:
            server = serve_loopback(scenario, host=host, port=port, seed=seed, mcp=mcp, max_kept_text=KEPT_TEXT)
            with server:
                warning = getattr(server, "warning", None)
                if warning is not None:
                    click.echo(f"simloop: WARNING: {warning}", err=True)
                click.echo(server.base_url)
                mcp_url = getattr(server, "mcp_url", None)
                if mcp_url:
                    click.echo(mcp_url)
                sys.stdout.flush()
                click.echo(
                    f"simloop: serving scenario {scenario.name!r}; Ctrl-C stops\n"
                    f"  export ANTHROPIC_BASE_URL={server.base_url}"
                    + (f"\n  export SIMLOOP_MCP_URL={mcp_url}" if mcp_url else ""),
                    err=True,
                )
                _wait_for_interrupt()
        except KeyboardInterrupt:
            pass
        except _Terminated:
            how = " (SIGTERM)"
    if server is None:  # stopped while starting: nothing was served
        click.echo(f"simloop: stopped{how} before serving", err=True)
        return 0
    transcript = server.transcript
    requests = len(transcript.requests)
    click.echo(f"simloop: stopped{how} after {requests} request(s)", err=True)
    for error in getattr(server, "errors", []):
        click.echo(f"simloop: a request was answered with a simloop 500: {error}", err=True)
    if trace:
        click.echo(f"transcript written to {transcript.write(trace)}", err=True)
    return 0


@cli.command(name="mcp")
@click.option(
    "--scenario",
    "scenario_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The scenario file whose tools to serve.",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="When the client disconnects, write the tool executions (JSONL transcript; real seconds) here.",
)
def mcp_command(scenario_path: str, trace: str | None) -> int:
    """Serve a scenario's tools as an MCP server over stdio (for an MCP client that starts its servers).

    Every tools/call runs the scenario's tool with its faults (raise, timeout, slow, huge_output,
    commit_then_raise) and is written to the execution ledger; a failure is answered as an MCP tool error.
    Nothing but MCP is written to stdout. Needs pip install 'simloop[mcp]'.

    Example: simloop mcp --scenario scenarios/happy-path.yaml --trace tools.jsonl
    """
    from simloop.mcp import require_mcp, serve_stdio, tool_server
    from simloop.scenario import load_scenario
    from simloop.tools import ToolBox
    from simloop.transcript import Header, Transcript

    require_mcp()
    scenario = load_scenario(scenario_path)
    transcript = Transcript(header=Header(scenario=scenario.name, seed=0, tools={t.name: t.kind for t in scenario.tools}))
    start = time.monotonic()
    tools = ToolBox(scenario, transcript, now=lambda: round(time.monotonic() - start, 6), sleep=lambda s: None)

    async def call(name: str, arguments: dict[str, Any], *, tool_use_id: str | None = None) -> str:
        return tools.run(name, arguments, tool_use_id=tool_use_id)

    serve_stdio(tool_server([t.schema_dict() for t in scenario.tools], call))
    if trace:
        click.echo(f"simloop mcp: {tools.executions} tool call(s); transcript written to {transcript.write(trace)}", err=True)
    return 0


@cli.command()
@click.argument("cassette", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the scenario file here [default: print it].",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    metavar="TOOL=read|write",
    help="A tool's kind (repeatable); tools not named are guessed from their names.",
)
@click.option(
    "--secret",
    "secrets",
    multiple=True,
    metavar="TEXT",
    help="A value to scrub from the scenario besides key-shaped strings (repeatable; 8 characters or more).",
)
@click.option(
    "--conversation",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which of the cassette's independent conversations to convert (0-based, in the order they begin).",
)
def convert(
    cassette: str, output: str | None, kinds: tuple[str, ...], secrets: tuple[str, ...], conversation: int
) -> int:
    """Convert a recorded VCR.py cassette of Anthropic traffic into a scenario file.

    The recorded replies become the scenario's model script (with their latencies, usage and thinking),
    the task is the first user message, the user's later turns its follow-ups, and the tools come from the
    first request, so the conversation replays with no network and no API key.

    Example: simloop convert tests/cassettes/refund.yaml -o scenarios/refund.yaml
    """
    from simloop import cassettes

    kind_map: dict[str, str] = {}
    for item in kinds:
        name, sep, kind = item.partition("=")
        if not sep or kind not in ("read", "write") or not name:
            raise click.UsageError(f"--kind takes TOOL=read or TOOL=write, got {item!r}")
        kind_map[name] = kind
    scrubber = cassettes.Scrubber(secrets)
    recording = cassettes.load_recording(cassette, kinds=kind_map or None, conversation=conversation)
    if output:
        path = cassettes.convert(cassette, output, kinds=kind_map or None, secrets=secrets, conversation=conversation)
        click.echo(f"wrote {path}")
    else:
        from simloop.cassettes._convert import scrubbed_scenario

        click.echo(scrubbed_scenario(recording.scenario, scrubber).to_yaml(), nl=False)
    if not recording.calls:  # say why, rather than leave an empty script to puzzle over
        click.echo(f"simloop convert: {cassette}: {recording.notes[-1]}", err=True)
    for note in recording.notes:
        if "independent conversations" in note:
            click.echo(f"simloop convert: {cassette}: {note}", err=True)
    return 0


# -- demo, scenarios -------------------------------------------------------------------------------------------------


@cli.command()
def demo() -> int:
    """Verify the bundled correct loop, then show the bug simloop catches in its one-bug twin.

    What `make demo` shows in a checkout, from an installed simloop: the reference loop passes 100
    generated runs, and the same loop with one classic bug (it re-runs the previous turn's tools when the
    next API call fails) is caught, shrunk to a minimal scenario (written under .simloop/failures/) and
    reported with its timeline and the command that replays it. Exits 0 when the bug is caught.

    Example: simloop demo
    """
    from simloop._library import examples_module

    return int(examples_module("demo").main())


@cli.command()
@click.option(
    "--copy",
    "copy_to",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Copy the library into DIR (files already there are left alone).",
)
def scenarios(copy_to: str | None) -> int:
    """List the curated scenario library that ships with simloop, or copy it into a folder.

    Each file scripts one documented agent-loop failure (a stuck model, a cut-off reply, an outage after a
    write...) and says in its header what a correct loop does; every correct loop passes all of them. A file
    that needs something of the loop (a Stop button, restarts, follow-up turns, a stop policy) says so
    (needs: ...); 'simloop run' skips it unless the loop claims it (--abort, --restarts N, --turns N, --claims).

    Example: simloop scenarios --copy scenarios && simloop run scenarios/ --drive examples.correct_sync:drive
    """
    import shutil

    from simloop._library import scenarios_dir
    from simloop.errors import ScenarioError
    from simloop.scenario import load_scenario

    source = scenarios_dir()
    files = sorted(p for p in source.rglob("*.yaml"))
    if copy_to is None:
        click.echo(f"{len(files)} curated scenarios in {source}:")
        for path in files:
            first = path.read_text(encoding="utf-8").splitlines()[0] if path.stat().st_size else ""
            story = first.split(":", 1)[1].strip() if first.startswith("#") and ":" in first else ""
            try:
                needs = load_scenario(path).needs
            except ScenarioError as e:  # a file edited in place: say so, and list the rest
                story, needs = f"(cannot be read: {e})", ()
            click.echo(f"  {path.relative_to(source)!s:<52} {story}")
            if needs:
                click.echo(f"  {'':<52} needs: {', '.join(needs)}")
        click.echo("copy them with: simloop scenarios --copy DIR")
        click.echo(
            "a file that needs what your loop does not claim is skipped by 'simloop run' (pass --abort, "
            "--restarts 1, --turns N or --claims NAMES when your loop has it)"
        )
        return 0
    target = Path(copy_to)
    copied = kept = 0
    for path in files:
        dest = target / path.relative_to(source)
        if dest.exists():
            kept += 1
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        copied += 1
    click.echo(f"copied {copied} scenario file(s) to {target}" + (f" ({kept} already there, left alone)" if kept else ""))
    return 0


_INIT_CONFTEST = '''"""simloop settings for these tests (written by `simloop init`)."""

import pytest


@pytest.fixture
def simloop_config():
    # The drive is the adapter that runs your loop in a simloop.Sim (simloop_drive.py, next to this file).
    # Say only what your loop has: "limits": {"max_steps": 10} if it stops after 10 model calls (it reads
    # sim.limits), "abort": True if it has a Stop button wired to sim.abort, "turns": 3 if it takes follow-ups,
    # "restarts": 1 if it resumes from sim.store after a crash.  Scenario files that need more are skipped.
    return {"drive": "simloop_drive:drive", "max_examples": 50}
'''

_INIT_DRIVE = '''"""The adapter that runs your agent loop against simloop\'s simulated API (written by `simloop init`).

Replace the reference loop below with your own: it gets the SDK client, the tool schemas, a function that
runs a tool (it may raise: report that to the model as an is_error tool_result) and the task, and returns
why it stopped and its last text.
"""

import simloop
from simloop.examples.correct_sync import run_agent  # TODO: from my_agent import run_agent


def drive(sim: simloop.Sim) -> simloop.Outcome:
    return run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.limits)
'''

_INIT_TEST = '''"""Property tests and a scenario replay of your agent loop (written by `simloop init`)."""

import pytest


def test_loop_keeps_every_invariant(simloop):
    # generated model behaviours, API errors, tool faults and latencies; fails with a minimal scenario
    simloop.verify()


@pytest.mark.simloop(scenario="scenarios/happy-path.yaml")
def test_happy_path(simloop):
    # a saved scenario (a failure verify wrote under .simloop/failures/ replays the same way)
    simloop.replay()
'''


@cli.command()
@click.argument("folder", default="tests", type=click.Path(file_okay=False))
def init(folder: str) -> int:
    """Write a tests folder that checks your own loop: a conftest, a drive skeleton, a test and a scenario.

    FOLDER (default: tests) gets conftest.py (the simloop_config fixture), simloop_drive.py (the adapter:
    point it at your loop), test_agent_loop.py (simloop.verify() and a scenario replay) and
    scenarios/happy-path.yaml. Files already there are left alone. Then run: pytest FOLDER

    Example: simloop init tests
    """
    from simloop._library import scenarios_dir

    target = Path(folder)
    files = {
        target / "conftest.py": _INIT_CONFTEST,
        target / "simloop_drive.py": _INIT_DRIVE,
        target / "test_agent_loop.py": _INIT_TEST,
        target / "scenarios" / "happy-path.yaml": (scenarios_dir() / "happy-path.yaml").read_text(encoding="utf-8"),
    }
    for path, text in files.items():
        if path.exists():
            click.echo(f"kept    {path} (already there)")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        click.echo(f"wrote   {path}")
    click.echo(f"next: point {target / 'simloop_drive.py'} at your loop, then run: pytest {folder}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (0 clean, 1 violations, 2 usage errors).

    As the console script (``argv`` None), the process ends with that code right after the report, whatever
    a loop under test left behind (see `_exit_after_report`).
    """
    code = _main(argv)
    if argv is None:
        _end_commands(final=True)  # (a run's thread may have started one after the command's own cleanup)
        _exit_after_report(code)
    return code


#: Real seconds the exit hooks (``atexit``) get after the report before the command ends regardless.
EXIT_HOOKS_S = 2.0


def _exit_after_report(code: int, *, hooks_s: float = EXIT_HOOKS_S) -> None:
    """End the process with ``code`` now: the verdict is given, nothing a loop left may change or delay it.

    Python waits at exit for every non-daemon thread and thread-pool worker, and runs the exit hooks (a loop's
    ``atexit`` hook may never return, or call ``os._exit(0)``).  So the command flushes its output, gives the
    hooks ``hooks_s`` seconds on a daemon thread (a hook's own exit is turned into this one), and ends with
    ``os._exit(code)``.
    """
    import atexit

    from simloop._runtime import process as _process

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _process.install()
    _process.FINAL_CODE[:] = [code]  # an os._exit in a hook ends the process with the verdict's code
    hooks = threading.Thread(target=atexit._run_exitfuncs, name="simloop-exit-hooks", daemon=True)
    hooks.start()
    hooks.join(hooks_s)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _process.REAL_EXIT(code)


def _main(argv: Sequence[str] | None) -> int:
    from simloop._runtime import process as _process

    _process.install()  # before the loop's modules are imported: an `os._exit` they bind is simloop's
    try:
        return _command(argv)
    finally:
        _process.LAST_RESORT_S.clear()  # (main() called from Python: the next runs are not the command's)


def _command(argv: Sequence[str] | None) -> int:
    _Stopping.terminated, _Stopping.ended = False, 0
    try:
        rv = cli.main(args=list(argv) if argv is not None else None, prog_name="simloop", standalone_mode=False)
    except click.UsageError as e:
        e.show()
        return 2
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.Abort:
        if _Stopping.terminated:
            ended = "; the processes of the command that was running were ended" if _Stopping.ended else ""
            click.echo(f"simloop: stopped by SIGTERM{ended}", err=True)
            return 128 + signal.SIGTERM
        click.echo("simloop: aborted", err=True)
        return 1
    except UsageError as e:  # a simloop misuse raised outside a command's own handling: a fix-it message
        click.echo(f"simloop: error: {e}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
