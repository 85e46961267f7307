"""Generated runs speak of the task they were given (issue 40, item 13).

With ``verify(drive, task=...)`` the generated tool inputs and the user's follow-up turns are made of the task's
words, not the default refund story's ("refund 12", "order 1234").
"""

from __future__ import annotations

from typing import Any

import simloop
from examples import correct_sync
from simloop._campaign.world import DEFAULT_TASK, FOLLOWUPS, followups
from simloop._inputs import topic_words

TASK = "Book the cheapest flight from Oslo to Lisbon for next Tuesday and send the itinerary to the traveller."
STORY = ("refund", "order", "invoice", "shipping", "1234", "gift card", "ticket")


def test_verify_with_a_task_of_its_own_draws_nothing_of_the_refund_story() -> None:
    said: list[str] = []

    def drive(sim: simloop.Sim) -> Any:
        said.extend(sim.scenario.followups)
        outcome = correct_sync.drive(sim)
        said.extend(str(e.input) for e in sim.transcript.events if type(e).__name__ == "ToolStart")
        return outcome

    simloop.verify(drive, task=TASK, turns=3, max_examples=40, seed=3, limits={"max_steps": 10})
    assert any("'q':" in s for s in said) and any(s in followups(3, TASK) for s in said)  # (there was text to judge)
    leaks = [s for s in said if any(word in s.lower() for word in STORY)]
    assert leaks == []


def test_the_default_task_keeps_its_story() -> None:
    assert followups(2) == list(FOLLOWUPS[:2]) == followups(2, DEFAULT_TASK)
    assert topic_words(TASK)[:4] == ("book", "cheapest", "flight", "oslo")
    assert topic_words("Hi there", default=("x", "y")) == ("x", "y")  # too few words of its own: the default
