"""A sync run's threads and pool jobs act on the simulator in a fixed order (`simloop._runtime.order`).

A loop that runs a reply's tool calls at once on a thread pool (LangGraph's ToolNode, a user's ``pool.map``) had its
jobs reach ``sim.run_tool`` in OS-scheduling order: the executions' numbers, their canned results ("result N of
...") and so the next request differed between runs of one seed, and ``verify`` could neither replay nor shrink.
docs/design.md, Virtual time, "Threads in turn".
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import queue
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

from simloop import Outcome, Scenario, Sim
from simloop._runtime.order import GRACE
from simloop._runtime.realtime import REAL
from simloop.transcript import ToolStart

RUNS = 10
TOOLS = [{"name": "search", "kind": "read", "description": "Search the knowledge base.",
          "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]


def calls(*qs: str) -> dict[str, Any]:
    return {"tool_use": [{"name": "search", "input": {"q": q}} for q in qs]}


# Two replies asking for several calls at once, then an answer.
AT_ONCE = Scenario.model_validate({"name": "at-once", "task": "Find.", "tools": TOOLS,
                                   "model": [calls("a", "b", "c"), calls("d", "e"), {"end_turn": "Done."}]})


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def busy(n: int) -> None:
    """The job's own Python before its tool (argument checks, logging, a framework's callbacks), long enough that
    the OS switches threads in it: a later job with less of it reached the simulator first."""
    sum(i * i for i in range(n))


def pool_loop(work: Callable[[anthropic.Anthropic, Any, Any], str]) -> Callable[[Sim], Outcome]:
    """The README's loop, running a reply's tool calls on a ThreadPoolExecutor, each as ``work`` does it."""

    def drive(sim: Sim) -> Outcome:
        client = sim.client
        messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
        with cf.ThreadPoolExecutor(max_workers=4) as pool:
            for _ in range(10):
                reply = client.messages.create(model=sim.model, max_tokens=1024, messages=messages,
                                               tools=sim.tool_schemas)
                messages.append({"role": "assistant", "content": reply.content})
                uses = [b for b in reply.content if b.type == "tool_use"]
                if not uses:
                    return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
                outputs = work(sim, pool, uses)
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": out} for b, out in zip(uses, outputs)]})
        return Outcome("max_steps", "")

    return drive


def mapped(sim: Sim, pool: cf.ThreadPoolExecutor, uses: list[Any]) -> list[str]:
    def one(i: int, block: Any) -> str:
        busy(60_000 * (len(uses) - i))  # the first call has the most to do before its tool
        return sim.run_tool(block.name, block.input)

    return list(pool.map(one, range(len(uses)), uses))


def followed_up(sim: Sim, pool: cf.ThreadPoolExecutor, uses: list[Any]) -> list[str]:
    """Each job hands its result over a queue, and the loop makes a tool call of its own on each as it comes.

    (Not ``as_completed``: the futures already done when it is called come out in the order of a set, which is
    the order of their addresses in memory, in production as here.)"""
    results: queue.Queue[tuple[str, str]] = queue.Queue()

    def one(block: Any) -> None:
        busy(30_000)
        results.put((block.id, sim.run_tool(block.name, block.input)))

    for block in uses:
        pool.submit(one, block)
    out = {}
    for _ in uses:
        id_, result = results.get(timeout=60)
        out[id_] = result + sim.run_tool("search", {"q": "more"})
    return [out[b.id] for b in uses]


def transcripts(drive: Callable[[Sim], Any], scenario: Scenario = AT_ONCE, runs: int = RUNS) -> list[str]:
    out = []
    for _ in range(runs):
        with Sim(scenario, seed=3) as sim:
            assert sim.run(drive).reason == "final"
        out.append(sim.transcript.to_jsonl())
    return out


def executed(jsonl: str) -> list[str]:
    """The tool executions' inputs (q), in the order recorded."""
    return [e["input"]["q"] for e in map(json.loads, jsonl.splitlines()) if e.get("type") == "tool_start"]


def test_a_pools_jobs_run_their_tools_in_submit_order_and_every_run_of_a_seed_is_the_same() -> None:
    runs = transcripts(pool_loop(mapped))
    assert len(set(runs)) == 1, f"{len(set(runs))} different transcripts in {RUNS} runs of one seed"
    assert executed(runs[0]) == ["a", "b", "c", "d", "e"]  # the first job had the most to do, and went first


def test_a_loop_that_acts_on_each_result_as_it_completes_is_reproducible() -> None:
    runs = transcripts(pool_loop(followed_up))
    assert len(set(runs)) == 1, f"{len(set(runs))} different transcripts in {RUNS} runs of one seed"


def test_threads_started_by_hand_with_two_tools_each_are_reproducible() -> None:
    def work(sim: Sim, pool: Any, uses: list[Any]) -> list[str]:
        out = [""] * len(uses)

        def job(i: int, block: Any) -> None:
            busy(40_000 * (len(uses) - i))
            first = sim.run_tool(block.name, block.input)
            busy(40_000 * (i + 1))
            out[i] = first + sim.run_tool(block.name, {"q": block.input["q"] * 2})

        threads = [threading.Thread(target=job, args=(i, b)) for i, b in enumerate(uses)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    runs = transcripts(pool_loop(work))
    assert len(set(runs)) == 1, f"{len(set(runs))} different transcripts in {RUNS} runs of one seed"


def test_the_langgraph_sync_drive_is_reproducible() -> None:
    pytest.importorskip("langgraph", reason="langgraph is not installed (pip install simloop[langgraph])")
    from simloop.adapters import langgraph as lg

    runs = transcripts(lg.make_drive())
    assert len(set(runs)) == 1, f"{len(set(runs))} different transcripts in {RUNS} runs of one seed"
    assert executed(runs[0]) == ["a", "b", "c", "d", "e"]  # the ToolNode's jobs, in the reply's order


# -- a job that waits on a later one -------------------------------------------------------------------------------


def _waits_on_the_next(how: str) -> tuple[Sim, float]:
    """Job 1 waits for job 2 to have run its tool (through an Event, seen by simloop, or a Lock, not seen)."""
    ready = threading.Event()
    gate = threading.Lock()
    gate.acquire()

    def first(sim: Sim) -> str:
        if how == "event":
            assert ready.wait(30)
        else:
            assert gate.acquire(timeout=30)
        return sim.run_tool("search", {"q": "first"})

    def second(sim: Sim) -> str:
        out = sim.run_tool("search", {"q": "second"})
        ready.set() if how == "event" else gate.release()
        return out

    def drive(sim: Sim) -> Outcome:
        with cf.ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(first, sim), pool.submit(second, sim)]
            return Outcome("final", " ".join(f.result(timeout=60) for f in futures))

    scenario = Scenario.model_validate({"name": "waits", "task": "t", "tools": TOOLS, "model": [{"end_turn": "x"}]})
    started = REAL.monotonic()
    with Sim(scenario, seed=0) as sim:
        assert sim.run(drive).reason == "final"
    return sim, REAL.monotonic() - started


def test_a_job_waiting_on_an_event_a_later_job_sets_lets_it_go_at_once() -> None:
    sim, _ = _waits_on_the_next("event")
    assert [s.input["q"] for s in sim.transcript.of(ToolStart)] == ["second", "first"]
    assert sim.clock.order is not None and sim.clock.order.fallbacks == 0  # the wait is seen: no grace spent


def test_a_job_blocked_where_simloop_cannot_see_lets_the_later_one_go_after_the_grace() -> None:
    sim, took = _waits_on_the_next("lock")
    assert [s.input["q"] for s in sim.transcript.of(ToolStart)] == ["second", "first"]
    assert sim.clock.order is not None and sim.clock.order.fallbacks >= 1
    assert took >= GRACE  # (no upper bound in real time: a loaded machine may take longer, never less)


def test_a_job_queued_behind_a_full_pool_holds_nobody_up() -> None:
    # one worker: the second job cannot begin while the first runs, so the first does not wait for it
    def work(sim: Sim, pool: Any, uses: list[Any]) -> list[str]:
        with cf.ThreadPoolExecutor(max_workers=1) as one:
            return list(one.map(lambda b: sim.run_tool(b.name, b.input), uses))

    with Sim(AT_ONCE, seed=3) as sim:
        assert sim.run(pool_loop(work)).reason == "final"
    assert sim.clock.order is not None and sim.clock.order.fallbacks == 0
    assert [s.input["q"] for s in sim.transcript.of(ToolStart)] == ["a", "b", "c", "d", "e"]


def test_a_background_thread_sleeping_in_a_loop_takes_its_turns_between_the_drives_calls() -> None:
    # (round-robin: the drive, which never waits, does not starve a thread it started; the same every run)
    def drive(sim: Sim) -> Outcome:
        stop = threading.Event()
        ticks: list[float] = []

        def heartbeat() -> None:
            while not stop.is_set():
                sim.run_tool("search", {"q": "beat"})
                ticks.append(sim.clock.now())
                if len(ticks) >= 50:
                    return

        t = threading.Thread(target=heartbeat, daemon=True)
        t.start()
        for _ in range(3):
            sim.run_tool("search", {"q": "main"})
        stop.set()
        t.join()
        return Outcome("final", str(len(ticks)))

    scenario = Scenario.model_validate({"name": "beat", "task": "t", "tools": TOOLS, "model": [{"end_turn": "x"}]})
    seen = set()
    for _ in range(5):
        with Sim(scenario, seed=0) as sim:
            assert sim.run(drive).reason == "final"
        qs = [s.input["q"] for s in sim.transcript.of(ToolStart)]
        seen.add(tuple(qs))
    assert len(seen) == 1, seen
    qs = list(seen.pop())
    assert qs[:6] == ["beat", "main", "beat", "main", "beat", "main"], qs
