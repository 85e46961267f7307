"""Exact attribution: each tool execution is bound to the tool_use it answers by evidence, never by age.

The loops here are written as a user writes one from the README's adapter section: ``run_agent(client,
tools, run_tool, task)``, passing no tool_use ids.  Each is correct, and each was falsely reported while
an id-less execution was charged to the oldest pending tool_use of the same name and input (issue 25).
"""

from __future__ import annotations

import itertools
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simloop import Outcome, Sim
from simloop.invariants import check
from simloop.transcript import Response, ToolStart

RunTool = Callable[[str, Any], str]
SEARCH = {"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
EMAIL = {"name": "send_email", "kind": "write", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}}
REFUND = {"name": "search", "input": {"q": "refund"}}


def run_agent(
    client: Any, tools: list[dict[str, Any]], run_tool: RunTool, task: str, *,
    history: list[dict[str, Any]] | None = None, stop: Callable[[], bool] = lambda: False,
    store: dict[str, Any] | None = None, reverse: bool = False,
) -> tuple[str, str]:
    """A careful loop: drops a cut-off or stopped reply, answers what it did not run with an is_error "not run", keeps an
    idempotency key per write in ``store``; ``reverse`` runs a reply's calls last first (any order is fine)."""
    messages = history if history is not None else []
    messages.append({"role": "user", "content": task})
    for _ in range(8):
        if stop():
            return "aborted", ""
        reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=tools, messages=messages)
        if reply.stop_reason == "max_tokens":
            return "truncated", ""  # the cut reply is dropped: its calls never run
        if stop():
            return "aborted", ""  # stopped as the reply came: dropped too, its calls never run
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason != "tool_use" or not calls:
            return "final", "".join(b.text for b in reply.content if b.type == "text")
        results: dict[str, dict[str, Any]] = {}
        for call in reversed(calls) if reverse else calls:
            if stop():
                results[call.id] = {"type": "tool_result", "tool_use_id": call.id, "content": "not run: stopped",
                                    "is_error": True}
                continue
            key = f"{call.name}:{json.dumps(call.input, sort_keys=True)}"
            if store is not None and call.name == "send_email" and key in store:
                results[call.id] = {"type": "tool_result", "tool_use_id": call.id,
                                    "content": "already attempted before a restart; not repeated"}
                continue
            if store is not None and call.name == "send_email":
                store[key] = "started"
            try:
                out = run_tool(call.name, call.input)
                results[call.id] = {"type": "tool_result", "tool_use_id": call.id, "content": out}
            except Exception as exc:  # noqa: BLE001 - a tool's failure is an observation for the model
                results[call.id] = {"type": "tool_result", "tool_use_id": call.id, "content": f"{exc}",
                                    "is_error": True}
        messages.append({"role": "user", "content": [results[c.id] for c in calls]})
        if stop():
            return "aborted", ""
    return "max_steps", ""


def _conversation(sim: Sim) -> list[Outcome]:
    history: list[dict[str, Any]] = []
    return [Outcome(*run_agent(sim.client, sim.tool_schemas, sim.run_tool, text, history=history,
                               stop=sim.abort.is_set))
            for text in sim.user_turns]


def _violations(sim: Sim) -> list[str]:
    return [str(v) for v in check(sim.transcript).violations]


def test_a_call_asked_afresh_after_a_cut_off_turn_is_the_fresh_ones() -> None:
    """Turn 1 is cut at max_tokens (its calls dropped); turn 2 asks the same search afresh: not `truncation`."""
    world = {"task": "Find the refund policy.", "followups": ["Please try again."], "tools": [SEARCH],
             "model": [{"max_tokens": {"tool_use": [REFUND, {"name": "search", "input": {"q": "refunds"}}]}},
                       {"tool_use": [REFUND]}, {"end_turn": "Refunds take 5 days."}]}
    with Sim(world) as sim:
        sim.run(_conversation)
    assert [o.reason for o in sim.outcomes] == ["truncated", "final"]
    assert _violations(sim) == []
    fresh = next(r for r in sim.transcript.of(Response) if r.kind == "tool_use")
    assert [s.matched for s in sim.transcript.of(ToolStart)] == [fresh.tool_uses[0]["id"]]


def test_a_call_asked_afresh_after_a_stopped_turn_is_the_fresh_ones() -> None:
    """Turn 1 is stopped before its search runs; turn 2 asks the same search: not `results_sent`."""
    world = {"task": "Find the refund policy.", "followups": ["Go on."], "tools": [SEARCH],
             "abort": {"after_call": 1},
             "model": [{"tool_use": [REFUND]}, {"tool_use": [REFUND]}, {"end_turn": "Refunds take 5 days."}]}
    with Sim(world) as sim:
        sim.run(_conversation)
    assert [o.reason for o in sim.outcomes] == ["aborted", "final"]
    assert _violations(sim) == []


def test_life_twos_search_is_not_charged_to_life_one() -> None:
    """Life 1 dies in send_email before its search runs; life 2 runs the identical reply's search: not
    `results_sent`."""
    reply = {"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}, REFUND]}
    world = {"task": "Email the customer, then find the policy.", "tools": [EMAIL, SEARCH],
             "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}],
             "model": [reply, reply, {"end_turn": "Done."}]}

    def drive(sim: Sim) -> Outcome:
        return Outcome(*run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, store=sim.store))

    with Sim(world) as sim:
        assert sim.run(drive).reason == "final"
    assert sim.lives == 2 and _violations(sim) == []


def test_identical_calls_are_bound_as_a_set_by_where_their_outputs_went() -> None:
    """Two identical searches, run last first, the first execution failing: its error went to the second
    tool_use's result, which is is_error: not `tool_errors`."""
    world = {"task": "Search twice.", "tools": [SEARCH], "faults": [{"tool": "search", "call": 1, "kind": "raise"}],
             "model": [{"tool_use": [REFUND, REFUND]}, {"end_turn": "Done."}]}

    def drive(sim: Sim) -> Outcome:
        return Outcome(*run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, reverse=True))

    with Sim(world) as sim:
        sim.run(drive)
    assert _violations(sim) == []


def test_identical_calls_with_a_dropped_error_are_still_caught() -> None:
    """The same two searches, but the loop reports the failure as a success: `tool_errors` under any binding."""
    world = {"task": "Search twice.", "tools": [SEARCH], "faults": [{"tool": "search", "call": 1, "kind": "raise"}],
             "model": [{"tool_use": [REFUND, REFUND]}, {"end_turn": "Done."}]}

    def careless(name: str, input: Any, run: RunTool) -> str:
        try:
            return run(name, input)
        except Exception:  # noqa: BLE001 - the defect: a failure reported as an ordinary result
            return "no results"

    def drive(sim: Sim) -> Outcome:
        return Outcome(*run_agent(sim.client, sim.tool_schemas, lambda n, i: careless(n, i, sim.run_tool), sim.task,
                                  reverse=True))

    with Sim(world) as sim:
        sim.run(drive)
    assert {v.invariant for v in check(sim.transcript).violations} == {"tool_errors"}


def test_a_cut_off_calls_execution_is_still_truncation() -> None:
    """A loop that runs the calls of a cut reply is still caught: the cut reply's call is the only match."""
    world = {"task": "Find the refund policy.", "tools": [SEARCH],
             "model": [{"max_tokens": {"tool_use": [REFUND, {"name": "search", "input": {"q": "refunds"}}]}},
                       {"end_turn": "Done."}]}

    def drive(sim: Sim) -> Outcome:
        reply = sim.client.messages.create(model="m", max_tokens=1024, tools=sim.tool_schemas,  # type: ignore[arg-type]
                                           messages=[{"role": "user", "content": sim.task}])
        sim.run_tool("search", reply.content[0].input)  # type: ignore[union-attr]  # the defect
        return Outcome("truncated")

    with Sim(world) as sim:
        sim.run(drive)
    assert "truncation" in {v.invariant for v in check(sim.transcript).violations}


@pytest.mark.parametrize("where", ["header", "mcp"])
def test_the_tools_endpoint_and_mcp_take_the_tool_use_id(where: str) -> None:
    """A call over the tools endpoint (header ``x-simloop-tool-use-id``) or MCP (``_meta.tool_use_id``) is bound
    to the tool_use it names, not to the first identical one."""
    if where == "mcp":
        pytest.importorskip("mcp", reason="the MCP tools need simloop[mcp]")
    from simloop.wire.loopback import TOOL_USE_ID_HEADER, serve

    world = {"task": "Search twice.", "tools": [SEARCH], "model": [{"tool_use": [REFUND, REFUND]}]}
    with serve(world, mcp=True) as server:
        body = json.dumps({"model": "m", "max_tokens": 100, "tools": [{k: v for k, v in SEARCH.items() if k != "kind"}],
                           "messages": [{"role": "user", "content": "Search twice."}]}).encode()
        request = urllib.request.Request(f"{server.base_url}/v1/messages", data=body, method="POST",
                                         headers={"content-type": "application/json", "x-api-key": "k",
                                                  "anthropic-version": "2023-06-01"})
        with urllib.request.urlopen(request) as answer:
            second = json.loads(answer.read())["content"][1]["id"]
        if where == "header":
            call = urllib.request.Request(f"{server.base_url}/simloop/tools/search", data=b'{"q": "refund"}',
                                          method="POST", headers={TOOL_USE_ID_HEADER: second})
            with urllib.request.urlopen(call) as answer:
                assert json.loads(answer.read())["is_error"] is False
        else:
            import anyio
            import mcp

            async def call_over_mcp() -> None:
                async with mcp.Client(server.mcp_url) as client:
                    await client.call_tool("search", {"q": "refund"}, meta={"tool_use_id": second})

            anyio.run(call_over_mcp)
        starts = server.server.transcript.of(ToolStart)
    assert [(s.tool_use_id, s.matched) for s in starts] == [(second, second)]


def test_a_verdict_its_replay_does_not_reproduce_is_reported_in_words(tmp_path: Path) -> None:
    """A loop whose first run fails and whose replay passes: the failure found, and why it may not reproduce,
    never Hypothesis's FlakyFailure traceback."""
    from examples.correct_sync import drive as correct
    from simloop import InvariantViolation, verify

    runs = itertools.count()

    def drive(sim: Sim) -> Outcome:
        if next(runs) == 0:
            raise RuntimeError("only the first time")
        return correct(sim)

    with pytest.raises(InvariantViolation) as found:
        verify(drive, max_examples=5, seed=0, out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} == {"crash"}
    assert "note: this run broke the invariants once, and its replay did not" in str(found.value)
    assert "tool_use_id=block.id" in str(found.value)


@pytest.mark.parametrize("order", ["together", "last first"])
def test_identical_calls_over_the_tools_endpoint_hold_whichever_runs_first(order: str) -> None:
    """The TypeScript tool runner's shape: two identical searches posted at once (or the second first), no id (the
    endpoint's header left out), the first execution failing; each answer goes back under its own call.  Whichever
    call the failure lands on, the run holds (its verdict no longer depends on which request arrived first)."""
    from concurrent.futures import ThreadPoolExecutor

    from simloop.wire.loopback import serve

    schema = {k: v for k, v in SEARCH.items() if k != "kind"}
    world = {"task": "Search twice.", "tools": [SEARCH], "faults": [{"tool": "search", "call": 1, "kind": "raise"}],
             "model": [{"tool_use": [REFUND, REFUND]}, {"end_turn": "Done."}]}
    headers = {"content-type": "application/json", "x-api-key": "k", "anthropic-version": "2023-06-01"}

    def post(url: str, payload: dict[str, Any]) -> Any:
        request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST", headers=headers)
        with urllib.request.urlopen(request) as answer:
            return json.loads(answer.read())

    with serve(world, mcp=True) as server:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Search twice."}]
        reply = post(f"{server.base_url}/v1/messages", {"model": "m", "max_tokens": 100, "tools": [schema],
                                                          "messages": messages})
        calls = [b for b in reply["content"] if b["type"] == "tool_use"]
        def run(call: dict[str, Any]) -> Any:
            return post(f"{server.base_url}/simloop/tools/search", call["input"])

        if order == "together":
            with ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(run, calls))
        else:
            answers = [run(c) for c in reversed(calls)][::-1]
        messages += [{"role": "assistant", "content": reply["content"]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"], **a}
                                                  for c, a in zip(calls, answers, strict=True)]}]
        post(f"{server.base_url}/v1/messages", {"model": "m", "max_tokens": 100, "tools": [schema],
                                                "messages": messages})
        transcript = server.server.transcript
    assert sorted(a["is_error"] for a in answers) == [False, True]
    assert check(transcript).violations == []
