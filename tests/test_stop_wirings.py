"""The README's Stop wirings for pydantic-ai and LangGraph (The Stop button), run as a user writes them.

Each framework is tried twice: the one-liner a user first writes from the README's old wording ("break when
``sim.abort.is_set()``"), which simloop shows to be wrong (the finished tools' results are lost and the next
turn fails), and the wiring the README now gives (simloop's helpers: ``pai.run_until_stop``,
``lg.stop_aware_tool_node`` and ``lg.stream_until_stop``), which holds under scripted Stops and
`verify(abort=True)`, as do the adapters' ready drives built on them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

import simloop
from simloop import Outcome, Scenario, Sim
from simloop.scenario import Abort

try:  # each framework is an extra: its tests are skipped with the reason when it is missing
    from pydantic_ai import Agent
    from pydantic_ai.messages import repair_messages

    from simloop.adapters import pydantic_ai as pai
except ImportError:
    pai = None
try:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from simloop.adapters import langgraph as lg
except ImportError:
    lg = None

needs_pai = pytest.mark.skipif(pai is None, reason="pydantic-ai is not installed (pip install simloop[pydantic-ai])")
needs_lg = pytest.mark.skipif(lg is None, reason="LangGraph is not installed (pip install simloop[langgraph])")

DURING_TOOL = Path(__file__).resolve().parents[1] / "scenarios" / "stop-button-during-tool.yaml"
# what a Stop wiring can break (the frameworks' known findings on other invariants stay out: docs/findings.md)
STOP_INVARIANTS = ["abort", "pairing", "request_valid", "results_sent", "results_together", "results_real", "no_rerun",
                   "honest_outcome", "crash", "no_work_after_return"]
STOPS = [pytest.param({"tool_call": 1}, id="during-tool"), pytest.param({"after_call": 1}, id="after-call")]


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown model prices (pydantic-ai), create_react_agent's deprecation
        yield


def scripted(abort: dict[str, Any]) -> Scenario:
    """The search-and-email scenario (two parallel calls, a follow-up turn) with Stop at ``abort``."""
    s = Scenario.from_yaml(DURING_TOOL.read_text())
    return s.model_copy(update={"abort": Abort(**abort)})


def run(drive: Any, abort: dict[str, Any]) -> tuple[list[Outcome], simloop.Report]:
    with Sim(scripted(abort)) as sim:
        outcome = sim.run(drive)
    return [o for o in sim.outcomes], sim.check(outcome)


# --- pydantic-ai -----------------------------------------------------------------------------------------------

async def pai_break_only(sim: Sim) -> list[Outcome]:
    """The old wording: ``agent.iter(...)`` and break when Stop is set; the history repaired as pydantic-ai asks
    (``repair_messages``: it refuses a new prompt after calls left unanswered)."""
    agent = Agent(pai.model(sim), tools=pai.tools(sim))
    history: list[Any] = []
    outcomes = []
    for text in sim.user_turns:
        async with agent.iter(text, message_history=history) as agent_run:
            async for _node in agent_run:
                if sim.abort.is_set():
                    break
        history = repair_messages(agent_run.all_messages())
        outcomes.append(Outcome("aborted") if sim.abort.is_set() else Outcome("final", str(agent_run.result.output)))
    return outcomes


async def pai_stop(sim: Sim) -> list[Outcome]:
    """The README's wiring: each turn run with ``pai.run_until_stop``, which leaves ``agent.iter`` at Stop and
    returns the history that keeps the finished tools' results."""
    agent = Agent(pai.model(sim), tools=pai.tools(sim))
    history: list[Any] = []
    outcomes = []
    for text in sim.user_turns:
        outcome, history = await pai.run_until_stop(agent, text, history, stop=sim.abort.is_set)
        outcomes.append(outcome)
    return outcomes


# --- LangGraph -------------------------------------------------------------------------------------------------

def lg_break_only(sim: Sim) -> list[Outcome]:
    """The old wording: stream the graph and stop iterating when Stop is set."""
    agent = create_react_agent(lg.chat_model(sim), lg.tools(sim), checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "chat"}}
    outcomes = []
    for text in sim.user_turns:
        for _update in agent.stream({"messages": [("user", text)]}, config, stream_mode="updates"):
            if sim.abort.is_set():
                break
        last = agent.get_state(config).values["messages"][-1]
        outcomes.append(Outcome("aborted") if sim.abort.is_set() else Outcome("final", last.text))
    return outcomes


def lg_stop(sim: Sim) -> list[Outcome]:
    """The README's wiring: the tools in ``lg.stop_aware_tool_node`` (no call starts after Stop) and each turn
    streamed with ``lg.stream_until_stop`` (left cleanly at Stop, the finished results written to the thread)."""
    model, tools, saver = lg.chat_model(sim), lg.tools(sim), InMemorySaver()
    agent = create_react_agent(model, lg.stop_aware_tool_node(tools, stop=sim.abort.is_set), checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "chat"}}
    outcomes = []
    for text in sim.user_turns:
        try:
            for update in lg.stream_until_stop(agent, {"messages": [("user", text)]}, config, stop=sim.abort.is_set): ...
        except (anthropic.APIError, httpx2.HTTPError) as exc:  # the API failed past its retries
            outcomes.append(Outcome("aborted") if sim.abort.is_set() else Outcome("error", str(exc)))
            continue
        last = agent.get_state(config).values["messages"][-1]
        outcomes.append(Outcome("aborted") if sim.abort.is_set() else lg.outcome_of(last))
    return outcomes


# --- the tests -------------------------------------------------------------------------------------------------

def held(report: Any) -> list[str]:
    return [f"{v.invariant}: {v.message[:160]}" for v in report.violations]


@needs_pai
@pytest.mark.parametrize("abort", STOPS)
def test_pydantic_ai_wiring_stops_and_keeps_what_ran(abort: dict[str, Any]) -> None:
    outcomes, report = run(pai_stop, abort)
    assert report.ok, held(report)
    assert [o.reason for o in outcomes] == ["aborted", "final"]


@needs_pai
def test_pydantic_ai_wiring_holds_under_verify(tmp_path: Path) -> None:
    # pydantic-ai's known findings are left out (F5b truncation, F3 tool_errors, F6/F7 limits: docs/findings.md)
    report = simloop.verify(pai_stop, abort=True, turns=2, max_examples=30, seed=31, out_dir=tmp_path,
                            invariants=STOP_INVARIANTS)
    assert report.ok and report.examples == 30


@needs_pai
def test_pydantic_ai_break_alone_loses_the_finished_tools_results() -> None:
    # breaking out of agent.iter() leaves the tools' results in the pending request node; the history pydantic-ai
    # then asks for (repair_messages) tells the model the email that was sent was interrupted
    outcomes, report = run(pai_break_only, {"tool_call": 1})
    assert [v.invariant for v in report.violations] == ["results_real"]
    assert "send_email" in report.violations[0].message and outcomes[0].reason == "aborted"


@needs_lg
@pytest.mark.parametrize("abort", STOPS)
def test_langgraph_break_alone_breaks_the_thread(abort: dict[str, Any]) -> None:
    # stopping the stream closes it mid-step: the next message on the thread is refused by LangGraph itself
    # (INVALID_CHAT_HISTORY), and the ToolNode runs every call of the reply, the one started after Stop included
    _, report = run(lg_break_only, abort)
    found = {v.invariant for v in report.violations}
    assert "crash" in found and "INVALID_CHAT_HISTORY" in report.violations[0].message
    assert ("abort" in found) == (abort == {"tool_call": 1})


@needs_lg
@pytest.mark.parametrize("abort", STOPS)
def test_langgraph_wiring_stops_and_keeps_what_ran(abort: dict[str, Any]) -> None:
    outcomes, report = run(lg_stop, abort)
    assert report.ok, held(report)
    assert [o.reason for o in outcomes] == ["aborted", "final"]


@needs_lg
def test_langgraph_wiring_holds_under_verify(tmp_path: Path) -> None:
    # LangGraph's known findings are left out (F8 stops, F9 truncation, F14 tool_errors: docs/findings.md)
    report = simloop.verify(lg_stop, abort=True, turns=2, max_examples=30, seed=31, out_dir=tmp_path,
                            invariants=STOP_INVARIANTS)
    assert report.ok and report.examples == 30


@needs_pai
def test_pydantic_ai_ready_drive_honours_stop(tmp_path: Path) -> None:
    outcomes, report = run(pai.drive, {"tool_call": 1})
    assert report.ok and [o.reason for o in outcomes] == ["aborted", "final"], held(report)
    report = simloop.verify(pai.drive, abort=True, turns=2, max_examples=30, seed=31, out_dir=tmp_path,
                            invariants=STOP_INVARIANTS)
    assert report.ok and report.examples == 30


@needs_lg
@pytest.mark.parametrize("name", ["drive", "async_drive"])
def test_langgraph_ready_drives_honour_stop(name: str, tmp_path: Path) -> None:
    drive = getattr(lg, name)
    outcomes, report = run(drive, {"tool_call": 1})
    assert report.ok and [o.reason for o in outcomes] == ["aborted", "final"], held(report)
    report = simloop.verify(drive, abort=True, turns=2, max_examples=30, seed=31, out_dir=tmp_path,
                            invariants=STOP_INVARIANTS)
    assert report.ok and report.examples == 30



def test_the_readme_lines_are_the_ones_tested_here() -> None:
    # the README's pydantic-ai and LangGraph Stop lines are run as written by pai_stop and lg_stop above
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The Stop button", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    lines = [line.strip() for line in section.splitlines() if "pai." in line or "lg." in line]
    lines = [line for line in lines if not line.startswith("#")]
    source = Path(__file__).read_text(encoding="utf-8")
    assert len(lines) == 3 and all(line in source for line in lines), lines
