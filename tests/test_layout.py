"""The package's shape holds (docs/design.md, Architecture): no two modules import each other, the layers
import downwards only, and the core needs neither pytest nor rich to import.

Read from the source with `ast`, imports inside functions included: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import simloop

ROOT = Path(simloop.__file__).parent

#: The simulator: what runs a loop.  The invariants are pure functions of a transcript and import none of it.
SIMULATOR = ("simloop.sim", "simloop._sim", "simloop.wire", "simloop.tools", "simloop.models", "simloop.generated",
             "simloop._runtime", "simloop.verify", "simloop.command", "simloop.mcp")
#: What stands on the run's machinery: the runtime imports none of it.
ABOVE_THE_RUNTIME = ("simloop.sim", "simloop._sim", "simloop.wire", "simloop.tools", "simloop.models", "simloop.generated",
                     "simloop.strategies", "simloop.verify", "simloop.command", "simloop.mcp", "simloop.cli",
                     "simloop.cassettes", "simloop.adapters", "simloop.report", "simloop._workers")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _targets(name: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The simloop modules an import statement in module ``name`` names (``from pkg import mod`` is ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        bases = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        bases = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    for target in bases:
        while target not in MODULES and "." in target:
            target = target.rpartition(".")[0]
        if target in MODULES and target != name:
            yield target


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = {t for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                       for t in _targets(name, node)}
    return graph


GRAPH = _graph()


def _closure(start: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        for target in GRAPH[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_graph_sees_the_known_edges() -> None:
    # the reader sees a module-level import, a lazy (function-level) one and `from pkg import mod as _mod`
    assert "simloop._runtime.realtime" in GRAPH["simloop._runtime.watchdog"]
    assert "simloop._runtime.halt" in GRAPH["simloop._runtime.clock"]
    assert "simloop._workers" in GRAPH["simloop._campaign.engine"]
    assert "simloop._runtime.process" in GRAPH["simloop._sim.runner"]
    assert "simloop._sim.clients" in GRAPH["simloop.sim"]  # `from simloop._sim import clients as _clients`
    assert "simloop._runtime.process" in GRAPH["simloop.cli._main"]  # lazy, and `from simloop._runtime import process`


def test_no_two_modules_import_each_other() -> None:
    pairs = sorted((a, b) for a, targets in GRAPH.items() for b in targets if a < b and a in GRAPH[b])
    assert pairs == [], f"modules that import each other (break it: inject, or move the shared piece): {pairs}"


def test_the_clock_does_not_import_the_watchdog() -> None:
    assert "simloop._runtime.watchdog" not in _closure({"simloop._runtime.clock"})


#: Virtual time's pieces below the clock (docs/design.md, Virtual time): each its own job, none reaching up to it.
CLOCK_PARTS = ("simloop._runtime.realtime", "simloop._runtime.registry", "simloop._runtime.datetimes",
               "simloop._runtime.patches", "simloop._runtime.aliases", "simloop._runtime.threadtime")


def test_the_event_loop_stands_below_the_clock_that_makes_it() -> None:
    # the clock makes its loops (and re-exports the loop's names); the loop reads the clock as a value it is given
    loop_parts = {"simloop._runtime.eventloop", "simloop._runtime.jobs", "simloop._runtime.sockets"}
    assert loop_parts <= _closure({"simloop._runtime.clock"})
    assert "simloop._runtime.clock" not in _closure(loop_parts)


def test_virtual_times_pieces_stand_below_the_clock() -> None:
    assert set(CLOCK_PARTS) <= set(GRAPH["simloop._runtime.clock"]) | _closure({"simloop._runtime.clock"})
    reached = sorted(m for m in _closure(set(CLOCK_PARTS)) if not _in(m, CLOCK_PARTS))
    assert reached == [], f"the clock's pieces reach {reached}: they stand below the clock and import only each other"


def test_the_invariants_import_nothing_of_the_simulator() -> None:
    invariants = {m for m in MODULES if _in(m, ("simloop.invariants",))}
    reached = sorted(m for m in _closure(invariants) if _in(m, SIMULATOR))
    assert reached == [], f"the invariants reach the simulator through {reached}"


#: What each wire accepts, refuses and writes: pure, the bottom of the package.
PROTOCOL = ("simloop.protocol",)
#: The simulated API's server: parses, plans and delivers, on the protocol and the run.
SERVER = ("simloop.wire",)
#: The run below the server: what it plans and records with.
THE_RUN = ("simloop.models", "simloop.tools", "simloop.transcript", "simloop.scenario", "simloop._runtime")


def test_the_protocol_imports_nothing_of_simloop_but_itself() -> None:
    protocol = {m for m in MODULES if _in(m, PROTOCOL)}
    assert {"simloop.protocol.validate", "simloop.protocol.render", "simloop.protocol.openai_chat",
            "simloop.protocol.openai_responses", "simloop.protocol.openai_rules", "simloop.protocol.servertools",
            "simloop.protocol.errors"} <= protocol, "the three wires' rules and formats live in simloop/protocol/"
    reached = sorted(m for m in _closure(protocol) if not _in(m, PROTOCOL))
    assert reached == [], f"the protocol reaches {reached}: pass the value in, or move the piece to simloop.wire"


def test_the_server_stands_on_the_protocol_and_the_run_never_the_reverse() -> None:
    server = {m for m in MODULES if _in(m, SERVER)}
    assert {"simloop.wire.server", "simloop.wire.transport", "simloop.wire.loopback"} <= server
    assert "simloop.protocol.validate" in GRAPH["simloop.wire.server"]
    assert "simloop.models" in GRAPH["simloop.wire.server"]
    below = {m for m in MODULES if _in(m, PROTOCOL + THE_RUN + ("simloop.invariants", "simloop.generated"))}
    reached = sorted(m for m in _closure(below) if _in(m, SERVER))
    assert reached == [], f"the protocol or the run reaches up to the server through {reached}"


def test_the_protocol_and_the_server_stand_below_the_sim() -> None:
    assert "simloop.wire.server" in GRAPH["simloop.sim"]
    # the loopback server may serve the tools over MCP beside the API (simloop.mcp stands on no Sim either)
    both = {m for m in MODULES if _in(m, PROTOCOL + SERVER)}
    above = ("simloop.sim", "simloop._sim", "simloop.verify", "simloop._campaign", "simloop.strategies", "simloop.command",
             "simloop.cli", "simloop.adapters", "simloop.cassettes")
    reached = sorted(m for m in _closure(both) if _in(m, above))
    assert reached == [], f"the protocol or the server reaches up to {reached}"


def test_the_sims_pieces_stand_below_the_sim() -> None:
    # the facade delegates to them; they get the parts of the world they need, never import the Sim
    pieces = {m for m in MODULES if _in(m, ("simloop._sim",))}
    assert {"simloop._sim.clients", "simloop._sim.lives", "simloop._sim.runner", "simloop._sim.mcptools"} <= pieces
    assert {"simloop._sim.clients", "simloop._sim.runner"} <= GRAPH["simloop.sim"]
    reached = sorted(m for m in _closure(pieces) if _in(m, ("simloop.sim", "simloop.verify", "simloop._campaign")))
    assert reached == [], f"the Sim's pieces reach up to {reached}: pass the part in instead"


def test_the_runtime_imports_nothing_that_stands_on_it() -> None:
    runtime = {m for m in MODULES if _in(m, ("simloop._runtime",))}
    reached = sorted(m for m in _closure(runtime) if _in(m, ABOVE_THE_RUNTIME))
    assert reached == [], f"the run's machinery (simloop._runtime) reaches up to {reached}"


def test_the_core_imports_neither_pytest_nor_rich_at_module_level() -> None:
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _module_level(tree.body):
            tops = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if node.level == 0 else [])
            found += [f"{name}: {top}" for top in tops if top.split(".")[0] in ("pytest", "_pytest", "rich")]
    assert found == []


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (``if TYPE_CHECKING:`` blocks left out)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body + node.orelse + node.finalbody
                                     + [s for h in node.handlers for s in h.body])


def test_a_private_package_names_its_modules_without_an_underscore() -> None:
    # the rule of the layout: the underscore marks the first private level of a dotted path, once
    for name in MODULES:
        parts = name.split(".")
        private = [part for part in parts if part.startswith("_") and not part.startswith("__")]
        assert len(private) <= 1, f"{name}: one underscore per path, at its first private level"


#: Functions allowed past `LONGEST` lines, each with the reason it reads better whole (none today).
LONG_ON_PURPOSE: dict[str, str] = {}
LONGEST = 60


def test_no_function_in_simloop_is_longer_than_a_reader_can_see_whole() -> None:
    """No function (methods and nested functions included) over 60 lines: a longer one wants another seam."""
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                where = f"{name}::{node.name}"
                if lines > LONGEST and where not in LONG_ON_PURPOSE:
                    long.append(f"{where} ({lines} lines)")
    assert long == [], f"functions over {LONGEST} lines: {sorted(long)}"


def test_every_package_of_simloop_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages (it maps examples/ and scenarios/ in): a new one left out would be missing
    from every install while the checkout works (tests/test_wheel.py finds it too, slowly)."""
    import tomllib

    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert packages - listed == set()


#: The facades users know, each delegating to its pieces: the most lines each may take (docstrings included).
FACADES = {"simloop.sim": ("Sim", 260), "simloop.wire.server": ("SimServer", 240)}


@pytest.mark.parametrize("module", sorted(FACADES))
def test_the_facades_stay_short_and_delegate(module: str) -> None:
    """`Sim` and `SimServer` hand each concern to a piece of its own (simloop/_sim/, simloop/wire/): a new concern
    is a piece, not more lines here."""
    name, most = FACADES[module]
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    lines = (cls.end_lineno or cls.lineno) - cls.lineno + 1
    assert lines <= most, f"{name} is {lines} lines (most {most}): move its new concern into a piece of its own"
