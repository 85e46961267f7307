"""The pytest plugin entry point (``pytest11: simloop``).

Loading it imports nothing heavy: simloop (and the anthropic SDK) are imported
only when a test asks for a simloop fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "simloop(scenario=None, seed=None, max_examples=None, strict=True): configure the simloop fixture for this test",
    )


@pytest.fixture
def simloop_config() -> dict[str, Any]:
    """Override in conftest.py to set defaults for every simloop fixture (like pytest-recording's vcr_config)."""
    return {}


@pytest.fixture
def simloop_sim() -> Iterator[Any]:
    """A factory of Sims, closed at teardown: ``sim = simloop_sim(scenario)``."""
    from simloop import Sim

    made: list[Any] = []

    def make(scenario: Any, **kwargs: Any) -> Any:
        sim = Sim(scenario, **kwargs)
        made.append(sim)
        return sim

    yield make
    for sim in made:
        sim.close()
