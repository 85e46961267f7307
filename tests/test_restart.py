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
