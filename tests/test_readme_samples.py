"""The README's sample outputs match what simloop prints now (`bench/readme_samples.py`, `make readme`)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from _modules import load

ROOT = Path(__file__).resolve().parents[1]



def _script() -> ModuleType:
    return load("readme_samples", ROOT / "bench" / "readme_samples.py")


def test_the_readme_samples_are_what_a_real_run_prints() -> None:
    moved = load("lockdiff", ROOT / ".ci" / "lockdiff.py").moved(ROOT / "constraints.txt")
    if moved:  # make test-latest, make test-floor: the SDK's own texts (its errors' str()) differ between releases
        pytest.skip("the README's samples are made with the locked releases (constraints.txt); here:\n"
                    + "\n".join(moved))
    script = _script()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    fresh = script.samples()
    assert set(script.written(readme)) == {"demo", "quickstart"}
    diff = script.stale(readme, fresh)
    assert not diff, f"the README's samples are stale: run `make readme`\n{diff}"


def test_a_stale_sample_is_reported_and_rewritten() -> None:
    script = _script()
    readme = "intro\n<!-- sample: demo -->\n```\nold output in 0.7s\n```\nafter\n"
    fresh = {"demo": "new output in 3.1s"}
    assert "-old output in N.Ns" in script.stale(readme, fresh)
    rewritten = script.rewrite(readme, fresh)
    assert rewritten == "intro\n<!-- sample: demo -->\n```\nnew output in 3.1s\n```\nafter\n"
    assert script.stale(rewritten, {"demo": "new output in 9.9s"}) == ""  # durations differ from run to run
    assert "has no '<!-- sample: quickstart -->' block" in script.stale(readme, {"quickstart": "x"})


def test_the_readme_lists_every_outcome_reason_and_no_other() -> None:
    from simloop.outcome import REASONS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| reason | the loop stopped because |"):]
    table = table[: table.index("\n\n")]
    listed = [row.split("`")[1] for row in table.splitlines()[2:]]
    assert listed == list(REASONS)
