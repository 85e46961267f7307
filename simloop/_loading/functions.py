"""Resolving a tool's ``function: "pkg.module:fn"`` import path, only into the user's own code.

A scenario file is data, so naming code in it is refused unless the person running it opts in
(``allow_functions=True``, ``simloop run --allow-functions``).  Even then the path must lead to a
callable defined in the user's own modules: never the standard library, an installed package
(site-packages) or simloop itself, so ``subprocess:getoutput`` or ``os:system`` are refused before
anything is imported.  See docs/security.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import site
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

from simloop.errors import UsageError

__all__ = ["FUNCTIONS_OPT_IN", "resolve_function"]

#: How the person running a scenario opts in to its ``function:`` paths (quoted in error messages).
FUNCTIONS_OPT_IN = "allow_functions=True (simloop run --allow-functions)"
_NOT_OURS = frozenset({"simloop", "pytest_plugin"})


def resolve_function(path: str, *, tool: str) -> Callable[..., Any]:
    """The callable ``path`` (``"package.module:function"``) names, if it is the user's own code.

    Raises:
        UsageError: the path is malformed, leads outside the user's modules, cannot be imported or
            is not callable; the message says which and what to do.
    """
    module, sep, attr = path.partition(":")
    parts = attr.split(".")
    names = [*module.split("."), *parts]
    if not sep or not all(n.isidentifier() for n in names):
        raise UsageError(f"tool {tool!r}: function {path!r} is not of the form 'package.module:function'")
    if any(p.startswith("__") for p in parts):
        raise UsageError(f"tool {tool!r}: function {path!r} names a dunder attribute; name a function of your module")
    _check_user_module(module, path=path, tool=tool)
    try:
        target: Any = importlib.import_module(module)
        for part in parts:
            target = getattr(target, part)
    except Exception as e:  # noqa: BLE001 - any failure to import the user's module is reported, said plainly
        raise UsageError(
            f"tool {tool!r}: cannot import function {path!r} ({type(e).__name__}: {e}); "
            "use the form 'package.module:function', importable from the current directory"
        ) from None
    if not callable(target):
        raise UsageError(f"tool {tool!r}: function {path!r} is a {type(target).__name__}, not a function")
    defined_in = getattr(target, "__module__", None)
    if not isinstance(defined_in, str):
        raise UsageError(f"tool {tool!r}: function {path!r} is not a function defined in your own module")
    if defined_in.partition(".")[0] != module.partition(".")[0]:
        _check_user_module(defined_in, path=path, tool=tool, via=True)
    return target  # type: ignore[no-any-return]


def _check_user_module(module: str, *, path: str, tool: str, via: bool = False) -> None:
    """Refuse a module that is not the user's own, without importing it."""
    top = module.partition(".")[0]
    shown = f"{path!r} (defined in {module})" if via else repr(path)
    refusal = (
        f"tool {tool!r}: function {shown} is not in your own code; a scenario may name only functions of your "
        "modules, never the standard library, an installed package or simloop. Bind other callables in Python: "
        "Sim(scenario, tools={" + repr(tool) + ": fn})"
    )
    if top in _NOT_OURS or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise UsageError(refusal)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise UsageError(
            f"tool {tool!r}: cannot import function {path!r} (no module named {top!r}); "
            "use the form 'package.module:function', importable from the current directory"
        )
    places = list(spec.submodule_search_locations or [])
    if spec.origin and spec.has_location:
        places.append(spec.origin)
    if not places or not all(_is_user_path(p) for p in places):
        raise UsageError(refusal)


def _system_roots() -> list[str]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages())
    roots.update(p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages"))
    return [os.path.realpath(r) for r in roots if r]


def _is_user_path(place: str) -> bool:
    real = os.path.realpath(place)
    return not any(real == root or real.startswith(root + os.sep) for root in _system_roots())
