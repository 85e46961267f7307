"""simloop's own suite runs identically every time: derandomized, no Hypothesis example database.

(A database replays earlier failures first, which is what users want and what the
plugin keeps for them; for this suite it would make a run depend on the last one.)
"""

from __future__ import annotations

import pytest
from _report import KEY, Say
from hypothesis import settings

settings.register_profile("simloop-suite", database=None, derandomize=True)
settings.load_profile("simloop-suite")


@pytest.fixture
def say(request: pytest.FixtureRequest) -> Say:
    """``say(line)``: a line for the end of the run (the fidelity counts), shown under xdist too."""
    return lambda line: request.node.user_properties.append((KEY, line))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for key, value in getattr(report, "user_properties", ())
        if key == KEY
    ]
    if lines:
        terminalreporter.section("measured against recorded traffic")
        for line in lines:
            terminalreporter.write_line(line)
