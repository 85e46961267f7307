"""What ships with simloop: ``simloop demo``, ``simloop scenarios`` (the curated library) and ``simloop init``.

``init`` writes a tests folder from the skeleton files under ``simloop/cli/templates/`` (package data: edit
them as the files a user gets, not as strings in code) and the library's happy-path scenario.
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["demo", "init", "scenarios"]

#: The files ``simloop init`` writes into FOLDER; each is ``templates/NAME.txt`` of this package.
INIT_FILES = ("conftest.py", "simloop_drive.py", "test_agent_loop.py", "tools.yaml")


def init_template(name: str) -> str:
    """The text ``simloop init`` writes as ``name`` (one of `INIT_FILES`), read from the package data."""
    from importlib import resources

    return (resources.files("simloop.cli") / "templates" / f"{name}.txt").read_text(encoding="utf-8")


@click.command()
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


@click.command()
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


@click.command()
@click.argument("folder", default="tests", type=click.Path(file_okay=False))
def init(folder: str) -> int:
    """Write a tests folder that checks your own loop: a conftest, a drive skeleton, its tools, a test and a scenario.

    FOLDER (default: tests) gets conftest.py (the simloop_config fixture), simloop_drive.py (the adapter:
    point it at your loop), tools.yaml (your loop's own tools: edit it), test_agent_loop.py (simloop.verify()
    and a scenario replay) and scenarios/happy-path.yaml. Files already there are left alone. Then run: pytest FOLDER

    Example: simloop init tests
    """
    from simloop._library import scenarios_dir

    target = Path(folder)
    files = {target / name: init_template(name) for name in INIT_FILES}
    files[target / "scenarios" / "happy-path.yaml"] = (scenarios_dir() / "happy-path.yaml").read_text("utf-8")
    for path, text in files.items():
        if path.exists():
            click.echo(f"kept    {path} (already there)")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        click.echo(f"wrote   {path}")
    click.echo(
        f"next: point {target / 'simloop_drive.py'} at your loop, list its tools in {target / 'tools.yaml'}, "
        f"then run: pytest {folder}"
    )
    return 0
