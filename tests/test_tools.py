"""Fault-injecting tools and the execution ledger (`sim.run_tool` / `sim.arun_tool`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import simloop
from simloop import Scenario, Sim
from simloop.transcript import ToolEnd, ToolStart


def lookup(q: str) -> dict[str, Any]:
    """A user function tool (referenced by import path in a test below)."""
    return {"answer": q.upper()}


def make(faults: list[dict[str, Any]] | None = None, **tool: Any) -> Sim:
    spec = {"name": "send_email", "kind": "write", **tool}
    return Sim(Scenario.model_validate({
        "tools": [{"name": "search", "results": ["a", "b"]}, spec],
        "model": [{"end_turn": "x"}],
        "faults": faults or [],
    }))


def ledger(sim: Sim) -> list[tuple[Any, ...]]:
    ends = {e.exec: e for e in sim.transcript.of(ToolEnd)}
    return [
        (s.tool, s.nth, s.fault, ends[s.exec].status, ends[s.exec].committed, s.t, ends[s.exec].t)
        for s in sim.transcript.of(ToolStart)
    ]


def test_canned_results_cycle_and_defaults_describe_the_call() -> None:
    sim = make()
    assert [sim.run_tool("search", {"q": "x"}) for _ in range(3)] == ["a", "b", "a"]
    assert sim.run_tool("send_email", {"to": "ann@example.com"}) == 'send_email ok: {"to":"ann@example.com"}'
    assert [row[:5] for row in ledger(sim)] == [
        ("search", 1, None, "ok", False), ("search", 2, None, "ok", False), ("search", 3, None, "ok", False),
        ("send_email", 1, None, "ok", True),  # a completed write is committed
    ]


@pytest.mark.parametrize(
    ("fault", "exc", "message", "committed", "took"),
    [
        ({"kind": "raise"}, ConnectionError, "send_email: could not reach the backend", False, 0.0),
        ({"kind": "raise", "error": "PermissionError"}, PermissionError, "send_email: permission denied", False, 0.0),
        ({"kind": "timeout", "latency": 12}, TimeoutError, "send_email timed out after 12s", False, 12.0),
        ({"kind": "timeout"}, TimeoutError, "send_email timed out after 30s", False, 30.0),
        ({"kind": "commit_then_raise"}, ConnectionResetError, "the effect was applied", True, 0.0),
    ],
)
def test_faults_raise_realistic_exceptions(
    fault: dict[str, Any], exc: type[BaseException], message: str, committed: bool, took: float
) -> None:
    sim = make([{"tool": "send_email", "call": 1, **fault}])
    with sim.clock.patched(), pytest.raises(exc, match=message):
        sim.run_tool("send_email", {"to": "a"})
    [(_, _, kind, status, was_committed, start, end)] = ledger(sim)
    assert (kind, status, was_committed, end - start) == (fault["kind"], "raised", committed, took)
    assert sim.run_tool("send_email", {"to": "a"}).startswith("send_email ok")  # call 2 has no fault


def test_slow_and_huge_output() -> None:
    sim = make([{"tool": "search", "kind": "slow", "latency": 45}, {"tool": "send_email", "kind": "huge_output", "size": 5000}])
    with sim.clock.patched():
        assert sim.run_tool("search", {"q": "x"}) == "a"
        assert sim.clock.now() == 45.0
        out = sim.run_tool("send_email", {"to": "a"})
    assert len(out) == 5000 and out.startswith("send_email ok")
    end = sim.transcript.of(ToolEnd)[-1]
    assert end.result is not None and end.result.endswith("... [5000 chars]")  # the ledger keeps a preview


def make_with(allow_functions: bool = False, **tool: Any) -> Sim:
    spec = {"name": "send_email", "kind": "write", **tool}
    scenario = Scenario.model_validate({"tools": [{"name": "search"}, spec], "model": [{"end_turn": "x"}]})
    return Sim(scenario, allow_functions=allow_functions)


def test_function_tools_by_callable_and_by_import_path_with_the_opt_in() -> None:
    sim = make(function=lookup)
    assert sim.run_tool("send_email", {"q": "hi"}) == '{"answer": "HI"}'
    sim = make_with(allow_functions=True, function="tests.test_tools:lookup")
    assert sim.run_tool("send_email", {"q": "yo"}) == '{"answer": "YO"}'
    # A bad path is the user's error when the Sim is made, never a tool error the loop might swallow.
    with pytest.raises(simloop.UsageError, match="cannot import function 'tests.test_tools:nope'"):
        make_with(allow_functions=True, function="tests.test_tools:nope")


def test_an_import_path_is_refused_without_the_opt_in() -> None:
    with pytest.raises(simloop.UsageError, match=r"resolves only when you opt in with allow_functions=True"):
        make_with(function="tests.test_tools:lookup")


def test_sim_tools_binds_implementations_from_python() -> None:
    scenario = Scenario.model_validate({"tools": [{"name": "search"}], "model": [{"end_turn": "x"}]})
    sim = Sim(scenario, tools={"search": lookup})
    assert sim.run_tool("search", {"q": "py"}) == '{"answer": "PY"}'
    assert scenario.tools[0].function is None, "the scenario given is left as it was"
    with pytest.raises(simloop.UsageError, match=r"'lookup' is not a tool of scenario 'scenario' \(its tools: search\)"):
        Sim(scenario, tools={"lookup": lookup})
    with pytest.raises(simloop.UsageError, match="the implementation of 'search' must be callable"):
        Sim(scenario, tools={"search": "tests.test_tools:lookup"})  # type: ignore[dict-item]


def test_an_unknown_tool_raises_a_lookup_error_the_loop_can_report() -> None:
    sim = make()
    with pytest.raises(LookupError, match=r"unknown tool 'delete_all' \(the tools are: search, send_email\)"):
        sim.run_tool("delete_all", {})
    [start] = sim.transcript.of(ToolStart)
    assert start.matched is None


def test_executions_are_matched_to_tool_use_blocks() -> None:
    scenario = Scenario.model_validate({
        "tools": [{"name": "search"}],
        "model": [
            {"tool_use": [{"name": "search", "input": {"q": "a"}}, {"name": "search", "input": {"q": "a"}}]},
            {"end_turn": "done"},
        ],
    })

    def drive(sim: Sim) -> simloop.Outcome:
        reply = sim.client.messages.create(
            model=sim.model, max_tokens=100, tools=sim.tool_schemas, messages=[{"role": "user", "content": "go"}]
        )
        first, second = [b for b in reply.content if b.type == "tool_use"]
        sim.run_tool("search", {"q": "a"})  # no id: matched by name and input, first not-yet-executed
        sim.run_tool("search", {"q": "a"}, tool_use_id=second.id)  # by id
        sim.run_tool("search", {"q": "a"})  # a rerun: matches an executed block again
        sim.run_tool("search", {"q": "a"}, tool_use_id="toolu_made_up")  # answers nothing
        return simloop.Outcome("final", first.id)

    with Sim(scenario) as sim:
        outcome = sim.run(drive)
    ids = [b["id"] for b in sim.transcript.responses[0].tool_uses]
    assert [s.matched for s in sim.transcript.of(ToolStart)] == [ids[0], ids[1], ids[1], None]
    assert {v.invariant for v in sim.check(outcome).violations} >= {"no_rerun"}


def test_faults_that_never_fired_are_leftovers() -> None:
    sim = make([{"tool": "search", "call": 2, "kind": "raise"}, {"tool": "send_email", "kind": "slow"}])
    sim.run_tool("search", {"q": "x"})
    assert sim.leftovers() == [
        "model[0] (end_turn) was never served",
        "faults[0] (raise on search call 2) never fired: search ran 1 time(s)",
    ]


def test_async_tools_overlap_on_the_virtual_loop_and_record_cancellation() -> None:
    sim = make([{"tool": "search", "kind": "slow", "latency": 30}])

    async def main() -> list[str]:
        done = await asyncio.gather(sim.arun_tool("search", {"q": "1"}), sim.arun_tool("search", {"q": "2"}))
        task = asyncio.ensure_future(sim.arun_tool("search", {"q": "3"}))
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(done)

    with sim.clock.patched():
        assert sim.clock.run(main()) == ["a", "b"]
    rows = ledger(sim)
    assert [(r[3], r[5], r[6]) for r in rows] == [("ok", 0.0, 30.0), ("ok", 0.0, 30.0), ("cancelled", 30.0, 31.0)]
