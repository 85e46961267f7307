"""The Pythons the package claims are the ones its suite runs on (pyproject.toml's classifiers, ``requires-python``)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _named() -> list[tuple[int, int]]:
    found = (re.fullmatch(r"Programming Language :: Python :: 3\.(\d+)", c) for c in PROJECT["classifiers"])
    return sorted((3, int(m[1])) for m in found if m)


def test_the_python_running_the_suite_is_one_the_package_names() -> None:
    here = sys.version_info[:2]
    assert here in _named(), (
        f"the suite runs on Python {here[0]}.{here[1]}, which pyproject.toml's classifiers do not name: add "
        f"'Programming Language :: Python :: {here[0]}.{here[1]}' once the whole suite passes on it")


def test_the_oldest_python_named_is_the_floor_the_package_requires() -> None:
    oldest = _named()[0]
    assert PROJECT["requires-python"] == f">={oldest[0]}.{oldest[1]}"
