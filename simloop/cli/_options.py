"""What several commands share: the scenario format's caps, the option types and options, the drive and the console.

A new option that more than one command takes goes here, once; an option of one command stays with it.
Nothing here imports the YAML reader, rich or the simulator at import time (loading the CLI stays cheap).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

# The scenario format's caps (simloop._loading.fileguard, docs/security.md) and its limit names, repeated here so that
# loading the CLI does not load the YAML reader; a test checks that they agree.
MAX_COUNT = 10_000
MAX_DEADLINE_S = 7 * 86_400.0
MAX_TOKENS = 100_000_000
LIMIT_NAMES = (
    "max_steps", "deadline_s", "max_total_tokens", "max_tool_errors", "max_writes", "max_repeats", "max_cost_usd",
)
MAX_COST_USD = 1_000_000.0  # simloop.scenario.MAX_COST_USD
MAX_TIMEOUT_S = 604_800.0  # simloop.command.MAX_TIMEOUT_S (a test checks that they agree)

DRIVE_HELP = (
    "package.module:function, the adapter that runs your loop in a Sim (importable from the current directory)"
)


class Finite(click.FloatRange):
    """A number above 0 and at most ``most``, in ``unit``; unlike a plain FloatRange, ``nan`` is refused too."""

    def __init__(self, most: float, unit: str = "seconds", example: str = "30 or 2.5") -> None:
        super().__init__(min=0, min_open=True, max=most)
        self.unit, self.example = unit, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of {self.unit} (e.g. {self.example})", param, ctx)
        number = super().convert(value, param, ctx)
        if math.isnan(number):  # every comparison with nan is false, so the range let it through
            self.fail(f"{value!r} is not a number of {self.unit}: give a finite number in the range "
                      f"0<x<={self.max:g}", param, ctx)
        return number


class Seconds(Finite):
    """Seconds above 0 and at most ``most`` (``--timeout``, ``--deadline``): finite, never ``nan``."""

    def __init__(self, most: float) -> None:
        super().__init__(most)


def _hard_timeout(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``--hard-timeout`` arms the last-resort bound of every run (`simloop._runtime.process.bounded`)."""
    from simloop._runtime import process as _process

    _process.LAST_RESORT_S[:] = [value]
    return value


#: ``--hard-timeout S`` (verify, run): the real seconds one run may last, whatever the loop does.
HARD_TIMEOUT = click.option(
    "--hard-timeout",
    type=Seconds(MAX_TIMEOUT_S),
    default=300.0,
    show_default=True,
    callback=_hard_timeout,
    expose_value=False,
    help="Real seconds one run may last, whatever the loop does: past them simloop prints where every thread is "
    "and exits with status 1 (a last resort for a loop stuck in C, e.g. a catastrophic regex, that the watchdog "
    "cannot unwind).",
)

#: ``--network block|loopback|allow`` (verify, run): the loop's real connections.
NETWORK = click.option(
    "--network",
    type=click.Choice(["block", "loopback", "allow"]),
    default="block",
    show_default=True,
    help="Real network connections from the loop: block them (a loop that bypasses the simulator fails the run), "
    "allow loopback ones (a loop that uses a local service), or allow all.",
)


#: ``--tools FILE`` (verify, run): the loop's own tools, so the model calls the tools the loop really has.
TOOLS = click.option(
    "--tools",
    "tools_file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Your loop's own tools: a YAML or JSON file listing them in the scenario's tools: format (name, kind: "
    "read|write, description, input_schema, results), or a scenario file whose tools: is taken. verify's runs "
    "declare them (default: a read 'search' and a write 'send_email'); run gives them to files with no tools:.",
)


def load_tools(path: str | None) -> list[Any] | None:
    """``--tools FILE`` -> the `ToolSpec` s it lists (None when not given); a malformed file is a usage error."""
    if path is None:
        return None
    from simloop.errors import ScenarioError
    from simloop.scenario import load_tools as read_tools

    try:
        return list(read_tools(path))
    except ScenarioError as e:
        raise click.UsageError(f"--tools: {e}") from None


def load_drive(spec: str) -> Callable[..., Any]:
    """``pkg.module:function`` or ``path/file.py:function`` -> the function (a `click.UsageError` naming what is wrong otherwise)."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise click.UsageError(f"DRIVE takes 'package.module:function' or 'path/to/file.py:function', got {spec!r}")
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
    return getattr(target, "simloop_drive", target)  # type: ignore[no-any-return]  # a simloop.property test: its drive


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A rich console; 120 columns when not a terminal (or $COLUMNS), so logs and pipes get whole lines."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if width is None and not stream.isatty():
        width = int(os.environ.get("COLUMNS", "120") or 120)
    return Console(file=stream, width=width, stderr=stderr)
