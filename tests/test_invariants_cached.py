"""What `check` and verify's tally work out once instead of per run give the answers they gave per run.

`check` resolves a tuple of invariant ids once (verify passes the same tuple after every run) and tells a run with
sub-agent runs by the kinds of its events; `Tally.count` walks a run's events once.  Each is pinned here to the
form it replaced.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simloop
from simloop import invariants
from simloop._campaign.engine import Tally
from simloop.invariants import CATALOGUE, _has_subruns, _resolve, _resolve_ids
from simloop.transcript import Header, Request, Response, SubagentEnd, SubagentStart, ToolEnd, ToolStart, Transcript

IDS = list(CATALOGUE)


@given(st.lists(st.sampled_from(IDS), unique=True))
def test_a_tuple_of_ids_resolves_as_the_list_does(ids: list[str]) -> None:
    assert _resolve(tuple(ids)) == _resolve_ids(ids) == _resolve(tuple(ids))  # the second one from the cache
    assert _resolve(ids) == _resolve_ids(ids)


def test_an_unknown_id_in_a_tuple_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(simloop.UsageError, match="unknown invariant id 'pairng' .did you mean 'pairing'"):
            invariants.check(Transcript(Header(scenario="s", seed=0)), invariants=("pairng",))
    assert _resolve(None) == tuple(CATALOGUE)


def _request(i: int) -> Request:
    return Request(t=0.0, index=i, call=i + 1, attempt=0, path="/v1/messages", stream=False, body={"messages": []})


def _response(i: int, uses: int) -> Response:
    content = [{"type": "tool_use", "id": f"toolu_{i}_{k}", "name": "search", "input": {}} for k in range(uses)]
    return Response(t=0.0, index=i, call=i + 1, status=200, kind="tool_use", stop_reason="tool_use",
                    message={"content": content})


_EVENTS = st.one_of(
    st.integers(0, 20).map(_request),
    st.tuples(st.integers(0, 20), st.integers(0, 2)).map(lambda p: _response(*p)),
    st.sampled_from(["search", "send_email", "other"]).map(
        lambda name: ToolStart(t=0.0, exec=1, tool=name, input={}, nth=1, kind="read")),
    st.just(ToolEnd(t=0.0, exec=1, status="ok")),
    st.just(SubagentStart(t=0.0, run=1, task="t")),
    st.just(SubagentEnd(t=0.0, run=1)),
)


@settings(max_examples=200)
@given(st.lists(_EVENTS, max_size=30))
def test_a_run_has_sub_runs_when_an_event_says_so(events: list[Any]) -> None:
    t = Transcript(Header(scenario="s", seed=0), events=events)
    assert _has_subruns(t) == any(type(e).__name__ == "SubagentStart" for e in t.events)


class _Sim:
    """What `Tally.count` reads of a Sim."""

    def __init__(self, events: list[Any], calls: int) -> None:
        self.transcript = Transcript(Header(scenario="s", seed=0), events=events)
        self.server = type("Server", (), {"calls": calls})()
        self.scenario = simloop.Scenario(name="s", tools=[{"name": "search"}, {"name": "send_email", "kind": "write"}])


def _counted_as_before(tally: Tally, sim: Any) -> None:
    """`Tally.count` as it was written before: two walks (`Transcript.of`) and an any()."""
    tally.examples += 1
    if sim.server.calls:
        tally.reached += 1
    if any(r.tool_uses for r in sim.transcript.of(Response)):
        tally.asked += 1
    starts = sim.transcript.of(ToolStart)
    if starts:
        tally.ran += 1
        names = {t.name for t in sim.scenario.tools}
        if any(s.tool in names for s in starts):
            tally.known += 1
        elif not tally.known:
            tally.unknown.update(s.tool for s in starts)
            tally.declared = tuple(t.name for t in sim.scenario.tools)


@settings(max_examples=100)
@given(st.lists(st.tuples(st.lists(_EVENTS, max_size=20), st.integers(0, 2)), max_size=6))
def test_the_tally_counts_runs_as_it_did(runs: list[tuple[list[Any], int]]) -> None:
    mine, theirs = Tally(), Tally()
    for events, calls in runs:
        mine.count(_Sim(events, calls))  # type: ignore[arg-type]
        _counted_as_before(theirs, _Sim(events, calls))
    assert mine == theirs


def test_a_real_runs_tally_and_report_are_unchanged() -> None:
    drive = importlib.import_module("examples.correct_sync").drive
    report = simloop.verify(drive, max_examples=8, seed=3)
    assert report.ok and report.examples == 8
