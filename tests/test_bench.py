"""The benchmarks compare like with like: their bare side makes requests the real API accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from _modules import load

from simloop.protocol.validate import validate_messages_request

ROOT = Path(__file__).resolve().parents[1]



def test_the_bare_side_of_the_overhead_bench_sends_requests_the_api_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    # bench/overhead.py's bare side answered every tool call with the id toolu_01: from the third call the
    # history held one id twice, a request the real API (and the simulator) refuses; both sides must make the same calls.
    overhead = load("bench_overhead_under_test", ROOT / "bench" / "overhead.py")
    sent: list[Any] = []
    real = httpx2.MockTransport.handle_request

    def recording(self: httpx2.MockTransport, request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.read()))
        return real(self, request)

    monkeypatch.setattr(httpx2.MockTransport, "handle_request", recording)
    calls = overhead.loop(overhead.bare_client())
    assert calls == overhead.STEPS == len(sent)
    refused = [(n, r.message) for n, body in enumerate(sent, 1) if (r := validate_messages_request(body)) is not None]
    assert not refused, f"the bare side's requests the API refuses (call, why): {refused}"


@pytest.mark.parametrize("drive", ["sync", "async-stream"])
def test_the_floor_replays_the_simulators_own_plans_without_it(drive: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench/floor.py`'s "simulator taken out" run is the simulated run with the simulator's plans handed over as
    its transports hand them: every call made, none reaching the simulator."""
    floor = load("bench_floor_under_test", ROOT / "bench" / "floor.py")
    overhead = floor.overhead
    simulated = overhead.sim_run if drive == "sync" else overhead.sim_async_stream_run
    plans = floor._plans(simulated)
    assert len(plans) == overhead.STEPS and {p.status for p in plans} == {200}
    assert all((p.events is not None) == (drive == "async-stream") and p.record is None for p in plans)
    handled: list[object] = []
    monkeypatch.setattr(floor.SimServer, "handle", lambda *args, **kwargs: handled.append(args))
    assert floor.served_by(simulated, *floor._served(plans))() == overhead.STEPS
    assert handled == []
