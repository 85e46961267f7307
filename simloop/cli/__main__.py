"""``python -m simloop.cli``: the ``simloop`` command, for where the console script is not on PATH."""

from __future__ import annotations

import sys

from simloop.cli._main import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
