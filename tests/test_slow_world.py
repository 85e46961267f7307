"""The runaway bound on virtual time is the loop's own time, never the world's (issue 40, item 7).

A loop inside its declared step cap in a slow world (model calls of ~10 minutes, tools of half an hour) is not a
runaway; a loop that runs on in time of its own (backoff, sleeps, a person's answer it waits for without a bound)
still is, and the report says which.
"""

from __future__ import annotations

from typing import Any

import anthropic

import simloop
from simloop import Outcome, Sim

LOOKUP = {"name": "lookup", "kind": "read", "results": ["found"],
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
EMAIL = {"name": "send_email", "kind": "write", "needs_approval": True, "results": ["sent"],
         "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}}


def capped_loop(sim: Sim) -> Outcome:
    """A README loop: a step cap taken from sim.limits, no deadline, tool errors sent back, a gate before writes."""
    client = anthropic.Anthropic(api_key="k", http_client=sim.http_client)
    messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
    for _ in range(sim.limits.max_steps or 10):
        reply = client.messages.create(model=sim.model, max_tokens=1024, messages=messages, tools=sim.tool_schemas)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason == "max_tokens":
            return Outcome("truncated")
        if reply.stop_reason != "tool_use":
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        results = []
        for block in reply.content:
            if block.type != "tool_use":
                continue
            if block.name in sim.scenario.gated_tools and not sim.approve(block.name, block.input,
                                                                          tool_use_id=block.id):
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": "Denied by the user.",
                                "is_error": True})
                continue
            try:
                out = sim.run_tool(block.name, block.input, tool_use_id=block.id)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": out})
            except Exception as e:  # noqa: BLE001  (a tool's failure is an observation)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": str(e), "is_error": True})
        messages.append({"role": "user", "content": results})
    return Outcome("max_steps")


def _slow_world() -> dict[str, Any]:
    """Nine tool rounds of a 590 s model call and an 1,800 s tool, then the answer: 6 h 10 min of the world's time."""
    rounds = [{"tool_use": [{"name": "lookup", "input": {"q": f"part {n}"}}], "latency": 590} for n in range(9)]
    return {"name": "slow-world", "task": "Look the parts up.", "tools": [LOOKUP], "limits": {"max_steps": 10},
            "model": [*rounds, {"end_turn": "All nine parts found.", "latency": 590}],
            "faults": [{"tool": "lookup", "kind": "slow", "latency": 1800}]}


def test_a_loop_inside_its_step_cap_in_a_slow_world_is_not_a_runaway() -> None:
    with Sim(_slow_world()) as sim:
        outcome = sim.run(capped_loop)
    report = sim.check()
    assert sim.clock.now() > 6 * 3600  # past the old bound (6 h), on the world's time alone
    assert report.ok, report.violations
    assert outcome.reason == "final" and sim.transcript.model_calls == 10


def test_the_same_slow_world_replayed_from_a_file_with_the_claim(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "slow-world.yaml"
    path.write_text(yaml.safe_dump({"version": 1, **_slow_world()}))
    assert simloop.replay(capped_loop, path, limits=["max_steps"]).ok


def test_time_of_the_loops_own_is_still_bounded() -> None:
    """Backoff of its own between slow calls: the world's 590 s a call do not excuse an hour of sleep each time."""
    import time

    def sleepy(sim: Sim) -> Outcome:
        client = anthropic.Anthropic(api_key="k", http_client=sim.http_client)
        while True:
            client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])
            time.sleep(3600)

    scenario = {"name": "s", "task": "t", "model": [{"end_turn": "hi", "latency": 590, "repeat": "forever"}]}
    with Sim(scenario) as sim:
        sim.run(sleepy)
    [violation] = sim.check().violations
    assert violation.invariant == "stops" and sim.transcript.halt is not None
    assert sim.transcript.halt.budget == "virtual_time"
    assert "the loop ran for" in violation.message and sim.transcript.model_calls == 7


def test_a_persons_wait_unwound_by_the_bound_is_logged_and_reported_as_the_wait() -> None:
    scenario = {"name": "away", "task": "Email Ann.", "tools": [LOOKUP, EMAIL], "approvals": [{"answer": "away"}],
                "model": [{"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com"}}]},
                          {"end_turn": "Sent."}]}
    with Sim(scenario) as sim:
        sim.run(capped_loop)
    assert [(a.tool, a.answer) for a in sim.approvals] == [("send_email", "none")]
    [violation] = sim.check().violations
    assert violation.invariant == "stops"
    assert violation.message.startswith(
        "the loop waited for a person's answer on send_email from 0 virtual seconds until simloop unwound it at 0 s: "
        "the person never answered, and the loop set no bound on the wait; a correct loop bounds the wait")
    assert "kept asking for tools" not in violation.message
