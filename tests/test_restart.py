"""Crash and restart: `sim.store`, the ``crash`` fault, restarts of the drive, invariants across lives."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

import simloop
from simloop import Outcome, Sim
from simloop.errors import SimulatedCrash
from simloop.transcript import Restart, ToolEnd

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
DECLARED = {"max_steps": 10, "deadline_s": 300, "max_total_tokens": 200_000}


def _drive(name: str) -> Any:
    return importlib.import_module(f"examples.{name}").drive


def test_a_crash_restarts_the_drive_and_keeps_only_the_store() -> None:
    lives: list[tuple[int, dict[str, Any]]] = []

    def drive(sim: Sim) -> Outcome:
        lives.append((sim.lives, dict(sim.store)))
        sim.store["seen"] = sim.store.get("seen", 0) + 1
        try:
            sim.run_tool("send_email", {"to": "a"})
        except Exception:  # noqa: BLE001 - a crash is not an Exception: this cannot swallow it
            return Outcome("error")
        return Outcome("final")

    world = {"tools": [{"name": "send_email", "kind": "write", "input_schema": {"type": "object"}}],
             "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}]}
    with Sim(world) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "final" and lives == [(1, {}), (2, {"seen": 1})]
    assert [(e.life, e.detail) for e in sim.transcript.of(Restart)] == [
        (2, "the process died while send_email ran (its effect was applied)")]
    ends = sim.transcript.of(ToolEnd)
    assert [(e.status, e.committed) for e in ends] == [("crashed", True), ("ok", True)]
    assert issubclass(SimulatedCrash, BaseException) and not issubclass(SimulatedCrash, Exception)


def test_lives_are_bounded() -> None:
    def drive(sim: Sim) -> Outcome:
        sim.run_tool("send_email", {"to": "a"})
        return Outcome("final")

    world = {"tools": [{"name": "send_email", "kind": "write", "input_schema": {"type": "object"}}],
             "faults": [{"tool": "send_email", "kind": "crash"}]}  # every execution dies
    with Sim(world) as sim:
        sim.run(drive)
    assert sim.lives == 10 and sim.transcript.halt is not None and sim.transcript.halt.budget == "restarts"
    assert "stops" in {v.invariant for v in sim.check().violations}


def test_the_naive_durable_loop_sends_twice_and_the_keyed_one_once() -> None:
    with Sim(SCENARIOS / "crash-after-email.yaml") as sim:
        sim.run(_drive("durable_resend"))
    violations = sim.check().violations
    assert [v.invariant for v in violations] == ["no_rerun"]
    assert "after the process died and restarted" in violations[0].message
    with Sim(SCENARIOS / "crash-after-email.yaml") as sim:
        sim.run(_drive("correct_sync"))
    assert sim.check().ok and sim.store["writes"]


def test_verify_restarts_finds_the_naive_durable_loop(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(_drive("durable_resend"), limits=DECLARED, restarts=1, seed=0, max_examples=200,
                       out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} == {"no_rerun"}
    assert found.value.scenario is not None and any(f.kind == "crash" for f in found.value.scenario.faults)
    assert simloop.replay(_drive("correct_sync"), found.value.scenario_path or "").ok


def test_verify_restarts_must_be_a_count() -> None:
    with pytest.raises(simloop.UsageError, match=r"verify\(restarts=...\) is the most simulated process deaths"):
        simloop.verify(_drive("correct_sync"), restarts=-1)


def test_the_timeline_shows_the_restart() -> None:
    from simloop.timeline import render_timeline

    with Sim(SCENARIOS / "crash-after-email.yaml") as sim:
        sim.run(_drive("durable_resend"))
    text = render_timeline(sim.transcript, sim.check().violations, width=200)
    assert "committed, then the PROCESS DIED" in text
    assert "PROCESS DIED at 0.000s: the loop restarts (life 2), sim.store kept" in text


def test_cli_verify_takes_abort_and_restarts(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from simloop.cli import main

    monkeypatch.chdir(ROOT)
    base = ["verify", "--max-examples", "200", "--seed", "0", "--max-steps", "10", "--out", str(tmp_path),
            "--no-progress"]
    assert main([*base[:1], "examples.durable_resend:drive", *base[1:], "--restarts", "1"]) == 1
    assert "no_rerun" in capsys.readouterr().out
    assert main([*base[:1], "examples.abort_ignored:drive", *base[1:], "--abort"]) == 1
    assert "[abort]" in capsys.readouterr().out


def test_a_langgraph_agent_with_its_checkpointer_in_the_store_resends_after_a_crash(tmp_path: Path) -> None:
    # docs/findings.md, F15: resuming the thread re-runs the interrupted tools node (at least once)
    pytest.importorskip("langgraph", reason="langgraph is not installed (pip install simloop[langgraph])")
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from simloop.adapters import langgraph as lg

    def drive(sim: Sim) -> Outcome:
        saver = sim.store.setdefault("checkpointer", InMemorySaver())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = create_react_agent(lg.chat_model(sim), lg.tools(sim), checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "ticket-1234"},
                       "recursion_limit": lg.recursion_limit(sim.limits.max_steps) or 25}
        resumed = saver.get_tuple(config) is not None
        result = agent.invoke(None if resumed else {"messages": [{"role": "user", "content": sim.task}]}, config)
        return lg.outcome_of(result["messages"][-1])

    with Sim(SCENARIOS / "happy-path.yaml") as warm:  # the harness's imports, before a run's watchdog
        warm.run(lg.make_drive())
    with Sim(SCENARIOS / "crash-after-email.yaml") as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "final" and sim.lives == 2
    reruns = [v for v in sim.check().violations if v.invariant == "no_rerun"]
    assert [v.evidence["exec"] for v in reruns] == [3, 4]  # the resumed tools node, then the model's new ask
    assert reruns[0].step == 2  # exec 3 came before any new model call: the replayed superstep

    # under verify(restarts=1) the resumed graph's requests stay sound (a tool's exception escaping is F14)
    report = simloop.verify(drive, limits=DECLARED, restarts=1, seed=0, max_examples=30, out_dir=tmp_path,
                            invariants=["stops", "pairing", "request_valid"])
    assert report.ok


# -- a crash while a model call is in flight ----------------------------------------------------------------------

ONE_AT_A_TIME: Any = {"type": "auto", "disable_parallel_tool_use": True}
_EMAIL = {"name": "send_email", "kind": "write", "input_schema": {"type": "object"}, "results": ["sent"]}


def _forgets_finished_writes(sim: Sim) -> Outcome:
    """Defect: a durable loop that checkpoints its history in ``sim.store`` as each reply arrives, and keeps a
    write-ahead mark for each write while it runs, dropped once the write returned (its result is in the history
    now, the loop reasons: but that history is saved only with the next reply).  A crash during a write leaves the
    mark, so the write is not repeated; a crash during the next model call leaves neither mark nor result, and the
    resumed loop runs the saved reply's calls again: the email goes out twice.  One tool call a reply
    (``disable_parallel_tool_use``): no write finishes before another one's crash, so only a crash in a model call
    shows the bug."""
    import copy

    saved: list[Any] = sim.store.setdefault("history", [{"role": "user", "content": sim.task}])
    running: set[str] = sim.store.setdefault("running", set())
    history = copy.deepcopy(saved)

    def run(name: str, input: Any, tool_use_id: str) -> str:
        key = f"{name}:{sorted(input.items())}"
        if key in running:
            return "Not run again: this write was attempted before (it may have taken effect)."
        running.add(key)
        result = sim.run_tool(name, input, tool_use_id=tool_use_id)
        running.discard(key)  # BUG: forgotten before the history that records the result is saved
        return result

    for _ in range(10):
        if history[-1]["role"] == "assistant":
            calls = [b for b in history[-1]["content"] if b["type"] == "tool_use"]
            results = []
            for b in calls:
                try:
                    results.append({"type": "tool_result", "tool_use_id": b["id"], "content": run(b["name"], b["input"], b["id"])})
                except Exception as e:  # noqa: BLE001 (a tool's failure is an observation for the model)
                    results.append({"type": "tool_result", "tool_use_id": b["id"], "is_error": True, "content": str(e)})
            history.append({"role": "user", "content": results})
        try:
            reply = sim.client.messages.create(model=sim.model, max_tokens=1024, tools=sim.tool_schemas,
                                               messages=history, tool_choice=ONE_AT_A_TIME)
        except Exception as e:  # noqa: BLE001 (the SDK's retries gave up)
            return Outcome("error", str(e))
        text = "".join(b.text for b in reply.content if b.type == "text")
        if reply.stop_reason in ("max_tokens", "refusal"):
            return Outcome("truncated" if reply.stop_reason == "max_tokens" else "refusal", text)
        history.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        saved[:] = copy.deepcopy(history)  # the checkpoint: as each reply arrives
        if reply.stop_reason != "tool_use":
            return Outcome("final", text)
    return Outcome("max_steps")


def test_a_reply_that_crashes_kills_the_process_after_the_call_was_answered() -> None:
    from tests.loops.readme import durable

    world = {"name": "c", "task": "Email the customer.", "tools": [_EMAIL], "then": "end_turn", "model": [
        {"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]},
        {"end_turn": "Done.", "crash": True},
        {"end_turn": "Sent."},
    ]}
    scenario = simloop.Scenario.model_validate(world)
    assert scenario.needs == ("restarts",)
    assert simloop.Scenario.from_yaml(scenario.to_yaml()).model[1].crash
    with Sim(world) as sim:
        assert sim.run(durable) == Outcome("final", "Sent.")  # the request sent again after the restart
    restarts = sim.transcript.of(Restart)
    assert sim.lives == 2 and [r.detail for r in restarts] == [
        ("the process died while model call 2 was in flight (the request was sent and answered; its reply was never "
         "read)")]
    assert sim.check().ok
    with Sim(world) as sim:
        sim.run(_forgets_finished_writes)
    assert [v.invariant for v in sim.check().violations] == ["no_rerun"]
    # the same run with the process dying in the write instead: the loop's mark holds, nothing runs twice
    world = {**world, "model": [world["model"][0], {"end_turn": "Sent."}],
             "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}]}
    with Sim(world) as sim:
        sim.run(_forgets_finished_writes)
    assert sim.lives == 2 and sim.check().ok


def test_a_crash_in_a_model_call_reaches_an_async_loop_as_a_restart() -> None:
    async def drive(sim: Sim) -> Outcome:
        reply = await sim.async_client.messages.create(model=sim.model, max_tokens=100,
                                                       messages=[{"role": "user", "content": sim.task}])
        return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]

    world = {"name": "c", "task": "Hi.", "tools": [_EMAIL], "then": "end_turn",
             "model": [{"end_turn": "lost", "crash": True}, {"end_turn": "Hello."}]}
    with Sim(world) as sim:
        assert sim.run(drive) == Outcome("final", "Hello.")
    assert sim.lives == 2 and sim.check().ok


def test_a_crash_reply_is_a_reply_the_model_sends() -> None:
    with pytest.raises(ValueError, match="'crash' goes with a reply the model sends"):
        simloop.Scenario.model_validate({"name": "c", "task": "t", "model": [{"error": 529, "crash": True}]})


def test_verify_restarts_crashes_in_flight_model_calls_and_the_durable_readme_loop_holds(tmp_path: Path) -> None:
    from tests.loops.readme import LIMITS, durable

    lost: list[str] = []

    def watched(sim: Sim) -> Outcome:
        outcome = durable(sim)
        lost.extend(r.detail for r in sim.transcript.of(Restart) if "model call" in r.detail)
        return outcome

    report = simloop.verify(watched, limits=LIMITS, restarts=1, seed=0, max_examples=150, out_dir=tmp_path)
    assert report.ok and lost  # the process died in flight in some runs, and the loop resumed soundly


def test_verify_restarts_finds_a_loop_that_only_a_crash_in_a_model_call_breaks(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(_forgets_finished_writes, restarts=1, seed=0, max_examples=200, out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} == {"no_rerun"}
    scenario = found.value.scenario
    assert scenario is not None and [r.crash for r in scenario.model].count(True) == 1
    assert not any(f.kind == "crash" for f in scenario.faults)  # a write's crash leaves its mark: not this bug
    timeline = found.value.timeline or ""
    assert "PROCESS DIED at 0.000s with the call in flight" in timeline
    with pytest.raises(simloop.InvariantViolation):
        simloop.replay(_forgets_finished_writes, found.value.scenario_path or "")
    assert simloop.replay(_durable_readme_loop, found.value.scenario_path or "").ok


def _durable_readme_loop(sim: Sim) -> Outcome:
    from tests.loops.readme import durable

    return durable(sim)
