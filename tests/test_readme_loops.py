"""No false alarms: correct loops written from the README alone pass `verify` with every capability they claim.

The loops are in ``tests/loops/readme.py`` (plain SDK code: no tool ids, plain histories, the clock read through
``from time import monotonic``).  A violation here is simloop crying wolf.  ``bench/detect.py`` runs the same
loops over 20,000+ examples; the suite keeps a modest budget.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import simloop
from tests.loops.readme import LIMITS, LOOPS


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_a_correct_loop_written_from_the_readme_passes(name: str, tmp_path: Path) -> None:
    drive, claims = LOOPS[name]
    report = simloop.verify(drive, limits=LIMITS, max_examples=60, seed=7, out_dir=tmp_path, **claims)
    assert report.ok, report.violations
    assert report.examples >= 30
