"""Run the loop under test on interpreter stack space of its own (a CPython performance guard).

CPython keeps a thread's Python frames in chunks of memory (the first is 16 KiB).  A call that
does not fit in what is left of the current chunk gets a new chunk, mapped from the OS, and the
return from that call unmaps it again.  A loop whose calls keep going deeper right where a chunk
ends pays an ``mmap`` and a ``munmap`` on nearly every call and return there: under `verify`, the
``anthropic`` SDK ran two to three times slower at some depths than at others (``bench/stack.py``;
strace counted some 600 extra mappings per 10-call run).  Which depth is unlucky depends on everything above the
loop (pytest, Hypothesis, the Sim), so the Sim calls the loop through `on_fresh_stack`: a frame too
large for any chunk in use, which opens a chunk of its own (128 KiB) and leaves about 60 KiB above
itself, so the loop's calls come and go inside that one chunk.  It costs one mapping per run.

Elsewhere (another interpreter, a CPython whose frames live elsewhere) it is an ordinary call.

The mapping is not free (some 8 µs a call, and the page faults of a chunk never touched before), and a Sim
runs its loop on a worker thread that serves run after run: `hold_fresh_stack` runs such a thread's whole
job loop on one chunk of its own, kept for the thread's life, and `on_held_stack` then calls a job's
function directly there (the same room above it, no mapping per run).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["hold_fresh_stack", "on_fresh_stack", "on_held_stack"]

P = ParamSpec("P")
T = TypeVar("T")

# Frame slots (8 bytes each) the spacer frame reserves: 64 KiB, more than a chunk of the default size
# holds, so that CPython maps a chunk of 128 KiB for it (it sizes a chunk for the frame plus 1000 slots).
_SLOTS = 8 * 1024


def on_fresh_stack(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, called from a frame that starts a new stack chunk with room for deep calls."""
    return fn(*args, **kwargs)


try:  # the frame's size is the code's stack size plus its locals: a larger stack is space never used
    on_fresh_stack.__code__ = on_fresh_stack.__code__.replace(
        co_stacksize=on_fresh_stack.__code__.co_stacksize + _SLOTS
    )
except (AttributeError, TypeError, ValueError):  # pragma: no cover - an interpreter without CodeType.replace
    pass


_HELD: set[int] = set()  # threads running their job loop through `hold_fresh_stack`


def _after_fork() -> None:
    """A forked child has only the forking thread: the others' idents may be reused by new threads."""
    me = threading.get_ident()
    held = me in _HELD
    _HELD.clear()
    if held:
        _HELD.add(me)


os.register_at_fork(after_in_child=_after_fork)


def hold_fresh_stack(loop: Callable[[], None]) -> None:
    """``loop()``, a thread's whole job loop, on a fresh stack chunk that the thread keeps until it ends."""
    ident = threading.get_ident()
    _HELD.add(ident)
    try:
        on_fresh_stack(loop)
    finally:
        _HELD.discard(ident)


def on_held_stack(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`on_fresh_stack` for a job's own function, called near the base of a job of a `hold_fresh_stack` thread.

    There the job already runs a few frames above the start of a chunk of its own, with the same room above
    it: a direct call.  Anywhere else, `on_fresh_stack`.
    """
    if threading.get_ident() in _HELD:
        return fn(*args, **kwargs)
    return on_fresh_stack(fn, *args, **kwargs)
