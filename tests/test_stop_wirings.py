"""The README's Stop wirings for pydantic-ai and LangGraph (The Stop button), run as a user writes them.

Each framework is tried twice: the one-liner a user first writes from the README's old wording ("break when
``sim.abort.is_set()``"), which simloop shows to be wrong (the finished tools' results are lost and the next
turn fails), and the wiring the README now gives, which holds under scripted Stops and `verify(abort=True)`.
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
    from pydantic_ai.exceptions import AgentRunError
    from pydantic_ai.messages import repair_messages

    from simloop.adapters import pydantic_ai as pai
except ImportError:
    pai = None
try:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import ToolNode, create_react_agent

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
    """The README's wiring: break when Stop is set, then keep the pending request (the finished tools' results)
    and close what never ran (``repair_messages``)."""
    agent = Agent(pai.model(sim), tools=pai.tools(sim))
    history: list[Any] = []
    outcomes = []
    for text in sim.user_turns:
        try:
            async with agent.iter(text, message_history=history) as agent_run:
                async for node in agent_run:
                    if sim.abort.is_set():
                        break
        except AgentRunError as exc:  # a limit, a refusal, the API failed past its retries
            outcomes.append(pai.outcome_of_error(exc))
            continue
        except (anthropic.APIError, httpx2.HTTPError) as exc:
            outcomes.append(Outcome("error", f"{type(exc).__name__}: {exc}"))
            continue
        if sim.abort.is_set():
            done = [node.request] if Agent.is_model_request_node(node) else []
            history = repair_messages(agent_run.all_messages() + done)
            outcomes.append(Outcome("aborted"))
        else:
            history = agent_run.all_messages()
            ending = {"length": "truncated", "content_filter": "refusal"}.get(agent_run.result.response.finish_reason or "")
            outcomes.append(Outcome(ending or "final", str(agent_run.result.output)))
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
    """The README's wiring: a ToolNode that starts no call after Stop, the stream left once Stop is set and the
    tools' step is over, and that step's results written back to the thread (a closed stream drops them)."""

    def unless_stopped(request: Any, execute: Any) -> Any:
        if sim.abort.is_set():
            return ToolMessage("Not run: the user pressed Stop.", tool_call_id=request.tool_call["id"], status="error")
        return execute(request)

    tool_node = ToolNode(lg.tools(sim), wrap_tool_call=unless_stopped, handle_tool_errors=True)
    agent = create_react_agent(lg.chat_model(sim), tool_node, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "chat"}}
    outcomes = []
    for text in sim.user_turns:
        seen: list[Any] = []  # the messages the stream gave
        failed: Outcome | None = None
        try:
            for update in agent.stream({"messages": [("user", text)]}, config, stream_mode="updates"):
                seen += [m for node in update.values() for m in (node or {}).get("messages", [])]
                if sim.abort.is_set() and not open_calls(seen):
                    break
        except Exception as exc:  # noqa: BLE001 (the API failed past its retries: the turn's error)
            failed = Outcome("error", f"{type(exc).__name__}: {exc}")
        if sim.abort.is_set():  # the Stop first, whatever else went wrong in the step it stopped
            ids = {c["id"] for c in last_calls(seen)}
            if ids:
                tool_messages = [m for m in seen if isinstance(m, ToolMessage) and m.tool_call_id in ids]
                agent.update_state(config, {"messages": tool_messages}, as_node="tools")
            outcomes.append(Outcome("aborted"))
        else:
            outcomes.append(failed or lg.outcome_of(seen[-1] if seen else None))  # from its stop_reason
    return outcomes


def last_calls(seen: list[Any]) -> list[Any]:
    """The tool calls of the last reply the stream gave."""
    asked = [m for m in seen if isinstance(m, AIMessage)][-1:]
    return asked[0].tool_calls if asked else []


def open_calls(seen: list[Any]) -> set[str]:
    """The ids of the last reply's calls the stream has given no result for yet."""
    return {c["id"] for c in last_calls(seen)} - {m.tool_call_id for m in seen if isinstance(m, ToolMessage)}


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
