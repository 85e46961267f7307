"""SIGTERM while ``simloop verify`` or ``simloop run`` works: end the commands' processes, then simloop (exit 143).

`ends_commands` wraps a command's callback; `Stopping` tells `simloop.cli._main` that SIGTERM, not Ctrl-C,
stopped it; `end_commands` ends whatever ``--command`` processes are still alive.
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Stopping:
    """SIGTERM arrived (set by `sigterm_ends_commands`), and how many running commands it ended."""

    terminated = False
    ended = 0

    @classmethod
    def reset(cls) -> None:
        """Forget the previous command's SIGTERM (``main()`` may be called several times in one process)."""
        cls.terminated, cls.ended = False, 0


@contextmanager
def sigterm_ends_commands() -> Iterator[None]:
    """SIGTERM (what ``kill``, CI runners and container runtimes send) ends the commands simloop runs, then simloop.

    While ``simloop verify`` or ``simloop run`` works, the handler ends every live ``--command`` process tree at
    once (nothing it started outlives simloop), then stops simloop as a Ctrl-C does; `simloop.cli._main` exits 143
    (128 + SIGTERM).  On the way out, whatever a run left (a Ctrl-C leaves the command's thread behind) is ended.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        end_commands()
        return

    def stop(signum: int, frame: object) -> None:
        Stopping.ended = end_commands(final=True)
        Stopping.terminated = True
        raise KeyboardInterrupt  # (an Exception would be read by Hypothesis as the example failing)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        end_commands()


def ends_commands(command: Callable[..., int]) -> Callable[..., int]:
    """Run a command's callback under `sigterm_ends_commands` (innermost decorator: click's see the wrapper)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> int:
        with sigterm_ends_commands():
            return command(*args, **kwargs)

    return wrapper


def end_commands(*, final: bool = False) -> int:
    """End every live command's processes (``final``: and those started from now on); how many were running."""
    tree = sys.modules.get("simloop._runtime.proctree")  # loaded only when a command ran
    return int(tree.end_all(final=final)) if tree is not None else 0
