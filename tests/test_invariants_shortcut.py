"""The invariants' cheaper forms give what the forms they replaced gave: the shared view files events by their class
in one lookup (`_base._build_view`), held to the isinstance chain it replaced over the transcripts of
`simloop.verify`'s generated worlds on reference loops; `_canon` reuses one encoder, held to ``json.dumps``; a reply's
twins are found within one name, held to the pairwise comparison.
"""

from __future__ import annotations

import importlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simloop
from simloop.invariants import _base, check
from simloop.transcript import (
    ApprovalEvent,
    OutcomeEvent,
    Request,
    Response,
    Restart,
    ToolEnd,
    ToolStart,
    Transcript,
)
from tests._runs import every_run


def _worlds(module: str, options: dict[str, Any], tmp_path: Any) -> list[Transcript]:
    drive = importlib.import_module(f"examples.{module}").drive
    with every_run() as ran:
        try:
            simloop.verify(drive, max_examples=12, seed=5, out_dir=tmp_path, **options)
        except simloop.InvariantViolation:
            pass
    assert ran
    return [sim.transcript for sim in ran]


def _said(t: Transcript) -> list[tuple[str, str, int | None, str]]:
    report = check(t)
    return [(v.invariant, v.message, v.step, repr(v.evidence)) for v in report.violations]


# -- the view's filing, against the isinstance chain it replaced --------------------------------------------------


def _reference_twins(v: _base._View, uses: list[dict[str, Any]]) -> None:
    for i, a in enumerate(uses):
        for b in uses[i + 1:]:
            if a.get("name") == b.get("name") and a.get("input") == b.get("input") and _base._canon(
                    a.get("input")) == _base._canon(b.get("input")):
                ida, idb = str(a.get("id")), str(b.get("id"))
                v.twins.setdefault(ida, []).append(idb)
                v.twins.setdefault(idb, []).append(ida)


def _reference_view(t: Transcript) -> _base._View:
    v = _base._View(t, size=len(t.events))
    for pos, e in enumerate(t.events):
        if isinstance(e, Request):
            v.request_at[e.index] = e
            if e.path in _base.MODEL_PATHS:
                v.model_requests.append((pos, e))
        elif isinstance(e, Response) and _base._is_reply(e):
            req = v.request_at.get(e.index)
            if req is None or req.path in _base.MODEL_PATHS:
                v.replies.append((pos, e))
                uses = e.tool_uses
                for block in uses:
                    uid = str(block.get("id"))
                    if uid not in v.issued:
                        v.issued[uid] = (pos, e)
                        v.use_block[uid] = block
                if len(uses) > 1:
                    _reference_twins(v, uses)
        elif isinstance(e, ToolStart):
            v.starts.append((pos, e))
        elif isinstance(e, ToolEnd):
            v.ends[e.exec] = (pos, e)
        elif isinstance(e, OutcomeEvent):
            v.outcome_pos = pos
        elif isinstance(e, Restart):
            v.restarts.append(pos)
        elif isinstance(e, ApprovalEvent):
            v.asks.append((pos, e))
            v.asked_about[pos] = e.matched
    _base._bind(v)
    _base._bind_asks(v)
    return v


@pytest.mark.parametrize(("module", "options"), [
    ("correct_sync", {}), ("correct_sync", {"turns": 2, "abort": True}), ("correct_sync", {"restarts": 2}),
    ("approval_reused", {}), ("durable_resend", {}),
])
def test_the_view_files_events_as_the_isinstance_chain_did(module: str, options: dict[str, Any],
                                                          tmp_path: Any) -> None:
    for t in _worlds(module, options, tmp_path):
        assert _base._build_view(t) == _reference_view(t)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(_json)
def test_canon_is_json_dumps(value: Any) -> None:
    want = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    assert _base._canon(value) == want


def test_canon_of_what_is_not_json_is_its_repr() -> None:
    thing = type("Thing", (), {"__repr__": lambda self: "T"})()
    odd = {"b": thing, "a": math.inf, "c": [-0.0, {"z": 1, "y": True}]}
    assert _base._canon(odd) == json.dumps(odd, sort_keys=True, separators=(",", ":"), default=repr)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", 1, 1.0, True]), st.sampled_from([{}, {"x": 1}, {"x": 1.0}, {"x": True}]),
                          st.sampled_from(["toolu_1", "toolu_2", "toolu_3"])), max_size=6))
def test_twins_are_found_as_every_pair_was_compared(calls: list[tuple[Any, Any, str]]) -> None:
    """Names that are equal across types (1, 1.0, True), inputs equal but not as JSON, ids that repeat."""
    uses = [{"type": "tool_use", "id": uid, "name": name, "input": value} for name, value, uid in calls]
    want, got = _base._View(Transcript.__new__(Transcript), 0), _base._View(Transcript.__new__(Transcript), 0)
    _reference_twins(want, uses)
    _base._find_twins(got, uses)
    assert got.twins == want.twins
    assert [list(x) for x in got.twins.items()] == [list(x) for x in want.twins.items()]  # (the order too)
