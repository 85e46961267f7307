"""A process's first run does simloop's once-per-process work for what its drive runs on, and no more."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_FIRST_RUNS = textwrap.dedent("""
    import sys
    import simloop
    from examples import correct_async, correct_sync

    BACKEND = "anyio._backends._asyncio"
    seen = [BACKEND in sys.modules]
    for drive in (correct_sync.drive, correct_async.drive):
        outcome = simloop.Sim("scenarios/happy-path.yaml").run(drive)
        seen += [outcome.reason, BACKEND in sys.modules]
    print(*seen)
""")


def test_a_sync_drives_first_run_leaves_out_the_async_machinery_an_async_drive_gets() -> None:
    # The warm-up made an async call on a virtual-time loop for every drive: anyio's asyncio backend imported
    # (some 10 ms of CPU, a third of simloop's part of a process's first run) for loops that never await.
    child = subprocess.run([sys.executable, "-c", _FIRST_RUNS], cwd=ROOT, check=False, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    seen = child.stdout.split()
    if seen[0] == "True":
        pytest.skip("the installed SDK imports anyio's asyncio backend itself")
    assert seen == ["False", "final", "False", "final", "True"]
