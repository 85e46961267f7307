"""A failure `verify` saves is a regression test: it fails on the defect loop and passes on the fixed one.

For every defect loop in examples/ with a correct twin: verify finds the defect, the saved file replays
the failure on the defect loop, and the same file replays cleanly on the twin (the script ends the way a
model would after the shrunk replies, and ``expect`` states the invariants, not the buggy run's ending).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import simloop
from examples.catalogue import ABORTS, APPROVALS, OWN_TOOLS, RESTARTS, TURNS, TWIN, VERIFY
from simloop.scenario import load_scenario


def _drive(name: str) -> simloop.sim.Drive:
    return importlib.import_module(f"examples.{name}").drive  # type: ignore[no-any-return]


@pytest.mark.parametrize("defect", sorted(TWIN))
def test_saved_failure_fails_on_the_defect_and_passes_on_its_twin(defect: str, tmp_path: Path) -> None:
    declared, _ = VERIFY[defect]
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(
            _drive(defect), limits=declared, max_examples=200, seed=0, out_dir=tmp_path, turns=TURNS.get(defect, 1),
            abort=defect in ABORTS, restarts=RESTARTS.get(defect, 0), approvals=defect in APPROVALS,
            tools=importlib.import_module(f"examples.{defect}").TOOLS if defect in OWN_TOOLS else None,
        )
    path = Path(found.value.scenario_path or "")
    assert path.parent == tmp_path and path.is_file()
    saved = load_scenario(path)
    assert saved.expect is not None and saved.expect.violations == [] and saved.expect.reason is None
    assert saved.then in ("end_turn", "repeat_last")

    with pytest.raises(simloop.InvariantViolation) as again:
        simloop.replay(_drive(defect), path)
    assert {v.invariant for v in again.value.violations} & {v.invariant for v in found.value.violations}

    report = simloop.replay(_drive(TWIN[defect]), path)  # raises if the fixed loop breaks it or runs out of script
    assert report.ok


def test_distinct_failures_keep_distinct_files(tmp_path: Path) -> None:
    # two different minimal failures of one loop and one invariant (found under different limits)
    drive = _drive("deadline_unchecked")
    paths = []
    for deadline in (60.0, 300.0):
        with pytest.raises(simloop.InvariantViolation) as found:
            simloop.verify(drive, limits={"deadline_s": deadline}, max_examples=200, seed=0, out_dir=tmp_path)
        assert f"written to {found.value.scenario_path}:" in str(found.value)
        paths.append(Path(found.value.scenario_path or ""))
    assert paths[0] != paths[1]
    assert all(p.is_file() for p in paths)
    assert all(p.name.startswith("deadline_unchecked-limits-") for p in paths)
    assert paths[0].read_text() != paths[1].read_text()
