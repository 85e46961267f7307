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
    report = simloop.verify(drive, **{"limits": LIMITS, **claims}, max_examples=60, seed=7, out_dir=tmp_path)
    assert report.ok, report.violations
    assert report.examples >= 30


#: The claims each loop states on the command line (the same names as verify's options).
CLAIMS = {"plain": [], "conversation": ["--abort", "--turns", "3"], "durable": ["--restarts", "1"],
          "async_stop": ["--abort"], "gated": ["--claims", "approvals"], "gated_review": ["--claims", "approvals"],
          "delegating": []}
# (not the budgeted loop: a cent a task is its own choice, and some of the library's files cost more)


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_the_curated_library_passes_a_correct_loop_and_skips_what_it_does_not_claim(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simloop run scenarios/ --drive LOOP`` exits 0 on a correct loop, naming each file it skipped and why."""
    from simloop.cli import main

    code = main(["run", "scenarios", "--drive", f"tests.loops.readme:{name}", *CLAIMS[name]])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = out.strip().splitlines()[-1]
    assert " 0 failed" in summary and "skipped" in summary, summary
    assert "skip" in out and "if your loop has" in out  # each skipped file says what to pass
