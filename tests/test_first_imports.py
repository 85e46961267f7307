"""A module a loop imports for the first time during a run works as outside one (issue 40, item 9).

During a run ``datetime.date``/``datetime.datetime`` are simloop's subclasses with a metaclass of their own:
a class statement naming them as a base with a metaclass of its own (pydantic v1's ``ConstrainedDate``,
imported lazily by langchain_core) must not fail with "metaclass conflict", and the class it makes must
be the one it would make outside a run.
"""

from __future__ import annotations

import datetime
import importlib
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest
from _isolated import in_fresh_process

from simloop import Outcome, Scenario, Sim

TASK = "Look up the refund policy."
LATE_MODULE = '''
import datetime
from datetime import date


class Meta(type):
    """A metaclass of the module's own, as pydantic v1's ConstrainedNumberMeta."""


class Day(date, metaclass=Meta):
    pass


class Stamp(datetime.datetime, metaclass=Meta):
    pass


class Plain(date):
    pass
'''


def _scenario() -> Scenario:
    return Scenario.model_validate({"name": "first-import", "task": TASK, "model": [{"end_turn": "Done."}]})


def _loop(sim: Sim, client: anthropic.Anthropic) -> Outcome:
    reply = client.messages.create(model=sim.model, max_tokens=512, messages=[{"role": "user", "content": sim.task}])
    return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))


def test_a_module_first_imported_in_the_run_subclasses_date_with_its_own_metaclass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "late_dates.py").write_text(LATE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "late_dates", raising=False)
    seen: dict[str, Any] = {}

    def drive(sim: Sim) -> Outcome:
        module = importlib.import_module("late_dates")  # first imported here, during the run
        seen["module"] = module
        seen["today"] = module.Day.today()
        return _loop(sim, anthropic.Anthropic(api_key="k", http_client=sim.http_client))

    with Sim(_scenario()) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "final", sim.report()
    module = seen["module"]
    monkeypatch.delitem(sys.modules, "late_dates")
    # the classes are what they would be outside a run: subclasses of the real classes, making their own objects
    assert module.Day.__mro__[1] is datetime.date and module.Stamp.__mro__[1] is datetime.datetime
    assert type(module.Day(2026, 1, 2)) is module.Day and type(module.Plain(2026, 1, 2)) is module.Plain
    assert type(module.Stamp(2026, 1, 2, 3)) is module.Stamp
    assert isinstance(seen["today"], datetime.date)


@in_fresh_process
def test_pydantic_v1_imported_first_inside_a_drive() -> None:
    assert "pydantic.v1.types" not in sys.modules  # (else this test would not import it during the run)
    seen: dict[str, Any] = {}

    def drive(sim: Sim) -> Outcome:
        import pydantic.v1  # what langchain_core imports lazily: ConstrainedDate(date, metaclass=...)

        seen["model"] = pydantic.v1.create_model("When", day=(pydantic.v1.types.ConstrainedDate, ...))
        return _loop(sim, anthropic.Anthropic(api_key="k", http_client=sim.http_client))

    with Sim(_scenario()) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "final", sim.report()
    assert seen["model"](day="2026-01-02").day == datetime.date(2026, 1, 2)
