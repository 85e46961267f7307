"""Find the loop's module-level aliases of the clock (``from time import monotonic``), for `simloop._runtime.clock`.

``from time import monotonic, sleep`` binds the real functions in the importing module at import time;
patching ``time.monotonic`` later does not reach them, so a deadline read through the alias would
read real time and a backoff through ``sleep`` would sleep for real.  freezegun answers this by
scanning every loaded module at each ``freeze_time`` (20-30 ms with the SDK loaded, libs.md E3); we
scan each module once per process and keep what we found, so a run costs a look at ``sys.modules``'
size and last entry, plus one identity check per alias found.  The first scan of a process (some 4,000
modules with the SDK loaded) asks each module in C whether any of its globals is one of ours and walks only
the few that answer yes (`bench/startup.py`: 5-6 ms of CPU on a loaded machine, 16-18 ms before).

Which modules, and what in them (docs/design.md, Virtual time):

* the clock functions (``time.time/time_ns/monotonic/monotonic_ns/perf_counter/perf_counter_ns/sleep``)
  in every module but the standard library's, simloop's own (its bundled examples are the user's),
  the test harness's (pytest, Hypothesis, freezegun, time-machine, coverage, xdist) and the SDKs' generated
  model definitions (``anthropic.types``, ``openai.types``: two thirds of a process's modules with the SDK
  loaded, and none binds a clock function, tests/test_clock.py): the loop may be an installed framework,
  and the replacements give other threads the real clock anyway;
* the ``datetime.datetime``/``datetime.date`` classes (``from datetime import datetime``, then
  ``datetime.now()``) only in the user's own modules (those not installed in site-packages): libraries
  bind the class for types and isinstance checks in hundreds of modules (the SDK alone in some 240),
  where swapping it would cost time at every run and break ``type(x) is datetime``.

A module is scanned when it first appears in ``sys.modules`` (a module replaced in place under the
same name, without a new entry, is not seen again).  Aliases outside module globals are out of reach:
in a closure, a default argument, a class attribute, an instance, or a C extension's own clock.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Mapping
from types import ModuleType
from typing import ClassVar

__all__ = ["Alias", "find_aliases"]

#: (module, attribute, key): the module global ``attribute`` held the real function or class ``key``
#: ("time.monotonic", "datetime.datetime", ...) when the module was scanned.
Alias = tuple[ModuleType, str, str]

#: Top-level packages that run the tests around a loop, never the loop: their clocks stay real.
HARNESS = frozenset({
    "_pytest", "pytest", "pluggy", "py", "pytest_simloop", "xdist", "execnet", "coverage", "pytest_cov",
    "hypothesis", "_hypothesis_pytestplugin", "_hypothesis_ftz_detector", "_hypothesis_globals",
    "freezegun", "time_machine", "_time_machine",
})
_STDLIB = frozenset(sys.stdlib_module_names)
#: Top-level packages whose aliases are never rebound: the standard library's, the harness's, simloop's own (but
#: ``simloop.examples``: the bundled examples are the user's).
_NEVER = _STDLIB | HARNESS | {"simloop"}
#: The SDKs whose ``<sdk>.types`` package (generated model definitions: some 3,000 modules in ``anthropic.types``)
#: is never scanned: it binds the ``datetime`` class for field types and never a clock function.
_SDKS = frozenset({"anthropic", "openai"})
_INSTALLED = tuple({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


class _Index:
    """What each module of ``sys.modules`` aliases, by module name; refreshed when ``sys.modules`` grew."""

    seen: ClassVar[dict[str, ModuleType]] = {}
    found: ClassVar[dict[str, list[Alias]]] = {}
    flat: ClassVar[list[Alias]] = []
    signature: ClassVar[tuple[int, str | None, object]] = (-1, None, None)


def _signature() -> tuple[int, str | None, object]:
    # Modules are added at the end of sys.modules (a dict keeps insertion order): its size and last entry
    # change whenever one is imported, re-imported or removed.
    modules = sys.modules
    try:
        last = next(reversed(modules))
    except (StopIteration, RuntimeError):  # empty, or changed by another thread meanwhile
        return (-1, None, None)
    return (len(modules), last, modules.get(last))


def find_aliases(functions: Mapping[int, str], classes: Mapping[int, str]) -> list[Alias]:
    """Every module global that held one of ``functions`` (``id(obj) -> key``) or, in the user's own
    modules, one of ``classes``; a cached list, rescanning only modules new since the last call.

    The caller checks each alias's value again before replacing it (a module may rebind its globals).
    """
    signature = _signature()
    if signature == _Index.signature and signature[0] != -1:
        return _Index.flat
    seen, found = _Index.seen, _Index.found
    current = {name: module for name, module in list(sys.modules.items()) if isinstance(module, ModuleType)}
    new = [(name, module) for name, module in current.items() if seen.get(name) is not module]
    for name in [n for n, aliases in found.items() if current.get(n) is not aliases[0][0]]:  # gone, or replaced
        del found[name]
    found.update(_scan(new, functions, classes))
    _Index.seen = current
    _Index.flat = [alias for aliases in found.values() for alias in aliases]
    _Index.signature = signature
    return _Index.flat


def _scan(
    modules: list[tuple[str, ModuleType]], functions: Mapping[int, str], classes: Mapping[int, str],
) -> dict[str, list[Alias]]:
    """The aliases in each of ``modules`` that holds any (by name), skipping the ones never rebound.

    The first run of a process scans some 4,000 modules (80,000 globals with the SDK loaded), all but a few
    hundred holding none: each is asked in C (``isdisjoint`` over the ids of its values, no Python frame per
    global) and only those that hold one are walked.
    """
    wanted = {**functions, **classes}
    ids = wanted.keys()
    found: dict[str, list[Alias]] = {}
    for name, module in modules:
        top, _, rest = name.partition(".")
        if top in _NEVER and not name.startswith("simloop.examples"):
            continue
        if top in _SDKS and rest.partition(".")[0] == "types":  # (two thirds of a process's modules with the SDK)
            continue
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is not dict:
            continue
        try:
            if ids.isdisjoint(map(id, namespace.values())):
                continue
            lookup = wanted if _own(name, module) else functions  # (installed packages keep the classes)
            if lookup is functions and functions.keys().isdisjoint(map(id, namespace.values())):
                continue
            hits = [(module, attr, lookup[id(value)]) for attr, value in namespace.items() if id(value) in lookup]
        except RuntimeError:  # the module is still being filled by another thread's import: look next time
            continue
        if hits:
            found[name] = hits
    return found


def _own(name: str, module: ModuleType) -> bool:
    """Whether the module is the user's own code (not an installed package); simloop's examples count."""
    if name.startswith("simloop.examples"):
        return True
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return True  # __main__ of ``python -c``, a module built in memory
    return not path.startswith(_INSTALLED) and "site-packages" not in path and "dist-packages" not in path
