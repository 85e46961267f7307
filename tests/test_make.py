"""The Makefile and CI: `make test` never changes the system; CI installs chromium and runs the checks explicitly."""

from __future__ import annotations

import shutil
import subprocess
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
    assert lines == ["make browser redis || exit 1", "make check || exit 1", "exec make test"]
    assert "make test" in (ROOT / "README.md").read_text().split("\n\n", 2)[1]
