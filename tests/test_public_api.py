"""The public API is pinned: `simloop.__all__` is exactly the public namespace (docs/design.md, Public API)."""

from __future__ import annotations

import subprocess
import sys
import types

import simloop

PUBLIC = {
    "Fault",
    "FunctionModel",
    "InvariantViolation",
    "Limits",
    "ModelRequest",
    "Outcome",
    "Reply",
    "Report",
    "Scenario",
    "ScenarioError",
    "Script",
    "ScriptExhaustedError",
    "Sim",
    "SimloopInternalError",
    "ToolCall",
    "ToolSpec",
    "Transcript",
    "UsageError",
    "Violation",
    "load_scenario",
    "property",
    "replay",
    "strategies",
    "verify",
}


def test_all_is_the_pinned_public_api() -> None:
    assert sorted(simloop.__all__) == sorted(PUBLIC), "a public name was added or removed: update docs/design.md too"
    assert len(simloop.__all__) == len(set(simloop.__all__))


def test_all_is_exactly_the_public_namespace() -> None:
    # every name without a leading underscore is in __all__, except the submodules Python binds on import
    # and __version__
    public = {n for n in vars(simloop) if not n.startswith("_")}
    submodules = {n for n in public if isinstance(getattr(simloop, n), types.ModuleType)} - {"strategies"}
    assert public - submodules == set(simloop.__all__)


def test_each_public_name_imports_from_simloop() -> None:
    names = ", ".join(sorted(PUBLIC))
    code = f"from simloop import {names}; import simloop; print(simloop.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == simloop.__version__


def test_import_simloop_leaves_the_extras_alone() -> None:
    code = (
        "import sys, simloop; "
        "print(sorted(m for m in ('rich', 'vcr', 'simloop.cassettes', 'simloop.adapters', 'simloop.cli', 'mcp', 'uvicorn', "
        "'simloop.mcp', 'simloop.command', 'agents', 'litellm') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
