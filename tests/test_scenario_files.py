"""The curated scenarios and the reference loops hold together.

Every file in scenarios/ loads as a v1 scenario and tells its story in a
comment header; every module in examples/ imports; `examples.catalogue` points
at modules and scenario files that exist, with invariant ids that exist; and,
once `simloop.Sim` is importable, every correct loop passes every scenario
while every defect loop breaks exactly the invariant the catalogue names.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from examples.catalogue import CONTEXT, CORRECT, DEFECTS, OPENAI

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
EXAMPLES = ROOT / "examples"
SCENARIO_FILES = sorted(p for p in SCENARIOS.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
MODULES = sorted(p.stem for p in EXAMPLES.glob("*.py") if p.stem != "__init__")
LOOP_MODULES = [m for m in MODULES if not m.startswith("_") and m not in ("catalogue", "demo")]
INVARIANT_IDS = (
    "stops",
    "pairing",
    "request_valid",
    "no_rerun",
    "truncation",
    "refusal",
    "honest_outcome",
    "limits",
    "tool_errors",
    "no_work_after_return",
    "crash",
    "results_sent",
    "results_together",
    "abort",
    "results_real",
    "approval",
    "subagent_honest",
)


def _docstring(module: str) -> str:
    """A module's docstring, read without importing it (so it works before simloop's runtime exists)."""
    return ast.get_docstring(ast.parse((EXAMPLES / f"{module}.py").read_text(encoding="utf-8"))) or ""


def _import_example(name: str) -> ModuleType:
    """Import ``examples.<name>``."""
    return importlib.import_module(f"examples.{name}")


# -- scenarios/ ----------------------------------------------------------------------------------------------


def test_scenarios_folder_has_the_curated_set() -> None:
    names = {p.name for p in SCENARIO_FILES}
    wanted = {scenario for scenario, _ in DEFECTS.values()}
    assert wanted <= names, f"catalogue scenarios missing from scenarios/: {sorted(wanted - names)}"
    assert len(names) >= 20


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_scenario_file_loads(path: Path) -> None:
    from simloop.scenario import load_scenario

    scenario = load_scenario(path)
    assert scenario.name == path.stem, "a scenario's name is its file name, so reports and files match"
    assert scenario.expect is not None, "every curated scenario says what a correct loop shows (expect:)"
    assert scenario.model, "a curated scenario scripts the model"


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_scenario_file_tells_its_story(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    assert header and header[0].startswith(f"# {path.stem}:"), "the header starts with '# <name>: <one line>'"
    text = " ".join(header)
    assert len(header) >= 6
    assert "correct loop" in text.lower(), "the header says what a correct loop does"


# -- examples/ -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_example_module_imports(name: str) -> None:
    module = _import_example(name)
    assert module.__doc__


@pytest.mark.parametrize("name", LOOP_MODULES)
def test_loop_module_exposes_drive_and_loop(name: str) -> None:
    module = _import_example(name)
    assert callable(module.drive)
    assert callable(module.run_agent), "the loop itself is a plain function, run_agent(client, tools, ...)"


def test_every_loop_module_is_catalogued() -> None:
    assert sorted(LOOP_MODULES) == sorted([*CORRECT, *DEFECTS, *CONTEXT, *{n.partition(":")[0] for n in OPENAI}])
    assert not set(CORRECT) & set(DEFECTS)
    assert not set(CONTEXT) & ({*CORRECT} | set(DEFECTS))


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_catalogue_entry_points_at_real_things(defect: str) -> None:
    scenario, invariant = DEFECTS[defect]
    assert (EXAMPLES / f"{defect}.py").is_file()
    assert (SCENARIOS / scenario).is_file()
    assert invariant in INVARIANT_IDS
    doc = _docstring(defect)
    assert doc.startswith("Defect"), "a defect module's docstring starts by naming the defect"
    assert f"``{invariant}``" in doc and scenario in doc, "the docstring names the catching invariant and scenario"


def test_catalogue_invariant_ids_are_simloops() -> None:
    from simloop.scenario import INVARIANT_IDS as ids

    assert tuple(ids) == INVARIANT_IDS
    assert all(m in MODULES for m in CORRECT)


# -- running the catalogue (needs simloop.Sim) ------------------------------------------------------------------


def _sim_class() -> type:
    from simloop import Sim

    return Sim


def _run(module_name: str, scenario_file: str) -> tuple[object, list[str]]:
    from simloop.scenario import load_scenario

    sim_cls = _sim_class()
    module = _import_example(module_name)
    with sim_cls(load_scenario(SCENARIOS / scenario_file), seed=0) as sim:
        outcome = sim.run(module.drive)
        report = sim.check(outcome)
    return outcome, [v.invariant for v in report.violations]


@pytest.mark.parametrize("scenario", [p.name for p in SCENARIO_FILES])
@pytest.mark.parametrize("loop", CORRECT)
def test_correct_loop_shows_what_the_scenario_expects(loop: str, scenario: str) -> None:
    from simloop.scenario import load_scenario

    expect = load_scenario(SCENARIOS / scenario).expect
    assert expect is not None
    outcome, broken = _run(loop, scenario)
    assert broken == list(expect.violations), f"{loop} on {scenario}: {outcome}"
    assert expect.allows(outcome.reason), f"{loop} on {scenario}: {outcome}"  # type: ignore[attr-defined]


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_loop_is_caught_by_exactly_its_invariant(defect: str) -> None:
    scenario, invariant = DEFECTS[defect]
    outcome, broken = _run(defect, scenario)
    assert sorted(set(broken)) == [invariant], f"{defect} on {scenario}: {broken} ({outcome})"


def test_demo_passes() -> None:
    _sim_class()
    demo = _import_example("demo")
    assert demo.main() == 0
