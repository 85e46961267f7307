"""Run a test in a fresh interpreter: for the attacks whose run simloop abandons.

An abandoned run leaves its thread parked for good (a daemon, no CPU), as the user's process would have
it; the rest of this test session should not share a process with such threads, so each of those tests
runs alone in a child pytest and the parent asserts that it passed.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "SIMLOOP_TEST_IN_FRESH_PROCESS"
ROOT = Path(__file__).resolve().parents[1]


def in_fresh_process(test: F) -> F:
    """The test, run in a child pytest (the parent passes when the child's run of it passes)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        nodeid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        if os.environ.get(_MARK) == nodeid:
            test(*args, **kwargs)
            return
        child = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", nodeid],
            check=False, cwd=ROOT, env={**os.environ, _MARK: nodeid}, capture_output=True, text=True, timeout=300,
        )
        assert child.returncode == 0, f"{nodeid} failed in its own process:\n{child.stdout}\n{child.stderr}"

    return wrapper  # type: ignore[return-value]
