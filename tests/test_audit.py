"""simloop's one audit hook: the network guard and the process tracking share it (one Python call per event)."""

from __future__ import annotations

import sys
from typing import Any

from simloop import Sim
from simloop._runtime import audit


def test_a_handler_sees_only_its_events_and_once_however_often_registered() -> None:
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def handler(event: str, args: tuple[Any, ...]) -> None:
        seen.append((event, args))

    audit.on_events(["simloop.test.watched"], handler)
    audit.on_events(["simloop.test.watched"], handler)
    sys.audit("simloop.test.watched", 1, "a")
    sys.audit("simloop.test.ignored", 2)
    assert seen == [("simloop.test.watched", (1, "a"))]


def test_the_guard_and_the_process_tracking_share_one_hook() -> None:
    with Sim({"task": "t", "model": [{"end_turn": "hi"}]}) as sim:
        sim.run(lambda sim: ("final", "hi"))
    assert audit._installed == [True]
    assert {"socket.connect", "socket.getaddrinfo", "subprocess.Popen", "os.fork"} <= audit._EVENTS
    assert "builtins.id" not in audit._EVENTS  # the common events cost one lookup
