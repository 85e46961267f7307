"""The findings of docs/findings.md, each replayed from its scenario file in scenarios/findings/.

Each test replays one file through the drive that shows the finding and asserts
that the loop holds every invariant.  While the behaviour is upstream the test
is an expected failure (``xfail(strict=True, raises=InvariantViolation)``): it
turns red when the harness changes, so the finding gets re-judged.  A finding
that changes shape (a different invariant breaks) fails outright, not as xfail.

The pydantic-ai, LangGraph and OpenAI Agents SDK findings skip cleanly without those packages.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import simloop
from simloop import Sim

FINDINGS = Path(__file__).resolve().parents[1] / "scenarios" / "findings"


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("anthropic")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # the tool runner logs every tool exception with a traceback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logger.setLevel(level)


def replay_finding(
    drive: Callable[[Sim], Any], name: str, *, breaks: set[str], invariants: list[str] | None = None
) -> simloop.Report:
    """Replay ``scenarios/findings/<name>.yaml``; raise `InvariantViolation` while it breaks exactly ``breaks``.

    Breaking anything else fails the test with a plain failure (not the xfail's
    exception), so a finding cannot silently turn into a different one.
    """
    with Sim(FINDINGS / f"{name}.yaml", seed=0) as sim:
        sim.run(drive)
    report: simloop.Report = sim.check(invariants=invariants)
    found = {v.invariant for v in report.violations}
    if found - breaks:
        pytest.fail(f"{name}: expected only {sorted(breaks)} to break, got:\n{report}")
    report.raise_for_violations()
    return report


def known(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=simloop.InvariantViolation, reason=reason)


def test_every_finding_file_is_replayed_here() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    files = sorted(p.stem for p in FINDINGS.glob("*.yaml"))
    assert files, "scenarios/findings/ is empty"
    assert [f for f in files if f'"{f}"' not in source] == []


def test_every_finding_file_loads_and_says_how_to_replay_it() -> None:
    for path in FINDINGS.glob("*.yaml"):
        scenario = simloop.load_scenario(path)
        assert scenario.name == path.stem
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# Finding:") and "# Judgement:" in text and "# Replay: simloop run" in text


# -- the SDK's tool runner ------------------------------------------------------------------------------------


@known("anthropic's tool_runner has no max_iterations by default (documented): a stuck model loops forever")
def test_tool_runner_default_has_no_iteration_cap() -> None:
    from simloop.adapters import tool_runner

    replay_finding(tool_runner.drive_no_thread, "tool-runner-no-iteration-cap", breaks={"stops"})


@known("anthropic's tool_runner has no max_iterations by default (documented): a stuck model loops forever")
def test_tool_runner_default_has_no_iteration_cap_with_threads() -> None:
    from simloop.adapters import tool_runner

    # every invariant: a request halted mid-thread is recorded with the thread's whole history
    replay_finding(tool_runner.drive, "tool-runner-no-iteration-cap", breaks={"stops"})


def test_tool_runner_with_a_cap_holds_on_the_same_scenario() -> None:
    from simloop.adapters import tool_runner

    with Sim(FINDINGS / "tool-runner-no-iteration-cap.yaml", limits=simloop.Limits(max_steps=4)) as sim:
        outcome = sim.run(tool_runner.drive)
    assert outcome.reason == "max_steps" and sim.check(outcome).ok


@known("run_tools_eagerly runs a complete call before the reply turns out cut at max_tokens (documented trade-off)")
def test_tool_runner_eager_runs_a_write_from_a_cut_reply() -> None:
    from simloop.adapters import tool_runner

    replay_finding(tool_runner.stream_drive_eager, "tool-runner-eager-write-from-cut-reply", breaks={"truncation"})


def test_tool_runner_default_streaming_runs_nothing_from_the_same_cut_reply() -> None:
    from simloop.adapters import tool_runner

    report = replay_finding(tool_runner.stream_drive, "tool-runner-eager-write-from-cut-reply", breaks=set())
    assert report.ok


# -- pydantic-ai ----------------------------------------------------------------------------------------------


@pytest.fixture
def pai() -> Any:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (pip install simloop[pydantic-ai])")
    from simloop.adapters import pydantic_ai

    return pydantic_ai


@known("pydantic-ai re-raises a tool's exception out of agent.run (only ModelRetry/ToolFailed reach the model)")
def test_pydantic_ai_tool_exception_escapes(pai: Any) -> None:
    replay_finding(pai.drive, "pydantic-ai-tool-exception-escapes", breaks={"tool_errors"})


def test_pydantic_ai_tool_failed_holds_on_the_same_scenario(pai: Any) -> None:
    assert replay_finding(pai.drive_tool_failed, "pydantic-ai-tool-exception-escapes", breaks=set()).ok


@known("pydantic-ai returns a refusal's text as result.output; only finish_reason says content_filter")
def test_pydantic_ai_refusal_returned_as_output(pai: Any) -> None:
    replay_finding(pai.drive_trusting_output, "pydantic-ai-refusal-returned-as-output", breaks={"honest_outcome"})


@known("pydantic-ai returns text cut at max_tokens as result.output (documented); only finish_reason says length")
def test_pydantic_ai_cut_text_returned_as_output(pai: Any) -> None:
    replay_finding(pai.drive_trusting_output, "pydantic-ai-cut-text-returned-as-output", breaks={"truncation"})


@known("pydantic-ai's request_limit does not count pause_turn continuation requests (documented)")
def test_pydantic_ai_continuation_not_counted(pai: Any) -> None:
    replay_finding(pai.drive, "pydantic-ai-continuation-not-counted", breaks={"limits"})


@known("pydantic-ai runs the complete tool calls of a reply cut at max_tokens (a write among them)")
def test_pydantic_ai_runs_complete_calls_of_a_cut_reply(pai: Any) -> None:
    replay_finding(pai.drive_tool_failed, "pydantic-ai-runs-complete-calls-of-cut-reply", breaks={"truncation"})


@known("pydantic-ai checks total_tokens > limit before a request, so one more goes out at exactly the limit")
def test_pydantic_ai_token_limit_off_by_one(pai: Any) -> None:
    replay_finding(pai.drive, "pydantic-ai-token-limit-off-by-one", breaks={"limits"})


# -- LangGraph -------------------------------------------------------------------------------------------------


@pytest.fixture
def lg() -> Any:
    pytest.importorskip("langgraph", reason="langgraph is not installed (pip install simloop[langgraph])")
    pytest.importorskip("langchain_anthropic", reason="langchain-anthropic is not installed")
    from simloop.adapters import langgraph

    return langgraph


@known("LangGraph's default recursion_limit is 10007: a stuck model runs ~5000 model calls")
def test_langgraph_default_recursion_limit(lg: Any) -> None:
    replay_finding(lg.drive, "langgraph-default-recursion-limit", breaks={"stops"})


@known("the ReAct agent runs ChatAnthropic's tool calls from a max_tokens reply, with the partial input")
@pytest.mark.parametrize("variant", ["drive", "async_drive", "drive_handle_tool_errors"])
def test_langgraph_runs_a_tool_from_a_cut_reply(lg: Any, variant: str) -> None:
    replay_finding(getattr(lg, variant), "langgraph-runs-tool-from-cut-reply", breaks={"truncation"})


def test_langgraph_runs_the_cut_call_with_what_parsed_of_its_input(lg: Any) -> None:
    with Sim(FINDINGS / "langgraph-runs-tool-from-cut-reply.yaml") as sim:
        sim.run(lg.drive)
    (start,) = sim.transcript.of(simloop.transcript.ToolStart)
    assert (start.tool, start.input) == ("send_email", {"to": "ann@example.com"})  # the body never arrived


def test_langgraph_streaming_runs_the_cut_call_with_a_cut_string(lg: Any) -> None:
    with Sim(FINDINGS / "langgraph-runs-tool-from-cut-reply.yaml") as sim:
        sim.run(lg.make_drive(streaming=True))
    (start,) = sim.transcript.of(simloop.transcript.ToolStart)
    assert start.input == {"to": "ann@example.com", "body": "Y"}  # partial JSON, parsed leniently


@known("ToolNode's default handle_tool_errors re-raises all but invalid-argument errors")
def test_langgraph_tool_exception_escapes(lg: Any) -> None:
    replay_finding(lg.drive, "langgraph-tool-exception-escapes", breaks={"tool_errors"})


def test_langgraph_handle_tool_errors_holds_on_the_same_scenario(lg: Any) -> None:
    assert replay_finding(lg.drive_handle_tool_errors, "langgraph-tool-exception-escapes", breaks=set()).ok


@known("the ReAct agent ends normally on a refusal; only response_metadata['stop_reason'] tells")
def test_langgraph_refusal_returned_as_answer(lg: Any) -> None:
    replay_finding(lg.drive_trusting_output, "langgraph-refusal-returned-as-answer", breaks={"honest_outcome"})


@known("the ReAct agent ends normally on text cut at max_tokens; only response_metadata['stop_reason'] tells")
def test_langgraph_cut_text_returned_as_answer(lg: Any) -> None:
    replay_finding(lg.drive_trusting_output, "langgraph-cut-text-returned-as-answer", breaks={"truncation"})


@known("the ReAct agent ends on pause_turn instead of sending the paused turn back")
def test_langgraph_pause_turn_not_continued(lg: Any) -> None:
    replay_finding(lg.drive_trusting_output, "langgraph-pause-turn-not-continued", breaks={"honest_outcome"})


@known("out of recursion budget, the ReAct agent replaces the model's tool call with 'Sorry, need more steps'")
def test_langgraph_out_of_steps_answer(lg: Any) -> None:
    replay_finding(lg.drive_trusting_output, "langgraph-out-of-steps-answer", breaks={"honest_outcome"})


def test_langgraph_careful_drive_reads_the_out_of_steps_answer_as_max_steps(lg: Any) -> None:
    with Sim(FINDINGS / "langgraph-out-of-steps-answer.yaml") as sim:
        outcome = sim.run(lg.drive)
    assert outcome.reason == "max_steps" and outcome.text == lg.NEED_MORE_STEPS
    assert sim.transcript.model_calls == 3 and sim.check(outcome).ok


# -- the OpenAI Agents SDK (Runner, OpenAIChatCompletionsModel) ----------------------------------------------


@pytest.fixture
def oa() -> Any:
    pytest.importorskip("agents", reason="openai-agents is not installed (pip install simloop[openai-agents])")
    from simloop.adapters import openai_agents

    return openai_agents


@known("a FunctionTool's exception fails Runner.run (documented); the next turn's model never hears of it")
def test_openai_agents_tool_exception_ends_run(oa: Any) -> None:
    replay_finding(oa.drive, "openai-agents-tool-exception-ends-run", breaks={"tool_errors"})


def test_openai_agents_tool_messages_hold_on_the_same_scenario(oa: Any) -> None:
    assert replay_finding(oa.drive_tool_messages, "openai-agents-tool-exception-ends-run", breaks=set()).ok


@known("the Agents SDK runs the complete tool calls of a reply cut at finish_reason 'length' (a write among them)")
@pytest.mark.parametrize("variant", ["drive", "drive_tool_messages"])
def test_openai_agents_runs_complete_calls_of_a_cut_reply(oa: Any, variant: str) -> None:
    replay_finding(getattr(oa, variant), "openai-agents-runs-complete-calls-of-cut-reply", breaks={"truncation"})


@known("the Agents SDK returns text cut at 'length' as final_output and keeps no finish_reason to tell")
def test_openai_agents_cut_text_returned_as_output(oa: Any) -> None:
    replay_finding(oa.drive, "openai-agents-cut-text-returned-as-output", breaks={"truncation"})


@known("cancel(mode='after_turn') runs the reply's tool calls after the Stop (documented)")
def test_openai_agents_cancel_after_turn_runs_tools(oa: Any) -> None:
    replay_finding(oa.drive_cancel_after_turn, "openai-agents-cancel-after-turn-runs-tools", breaks={"abort"})


def test_openai_agents_immediate_cancel_holds_on_the_same_scenario(oa: Any) -> None:
    report = replay_finding(oa.drive, "openai-agents-cancel-after-turn-runs-tools", breaks=set())
    assert report.ok


def test_openai_agents_result_has_no_finish_reason(oa: Any) -> None:
    """Why the careful drive cannot read the cut: nothing of the run's result keeps the reply's finish_reason."""
    from agents import Agent, Runner

    results: list[Any] = []

    async def drive(sim: Sim) -> simloop.Outcome:
        results.append(await Runner.run(Agent(name="assistant", model=oa.model(sim)), sim.task))
        return simloop.Outcome("final", str(results[0].final_output))

    with Sim(FINDINGS / "openai-agents-cut-text-returned-as-output.yaml") as sim:
        sim.run(drive)
    (result,) = results
    assert result.final_output == "The refund policy says that customers who"
    (response,) = result.raw_responses
    assert "length" not in repr(vars(response))


# -- LiteLLM --------------------------------------------------------------------------------------------------


@pytest.fixture
def lt() -> Any:
    pytest.importorskip("litellm", reason="litellm is not installed (pip install simloop[litellm])")
    import litellm

    from simloop.adapters import litellm as adapter

    litellm.suppress_debug_info = True
    return adapter


@known("LiteLLM's stream drops delta.refusal: a loop reading the refusal field takes the refusal for an empty answer")
def test_litellm_stream_drops_the_refusal(lt: Any) -> None:
    replay_finding(lt.stream_drive_reading_refusal, "litellm-stream-drops-refusal", breaks={"honest_outcome"})


def test_litellm_the_same_loop_unstreamed_reads_the_refusal(lt: Any) -> None:
    with Sim(FINDINGS / "litellm-stream-drops-refusal.yaml") as sim:
        outcome = sim.run(lt.make_drive(refusal_via="message"))
    assert outcome == simloop.Outcome("refusal", "I can't help find customers' home addresses.")
    assert sim.check(outcome).ok


@known("LiteLLM's stream drops delta.refusal, and a refusal is finish_reason 'stop' on the real API (issue 42): "
       "a loop reading finish_reason takes it for an empty answer too")
def test_litellm_stream_drive_reading_finish_reason_cannot_tell_either(lt: Any) -> None:
    replay_finding(lt.stream_drive, "litellm-stream-drops-refusal", breaks={"honest_outcome"})
