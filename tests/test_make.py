"""The Makefile and CI: `make test` never changes the system; CI installs chromium and runs the checks explicitly."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")


def _dry_run(target: str, tmp_path: Path) -> str:
    """What `make TARGET` would run (make -n: nothing is run), with a venv that does not exist yet."""
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"],
        capture_output=True, text=True, check=True,
    )
    return out.stdout


def test_make_test_installs_no_system_packages(tmp_path: Path) -> None:
    commands = _dry_run("test", tmp_path)
    assert "pytest" in commands
    assert "apt-get" not in commands and "chromium" not in commands


@pytest.mark.parametrize(("pytest_exit", "fails"), [(0, False), (1, True), (5, True)])
def test_make_test_fails_when_pytest_fails_or_collects_no_test(tmp_path: Path, pytest_exit: int, fails: bool) -> None:
    """pytest's exit 5 (no test collected, as after a broken collection) fails `make test` like a failing test."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # stands in for the venv's python: `python -m pytest` exits with pytest_exit
    python.write_text(f"#!/bin/sh\nexit {pytest_exit}\n", encoding="utf-8")
    python.chmod(0o755)
    (venv / ".installed").touch()  # newer than pyproject.toml: make installs nothing
    out = subprocess.run(["make", "-C", str(ROOT), "test", f"VENV={venv}"], capture_output=True, text=True, check=False)
    assert f"{python} -m pytest" in out.stdout
    assert (out.returncode != 0) is fails, out.stdout + out.stderr


def test_make_browser_and_make_redis_are_where_system_packages_are_installed(tmp_path: Path) -> None:
    assert "apt-get install -y -q chromium" in _dry_run("browser", tmp_path)
    assert "apt-get install -y -q redis-server" in _dry_run("redis", tmp_path)
    assert "apt-get" not in _dry_run("test", tmp_path)


def test_make_check_runs_ruff_and_mypy(tmp_path: Path) -> None:
    commands = _dry_run("check", tmp_path)
    assert "ruff check simloop pytest_plugin examples tests bench" in commands
    assert "mypy simloop pytest_plugin examples bench\n" in commands, "mypy --strict covers examples/ and bench/ too"
    assert ".[test,dev," in commands, "the stamp installs the dev extra that pins ruff and mypy"


def test_ci_installs_the_system_packages_then_checks_then_runs_the_readme_test_command() -> None:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip().startswith(("make", "exec"))]
    assert lines == ["make browser redis || exit 1", "make check || exit 1", "make test || exit 1",
                     'exec make test-pythons PYTHONS="3.12 3.13"']


def test_make_test_installs_the_lock_and_runs_in_parallel(tmp_path: Path) -> None:
    commands = _dry_run("test", tmp_path)
    assert "-c constraints.txt -e" in commands, "make test installs the locked releases"
    assert "-m pytest -n auto" in commands


def test_the_other_releases_are_resolved_without_the_lock_and_say_what_moved(tmp_path: Path) -> None:
    latest, floor = _dry_run("test-latest", tmp_path), _dry_run("test-floor", tmp_path)
    assert "--upgrade --upgrade-strategy eager -e" in latest and "constraints.txt -e" not in latest
    assert "--resolution lowest-direct" in floor and "-c constraints.txt" not in floor
    for commands in (latest, floor):
        assert ".ci/lockdiff.py constraints.txt" in commands and "-m pytest -n auto" in commands


def test_the_readme_documents_every_make_target() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    [phony] = [line for line in makefile.splitlines() if line.startswith(".PHONY:")]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [t for t in phony.split()[1:] if t not in ("clean", "bench") and f"make {t}" not in readme]
    assert not missing, f"README.md never mentions: {missing}"


def test_lockdiff_names_what_moved(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# a comment\npytest==0.0.1\nno-such-package-simloop==1.0\n", encoding="utf-8")
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "lockdiff.py"), str(lock)], capture_output=True, text=True,
                         check=True).stdout
    assert "1 package(s) installed at another release" in out and "pytest: 0.0.1 (locked) ->" in out
    assert "make test" in (ROOT / "README.md").read_text().split("\n\n", 2)[1]
