"""``simloop show`` and ``simloop report``: a transcript as a timeline, or as one self-contained HTML page.

Both re-check the transcript against the invariants and exit 1 when the run broke one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from simloop.cli._options import console

if TYPE_CHECKING:
    from simloop.transcript import Transcript

__all__ = ["report", "show"]


def _read(path: str) -> Transcript:
    """The transcript at ``path`` (a malformed one is a usage error naming the line and field)."""
    from simloop.transcript import Transcript, TranscriptError

    try:
        return Transcript.read(path)
    except TranscriptError as e:
        raise click.UsageError(str(e)) from None


@click.command()
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
        # the verdict in plain text too, as the rich view and the failure reports give it
        click.echo(f"{len(violations)} violation(s):" if violations else "no violations")
        for v in violations:
            click.echo(f"  {v}")
        return 1 if violations else 0
    from simloop.report import print_timeline

    print_timeline(transcript, violations, console=console(width=width))
    return 1 if violations else 0  # the documented exit codes: 1 when the run broke an invariant


@click.command()
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
