"""The patches of a virtual-time run: what is replaced (the clock functions, the datetime classes, the event loop
factory, thread start and the waits), installed at a run's first ``patched()`` and put back at its last exit.

Besides the attributes themselves: freezegun's ``real_*`` (a ``freeze_time`` inside a run restores ours), pydantic's
view of ``datetime`` (`_show_pydantic_the_real_classes`), copyreg reducers (datetimes pickle while ours holds their
names: `simloop._runtime.datetimes`), and the loop's module-level aliases (`simloop._runtime.aliases`).  Why they come
and go with each run, not once per process: docs/design.md, Virtual time, and `simloop._runtime.clock`.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import copyreg
import datetime as _dt
import functools
import queue
import sys
import threading
import time
from collections.abc import Iterable
from operator import methodcaller
from types import ModuleType
from typing import Any, ClassVar

from simloop._runtime.aliases import find_aliases
from simloop._runtime.datetimes import REAL_DATETIME_MODULE, REDUCERS
from simloop._runtime.realtime import REAL
from simloop._runtime.registry import fakes, make_fake, saved

__all__ = ["install", "rebind", "tick_freezegun", "unbind", "uninstall"]


class _State:
    """What the installed patches hold, for all clocks (installed at the first `install`, undone at the last)."""

    users = 0  # active patched() contexts, all clocks
    applied: ClassVar[list[tuple[Any, str, Any, Any]]] = []  # (owner, attr, original, fake), install order
    aliases: ClassVar[dict[int, str]] = {}  # id(original) -> key, for patched(modules=...)
    rebinds: ClassVar[dict[tuple[int, str], list[Any]]] = {}  # (id(module), attr) -> [count, module, original]
    reducers: ClassVar[list[tuple[type, Any]]] = []  # (real class, our reducer) put in copyreg's dispatch table


# (`methodcaller`: the clock's method called from C, one Python frame less on every clock read of the run)
make_fake("time.time", methodcaller("time"))
make_fake("time.time_ns", lambda c: c._start_ns + c._ns)
make_fake("time.monotonic", methodcaller("monotonic"))
make_fake("time.perf_counter", methodcaller("monotonic"))
make_fake("time.monotonic_ns", methodcaller("_mono_ns"))
make_fake("time.perf_counter_ns", methodcaller("_mono_ns"))
make_fake("time.sleep", lambda c, seconds: c.sleep(seconds), takes_args=True)
make_fake("asyncio.events.new_event_loop", methodcaller("new_event_loop"))
make_fake("asyncio.new_event_loop", methodcaller("new_event_loop"))
make_fake("threading.Thread.start", lambda c, thread: c._start_thread(thread), takes_args=True)
make_fake("threading.Condition.wait", lambda c, cond, timeout=None: c._wait(cond, timeout), takes_args=True)
# What a thread receives from another: it has then lived up to the clock's time (see `VirtualClock.own_now`).
_SYNCS = ("threading.Thread.join", "threading.Event.wait", "queue.Queue.get", "concurrent.futures.Future.result",
          "concurrent.futures.Future.exception", "concurrent.futures.wait")
for _key in _SYNCS:
    make_fake(_key, functools.partial(lambda key, c, *a, **k: c._received(key, *a, **k), _key), takes_args=True)
# Deadline arithmetic of the waits above reads these aliases of time.monotonic, bound at import: on the
# virtual clock too, a wait that timed out there also ends there (Condition.wait_for, Queue.get).
make_fake("threading._time", methodcaller("monotonic"))
make_fake("queue.time", methodcaller("monotonic"))
_WALL = ("time.time", "time.time_ns", "datetime.datetime", "datetime.date")
_OWNERS: dict[str, Any] = {"builtins": builtins, "time": time, "datetime": _dt, "asyncio.events": asyncio.events, "asyncio": asyncio,
                           "threading.Thread": threading.Thread, "threading.Condition": threading.Condition,
                           "threading": threading, "queue": queue, "threading.Event": threading.Event,
                           "queue.Queue": queue.Queue, "concurrent.futures.Future": concurrent.futures.Future,
                           "concurrent.futures": concurrent.futures}
# (key, owner, attribute, fake, is a time/datetime attribute): worked out once, installed at every run.
_TARGETS = [
    (key, _OWNERS[owner_name], attr, fake, owner_name in ("time", "datetime"))
    for key, fake in fakes.items()
    for owner_name, attr in [key.rsplit(".", 1)]
]


# The real clock functions and classes as the alias scan looks for them (id -> the key of their fake).
_REAL_FUNCTIONS = {id(getattr(REAL, key[5:])): key for key in fakes if key.startswith("time.")}
_REAL_CLASSES = {id(REAL.datetime): "datetime.datetime", id(REAL.date): "datetime.date"}


def _freezegun() -> Any:
    api = sys.modules.get("freezegun.api")
    return api if api is not None and getattr(api, "freeze_factories", None) is not None else None


def install() -> None:
    _State.users += 1
    if _State.users > 1:
        return
    api = _freezegun()
    frozen = api is not None and bool(api.freeze_factories)  # a freeze_time is active: it owns the wall clock
    for key, owner, attr, fake, aliased in _TARGETS:
        if frozen and key in _WALL:
            continue
        saved[key] = original = getattr(owner, attr)
        setattr(owner, attr, fake)
        _State.applied.append((owner, attr, original, fake))
        if aliased:
            _State.aliases[id(original)] = key
            # A freeze_time entered inside the Sim restores freezegun.api.real_* on exit: make that us.
            if api is not None and getattr(api, "real_" + attr, None) is original:
                _State.applied.append((api, "real_" + attr, original, fake))
                setattr(api, "real_" + attr, fake)
    _show_pydantic_the_real_classes()
    if not frozen:  # datetimes pickled while ours holds their names (a freeze_time registers its own reducers)
        for cls, reducer in REDUCERS:
            if cls not in copyreg.dispatch_table:  # (someone else's reducer for it stays theirs)
                copyreg.dispatch_table[cls] = reducer
                _State.reducers.append((cls, reducer))
    _rebind_aliases()


def _show_pydantic_the_real_classes() -> None:
    """pydantic before 2.14 knows a model field's type by ``obj is datetime.datetime``, read when the schema is built
    (lazily, often during a run: the SDKs' and pydantic-ai's models), which is then our class: a field typed with
    the real ``datetime`` failed ("Unable to generate pydantic-core schema").  Its schema module gets a ``datetime``
    module of its own, with the real classes, while we are installed (put back with the other patches)."""
    schema = sys.modules.get("pydantic._internal._generate_schema")
    if schema is not None and getattr(schema, "datetime", None) is _dt:
        vars(schema)["datetime"] = REAL_DATETIME_MODULE
        _State.applied.append((schema, "datetime", _dt, REAL_DATETIME_MODULE))


def _rebind_aliases() -> None:
    """Point the loop's module-level aliases of the clock (``from time import monotonic``) at our functions.

    `simloop._runtime.aliases` finds them (scanning each module once per process); each is checked again here,
    since a module may have rebound it, and put back by `uninstall` unless someone replaced ours since.
    """
    for module, attr, key in find_aliases(_REAL_FUNCTIONS, _REAL_CLASSES):
        original = module.__dict__.get(attr)
        if _State.aliases.get(id(original)) == key and original is saved[key]:
            fake = fakes[key]
            setattr(module, attr, fake)
            _State.applied.append((module, attr, original, fake))


def uninstall() -> None:
    _State.users -= 1
    if _State.users > 0:
        return
    for owner, attr, original, fake in reversed(_State.applied):
        if getattr(owner, attr) is fake:  # someone patched over us and has not undone it: leave theirs
            setattr(owner, attr, original)
    for cls, reducer in _State.reducers:
        if copyreg.dispatch_table.get(cls) is reducer:
            del copyreg.dispatch_table[cls]
    _State.applied.clear()
    _State.reducers.clear()
    _State.aliases.clear()


def rebind(modules: Iterable[ModuleType]) -> list[tuple[int, str]]:
    done = []
    for module in modules:
        for attr, value in list(vars(module).items()):
            key = _State.aliases.get(id(value))
            slot = (id(module), attr)
            if slot in _State.rebinds:
                _State.rebinds[slot][0] += 1
            elif key is not None and value is saved[key]:
                _State.rebinds[slot] = [1, module, value]
                setattr(module, attr, fakes[key])
            else:
                continue
            done.append(slot)
    return done


def unbind(slots: list[tuple[int, str]]) -> None:
    for slot in slots:
        entry = _State.rebinds[slot]
        entry[0] -= 1
        if entry[0] == 0:
            del _State.rebinds[slot]
            setattr(entry[1], slot[1], entry[2])


def tick_freezegun(delta_ns: int) -> None:
    api = _freezegun()
    if api is None or not api.freeze_factories:
        return
    # A tick=True factory reads api.real_datetime.now(); when that is ours it already follows virtual time.
    follows = api.real_datetime is fakes["datetime.datetime"]
    for factory in api.freeze_factories:
        if not (follows and type(factory).__name__ == "TickingDateTimeFactory"):
            factory.tick(_dt.timedelta(microseconds=delta_ns / 1000))

