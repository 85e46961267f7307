"""The Stop button: `sim.abort`, the scenario key ``abort:``, the ``abort`` invariant and `verify(abort=True)`."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from typing import Any

import anthropic
import pytest

import simloop
from simloop import Outcome, ScenarioError, Sim
from simloop._abort import AbortSignal
from simloop.scenario import Abort, Scenario
from simloop.transcript import AbortEvent

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
DECLARED = {"max_steps": 10, "deadline_s": 300, "max_total_tokens": 200_000}
TOOLS = [{"name": "search", "kind": "read", "input_schema": {"type": "object"}, "results": ["found"]}]


def _world(model: list[dict[str, Any]], abort: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "stop", "task": "Hi.", "tools": TOOLS, "model": model, "then": "end_turn", "abort": abort, **extra}


def _calls(n: int, reason: str = "final") -> Any:
    """A drive that asks the model ``n`` times whatever happens and claims ``reason``."""

    def drive(sim: Sim) -> Outcome:
        for _ in range(n):
            sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": sim.task}])
        return Outcome(reason)

    return drive


def test_the_signal_is_event_like() -> None:
    fired: list[str] = []
    signal = AbortSignal(on_fire=fired.append)
    calls: list[int] = []
    signal.add_callback(lambda: calls.append(1))
    assert not signal.is_set() and not signal
    signal.set("by hand")
    signal.set("again")  # once
    assert signal.is_set() and signal.wait(0) and fired == ["by hand"] and calls == [1]
    signal.add_callback(lambda: calls.append(2))  # already set: at once
    assert calls == [1, 2]
    signal.clear()
    assert not signal.is_set() and repr(signal) == "AbortSignal(set=False)"


def test_a_wait_started_before_stop_is_released_by_it_and_a_cleared_signal_waits_again() -> None:
    import threading

    signal = AbortSignal()
    assert not signal.wait(0)  # (its event is made by the first wait: not set)
    waiting = threading.Event()
    out: list[bool] = []

    def waiter() -> None:
        waiting.set()
        out.append(signal.wait(20))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(20)
    signal.set("by hand")
    thread.join(20)
    assert out == [True] and signal.is_set()
    signal.clear()
    assert not signal.wait(0) and not signal.is_set()
    signal.set("again")
    assert AbortSignal().wait(0) is False and signal.wait(0) is True


def test_the_scenario_key_takes_exactly_one_point() -> None:
    assert Abort(after_call=2).describe() == "after model call 2"
    assert Abort(tool_call=1).describe() == "while tool execution 1 runs" and Abort(at=1.5).describe() == "at 1.5s"
    with pytest.raises(ScenarioError) as e:
        Scenario.from_yaml("task: x\nabort: {after_call: 1, at: 2}\n")
    assert "abort takes exactly one of after_call, tool_call, at (found: after_call, at)" in str(e.value)
    with pytest.raises(ScenarioError, match=r"<scenario>:2: abort.after_call: input should be greater than or equal to 1"):
        Scenario.from_yaml("task: x\nabort: {after_call: 0}\n")


def test_a_call_after_stop_breaks_abort() -> None:
    with Sim(_world([{"end_turn": "a"}, {"end_turn": "b"}], {"after_call": 1})) as sim:
        sim.run(_calls(2, "aborted"))
    violations = sim.check(invariants=["abort"]).violations
    assert [(v.step, v.message[:84]) for v in violations] == [
        (2, "the user pressed Stop (after model call 1, t=0s) and the loop then made model call 2")]


def test_a_reason_other_than_aborted_breaks_abort_unless_the_call_in_flight_failed_or_ended_the_turn() -> None:
    with Sim(_world([{"tool_use": [{"name": "search", "input": {"q": "a"}}]}], {"after_call": 1})) as sim:
        sim.run(_calls(1, "final"))
    assert [v.evidence["reason"] for v in sim.check(invariants=["abort"]).violations] == ["final"]

    # the call in flight answered with a final answer (or a refusal): its reason is honest when nothing followed
    for reply, reason in (({"end_turn": "a"}, "final"), ({"refusal": "no"}, "refusal")):
        with Sim(_world([reply], {"after_call": 1}, strict=False)) as sim:
            sim.run(_calls(1, reason))
        assert sim.check(invariants=["abort"]).ok, reply
        with Sim(_world([reply], {"after_call": 1}, strict=False)) as sim:
            sim.run(_calls(1, "max_steps"))  # but not a reason that reply does not give
        assert [v.evidence["reason"] for v in sim.check(invariants=["abort"]).violations] == ["max_steps"]

    def drive(sim: Sim) -> Outcome:
        try:
            sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": "x"}])
        except anthropic.APIError:
            return Outcome("error")
        return Outcome("final")

    # Stop at 0.5 s, during a burst of 529s that outlasts the SDK's retries: 'error' is honest
    with Sim(_world([{"error": 529, "repeat": 3}], {"at": 0.5})) as sim:
        sim.run(drive)
    assert sim.transcript.of(AbortEvent) and sim.check(invariants=["abort"]).ok


def test_stop_at_a_time_lands_in_the_middle_of_a_call() -> None:
    with Sim(_world([{"end_turn": "a", "latency": 4}], {"at": 1})) as sim:
        sim.run(_calls(1, "aborted"))
    assert [(e.t, e.trigger) for e in sim.transcript.of(AbortEvent)] == [(1.0, "at 1s")]
    assert sim.check().ok


def test_an_async_loop_cancels_the_call_in_flight() -> None:
    async def drive(sim: Sim) -> Outcome:
        task = asyncio.current_task()
        assert task is not None
        sim.abort.add_callback(task.cancel)  # the one line of wiring
        try:
            await sim.async_client.messages.create(model=sim.model, max_tokens=10,
                                                   messages=[{"role": "user", "content": sim.task}])
        except asyncio.CancelledError:
            return Outcome("aborted")
        return Outcome("final")

    with Sim(_world([{"end_turn": "a", "latency": 60}], {"at": 5})) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "aborted" and sim.clock.now() < 60  # it did not wait for the reply
    assert [e.t for e in sim.transcript.of(AbortEvent)] == [5.0] and sim.check().ok


def test_stop_is_per_turn() -> None:
    seen: list[bool] = []

    def drive(sim: Sim) -> list[Outcome]:
        outcomes = []
        for text in sim.user_turns:
            sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": text}])
            seen.append(sim.abort.is_set())
            outcomes.append(Outcome("aborted" if sim.abort.is_set() else "final"))
        return outcomes

    with Sim(_world([{"end_turn": "a"}, {"end_turn": "b"}], {"after_call": 1}, followups=["More?"])) as sim:
        sim.run(drive)
    assert seen == [True, False] and sim.check().ok


@pytest.mark.parametrize("defect", ["abort_ignored", "abort_streaming_continued"])
def test_verify_presses_stop_and_finds_the_defects(defect: str, tmp_path: Path) -> None:
    drive = importlib.import_module(f"examples.{defect}").drive
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(drive, limits=DECLARED, abort=True, seed=0, max_examples=200, out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} == {"abort"}
    assert found.value.scenario is not None and found.value.scenario.abort is not None
    assert "abort:" in Path(found.value.scenario_path or "").read_text()


def test_verify_abort_holds_for_the_reference_loop() -> None:
    drive = importlib.import_module("examples.correct_sync").drive
    assert simloop.verify(drive, limits=DECLARED, abort=True, turns=2, seed=3, max_examples=80).ok


def test_the_timeline_shows_the_stop_where_it_happened() -> None:
    from simloop.timeline import render_timeline

    drive = importlib.import_module("examples.abort_ignored").drive
    with Sim(SCENARIOS / "stop-button-during-tool.yaml") as sim:
        sim.run(drive)
    text = render_timeline(sim.transcript, sim.check().violations, width=200)
    lines = [line.strip() for line in text.splitlines()]
    stop = lines.index("STOP pressed (while tool execution 1 runs) at 2.000s")
    assert lines[stop + 1].startswith("-> search(") and lines[stop + 2].startswith("-> send_email(")
    assert "<-- abort" in text and "outcome of turn 1: aborted" in text


async def _recipe(sim: Sim) -> Outcome:
    """The README's async Stop recipe, as a user writes it: cancel the loop's own task, catch CancelledError."""
    from examples.correct_async import run_agent

    sim.abort.add_callback(asyncio.current_task().cancel)  # type: ignore[union-attr]
    try:
        return await run_agent(sim.async_client, sim.tool_schemas, sim.arun_tool, sim.task, sim.limits,
                               model=sim.model, stop=sim.abort.is_set)
    except asyncio.CancelledError:
        return Outcome("aborted", "stopped by the user")


_EVERY_POINT = [
    *({"after_call": n} for n in (1, 2, 3, 4)), *({"tool_call": n} for n in (1, 2, 3)),
    *({"at": s} for s in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 10.0, 60.0)),
]


@pytest.mark.parametrize("point", _EVERY_POINT, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_the_async_stop_recipe_ends_in_a_verdict_wherever_stop_lands(point: dict[str, Any]) -> None:
    # Stop after the loop's last await (after_call: 3 is the final reply) used to end in a raw CancelledError out of
    # simloop's own event loop: no outcome, no report
    model = [{"tool_use": [{"name": "search", "input": {"q": "a"}}], "latency": 1},
             {"tool_use": [{"name": "search", "input": {"q": "b"}}], "latency": 1},
             {"end_turn": "done", "latency": 1}]
    with Sim(_world(model, point)) as sim:
        outcome = sim.run(_recipe)
    report = sim.check()
    assert report.ok, [v.message for v in report.violations]
    assert outcome.reason == ("aborted" if sim.transcript.of(AbortEvent) else "final")


def test_a_cancellation_the_loop_lets_escape_is_a_crash_that_says_how_to_catch_it() -> None:
    async def drive(sim: Sim) -> Outcome:
        sim.abort.add_callback(asyncio.current_task().cancel)  # type: ignore[union-attr]
        await sim.async_client.messages.create(model=sim.model, max_tokens=10,
                                               messages=[{"role": "user", "content": sim.task}])
        await asyncio.sleep(1)
        return Outcome("final")

    with Sim(_world([{"end_turn": "a"}], {"after_call": 1})) as sim:
        outcome = sim.run(drive)
    assert isinstance(outcome.exception, asyncio.CancelledError)
    [crash] = sim.check(invariants=["crash"]).violations
    assert "catches the CancelledError around every await of its turn and returns Outcome(reason='aborted')" in (
        crash.message)
    assert "test_abort.py" in (crash.evidence["where"] or "")


def test_a_callback_added_before_the_first_turn_hears_the_stop_of_any_turn_once() -> None:
    """Callbacks hold for the run: one added before `sim.user_turns` is taken (issue 31: it was dropped without a
    word when the first turn began) is called for a Stop in a later turn, once, even if added twice."""
    heard: list[int] = []
    world = _world([{"end_turn": "a"}, {"end_turn": "b"}], {"after_call": 2}, followups=["And then?"])

    def drive(sim: Sim) -> list[Outcome]:
        def on_stop() -> None:
            heard.append(sim.user_turns.started)

        sim.abort.add_callback(on_stop)
        sim.abort.add_callback(on_stop)  # the same callback again: still called once
        outcomes = []
        for text in sim.user_turns:
            sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": text}])
            outcomes.append(Outcome("aborted" if sim.abort.is_set() else "final"))
        return outcomes

    with Sim(world) as sim:
        sim.run(drive)
    assert heard == [2]  # the Stop of the second turn (turn 1), heard once
    assert sim.check().ok


def test_a_restart_forgets_the_callbacks_of_the_life_that_died() -> None:
    heard: list[int] = []
    world = _world([{"tool_use": [{"name": "search", "input": {"q": "a"}}]}, {"end_turn": "b"}], {"after_call": 2},
                   faults=[{"tool": "search", "call": 1, "kind": "crash"}], strict=False)

    def drive(sim: Sim) -> Outcome:
        life = sim.lives
        sim.abort.add_callback(lambda: heard.append(life))  # a new closure each life
        reply = sim.client.messages.create(model=sim.model, max_tokens=10,
                                           messages=[{"role": "user", "content": sim.task}])
        for block in reply.content:
            if block.type == "tool_use":
                sim.run_tool(block.name, block.input, tool_use_id=block.id)  # life 1 dies here
        return Outcome("aborted" if sim.abort.is_set() else "final")

    with Sim(world) as sim:
        sim.run(drive)
    assert sim.lives == 2 and heard == [2]  # only the living life's callback heard the Stop
