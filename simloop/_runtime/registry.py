"""The patch registry of virtual time: which thread runs on which clock, what was replaced, and by what.

Shared by the clock (`simloop._runtime.clock`), the datetime substitutes (`simloop._runtime.datetimes`) and the
patches that install them (`simloop._runtime.patches`).  Each replacement made by `make_fake` first looks up the
calling thread: one on a clock reads it, any other falls through to the saved original.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LOCK", "TLS", "fakes", "get_ident", "make_fake", "saved", "threads"]

threads: dict[int, Any] = {}  # thread ident -> its VirtualClock, only while some clock is patched
saved: dict[str, Any] = {}  # "module.attr" -> what it held before we patched it (kept after exit)
fakes: dict[str, Any] = {}  # "module.attr" -> our replacement
get_ident = threading.get_ident
LOCK = threading.RLock()
TLS = threading.local()  # .job: the Job (of a VirtualTimeEventLoop) this executor thread is running


def make_fake(key: str, virtual: Callable[..., Any], *, takes_args: bool = False) -> Callable[..., Any]:
    """Register and return the replacement for ``key`` ("module.attr"): ``virtual(clock, ...)`` in threads on a clock."""

    def fake0() -> Any:  # the clock readers: no argument packing on the hot path of foreign threads
        clock = threads.get(get_ident())
        return saved[key]() if clock is None else virtual(clock)

    def fake(*args: Any, **kwargs: Any) -> Any:
        clock = threads.get(get_ident())
        if clock is None:
            return saved[key](*args, **kwargs)
        return virtual(clock, *args, **kwargs)

    if not takes_args:
        fake = fake0
    owner, fake.__name__ = key.rsplit(".", 1)
    owner = owner.rsplit(".", 1)[-1]  # a method's fake is named as the method is (Event.wait), a function's as it is
    fake.__qualname__ = f"{owner}.{fake.__name__}" if owner[:1].isupper() else fake.__name__
    fake.__doc__ = f"simloop: {key} on the VirtualClock in threads that run on one, the original elsewhere."
    fakes[key] = fake
    return fake
