"""Several conversations at once in one Sim: independent tool loops on threads (or asyncio tasks), each with its own
history, on the run's one client (docs/design.md, Conversations, "Several conversations at once").  Each is held to
the invariants as a run of its own: correct loops pass whatever the scheduling, a defect in one loop is caught and
named by its conversation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import pytest

import simloop
from examples import correct_async, correct_sync, rerun_after_api_error
from examples._common import tool_params
from simloop import Outcome, Sim
from simloop.invariants import check
from simloop.transcript import Request, ToolStart, Transcript

N = 4
TOOLS = [
    {"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
     "results": ["found it"]},
    {"name": "send_email", "kind": "write", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
     "results": ["sent"]},
]


def _world(*replies: dict[str, Any]) -> dict[str, Any]:
    calls = replies or tuple({"tool_use": [{"name": "search", "input": {"q": f"q{i}"}}]} for i in range(N))
    return {"name": "four-at-once", "task": "Find it.", "tools": TOOLS, "model": list(calls), "then": "end_turn"}


def _tasks(sim: Sim, same: bool) -> list[str]:
    return [sim.task if same else f"{sim.task} (part {i})" for i in range(N)]


def _loop(sim: Sim, task: str, *, before_next: Callable[[], None] = lambda: None,
          after_call: Callable[[], None] = lambda: None, drop_turn: bool = False, rerun_on_error: bool = False,
          cap: int | None = None) -> Outcome:
    """The README's loop on the run's client, in a thread of its own: run every call, send ALL the results back in
    ONE user message.  ``before_next`` runs before each call after the first, ``after_call`` after each (a test's
    barriers).  Its defects, one
    thread's: ``drop_turn`` calls the model again without the assistant turn and its results; ``rerun_on_error``
    runs the last turn's tools again when the next call fails."""
    tools = tool_params(sim.tool_schemas)
    messages: list[Any] = [{"role": "user", "content": task}]
    ran: list[Any] = []
    for step in range(cap or sim.limits.max_steps or 10):
        if step:
            before_next()
        try:
            reply = sim.client.messages.create(model=sim.model, max_tokens=512, tools=tools, messages=messages)
        except anthropic.APIError as exc:
            after_call()
            if not rerun_on_error or not ran:
                return Outcome("error", str(exc))
            for call in ran:  # the defect: the write runs again
                sim.run_tool(call.name, call.input)
            continue
        after_call()
        calls = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason == "refusal":
            return Outcome("refusal", "")
        if reply.stop_reason != "tool_use" or not calls:
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        results = []
        for call in calls:
            try:
                results.append({"type": "tool_result", "tool_use_id": call.id,
                                "content": str(sim.run_tool(call.name, call.input))})
            except Exception as exc:  # noqa: BLE001 - a tool's failure is the model's to read
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": str(exc), "is_error": True})
        ran = calls
        if not drop_turn:
            messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": results}]
    return Outcome("max_steps", "")


def _uncapped(sim: Sim, task: str, **hooks: Any) -> Outcome:
    """`_loop` with a defect: it ignores the step cap it declares."""
    return _loop(sim, task, cap=10, **hooks)


def _together(outcomes: list[Outcome]) -> Outcome:
    """The run's outcome: final when every conversation's was, else the first that was not."""
    return next((o for o in outcomes if o.reason != "final"), Outcome("final", "; ".join(o.text for o in outcomes)))


def _threads(*, same: bool = False, barrier: bool = False, start: bool = False) -> Callable[[Sim], Outcome]:
    """Four correct loops on a thread pool.  With ``barrier``, each waits after running its tools until all four
    ran theirs: every tool ends before another thread's next model call (the interleaving that misfired).  With
    ``start``, the four start together (four threads, none reused by the pool for another's loop)."""

    def drive(sim: Sim) -> Outcome:
        wait = threading.Barrier(N).wait if barrier else None
        started = threading.Barrier(N)

        def loop(task: str) -> Outcome:
            if start:
                started.wait()
            return _loop(sim, task, before_next=_once(wait))

        with ThreadPoolExecutor(N) as pool:
            futures = [pool.submit(loop, task) for task in _tasks(sim, same)]
            return _together([f.result() for f in futures])

    return drive


def _once(wait: Callable[[], object] | None) -> Callable[[], None]:
    """``wait`` the first time it is called, nothing after (or nothing at all without one)."""
    left = [wait] if wait is not None else []

    def call() -> None:
        if left:
            left.pop()()

    return call


@pytest.mark.parametrize("same", [False, True], ids=["own-tasks", "one-task"])
def test_four_loops_on_threads_interleaved_hold_every_invariant(same: bool) -> None:
    """Every tool ends before another thread's next call (a barrier): before, results_sent read that call as the
    tool's "next request" and reported each result dropped (4 violations a run)."""
    sim = Sim(_world(), seed=3)
    outcome = sim.run(_threads(same=same, barrier=True))
    report = sim.check()
    assert outcome.reason == "final" and len(sim.transcript.of(ToolStart)) == N
    assert report.ok, str(report)


def test_a_transcript_read_back_tells_the_threads_apart(tmp_path: Path) -> None:
    """Each call's thread is written (the loop's own threads, numbered; the drive's thread left out, as every
    transcript wrote it) and read back: the file checks as the run did."""
    sim = Sim(_world(), seed=5)
    sim.run(_threads(same=True, barrier=True))
    threads = {r.thread for r in sim.transcript.of(Request)}
    assert threads == {1, 2, 3, 4}  # the pool's four threads; the drive made no call itself
    lines = sim.transcript.to_jsonl().splitlines()
    assert sum('"thread"' in line for line in lines) == 4 * 2  # each thread's two calls
    read = Transcript.read(sim.transcript.write(tmp_path / "run.jsonl"))
    assert {r.thread for r in read.of(Request)} == threads and check(read).ok


def test_four_loops_on_threads_pass_whatever_the_scheduling() -> None:
    """60 runs as the threads happen to be scheduled, one task and own tasks: no false alarm (before: 5 to 59)."""
    alarms = []
    for seed in range(60):
        sim = Sim(_world(), seed=seed)
        sim.run(_threads(same=bool(seed % 2)))
        report = sim.check()
        if not report.ok:
            alarms.append(str(report))
    assert alarms == []


def test_four_loops_as_asyncio_tasks_hold_every_invariant() -> None:
    async def one(sim: Sim, task: str) -> Outcome:
        return await correct_async.run_agent(sim.async_client, tool_params(sim.tool_schemas), sim.arun_tool, task,
                                             model=sim.model)

    async def drive(sim: Sim) -> Outcome:
        return _together(list(await asyncio.gather(*(one(sim, task) for task in _tasks(sim, same=True)))))

    for seed in range(20):
        sim = Sim(_world(), seed=seed)
        sim.run(drive)
        assert sim.check().ok, str(sim.check())


def _on_threads(run_agent: Callable[..., Outcome]) -> Callable[[Sim], Outcome]:
    """A drive that runs ``run_agent`` four times at once on a thread pool, each on a task of its own."""

    def drive(sim: Sim) -> Outcome:
        with ThreadPoolExecutor(N) as pool:
            futures = [pool.submit(run_agent, sim.client, tool_params(sim.tool_schemas), sim.run_tool, task,
                                   sim.limits, model=sim.model) for task in _tasks(sim, same=False)]
            return _together([f.result() for f in futures])

    return drive


async def _gathered(sim: Sim) -> Outcome:
    """The async reference loop four times at once, as asyncio tasks."""
    runs = (correct_async.run_agent(sim.async_client, tool_params(sim.tool_schemas), sim.arun_tool, task, sim.limits,
                                    model=sim.model) for task in _tasks(sim, same=False))
    return _together(list(await asyncio.gather(*runs)))


@pytest.mark.parametrize("drive", [_on_threads(correct_sync.run_agent), _gathered], ids=["threads", "asyncio"])
def test_verify_passes_four_reference_loops_at_once(
    drive: Callable[[Sim], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Generated runs (API errors, tool faults, cut and refused replies, slow replies...) shared by four loops at
    once (before: results_sent failed every search of 5 seeds, on threads and on asyncio)."""
    monkeypatch.chdir(tmp_path)  # (a failure's scenario is saved under .simloop/)
    for seed in (7, 8):
        report = simloop.verify(drive, max_examples=25, limits=simloop.Limits(max_steps=8), seed=seed)
        assert report.ok and report.examples == 25


def test_verify_catches_a_rerun_in_loops_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's one-bug loop (it runs the last turn's tools again when the next call fails), four at once:
    caught, in the conversation whose call failed."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(_on_threads(rerun_after_api_error.run_agent), max_examples=150, seed=7,
                       limits=simloop.Limits(max_steps=8))
    assert {v.invariant for v in caught.value.violations} == {"no_rerun"}, str(caught.value)
    assert all("in conversation " in v.message and v.evidence["conversation"] for v in caught.value.violations)


# -- a defect in one of the loops is caught, and named by its conversation ------------------------------------------


def _one_defect(*, uncapped: bool = False, **defect: bool) -> Callable[[Sim], Outcome]:
    """Four loops; thread 0's has ``defect``.  The first calls go in order (so conversation 1 is thread 0's), every
    thread runs its tools, then thread 0 goes on to its end before the others call again."""

    def drive(sim: Sim) -> Outcome:
        called = [threading.Event() for _ in range(N)]
        ran = threading.Barrier(N)
        zero_done = threading.Event()

        def run(i: int) -> Outcome:
            if i:
                called[i - 1].wait()
            waits = [ran.wait] if i == 0 else [ran.wait, zero_done.wait]

            def before_next() -> None:
                while waits:
                    waits.pop(0)()

            loop = _uncapped if uncapped and i == 0 else _loop
            try:
                return loop(sim, f"{sim.task} (part {i})", before_next=before_next, after_call=called[i].set,
                            **(defect if i == 0 else {}))
            finally:
                if i == 0:
                    zero_done.set()

        with ThreadPoolExecutor(N) as pool:
            return _together(list(pool.map(run, range(N))))

    return drive


def test_a_thread_that_drops_its_turn_is_caught_in_its_conversation() -> None:
    sim = Sim(_world(), seed=1)
    sim.run(_one_defect(drop_turn=True))
    found = [(v.invariant, v.evidence.get("conversation")) for v in sim.check().violations]
    assert found == [("results_sent", 1)], str(sim.check())
    assert "in conversation 1 (from step 1, opening 'Find it. (part 0)')" in sim.check().violations[0].message


def test_a_thread_that_reruns_a_write_after_an_api_error_is_caught_in_its_conversation() -> None:
    world = _world(*({"tool_use": [{"name": "send_email", "input": {"to": f"p{i}@x"}}]} for i in range(N)),
                   {"error": 529, "repeat": 3})
    sim = Sim(world, seed=1)
    sim.run(_one_defect(rerun_on_error=True))
    report = sim.check()
    found = {(v.invariant, v.evidence.get("conversation")) for v in report.violations}
    assert ("no_rerun", 1) in found and all(c == 1 for _, c in found), str(report)


def test_a_refusal_in_one_thread_is_not_read_as_carried_on_by_the_others() -> None:
    """One task for all four: the others' later calls start with the refused call's messages, but they are other
    conversations (before: refusal reported them as carrying on the refused one)."""
    sim = Sim(_world({"refusal": "I can't help with that."},
                     *({"tool_use": [{"name": "search", "input": {"q": f"q{i}"}}]} for i in range(N - 1))), seed=2)
    outcome = sim.run(_threads(same=True, start=True))
    report = sim.check()
    assert outcome.reason == "refusal" and report.ok, str(report)


def test_each_thread_is_held_to_its_own_step_cap() -> None:
    """A declared cap of 3 is each loop's: four loops of two calls each keep it (before: limits counted the eight
    calls as one loop's), and a loop that goes past it is caught in its conversation."""
    world = {**_world(), "limits": {"max_steps": 3}}
    sim = Sim(world, seed=4)
    sim.run(_threads(barrier=True))
    assert sim.check().ok, str(sim.check())
    world = {**_world(*({"tool_use": [{"name": "search", "input": {"q": f"q{i}"}}]} for i in range(N + 3))),
             "limits": {"max_steps": 3}}
    sim = Sim(world, seed=4)
    sim.run(_one_defect(uncapped=True))
    found = [(v.invariant, v.evidence.get("conversation"), v.step) for v in sim.check().violations]
    assert found == [("limits", 1, 7)], str(sim.check())


def test_one_loop_that_starts_over_from_its_task_is_still_one_conversation() -> None:
    """A loop on one thread that runs its tools, then calls again with its history started over from the task (the
    results dropped): one conversation, so results_sent still sees the dropped result."""

    def drive(sim: Sim) -> Outcome:
        tools = tool_params(sim.tool_schemas)
        first = sim.client.messages.create(model=sim.model, max_tokens=512, tools=tools,
                                           messages=[{"role": "user", "content": sim.task}])
        for call in (b for b in first.content if b.type == "tool_use"):
            sim.run_tool(call.name, call.input)
        again = sim.client.messages.create(model=sim.model, max_tokens=512, tools=tools,
                                           messages=[{"role": "user", "content": sim.task}])
        return Outcome("final", "".join(b.text for b in again.content if b.type == "text"))

    sim = Sim(_world({"tool_use": [{"name": "search", "input": {"q": "a"}}]}), seed=1)
    sim.run(drive)
    found = [(v.invariant, v.evidence.get("conversation")) for v in sim.check().violations]
    assert found == [("results_sent", None)], str(sim.check())


def test_one_loop_that_starts_over_with_a_summary_keeps_its_step_cap() -> None:
    """A loop on the drive's own thread that starts its history over with another first message (a summary in place
    of its task) is still one loop: its declared cap counts across the restart, so going past it is caught."""

    def drive(sim: Sim) -> Outcome:
        tools = tool_params(sim.tool_schemas)
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        for step in range(5):  # the defect: five calls under a cap of 3
            if step == 2:
                messages = [{"role": "user", "content": "Summary so far: searched twice. Go on."}]
            reply = sim.client.messages.create(model=sim.model, max_tokens=512, tools=tools, messages=messages)
            calls = [b for b in reply.content if b.type == "tool_use"]
            results = [{"type": "tool_result", "tool_use_id": c.id, "content": sim.run_tool(c.name, c.input)}
                       for c in calls]
            messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": results}]
        return Outcome("max_steps", "")

    world = {**_world(*({"tool_use": [{"name": "search", "input": {"q": f"q{i}"}}]} for i in range(5))),
             "limits": {"max_steps": 3}}
    sim = Sim(world, seed=2)
    sim.run(drive)
    assert {r.thread for r in sim.transcript.of(Request)} == {None}  # the drive's own thread
    found = [(v.invariant, v.evidence.get("conversation")) for v in sim.check().violations]
    assert ("limits", None) in found, str(sim.check())


def test_loops_a_pool_runs_one_after_another_on_one_thread_are_told_apart() -> None:
    """A pool of one thread runs four correct loops in turn (each on its own task): calls from the loop's own thread,
    so each new history is a conversation of its own, held to its own cap."""

    def drive(sim: Sim) -> Outcome:
        with ThreadPoolExecutor(1) as pool:
            return _together(list(pool.map(lambda task: _loop(sim, task), _tasks(sim, same=False))))

    sim = Sim({**_world(), "limits": {"max_steps": 3}}, seed=3)
    sim.run(drive)
    assert {r.thread for r in sim.transcript.of(Request)} == {1}
    assert sim.check().ok, str(sim.check())
