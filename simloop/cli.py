"""The ``simloop`` command: verify a loop, replay scenario files, show a transcript.

Exit codes: 0 clean, 1 invariant violations, 2 usage errors (bad flags, a
drive that cannot be imported, a malformed scenario file).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

__all__ = ["main"]


def load_drive(spec: str) -> Any:
    """``pkg.module:function`` -> the function (a `click.UsageError` naming what is wrong otherwise)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.UsageError(f"--drive takes 'package.module:function', got {spec!r}")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the current directory's packages are importable
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except ImportError as e:
        raise click.UsageError(f"cannot import {module_name!r} for --drive {spec}: {e}") from None
    except AttributeError:
        raise click.UsageError(f"module {module_name!r} has no {attr!r} (from --drive {spec})") from None
    if not callable(target):
        raise click.UsageError(f"--drive {spec} is not a function")
    return target


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="simloop")
def cli() -> None:
    """Test and simulate LLM agent loops against a simulated Anthropic API."""


@cli.command()
@click.argument("drive")
@click.option("--max-examples", type=click.IntRange(min=1), default=200, show_default=True, help="Runs to try.")
@click.option("--seed", type=int, default=None, help="Make the search deterministic.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="The loop's declared step cap.")
@click.option("--deadline", "deadline_s", type=float, default=None, help="The loop's declared deadline (seconds).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=".simloop/failures", show_default=True,
              help="Where the minimal failing scenario is written.")
def verify(drive: str, max_examples: int, seed: int | None, max_steps: int | None, deadline_s: float | None,
           out_dir: str) -> None:
    """Property-test the loop behind DRIVE (package.module:function)."""
    import simloop
    from simloop.verify import verify as run_verify

    fn = load_drive(drive)
    limits = simloop.Limits(max_steps=max_steps, deadline_s=deadline_s)
    try:
        report = run_verify(fn, limits=limits, max_examples=max_examples, seed=seed, out_dir=out_dir)
    except simloop.InvariantViolation as e:
        click.echo(str(e))
        sys.exit(1)
    click.echo(f"simloop: {report.examples} examples, {len(report.checked)} invariants checked, no violations")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--drive", "drive_spec", required=True, help="The adapter: package.module:function.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-v", "--verbose", is_flag=True, help="Show the timeline of every failing file.")
def run(paths: Sequence[str], drive_spec: str, seed: int, verbose: bool) -> None:
    """Replay scenario files (or folders of them) through DRIVE, one line each."""
    import simloop
    from simloop.verify import replay

    fn = load_drive(drive_spec)
    files = _scenario_files(paths)
    failed = 0
    for path in files:
        try:
            replay(fn, path, seed=seed)
        except simloop.InvariantViolation as e:
            failed += 1
            ids = ", ".join(sorted({v.invariant for v in e.violations})) or "expectation"
            click.echo(f"FAIL  {path}  {ids}")
            for v in e.violations:
                click.echo(f"        {v}")
            if verbose and e.timeline:
                click.echo("\n".join("        " + line for line in e.timeline.splitlines()))
        except simloop.UsageError as e:
            click.echo(f"ERROR {path}  {e}")
            sys.exit(2)
        else:
            click.echo(f"ok    {path}")
    click.echo(f"{len(files) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


@cli.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
def show(path: str) -> None:
    """Show a transcript (.jsonl) as a timeline."""
    from simloop.invariants import check
    from simloop.timeline import render_timeline
    from simloop.transcript import Transcript, TranscriptError

    try:
        transcript = Transcript.read(path)
    except TranscriptError as e:
        raise click.UsageError(str(e)) from None
    click.echo(render_timeline(transcript, check(transcript).violations))


def _scenario_files(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out.extend(sorted(p.rglob("*.yaml")) if p.is_dir() else [p])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="simloop", standalone_mode=False)
    except click.UsageError as e:
        e.show()
        return 2
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.Abort:
        return 1
    except SystemExit as e:
        return int(e.code or 0)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
