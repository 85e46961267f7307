"""Across lives: what died with the process may run again (`no_rerun`), and each life answers only to the Stop
it could see (`abort`).  The loops are written as a user writes a durable loop from the README."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from simloop import Outcome, Sim
from simloop.invariants import check
from simloop.transcript import Header, Request, Response, Restart, ToolEnd, ToolStart, Transcript

SEARCH = {"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
EMAIL = {"name": "send_email", "kind": "write", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}}
CALLS = [{"name": "search", "input": {"q": "refund"}}, {"name": "send_email", "input": {"to": "a@example.com"}}]


def checkpointing_agent(
    client: Any, tools: list[dict[str, Any]], run_tool: Callable[[str, Any], str], task: str, store: dict[str, Any],
    stop: Callable[[], bool] = lambda: False,
) -> tuple[str, str]:
    """A durable loop: its history is checkpointed in ``store`` after each reply (so a restart resumes the
    interrupted round of tools) and each write keeps an idempotency key there before it runs."""
    messages: list[dict[str, Any]] = store.setdefault("messages", [{"role": "user", "content": task}])
    keys: set[str] = store.setdefault("keys", set())
    for _ in range(8):
        last = messages[-1]
        calls = [b for b in last["content"] if b["type"] == "tool_use"] if last["role"] == "assistant" else []
        if calls:  # a round of tools, fresh or interrupted by a crash: run it
            results = []
            for call in calls:
                key = f"{call['name']}:{json.dumps(call['input'], sort_keys=True)}"
                if call["name"] == "send_email" and key in keys:
                    results.append({"type": "tool_result", "tool_use_id": call["id"],
                                    "content": "attempted before a restart; not repeated"})
                    continue
                if call["name"] == "send_email":
                    keys.add(key)
                try:
                    out = run_tool(call["name"], call["input"])
                    results.append({"type": "tool_result", "tool_use_id": call["id"], "content": out})
                except Exception as exc:  # noqa: BLE001 - a tool's failure is an observation for the model
                    results.append({"type": "tool_result", "tool_use_id": call["id"], "content": str(exc),
                                    "is_error": True})
            messages.append({"role": "user", "content": results})
        if stop():
            return "aborted", ""
        reply = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=tools, messages=messages)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason != "tool_use":
            return "final", "".join(b.text for b in reply.content if b.type == "text")
        if stop():
            return "aborted", ""
    return "max_steps", ""


def _drive(sim: Sim) -> Outcome:
    return Outcome(*checkpointing_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.store,
                                        stop=sim.abort.is_set))


def test_a_read_whose_result_died_with_the_process_may_run_again() -> None:
    """The search ran, then the process died in send_email before the round's results were saved: the resumed
    loop runs the search again, which is what a durable runtime must do (not `no_rerun`)."""
    world = {"task": "Look it up and email the customer.", "tools": [SEARCH, EMAIL],
             "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}],
             "model": [{"tool_use": CALLS}, {"end_turn": "Done."}]}
    with Sim(world) as sim:
        assert sim.run(_drive).reason == "final"
    assert sim.lives == 2 and [s.tool for s in sim.transcript.of(ToolStart)] == ["search", "send_email", "search"]
    assert check(sim.transcript).violations == []


def _by_hand(second_end: ToolEnd) -> Transcript:
    """A transcript built by hand: a reply asks for a search and an email; the email's execution (exec 1) ends as
    ``second_end`` says, the process dies, and the resumed loop runs the email again for the same tool_use."""
    uses = [{"type": "tool_use", "id": "toolu_s", "name": "search", "input": {"q": "refund"}},
            {"type": "tool_use", "id": "toolu_e", "name": "send_email", "input": {"to": "a@example.com"}}]
    reply = {"role": "assistant", "content": uses, "stop_reason": "tool_use"}
    events: list[Any] = [
        Request(t=0, index=0, call=1, attempt=0, path="/v1/messages", stream=False,
                body={"messages": [{"role": "user", "content": "go"}]}),
        Response(t=0, index=0, call=1, status=200, kind="tool_use", stop_reason="tool_use", message=reply),
        ToolStart(t=0, exec=1, tool="send_email", input={"to": "a@example.com"}, nth=1, kind="write",
                  matched="toolu_e"),
    ]
    if second_end.status != "in flight":
        events.append(second_end)
    events += [
        Restart(t=0, life=2, detail="the process died"),
        ToolStart(t=0, exec=2, tool="send_email", input={"to": "a@example.com"}, nth=2, kind="write",
                  matched="toolu_e"),
        ToolEnd(t=0, exec=2, status="ok", result="sent", committed=True),
    ]
    return Transcript(header=Header(scenario="by-hand", seed=0, tools={"search": "read", "send_email": "write"}),
                      events=events)


def test_a_write_that_never_returned_may_run_again_but_a_committed_one_may_not() -> None:
    """In flight when the process died (no end), or ended ``cancelled`` without committing: forgiven.  Committed
    before the crash: `no_rerun`, as before."""
    for end in (ToolEnd(t=0, exec=1, status="in flight"), ToolEnd(t=0, exec=1, status="cancelled")):
        assert [v.invariant for v in check(_by_hand(end), invariants=["no_rerun"]).violations] == []
    committed = ToolEnd(t=0, exec=1, status="crashed", committed=True)
    assert [v.invariant for v in check(_by_hand(committed), invariants=["no_rerun"]).violations] == ["no_rerun"]


def test_a_life_is_not_held_to_the_stop_of_the_life_before() -> None:
    """Stop lands while send_email runs, and the process dies in it: the new life's sim.abort is clear, so its
    model calls and tools are not `abort` violations (the drive uses sim.task, as the README's restart drive)."""
    world = {"task": "Email the customer.", "tools": [SEARCH, EMAIL], "abort": {"tool_call": 1},
             "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}],
             "model": [{"tool_use": [CALLS[1]]}, {"end_turn": "Done."}]}
    with Sim(world) as sim:
        assert sim.run(_drive).reason == "final"
    assert sim.lives == 2 and not sim.abort.is_set()
    assert check(sim.transcript).violations == []


def test_a_loop_that_ignores_the_stop_of_its_own_life_is_still_caught() -> None:
    """Stop lands in life 2 (during the run's second tool execution, the search) and the loop never checks it."""
    world = {"task": "Email the customer.", "tools": [SEARCH, EMAIL], "abort": {"tool_call": 2},
             "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}],
             "model": [{"tool_use": [CALLS[1]]}, {"tool_use": [CALLS[0]]}, {"end_turn": "Done."}]}

    def drive(sim: Sim) -> Outcome:
        return Outcome(*checkpointing_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.store))

    with Sim(world) as sim:
        sim.run(drive)
    assert "abort" in {v.invariant for v in check(sim.transcript).violations}
