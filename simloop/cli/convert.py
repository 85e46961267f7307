"""``simloop convert``: a recorded VCR.py cassette (Messages, Chat Completions or Responses) as a scrubbed scenario file."""

from __future__ import annotations

import click

__all__ = ["convert"]


@click.command()
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
    """Convert a recorded VCR.py cassette (Anthropic Messages, OpenAI Chat Completions or Responses) into a scenario.

    The recorded replies become the scenario's model script (with their latencies, usage and thinking),
    the task is the first user message, the user's later turns its follow-ups, and the tools come from the
    first request, so the conversation replays with no network and no API key.

    A cassette with no reply to script (no model call, or only recorded 4xx errors) is refused (exit 2) with
    the reason.

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
    why = cassettes.unconvertible(recording)
    if why is not None:  # never an empty script to puzzle over: exit 2, saying what the cassette lacks
        raise cassettes.CassetteError(f"{cassette}: cannot convert: {why}")
    if output:
        path = cassettes.convert(cassette, output, kinds=kind_map or None, secrets=secrets, conversation=conversation)
        click.echo(f"wrote {path}")
    else:
        from simloop.cassettes._convert import scrubbed_scenario

        click.echo(scrubbed_scenario(recording.scenario, scrubber).to_yaml(), nl=False)
    for note in recording.notes:
        if "independent conversations" in note:
            click.echo(f"simloop convert: {cassette}: {note}", err=True)
    return 0
