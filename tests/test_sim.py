"""Loops driven end to end through `Sim`: sync, async, streaming, the SDK's tool runner, SDK retries."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anthropic
import pytest

import simloop
from simloop import Outcome, Scenario, Sim

TOOLS = [
    {"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"name": "send_email", "kind": "write", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}},
]


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    return Scenario.model_validate({"name": "t", "task": "Find and email.", "tools": TOOLS, "model": list(model), **kw})


def strict_client(sim: Sim) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="k", base_url="https://api.anthropic.com", http_client=sim.http_client, _strict_response_validation=True
    )


def strict_async_client(sim: Sim) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="k", base_url="https://api.anthropic.com", http_client=sim.async_http_client,
        _strict_response_validation=True,
    )


def sync_loop(sim: Sim, client: anthropic.Anthropic, *, max_steps: int = 8) -> Outcome:
    messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
    for _ in range(max_steps):
        reply = client.messages.create(model=sim.model, max_tokens=1024, messages=messages, tools=sim.tool_schemas)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        if reply.stop_reason != "tool_use":
            return Outcome("final" if reply.stop_reason == "end_turn" else "error", _text(reply))
        results = []
        for block in reply.content:
            if block.type == "tool_use":
                try:
                    out = sim.run_tool(block.name, block.input, tool_use_id=block.id)
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": out})
                except Exception as e:  # noqa: BLE001  (a tool's failure is an observation)
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": str(e), "is_error": True})
        messages.append({"role": "user", "content": results})
    return Outcome("max_steps")


def _text(reply: Any) -> str:
    return "".join(b.text for b in reply.content if b.type == "text")


SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund"}}]}
EMAIL = {"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]}


def test_sync_loop_through_the_sdk_with_retries_on_virtual_time() -> None:
    s = scenario(SEARCH, {"error": 529, "repeat": 2}, EMAIL, {"end_turn": "Done."}, limits={"max_steps": 8})
    started = time.perf_counter()
    with Sim(s, seed=1) as sim:
        outcome = sim.run(lambda sim: sync_loop(sim, strict_client(sim)))
    elapsed = time.perf_counter() - started
    assert outcome == Outcome("final", "Done.")
    t = sim.transcript
    assert t.model_calls == 3  # the two 529s were SDK retries of call 2
    assert [(r.call, r.attempt) for r in t.requests] == [(1, 0), (2, 0), (2, 1), (2, 2), (3, 0)]
    assert [r.status for r in t.responses] == [200, 529, 529, 200, 200]
    assert sim.clock.now() > 0.375 + 0.75  # the SDK's backoff slept on the virtual clock (a real sleep moves it not)
    assert elapsed < 30  # and the run returned, with room for a loaded machine (a real backoff would be 1.1 s)
    assert sim.check(outcome).ok
    usage = [r.input_tokens for r in t.responses if r.status == 200]
    assert usage == sorted(usage) and usage[0] < usage[-1]  # the history grows, so does usage


def test_529_burst_beyond_sdk_retries_reaches_the_loop() -> None:
    s = scenario({"error": 529, "repeat": 3})
    with Sim(s) as sim:
        outcome = sim.run(lambda sim: sync_loop(sim, sim.client))
    assert outcome.reason == "error"
    assert isinstance(outcome.exception, anthropic.OverloadedError)
    assert outcome.exception.request_id and outcome.exception.request_id.startswith("req_011C")
    assert sim.transcript.model_calls == 1


def test_async_loop_with_parallel_tools() -> None:
    s = scenario(
        {"tool_use": [{"name": "search", "input": {"q": "a"}}, {"name": "search", "input": {"q": "b"}}]},
        {"end_turn": "ok"},
        faults=[{"tool": "search", "kind": "slow", "latency": 30}],
    )

    async def drive(sim: Sim) -> Outcome:
        client = strict_async_client(sim)
        messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
        while True:
            reply = await client.messages.create(
                model=sim.model, max_tokens=512, messages=messages, tools=sim.tool_schemas
            )
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            if reply.stop_reason != "tool_use":
                return Outcome("final", _text(reply))
            uses = [b for b in reply.content if b.type == "tool_use"]
            outs = await asyncio.gather(*(sim.arun_tool(b.name, b.input, tool_use_id=b.id) for b in uses))
            messages.append(
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": o} for b, o in zip(uses, outs)
                ]}
            )

    with Sim(s) as sim:
        outcome = sim.run(drive)
    assert outcome == Outcome("final", "ok")
    starts = sim.transcript.of(simloop.transcript.ToolStart)
    ends = sim.transcript.of(simloop.transcript.ToolEnd)
    assert [e.t for e in starts] == [0.0, 0.0]
    assert [e.t for e in ends] == [30.0, 30.0]  # they overlapped on the virtual loop
    assert sim.check(outcome).ok


def test_an_async_drive_runs_from_inside_a_running_event_loop() -> None:
    """An async test calling `Sim.run` gets the run (on its own thread), not a RuntimeError as the outcome."""
    s = scenario(SEARCH, {"end_turn": "ok", "latency": 60})

    async def drive(sim: Sim) -> Outcome:
        messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
        reply = await sim.async_client.messages.create(
            model=sim.model, max_tokens=64, messages=messages, tools=sim.tool_schemas)
        block = next(b for b in reply.content if b.type == "tool_use")
        out = await sim.arun_tool(block.name, block.input, tool_use_id=block.id)
        messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": out}]}]
        final = await sim.async_client.messages.create(
            model=sim.model, max_tokens=64, messages=messages, tools=sim.tool_schemas)
        return Outcome("final", _text(final))

    async def async_test() -> tuple[Outcome, Sim]:
        with Sim(s) as sim:
            return sim.run(drive), sim

    outcome, sim = asyncio.run(async_test())
    assert outcome == Outcome("final", "ok")
    assert sim.clock.now() == 60.0  # on the Sim's virtual clock, not the test's loop
    assert sim.check(outcome).ok


def test_streaming_loop() -> None:
    s = scenario(SEARCH, {"end_turn": "All done, the refund is processed."})

    def drive(sim: Sim) -> Outcome:
        client = strict_client(sim)
        messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
        while True:
            with client.messages.stream(model=sim.model, max_tokens=512, messages=messages, tools=sim.tool_schemas) as st:
                texts = list(st.text_stream)
                reply = st.get_final_message()
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            if reply.stop_reason != "tool_use":
                assert "".join(texts) == _text(reply)
                return Outcome("final", _text(reply))
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input, tool_use_id=b.id)}
                for b in reply.content if b.type == "tool_use"
            ]})

    with Sim(s) as sim:
        outcome = sim.run(drive)
    assert outcome == Outcome("final", "All done, the refund is processed.")
    assert all(r.stream for r in sim.transcript.requests)
    assert sim.check(outcome).ok


@pytest.mark.parametrize("thread", [True, False], ids=["threads", "no-threads"])
def test_the_sdks_tool_runner(thread: bool) -> None:
    s = scenario(SEARCH, EMAIL, {"end_turn": "Sent."})

    def drive(sim: Sim) -> Outcome:
        @anthropic.beta_tool
        def search(q: str) -> str:
            """Search the knowledge base."""
            return sim.run_tool("search", {"q": q})

        @anthropic.beta_tool
        def send_email(to: str) -> str:
            """Send an email."""
            return sim.run_tool("send_email", {"to": to})

        kwargs: dict[str, Any] = {} if thread else {"thread": False}
        runner = sim.client.beta.messages.tool_runner(
            model=sim.model, max_tokens=512, tools=[search, send_email],
            messages=[{"role": "user", "content": sim.task}], **kwargs,
        )
        last = runner.until_done()
        return Outcome("final", "".join(b.text for b in last.content if b.type == "text"))

    with Sim(s) as sim:
        outcome = sim.run(drive)
    assert outcome == Outcome("final", "Sent.")
    reqs = sim.transcript.requests
    assert len(reqs) == 3
    if thread:
        assert reqs[0].body["thread"] == {"type": "create"}
        assert reqs[1].body["thread"]["type"] == "continue"
        assert len(reqs[1].body["messages"]) == 1  # only the new tool_result message is sent ...
        assert len(reqs[1].conversation) == 3  # ... and stands for the whole history
        assert "tools" not in reqs[1].body
    else:
        assert "thread" not in reqs[1].body and len(reqs[1].body["messages"]) == 3
    assert [e.matched is not None for e in sim.transcript.of(simloop.transcript.ToolStart)] == [True, True]
    assert sim.check(outcome).ok


def test_response_elapsed_is_the_virtual_latency() -> None:
    """``response.elapsed`` works as on the network, and shows the virtual time the request took."""
    s = scenario({"end_turn": "a", "latency": 2.5}, {"end_turn": "b", "latency": 4.0}, {"end_turn": "c", "latency": 1.5})
    elapsed: list[float] = []

    def drive(sim: Sim) -> Outcome:
        args: dict[str, Any] = {"model": sim.model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
        raw = sim.client.messages.with_raw_response.create(**args)
        elapsed.append(raw.elapsed.total_seconds())
        with sim.client.messages.with_streaming_response.create(**args, stream=True) as streamed:
            streamed.read()
        elapsed.append(streamed.elapsed.total_seconds())

        async def arun() -> None:
            raw = await sim.async_client.messages.with_raw_response.create(**args)
            elapsed.append(raw.elapsed.total_seconds())

        sim.clock.run(arun())
        return Outcome("final", "")

    with Sim(s) as sim:
        sim.run(drive)
    assert elapsed == [2.5, 4.0, 1.5]


def test_running_out_of_script_names_the_call_and_the_request() -> None:
    s = scenario(SEARCH)
    with Sim(s) as sim, pytest.raises(simloop.ScriptExhaustedError) as info:
        sim.run(lambda sim: sync_loop(sim, sim.client))
    msg = str(info.value)
    assert "the script has 1 reply and the loop asked for another at model call 2" in msg
    assert "the last a user message [tool_result]" in msg
    assert "then: end_turn" in msg


def test_same_scenario_and_seed_same_transcript_bytes() -> None:
    s = scenario(SEARCH, {"error": 500}, EMAIL, {"end_turn": "Done."})

    def once(seed: int) -> str:
        with Sim(s, seed=seed) as sim:
            sim.run(lambda sim: sync_loop(sim, sim.client))
        return sim.transcript.to_jsonl()

    first = once(3)
    assert all(once(3) == first for _ in range(3))
    assert once(4) != first  # ids come from the seed
    back = simloop.Transcript.from_jsonl(first)
    assert back.to_jsonl() == first


def test_exception_escaping_the_drive_is_the_outcome() -> None:
    def drive(sim: Sim) -> Outcome:
        raise KeyError("boom")

    with Sim(scenario({"end_turn": "x"})) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "error" and isinstance(outcome.exception, KeyError)
    assert sim.transcript.outcome is not None and sim.transcript.outcome.exception == "KeyError: 'boom'"
    assert sim.leftovers() == ["model[0] (end_turn) was never served"]


def test_a_sim_runs_once() -> None:
    with Sim(scenario({"end_turn": "x"})) as sim:
        sim.run(lambda sim: sync_loop(sim, sim.client))
        with pytest.raises(simloop.UsageError, match="a Sim runs one loop"):
            sim.run(lambda sim: sync_loop(sim, sim.client))


FIRST_CALL = """
import sys, threading

imported = {}


class Spy:  # where each module was first imported: inside a run (watched, on the clock) or outside
    def find_spec(self, name, path=None, target=None):
        if name not in imported:
            me = threading.get_ident()
            watched = me in sys.modules["simloop._runtime.watchdog"]._MONITOR.watched.values()
            imported[name] = "watched" if watched else "on the clock" if me in simloop._runtime.registry.threads else "outside"
        return None


import simloop
import simloop._runtime.clock
import simloop._runtime.registry

sys.meta_path.insert(0, Spy())
s = simloop.Scenario.model_validate({'model': [{'end_turn': 'hi'}]})
def drive(sim):
    r = sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{'role': 'user', 'content': 'x'}])
    return ('final', r.content[0].text)
async def adrive(sim):
    r = await sim.async_client.messages.create(model=sim.model, max_tokens=10, messages=[{'role': 'user', 'content': 'x'}])
    return ('final', r.content[0].text)
for d in (drive, adrive):
    with simloop.Sim(s) as sim:
        print(sim.run(d), sim.watchdog.halts)
print([imported.get(name, "never") for name in ("anthropic", "httpx2", "simloop.wire.transport", "anyio._backends._asyncio")])
print(sorted(name for name, where in imported.items() if where != "outside"))
"""


def test_the_first_sdk_call_of_a_process_works_inside_a_sim() -> None:
    """simloop imports the SDK (8.7 s on a loaded machine) and makes its first calls before the run: neither
    the watchdog nor the clock counts them (they halted a correct loop).  pydantic's lazily built schemas
    are built then too.  In a fresh interpreter: in this one, earlier tests have already done it all.
    """
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip().splitlines() == [
        "Outcome(reason='final', text='hi', exception=None) 0",
        "Outcome(reason='final', text='hi', exception=None) 0",
        "['outside', 'outside', 'outside', 'never']",  # anyio's backend: no drive here uses its threads
        "[]",  # nothing at all imported inside a run, sync or async
    ], out.stdout + out.stderr


def _cyclic_garbage(make: Any) -> list[str]:
    """The objects ``make()`` leaves for the garbage collector (reference cycles), by type, with collection off."""
    import gc

    gc.collect()
    gc.disable()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        make()
        gc.collect()
        left = sorted({type(o).__qualname__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return left


def test_a_finished_run_is_freed_as_it_ends_not_by_the_garbage_collector() -> None:
    """Every run builds a Sim, a transcript, a server and SDK clients; left in reference cycles, they wait for the
    garbage collector, whose collections then cost a run more than its model calls (hundreds of µs each)."""
    from tests.loops import readme

    world = scenario(
        {"tool_use": [{"name": "search", "input": {"q": "x"}}]}, {"end_turn": "one"}, {"end_turn": "two"},
        followups=["And then?"],
    )

    def runs() -> None:
        for drive in (readme.conversation, readme.async_stop, lambda sim: sync_loop(sim, sim.client)):
            with Sim(world) as sim:
                sim.run(drive)
            assert sim.transcript.outcome is not None

    runs()  # first imports and caches of the process
    assert _cyclic_garbage(runs) == []

    def cyclic() -> None:  # the defect this test catches: a run kept in a cycle (here, by the drive)
        with Sim(world) as sim:
            sim.store["sim"] = sim
            sim.run(readme.plain)

    assert "Sim" in _cyclic_garbage(cyclic)
