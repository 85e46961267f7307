"""Where an exception that escaped the loop under test was raised, in the loop's own code.

A traceback from a crashed loop runs through simloop (the Sim, the simulated
transport), the SDK, httpx2 and perhaps an agent framework before it reaches
the line that raised.  The `crash` report names the line a user can act on:
the deepest frame of the user's own code (neither simloop's nor an installed
library's nor the standard library's); failing that, the deepest frame
outside simloop's core (a framework's line, or a bundled adapter's); failing
that, the deepest frame of all.

A virtual-time event loop that can never wake up names where its suspended tasks wait (`innermost`, `where`).
"""

from __future__ import annotations

import functools
import os
import sysconfig
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

__all__ = ["innermost", "loop_frame", "where"]

_SIMLOOP = str(Path(__file__).resolve().parents[1]) + os.sep  # the simloop package (this is simloop/_runtime/)
_ADAPTERS = _SIMLOOP + "adapters" + os.sep
_LIBRARIES = tuple(
    {str(Path(p).resolve()) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
     if (p := sysconfig.get_paths().get(key))}
)


def loop_frame(error: BaseException) -> str | None:
    """``file:line in function`` of the frame that raised ``error`` in the loop's own code (see the module doc)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    user = library = None
    for f in frames:  # outermost first: the last match is the deepest
        path = _resolved(f.filename)
        if path.startswith(_SIMLOOP) and not path.startswith(_ADAPTERS):
            continue
        library = f
        if not (path.startswith(_ADAPTERS) or path.startswith(_LIBRARIES) or _is_library(path)):
            user = f
    chosen = user or library or frames[-1]
    return f"{_shown(chosen.filename)}:{chosen.lineno} in {chosen.name}"


def _is_library(path: str) -> bool:
    return f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path or path.startswith("<")


@functools.lru_cache(maxsize=1024)
def _resolved(filename: str) -> str:
    if filename.startswith("<"):
        return filename
    try:
        return str(Path(filename).resolve())
    except OSError:  # pragma: no cover - a path the OS cannot resolve is shown as recorded
        return filename


def _shown(filename: str) -> str:
    """The file relative to the working directory when it lies under it (stable across checkouts), else as is."""
    try:
        return str(Path(filename).resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return filename


def innermost(task: asyncio.Task[Any]) -> str | None:
    """``FILE:LINE in function`` of the innermost coroutine frame a suspended task waits in."""
    coro: Any = task.get_coro()
    found = None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        found = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return found


def where(task: asyncio.Task[Any]) -> str:
    """Where a suspended task waits: its chain of coroutine frames, outermost first, and what it awaits."""
    coro: Any = task.get_coro()
    chain = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            kind = type(coro).__name__
            chain.append(f"awaiting {'a Future' if kind == 'FutureIter' else kind}")
            break
        chain.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " -> ".join(chain) or "(not started)"
