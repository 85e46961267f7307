"""`results_real`: a tool_result reporting a success comes from an execution, and none denies a committed write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import simloop
from examples import fabricated_results
from simloop import Outcome, Sim
from simloop.invariants import check

ROOT = Path(__file__).resolve().parents[1]
EMAIL = {"name": "send_email", "kind": "write", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}}
SEARCH = {"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
CALL = {"name": "send_email", "input": {"to": "a@example.com"}}
Answer = Callable[[Sim, Any], dict[str, Any]]


def _loop(answer: Answer) -> Callable[[Sim], Outcome]:
    """A loop that answers each tool call with ``answer(sim, call)`` (the piece each test varies)."""

    def drive(sim: Sim) -> Outcome:
        messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
        for _ in range(5):
            reply = sim.client.messages.create(model="m", max_tokens=1024, tools=sim.tool_schemas,  # type: ignore[arg-type]
                                               messages=messages)  # type: ignore[arg-type]
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                return Outcome("final")
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id, **answer(sim, c)}
                                                         for c in calls]})
        return Outcome("max_steps")

    return drive


def _run(answer: Answer, **world: Any) -> list[simloop.Violation]:
    scenario = {"task": "Email the customer.", "tools": [EMAIL, SEARCH], "model": [{"tool_use": [CALL]}],
                "then": "end_turn", **world}
    with Sim(scenario) as sim:
        sim.run(_loop(answer))
    return check(sim.transcript).violations


def test_a_stubbed_tool_is_a_fabricated_result() -> None:
    violations = _run(lambda sim, call: {"content": "ok"})
    assert [v.invariant for v in violations] == ["results_real"]
    assert violations[0].evidence["path"] == "messages[2].content[0]"
    assert str(violations[0]).endswith(
        "the tool_result for send_email (tool_use " + violations[0].evidence["tool_use_id"] + ") reports a success "
        "('ok') but no execution of send_email produced it; not one tool execution reached simloop's ledger in this "
        "run: the loop's tools are not routed through sim.run_tool (or sim.arun_tool, the tools endpoint, MCP), so "
        "its own tools ran or none did; a correct loop runs each tool call through sim.run_tool and sends back what "
        "it returned, or says it did not run it (an is_error tool_result)")


@pytest.mark.parametrize("answer", [
    pytest.param(lambda sim, call: {"content": sim.run_tool(call.name, call.input)}, id="ran"),
    pytest.param(lambda sim, call: {"content": "Permission denied by the user.", "is_error": True}, id="refused"),
    pytest.param(lambda sim, call: {"content": "The user declined to run this tool."}, id="declined-in-words"),
])
def test_a_real_result_or_an_honest_refusal_holds(answer: Answer) -> None:
    assert _run(answer) == []


def test_a_cut_off_replys_calls_may_be_answered_without_running() -> None:
    """A reply cut at max_tokens: a loop may close its calls in the history without running them."""
    model = [{"max_tokens": {"tool_use": [CALL, {"name": "search", "input": {"q": "x"}}]}}]
    assert _run(lambda sim, call: {"content": "skipped"}, model=model) == []
    assert _run(lambda sim, call: {"content": "(cut off)"}, model=model) == []


def test_a_cached_answer_reuses_a_real_execution() -> None:
    """The model asks for the same search twice; the loop answers the second from its cache."""
    cache: dict[str, str] = {}

    def cached(sim: Sim, call: Any) -> dict[str, Any]:
        key = repr(call.input)
        if key not in cache:
            cache[key] = sim.run_tool(call.name, call.input)
        return {"content": cache[key]}

    search = {"name": "search", "input": {"q": "refund"}}
    assert _run(cached, model=[{"tool_use": [search]}, {"tool_use": [search]}]) == []


def test_telling_the_model_a_committed_write_was_interrupted_is_a_violation() -> None:
    """A repair step answers the email as interrupted although it went out."""

    def repaired(sim: Sim, call: Any) -> dict[str, Any]:
        sim.run_tool(call.name, call.input)
        return {"content": "Tool call was interrupted before a result was produced.", "is_error": True}

    violations = _run(repaired)
    assert [v.invariant for v in violations] == ["results_real"] and violations[0].evidence["kind"] == "denied_commit"
    assert "tells the model it was not run or was interrupted, but exec 1 had committed its write" in str(violations[0])


def test_the_defect_example_is_caught_and_its_twin_holds() -> None:
    with Sim(simloop.load_scenario(ROOT / "scenarios" / "happy-path.yaml")) as sim:
        sim.run(fabricated_results.drive)
    assert {v.invariant for v in sim.check().violations} == {"results_real"}


def test_verify_finds_fabricated_results(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(fabricated_results.drive, max_examples=30, seed=0, out_dir=tmp_path)
    assert "results_real" in {v.invariant for v in found.value.violations}
    assert "not routed through sim.run_tool" in str(found.value)


def test_verify_says_when_no_tool_ever_reached_the_ledger(tmp_path: Path) -> None:
    """Only `pairing` checked, the loop's own tools answer: no violation, but verify says what it did not test."""

    def own_tools(sim: Sim) -> Outcome:
        return _loop(lambda s, call: {"content": f"my own {call.name} ran"})(sim)

    with pytest.raises(simloop.UsageError, match=r"the model asked for tools, and not one tool execution reached "
                                                 r"simloop's ledger: the loop's tools are not routed through "
                                                 r"sim.run_tool"):
        simloop.verify(own_tools, max_examples=10, seed=0, invariants=["pairing"], out_dir=tmp_path)


def test_the_not_run_words_match_where_their_plain_alternation_matches() -> None:
    """`_NOT_RUN` is written for speed (grouped by first letter): it says the same as ``\\b(w1|w2|...)\\b``."""
    import random
    import re

    from simloop.invariants.execution import _NOT_RUN, _NOT_RUN_WORDS

    plain = re.compile(r"\b(" + "|".join(_NOT_RUN_WORDS) + r")\b", re.IGNORECASE)
    rng = random.Random(0)
    pieces = [w.replace("?", "").replace("[o']", "o").replace("[sz]", "s") for w in _NOT_RUN_WORDS]
    pieces += ["n't", "K", "\u017f", "\u0130", "\u0131", "x", "_", " ", "'", "not", "run", "Not Run", "CANCELED", "un"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) + rng.choice(["", " ", "_", ".", "x", "\u00e9"]) for _ in range(rng.randint(1, 5)))
        text = text.upper() if rng.random() < 0.3 else text
        assert bool(_NOT_RUN.search(text)) == bool(plain.search(text)), text
