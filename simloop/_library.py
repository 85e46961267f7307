"""The reference loops and curated scenarios that ship with simloop, found in a checkout or installed.

In a checkout they are the folders ``examples/`` (the package ``examples``) and ``scenarios/``; the
wheel ships the same files as the package ``simloop.examples`` and the data folder
``simloop/scenarios`` (see pyproject.toml: the folders are mapped, not moved).  Drive specs written
for a checkout (``examples.correct_sync:drive``) therefore also work installed: `import_drive_module`
falls back to ``simloop.examples``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from simloop.errors import UsageError

__all__ = ["examples_module", "import_drive_module", "installed_name", "scenarios_dir"]

_HERE = Path(__file__).resolve().parent


def installed_name(module_name: str) -> str | None:
    """``examples.x`` -> ``simloop.examples.x`` (the name the wheel ships it under); None for other modules."""
    if module_name == "examples" or module_name.startswith("examples."):
        return "simloop." + module_name
    return None


def import_drive_module(module_name: str) -> ModuleType:
    """Import a drive's module; ``examples.*`` falls back to the installed ``simloop.examples.*``.

    A file path (``loops/agent.py``) is imported as ``python loops/agent.py`` would find it: under its
    dotted name from the first folder above it that is not a package, which goes first on ``sys.path``.
    """
    if module_name.endswith(".py"):
        module_name = _module_of_file(Path(module_name))
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        fallback = installed_name(module_name)
        if fallback is None or e.name != "examples":
            raise
        try:
            return importlib.import_module(fallback)
        except ModuleNotFoundError:
            raise e from None


def _module_of_file(path: Path) -> str:
    """``examples/openai_loop.py`` -> ``examples.openai_loop``, with the folder that holds ``examples`` importable."""
    path = path.resolve()
    if not path.is_file():
        raise ModuleNotFoundError(f"no file {path}", name=str(path))
    parts = [path.stem]
    root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        parts.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return ".".join(parts)


def examples_module(name: str) -> ModuleType:
    """The reference loop module ``name`` (``correct_sync``, ``demo``...), from a checkout or installed."""
    return import_drive_module(f"examples.{name}")


def scenarios_dir() -> Path:
    """The folder of curated scenario files: installed next to the package, or a checkout's ``scenarios/``."""
    for candidate in (_HERE / "scenarios", _HERE.parent / "scenarios"):
        if (candidate / "happy-path.yaml").is_file():
            return candidate
    raise UsageError(
        f"simloop's curated scenarios are not installed (looked in {_HERE / 'scenarios'}); reinstall simloop "
        "from its wheel, or use a checkout's scenarios/ folder"
    )
