"""Campaigns over cores and machines: ``verify(..., workers=N)``, ``--workers``, ``--database`` (a directory or
Redis, with Hypothesis's own database classes).

The Redis test starts a real ``redis-server`` on 127.0.0.1 and is skipped with its reason when the server
(Debian's ``redis-server`` package) or the ``redis`` Python package is absent.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import simloop
from examples import correct_sync, rerun_after_api_error
from simloop.cli import main
from simloop.verify import example_database

ROOT = Path(__file__).resolve().parents[1]


def test_two_workers_share_the_budget_of_a_loop_that_holds(tmp_path: Path) -> None:
    report = simloop.verify(correct_sync.drive, max_examples=60, workers=2, seed=4, out_dir=tmp_path)
    assert report.ok and report.examples == 60


def test_the_first_failure_stops_the_other_worker_and_is_shrunk_once(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(rerun_after_api_error.drive, max_examples=400, workers=2, seed=4, out_dir=tmp_path)
    assert {v.invariant for v in caught.value.violations} == {"no_rerun"}
    assert [p.name for p in tmp_path.iterdir()] == [Path(str(caught.value.scenario_path)).name]  # one shrink, one file
    assert simloop.replay(correct_sync.drive, str(caught.value.scenario_path)).ok  # the fixed loop passes it


def test_workers_must_be_a_positive_count() -> None:
    with pytest.raises(simloop.UsageError, match=r"verify\(workers=...\): a number of processes, 1 or more; got 0"):
        simloop.verify(correct_sync.drive, workers=0)


def test_the_command_line_takes_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["verify", "examples.rerun_after_api_error:drive", "--workers", "2", "--max-examples", "300", "--seed", "2",
            "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 1
    assert "no_rerun broken" in capsys.readouterr().out


_DIES = textwrap.dedent("""
    import os, signal, threading
    from examples import correct_sync

    runs = 0

    def drive(sim):
        # the third run of whichever worker gets there first dies as if the OOM killer took it (a SIGKILL from
        # outside the loop's own calls: os.kill of its own process would be the loop's outcome, see simloop._runtime.process)
        global runs
        runs += 1
        if runs == 3:
            try:
                os.close(os.open(os.environ["SIMLOOP_TEST_DIES"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGKILL)
        return correct_sync.drive(sim)
""")


@pytest.fixture
def dying_drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``dies:drive``, importable from the current directory: one worker's third run kills its process."""
    (tmp_path / "dies.py").write_text(_DIES)
    monkeypatch.setenv("SIMLOOP_TEST_DIES", str(tmp_path / "died"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dies", raising=False)
    return "dies:drive"


def test_a_worker_killed_mid_campaign_is_reported_as_such(dying_drive: str, tmp_path: Path) -> None:
    from dies import drive  # type: ignore[import-not-found]

    with pytest.raises(simloop.errors.WorkerDied) as caught:
        simloop.verify(drive, max_examples=40, workers=2, seed=4, out_dir=tmp_path / "out")
    died = caught.value
    assert (died.signal, died.run, died.workers) == ("SIGKILL", 3, 2)
    assert died.seed is not None
    assert f"worker {died.worker + 1} of 2 was killed by SIGKILL during its run 3; the other workers ran" in str(died)
    assert f"search in one process: workers=1, seed={died.seed}, max_examples=20" in str(died)


def test_the_command_line_reports_a_dead_worker_without_a_traceback(
    dying_drive: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["verify", dying_drive, "--workers", "2", "--max-examples", "40", "--seed", "4", "--out",
            str(tmp_path / "out"), "--no-progress"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "was killed by SIGKILL during its run 3" in captured.out and "FAILED: a worker died" in captured.out
    assert "--workers 1 --seed" in captured.out
    assert "Traceback" not in captured.out + captured.err


# -- the example database ------------------------------------------------------------------------------------------


def test_a_failure_saved_in_a_directory_database_is_replayed_first(tmp_path: Path) -> None:
    sims: list[simloop.Sim] = []

    def drive(sim: simloop.Sim) -> Any:
        sims.append(sim)
        return rerun_after_api_error.drive(sim)

    database = tmp_path / "db"
    for _ in range(2):
        sims.clear()
        with pytest.raises(simloop.InvariantViolation):
            simloop.verify(drive, max_examples=300, database=database, out_dir=tmp_path / "out")
    assert not sims[0].check().ok  # the second search's first run is the failure the first one saved


def test_the_database_takes_a_directory_a_redis_url_or_a_database(tmp_path: Path) -> None:
    from hypothesis.database import DirectoryBasedExampleDatabase, InMemoryExampleDatabase

    assert isinstance(example_database(tmp_path), DirectoryBasedExampleDatabase)
    memory = InMemoryExampleDatabase()
    assert example_database(memory) is memory
    with pytest.raises(simloop.UsageError, match="give a directory, a redis:// URL or a hypothesis ExampleDatabase"):
        example_database(42)


def test_a_regular_file_is_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "examples.db"
    file.write_text("not a directory")
    args = ["verify", "examples.correct_sync:drive", "--database", str(file), "--max-examples", "5", "--no-progress"]
    assert main(args) == 2
    assert f"database {str(file)!r} is a file, not a directory: give a directory (made if missing)" in (
        capsys.readouterr().err.replace("\n", " ")
    )
    with pytest.raises(simloop.UsageError, match="cannot be made: .* is not a directory simloop can write to"):
        example_database(file / "below")


def test_an_unreachable_redis_is_a_usage_error_before_the_search(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("redis", reason="the redis Python package is not installed (pip install redis)")
    url = f"redis://127.0.0.1:{_free_port()}/0"  # loopback, a port nothing listens on
    runs: list[simloop.Sim] = []
    with pytest.raises(simloop.UsageError, match=r"the Redis server did not answer \(ConnectionError: .*\); start it"):
        simloop.verify(runs.append, database=url, workers=2, max_examples=4, out_dir=tmp_path)
    assert runs == []  # checked before the search started
    assert main(["verify", "examples.correct_sync:drive", "--database", url, "--no-progress"]) == 2
    assert f"database {url!r}: the Redis server did not answer" in capsys.readouterr().err.replace("\n", " ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real redis-server on 127.0.0.1, started for the test and stopped after it."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    pytest.importorskip("redis", reason="the redis Python package is not installed (pip install redis)")
    port = _free_port()
    proc = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # its own readiness signal
            if "Ready to accept connections" in line:
                break
        else:
            pytest.fail(f"redis-server exited before it was ready (code {proc.wait()})")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


_MACHINE = textwrap.dedent("""
    import sys, simloop
    from examples import rerun_after_api_error
    runs = []
    def drive(sim):
        runs.append(sim)
        return rerun_after_api_error.drive(sim)
    drive.__module__, drive.__qualname__ = "machine", "drive"
    try:
        simloop.verify(drive, max_examples=300, database=sys.argv[1], out_dir=sys.argv[2])
    except simloop.InvariantViolation:
        print("first run failed" if not runs[0].check().ok else "found later")
""")


def test_two_machines_share_a_redis_database(redis_url: str, tmp_path: Path) -> None:
    outputs = []
    for n in range(2):  # two processes, as two CI machines would be
        done = subprocess.run([sys.executable, "-c", _MACHINE, redis_url, str(tmp_path / f"m{n}")], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
        outputs.append(done.stdout.strip())
    assert outputs[1] == "first run failed"  # what the first machine found, the second replays first
