"""The ``simloop`` group and the console script: the commands put together, their exit codes, the exit itself.

A new command is a module of this package (or a function in its family's module) listed in `cli`'s commands.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence

import click

from simloop.cli._stopping import Stopping, end_commands
from simloop.cli.convert import convert
from simloop.cli.library import demo, init, scenarios
from simloop.cli.run import run
from simloop.cli.serve import mcp_command, serve
from simloop.cli.show import report, show
from simloop.cli.verify import verify
from simloop.errors import UsageError

__all__ = ["EXIT_HOOKS_S", "cli", "main"]


@click.group(
    commands=[verify, run, show, report, serve, mcp_command, convert, demo, scenarios, init],
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="simloop")
def cli() -> None:
    """Test and simulate LLM agent loops against a simulated Anthropic Messages API (and the OpenAI wires).

    Exit codes: 0 clean, 1 invariant violations, 2 usage errors.
    """


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (0 clean, 1 violations, 2 usage errors).

    As the console script (``argv`` None), the process ends with that code right after the report, whatever
    a loop under test left behind (see `_exit_after_report`).
    """
    code = _main(argv)
    if argv is None:
        end_commands(final=True)  # (a run's thread may have started one after the command's own cleanup)
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
    Stopping.reset()
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
        if Stopping.terminated:
            ended = "; the processes of the command that was running were ended" if Stopping.ended else ""
            click.echo(f"simloop: stopped by SIGTERM{ended}", err=True)
            return 128 + signal.SIGTERM
        click.echo("simloop: aborted", err=True)
        return 1
    except UsageError as e:  # a simloop misuse raised outside a command's own handling: a fix-it message
        click.echo(f"simloop: error: {e}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0
