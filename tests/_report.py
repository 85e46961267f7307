"""What a test tells the person running the suite (the fidelity counts), shown at the end of the run.

A test takes the ``say`` fixture (tests/conftest.py) and calls it with a line; the line travels with the test's
report (its ``user_properties``), so it is printed under pytest-xdist as in a serial run.
"""

from __future__ import annotations

from collections.abc import Callable

Say = Callable[[str], None]
KEY = "simloop-says"
