"""Cost budgets (issue 32 item 3): list prices, ``Limits(max_cost_usd=...)`` checked by ``limits``, the scenario's
``prices:``, the cost in the report and the timeline, ``--max-cost-usd``, a defect caught and its twin passing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import simloop
from examples import correct_sync, cost_budget_dropped
from simloop.cli import main
from simloop.pricing import DEFAULT, PRICES, Price, cost_usd, price_for
from simloop.scenario import Limits, Scenario
from simloop.timeline import render_timeline
from simloop.transcript import Transcript

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
COST = SCENARIOS / "cost-budget.yaml"
pytest_plugins = ["pytester"]


def test_prices_by_the_longest_prefix_and_the_overrides_first() -> None:
    assert price_for("claude-sonnet-4-5-20250929") == PRICES["claude-sonnet-4"] == Price(3.0, 15.0, 3.75, 0.3)
    assert price_for("claude-opus-4-1") == Price(15.0, 75.0, 18.75, 1.5)
    assert price_for("claude-opus-4-5") == Price(5.0, 25.0, 6.25, 0.5)  # not the older Opus 4's price
    assert price_for("claude-sonnet-5") == Price(2.0, 10.0, 2.5, 0.2)
    assert price_for("someone-elses-model") == DEFAULT
    override = {"claude-sonnet-5": {"input": 1, "output": 2}, "*": {"input": 7, "output": 8}}
    assert price_for("claude-sonnet-5", override) == Price(1.0, 2.0, 0.0, 0.0)
    assert price_for("claude-haiku-4-5", override) == Price(7.0, 8.0, 0.0, 0.0)


def test_cost_prices_each_kind_of_token_at_its_own_rate() -> None:
    usage = {"input_tokens": 1_000, "output_tokens": 200, "cache_creation_input_tokens": 4_000,
             "cache_read_input_tokens": 10_000}
    # 1000 * 3 + 200 * 15 + 4000 * 3.75 + 10000 * 0.3, per million
    assert math.isclose(cost_usd(usage, "claude-sonnet-4-5"), (3_000 + 3_000 + 15_000 + 3_000) / 1e6)
    assert cost_usd(None, "claude-sonnet-4-5") == 0.0


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, 2e6])
def test_a_cost_budget_is_a_positive_finite_number_of_dollars(bad: float) -> None:
    with pytest.raises(ValueError, match="max_cost_usd"):
        Limits(max_cost_usd=bad)


def test_the_defect_is_caught_with_the_cost_so_far() -> None:
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.replay(cost_budget_dropped.drive, COST)
    (v,) = caught.value.violations
    assert (v.invariant, v.step) == ("limits", 4)
    assert v.evidence == {"request": 3, "max_cost_usd": 0.25, "cost_usd": 0.2823}
    assert v.message.startswith(
        "model call 4 started after the replies had cost $0.2823, reaching the max_cost_usd=0.25 the scenario "
        "declares (its limits:); a correct loop prices each reply's usage"
    )
    assert "$0.2823  tool_use" in (caught.value.timeline or "")


def test_the_twin_stops_with_cost_budget_and_the_timeline_shows_the_cost() -> None:
    report = simloop.replay(correct_sync.drive, COST)
    assert report.ok
    assert report.transcript is not None
    outcome = report.transcript.outcome
    assert outcome is not None and outcome.reason == "cost_budget"
    lines = render_timeline(report.transcript).splitlines()
    assert lines[0].split() == ["step", "time", "in", "out", "cost", "reply"]
    assert [line.split()[4] for line in lines[1::2][:3]] == ["$0.2175", "$0.2475", "$0.2823"]


def test_prices_and_cache_tokens_reach_the_transcript_and_read_back(tmp_path: Path) -> None:
    report = simloop.replay(correct_sync.drive, COST)
    assert report.transcript is not None
    assert report.transcript.header.prices == {"*": {"input": 3.0, "output": 15.0, "cache_write": 3.75,
                                                     "cache_read": 0.3}}
    usage = report.transcript.responses[0].message["usage"]  # type: ignore[index]
    assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (40_000, 0)
    back = Transcript.read(report.transcript.write(tmp_path / "t.jsonl"))
    assert back.header.prices == report.transcript.header.prices
    assert simloop.invariants.check(back).ok


def test_a_run_without_prices_writes_the_header_it_always_wrote() -> None:
    with simloop.Sim(Scenario(model=[{"end_turn": "hi"}])) as sim:  # type: ignore[list-item]
        assert '"prices"' not in sim.transcript.to_jsonl()
        assert "cost" not in render_timeline(sim.transcript).splitlines()[0]


def test_verify_holds_the_reference_loop_to_a_small_budget_and_catches_the_defect(tmp_path: Path) -> None:
    limits = Limits(max_steps=10, deadline_s=300, max_cost_usd=0.01)
    assert simloop.verify(correct_sync.drive, limits=limits, max_examples=40, seed=1).ok
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(cost_budget_dropped.drive, limits=limits, max_examples=200, seed=1, out_dir=tmp_path)
    assert {v.invariant for v in caught.value.violations} == {"limits"}
    assert "max_cost_usd" in caught.value.violations[0].message


def test_the_command_line_declares_a_cost_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", "examples.cost_budget_dropped:drive", "--max-cost-usd", "0.01", "--max-examples", "100",
                 "--seed", "0", "--out", str(tmp_path), "--no-progress"])
    assert code == 1
    assert "max_cost_usd=0.01" in capsys.readouterr().out
    assert main(["verify", "examples.correct_sync:drive", "--max-cost-usd", "0", "--max-examples", "1"]) == 2


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "cheap"])
def test_a_cost_budget_on_the_command_line_that_is_not_a_finite_positive_number_exits_2(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", "examples.correct_sync:drive", "--max-cost-usd", value, "--max-examples", "1"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--max-cost-usd'" in err and "Traceback" not in err
    assert "is not a number of US dollars" in err or "0<x<=" in err


def test_the_plugin_takes_a_cost_budget_in_its_limits(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(Path(__file__).resolve().parents[1])
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def simloop_config():
            return {"limits": {"max_steps": 10, "max_cost_usd": 0.01}, "max_examples": 100}
    """)
    pytester.makepyfile(test_budget="""
        import pytest
        import simloop as sl
        from examples import correct_sync, cost_budget_dropped

        def test_the_reference_loop_stops_in_budget(simloop):
            assert simloop.verify(correct_sync.drive).ok

        def test_the_dropped_budget_is_caught(simloop):
            with pytest.raises(sl.InvariantViolation) as caught:
                simloop.verify(cost_budget_dropped.drive)
            assert "reaching the declared max_cost_usd=0.01" in str(caught.value)
    """)
    result = pytester.runpytest("--simloop-seed=3")
    result.assert_outcomes(passed=2)


# -- both vendors' usage shapes and prices (issue 42 item 9) -------------------------------------------------------


def test_cost_reads_the_chat_completions_and_responses_usage_shapes() -> None:
    """On the OpenAI wires the input count holds the cached tokens (``prompt_tokens_details.cached_tokens``,
    ``input_tokens_details.cached_tokens``); gpt-4o-mini at its list price (0.15 / 0.60 / 0.075 cached)."""
    chat = {"prompt_tokens": 1_000, "completion_tokens": 200, "total_tokens": 1_200,
            "prompt_tokens_details": {"cached_tokens": 400, "audio_tokens": 0}}
    expected = (600 * 0.15 + 400 * 0.075 + 200 * 0.6) / 1e6
    assert math.isclose(cost_usd(chat, "gpt-4o-mini"), expected)
    responses = {"input_tokens": 1_000, "output_tokens": 200, "total_tokens": 1_200,
                 "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 400},
                 "output_tokens_details": {"reasoning_tokens": 0}}
    assert math.isclose(cost_usd(responses, "gpt-4o-mini-2024-07-18"), expected)
    assert price_for("gpt-4o") == Price(2.5, 10.0, 2.5, 1.25)  # not gpt-4o-mini's, and not a Sonnet's
    assert price_for("gpt-4.1-mini") == Price(0.4, 1.6, 0.4, 0.1) and price_for("o3-mini") != price_for("o3")


@pytest.mark.parametrize("usage", [{}, {"tokens": 5}, {"promptTokens": 10, "completionTokens": 2}])
def test_a_usage_of_a_shape_cost_does_not_know_is_refused(usage: dict[str, int]) -> None:
    """Before: $0.00, silently, so a loop's budget never stopped it."""
    with pytest.raises(simloop.UsageError, match="cost_usd cannot read this usage"):
        cost_usd(usage, "gpt-4o")


def _budgeted_chat_loop(price: dict[str, float] | None) -> object:
    """A Chat Completions loop with a cost budget, pricing its replies as the README says (its own ``price`` for
    gpt-4o-mini, or the table's): it stops with ``cost_budget`` before a call once the replies cost the budget."""
    import json

    import openai

    from simloop.pricing import cost_usd as price_reply

    def drive(sim: simloop.Sim) -> simloop.Outcome:
        tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
                 for t in sim.tool_schemas]
        messages: list[object] = [{"role": "user", "content": sim.task}]
        budget = sim.limits.max_cost_usd if sim.limits else None
        prices = {"gpt-4o-mini": price} if price else sim.prices
        spent = 0.0
        for _ in range(10):
            if budget is not None and spent >= budget:
                return simloop.Outcome("cost_budget", f"${spent:.6f} spent")
            try:
                reply = sim.openai_client.chat.completions.create(model="gpt-4o-mini", messages=messages,  # type: ignore[arg-type]
                                                                  tools=tools)  # type: ignore[arg-type]
            except openai.APIError as exc:  # the SDK has retried what is worth retrying
                return simloop.Outcome("error", str(exc))
            spent += price_reply(reply.usage.model_dump() if reply.usage else None, reply.model, prices)
            choice = reply.choices[0]
            messages.append(choice.message.model_dump(exclude_none=True))
            if choice.message.refusal:
                return simloop.Outcome("refusal", choice.message.refusal)
            if choice.finish_reason != "tool_calls":
                return simloop.Outcome({"length": "truncated"}.get(choice.finish_reason, "final"),
                                       choice.message.content or "")
            for call in choice.message.tool_calls or []:
                try:
                    out = sim.run_tool(call.function.name, json.loads(call.function.arguments),  # type: ignore[union-attr]
                                       tool_use_id=call.id)
                except Exception as exc:  # noqa: BLE001 - an observation for the model
                    out = f"Error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": str(out)})
        return simloop.Outcome("max_steps", "no answer after 10 calls")

    return drive


def test_a_loop_pricing_gpt_4o_mini_at_its_list_price_is_held_to_that_price(tmp_path: Path) -> None:
    """Before: the loop's ``cost_usd`` read $0.00 from a Chat Completions usage (it never stopped), and the
    ``limits`` invariant priced gpt-4o-mini at a Sonnet's price (20x), so a correct loop was reported ``limits``."""
    limits = simloop.Limits(max_steps=10, max_cost_usd=0.0004)
    report = simloop.verify(_budgeted_chat_loop(None), limits=limits, max_examples=30, seed=3,  # type: ignore[arg-type]
                            out_dir=tmp_path)
    assert report.ok


def test_verify_takes_the_prices_the_loop_pays(tmp_path: Path) -> None:
    """A loop paying a negotiated price (a fifth of the list price) is held to it with ``verify(prices=...)``,
    and reported ``limits`` without it (at the list price its budget runs out sooner); the saved failure keeps
    the prices it was checked with."""
    mine = {"input": 0.03, "output": 0.12, "cache_write": 0.03, "cache_read": 0.015}
    limits = simloop.Limits(max_steps=10, max_cost_usd=0.0002)
    drive = _budgeted_chat_loop(mine)
    report = simloop.verify(drive, limits=limits, prices={"gpt-4o-mini": mine}, max_examples=30, seed=3,  # type: ignore[arg-type]
                            out_dir=tmp_path)
    assert report.ok
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(drive, limits=limits, max_examples=30, seed=3, out_dir=tmp_path)  # type: ignore[arg-type]
    assert {v.invariant for v in caught.value.violations} == {"limits"}
    with pytest.raises(simloop.UsageError, match=r"verify\(prices=...\): the price of 'gpt-4o-mini'"):
        simloop.verify(drive, limits=limits, prices={"gpt-4o-mini": {"input": -1}}, out_dir=tmp_path)  # type: ignore[arg-type]


def test_the_command_line_takes_the_prices_the_loop_pays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``simloop verify --price MODEL=IN,OUT[,CW,CR]``: verify(prices=...) from the command line; a malformed one
    is a usage error naming the option."""
    code = main(["verify", "examples.correct_sync:drive", "--max-examples", "3", "--seed", "0", "--out",
                 str(tmp_path), "--max-cost-usd", "5", "--price", "claude-sonnet-5=1,2,1.25,0.1", "--no-progress"])
    assert code == 0, capsys.readouterr().out
    assert main(["verify", "examples.correct_sync:drive", "--price", "gpt-4o=cheap", "--out", str(tmp_path)]) == 2
    assert "--price" in capsys.readouterr().err


def test_the_plugin_takes_the_prices_the_loop_pays(pytester: pytest.Pytester) -> None:
    """``simloop_config`` (or the marker) passes ``prices`` to verify: a loop paying a fifth of gpt-4o-mini's list
    price is held to what it pays."""
    pytester.syspathinsert(Path(__file__).resolve().parent)
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def simloop_config():
            mine = {"input": 0.03, "output": 0.12, "cache_write": 0.03, "cache_read": 0.015}
            return {"limits": {"max_steps": 10, "max_cost_usd": 0.0002}, "max_examples": 30,
                    "prices": {"gpt-4o-mini": mine}}
    """)
    pytester.makepyfile(test_priced="""
        from test_cost import _budgeted_chat_loop

        def test_the_loop_is_held_to_its_prices(simloop):
            mine = {"input": 0.03, "output": 0.12, "cache_write": 0.03, "cache_read": 0.015}
            assert simloop.verify(_budgeted_chat_loop(mine)).ok
    """)
    result = pytester.runpytest("--simloop-seed=3", "-p", "no:xdist")
    result.assert_outcomes(passed=1)
