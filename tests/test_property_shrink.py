"""A failure a fuzzer found in the long-history stage of `simloop.property` shrinks to the plain world's minimal run.

`hypothesis fuzz` saves what it finds, unshrunk, to the example database; the next run (HypoFuzz's own shrink, or
pytest's) shrinks it.  Found in the long stage (every tool output a quarter of the window, five to eight rounds),
a bug that needs no long history must come back as the run the plain stage gives (the same replies, no huge
outputs, no faults), and the shrinker must leave the long runs at once: each costs megabytes of history, and a
shrink that stays among them runs out of Hypothesis's time on a loaded machine (issue 40, item 12).
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from hypothesis import Phase, settings
from hypothesis.control import current_build_context
from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes
from hypothesis.internal.reflection import function_digest

import simloop
from simloop._campaign import engine
from simloop.strategies import stages

LIMITS = simloop.Limits(max_steps=10)
STAGES = [name for name, _, _ in stages()]
LONG = STAGES.index("long")


def split_results(sim: simloop.Sim) -> simloop.Outcome:
    """A user's loop from the README, with a planted bug: each tool result goes in a user message of its own (the
    API wants a turn's results together, in one message): a bug of two replies, whatever the history's size."""
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    tools: Any = sim.tool_schemas
    for _ in range(LIMITS.max_steps or 10):
        try:
            reply = sim.client.messages.create(model=sim.model, max_tokens=1024, tools=tools,
                                               messages=messages)
        except anthropic.APIError as e:
            return simloop.Outcome("error", str(e))
        if reply.stop_reason in ("max_tokens", "model_context_window_exceeded", "refusal"):
            return simloop.Outcome("truncated" if reply.stop_reason != "refusal" else "refusal", "")
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason != "tool_use":
            return simloop.Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        for block in reply.content:
            if block.type == "tool_use":
                try:
                    result: dict[str, Any] = {"content": sim.run_tool(block.name, block.input)}
                except Exception as e:  # noqa: BLE001 (a tool's failure is an observation for the model)
                    result = {"content": str(e), "is_error": True}
                messages.append({"role": "user", "content": [  # BUG: one message per result
                    {"type": "tool_result", "tool_use_id": block.id, **result}]})
    return simloop.Outcome("max_steps", "")


def _long_failure(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The choices of a failing run of the long stage, unshrunk (as a fuzzer meets it and saves it)."""
    found: list[tuple[Any, ...]] = []
    failed = engine.Campaign._failed

    def spy(self: engine.Campaign, failure: Any) -> None:
        found.append(tuple(current_build_context().data.choices))
        failed(self, failure)

    with monkeypatch.context() as m:
        m.setattr(engine.Campaign, "_failed", spy)
        with pytest.raises(simloop.InvariantViolation):
            simloop.verify(split_results, limits=LIMITS, max_examples=20, plan=stages()[LONG][1], seed=1,
                           settings=settings(database=None, phases=[Phase.generate]))
    assert found
    return found[0]


def _shrunk(test: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[simloop.InvariantViolation, int, int]:
    """Run a property test; its report, the runs it made and how many of them were long-history runs."""
    runs = [0, 0]
    play = engine.Campaign._play

    def counted(self: engine.Campaign, run: Any) -> Any:
        runs[0] += 1
        runs[1] += bool(getattr(getattr(run.model, "plan", None), "long", False))
        return play(self, run)

    monkeypatch.setattr(engine.Campaign, "_play", counted)
    with pytest.raises(simloop.InvariantViolation) as err:
        test()
    return err.value, runs[0], runs[1]


def test_a_failure_found_in_the_long_stage_shrinks_to_the_plain_world_s_minimal_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    choices = _long_failure(monkeypatch)
    db = InMemoryExampleDatabase()
    test = simloop.property(split_results, limits=LIMITS, max_examples=50, settings=settings(database=db),
                            out_dir=tmp_path / "long")
    key = function_digest(test.hypothesis.inner_test)  # type: ignore[attr-defined]
    db.save(key + b".secondary", choices_to_bytes((LONG, *choices)))  # found, not yet shrunk
    from_long, runs, long_runs = _shrunk(test, monkeypatch)
    assert from_long.examples_before_failure == 0  # the saved long-stage failure was the first run
    plain = simloop.property(split_results, limits=LIMITS, max_examples=50, out_dir=tmp_path / "plain",
                             settings=settings(database=None, derandomize=True))
    from_plain, _, plain_long = _shrunk(plain, monkeypatch)
    assert plain_long == 0
    for err in (from_long, from_plain):
        assert {v.invariant for v in err.violations} == {"results_together"}
        assert err.scenario is not None and err.scenario.faults == []  # no huge outputs, no other faults
    assert from_long.scenario is not None and from_plain.scenario is not None
    # as small as from the plain stage: a reply of two calls, and the request that sends their results apart
    assert len(from_long.scenario.model) == 2 <= len(from_plain.scenario.model)
    assert long_runs <= 3  # it left the long runs at once (the saved one, its first shrink attempt)
    assert runs <= 400  # and a bounded shrink (some 230 runs here, as from the plain stage)
