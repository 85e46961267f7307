"""``make demo``: check the reference loop on every curated scenario, then show a bug being caught.

Runs `examples.correct_sync` on each file in scenarios/ (every invariant must
hold and the outcome must match the file's ``expect:``), then runs
`examples.stop_not_tool_use_as_done` (the "anything but tool_use means done"
stop rule) on scenarios/max-tokens-thinking.yaml and prints simloop's report
and the run's timeline.  Exits 0 when the correct loop passes and the bug is
caught, 1 otherwise.

    python -m examples.demo
"""

from __future__ import annotations

import sys
from pathlib import Path

import simloop
from examples import correct_sync, stop_not_tool_use_as_done
from simloop.scenario import Expect
from simloop.timeline import render_timeline

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def main() -> int:
    """Run the demo; returns the process exit code."""
    ok = True
    print("correct_sync on every curated scenario:")
    for path in sorted(SCENARIOS.glob("*.yaml")):
        scenario = simloop.load_scenario(path)
        with simloop.Sim(scenario, seed=0) as sim:
            outcome = sim.run(correct_sync.drive)
            report = sim.check(outcome)
        expect = scenario.expect or Expect()
        good = [v.invariant for v in report.violations] == expect.violations and (
            expect.reason is None or outcome.reason == expect.reason
        )
        ok &= good
        print(f"  {'ok ' if good else 'BAD'} {path.name:32} {outcome.reason:13} {len(report.violations)} violation(s)")

    print("\nstop_not_tool_use_as_done on max-tokens-thinking.yaml:")
    with simloop.Sim(SCENARIOS / "max-tokens-thinking.yaml", seed=0) as sim:
        outcome = sim.run(stop_not_tool_use_as_done.drive)
        report = sim.check(outcome)
    print(report)
    print(render_timeline(sim.transcript, report.violations))
    caught = [v.invariant for v in report.violations] == ["truncation"]
    print("\n" + ("demo ok: the correct loop passes and the bug is caught" if ok and caught else "demo FAILED"))
    return 0 if ok and caught else 1


if __name__ == "__main__":
    sys.exit(main())
