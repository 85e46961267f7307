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
    assert seen == ["False", "final", "False", "final", "False"]  # the async drive uses no anyio thread


_BACKEND_MID_RUN = textwrap.dedent("""
    import asyncio, sys
    import simloop
    from simloop._runtime.clock import VirtualClock

    BACKEND = "anyio._backends._asyncio"
    clock = VirtualClock()
    seen = ["anyio" in sys.modules or BACKEND in sys.modules]

    async def main():
        await asyncio.sleep(1)
        import anyio.to_thread  # the backend first loads in the run, on a virtual loop that is already running
        await asyncio.gather(asyncio.to_thread(clock.sleep, 3), anyio.to_thread.run_sync(clock.sleep, 2),
                             asyncio.sleep(1))

    clock.run(main())
    seen += [BACKEND in sys.modules, clock.now(), type(sys.modules[BACKEND].__loader__).__name__ != "_TellingLoader"]
    clock.run(main())  # and on a later loop, the backend loaded before it started
    print(*seen, clock.now(), [type(f).__name__ for f in sys.meta_path if "Backend" in type(f).__name__])
""")


def test_anyio_threads_count_as_jobs_when_anyio_loads_its_backend_mid_run() -> None:
    # The clock patches anyio's worker-thread call to count it as a job of the loop.  It imported anyio's asyncio
    # backend to do so when a loop started (for a drive that never uses it, 10 ms of a first run); it now patches it
    # once anyio loads it: here in the middle of a run, where the jobs' sleeps must still overlap (1 + 3, not 1 + 5);
    # the module keeps its own loader, and the import hook is gone once it has fired.
    child = subprocess.run([sys.executable, "-c", _BACKEND_MID_RUN], cwd=ROOT, check=False, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["False", "True", "4.0", "True", "8.0", "[]"], child.stdout
