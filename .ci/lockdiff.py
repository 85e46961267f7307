#!/usr/bin/env python3
"""The installed releases that differ from the lock: ``python .ci/lockdiff.py constraints.txt``.

`make test-latest` and `make test-floor` print it before their suite, so a failure there says which releases
moved.  Standard library only.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def moved(lock: Path) -> list[str]:
    """``name: locked -> installed`` for each locked package installed at another release."""
    out = []
    for line in lock.read_text(encoding="utf-8").splitlines():
        name, sep, locked = line.partition("==")
        if not sep or line.startswith("#"):
            continue
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue
        if installed != locked.strip():
            out.append(f"  {name}: {locked.strip()} (locked) -> {installed}")
    return out


if __name__ == "__main__":
    lock = Path(sys.argv[1] if len(sys.argv) > 1 else "constraints.txt")
    lines = moved(lock)
    print(f"{len(lines)} package(s) installed at another release than {lock}:" if lines else f"as {lock} locks")
    print("\n".join(lines))
