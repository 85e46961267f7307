"""The generated world is as wide as the real one: schema-valid inputs, wide fan-out, cut multi-call replies,
persistent endings, interleaved stages; and the defect loops that only such a world shows are caught."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pydantic
import pytest
from hypothesis import find

import simloop
from simloop import strategies
from simloop._inputs import POOL, InputPool, pool_for
from simloop.generated import GeneratedModel
from simloop.scenario import ToolCall
from simloop.sim import Sim
from simloop.strategies import DEFAULT_TOOLS, Digits, tool_key
from simloop.transcript import ToolStart, Transcript
from simloop.verify import _FIRST_ROUND, _schedule, _split

ROOT = Path(__file__).resolve().parents[1]
LIMITS = simloop.Limits(max_steps=10, deadline_s=300, max_total_tokens=200_000)
SEARCH, EMAIL = DEFAULT_TOOLS


def drive_of(name: str) -> Any:
    return importlib.import_module(f"examples.{name}").drive


def recording(drive: Callable[[Sim], Any], runs: list[Sim]) -> Callable[[Sim], Any]:
    """``drive``, keeping each run's Sim (its transcript and its model's plan) in ``runs``."""
    if inspect.iscoroutinefunction(drive):

        async def arecorded(sim: Sim) -> Any:
            runs.append(sim)
            return await drive(sim)

        return arecorded

    def recorded(sim: Sim) -> Any:
        runs.append(sim)
        return drive(sim)

    return recorded


# -- inputs from the schema ----------------------------------------------------------------------------------


class Priority(pydantic.BaseModel):
    level: int = pydantic.Field(ge=1, le=5)


class Address(pydantic.BaseModel):
    street: str
    zip: str = pydantic.Field(pattern=r"^\d{5}$")


class Ticket(pydantic.BaseModel):
    """A schema with what tool schemas hold: enums, bounds, arrays, nested objects and $ref ($defs)."""

    title: str = pydantic.Field(min_length=3, max_length=40)
    kind: str = pydantic.Field(json_schema_extra={"enum": ["bug", "question", "refund"]})
    amount: float = pydantic.Field(gt=0, le=500)
    count: int = pydantic.Field(ge=1, le=9, multiple_of=3)
    tags: list[str] = pydantic.Field(default_factory=list, max_length=4)
    ship_to: Address
    extra: Address | None = None
    priority: Priority = Priority(level=1)
    urgent: bool = False


TICKET = Ticket.model_json_schema()


def test_the_simplest_input_has_the_required_fields_at_their_simplest() -> None:
    assert pool_for(SEARCH.input_schema).valid(0) == {"q": "refund"}
    assert pool_for(EMAIL.input_schema).valid(0) == {"to": "ann@example.com"}
    simplest = pool_for(TICKET).valid(0)
    assert set(simplest) == set(TICKET["required"])  # optional fields left out
    assert simplest["kind"] == "bug" and simplest["count"] == 3 and simplest["ship_to"]["zip"] == "11111"
    Ticket.model_validate(simplest)


def test_every_valid_input_fits_the_schema_and_they_differ() -> None:
    pool = pool_for(TICKET)
    inputs = [pool.valid(n) for n in range(3 * POOL)]  # the pool and beyond (built on demand)
    for value in inputs:
        Ticket.model_validate(value)  # the typed tool accepts it
        assert pool.is_valid(value)
    assert len({repr(v) for v in inputs}) >= 3 * POOL - 2
    optional = {k for v in inputs for k in v} - set(TICKET["required"])
    assert optional == {"tags", "extra", "priority", "urgent"}  # every optional field comes up
    assert {v["kind"] for v in inputs} == {"bug", "question", "refund"}


def test_invalid_inputs_are_realistic_slips_the_schema_rejects() -> None:
    pool = pool_for(TICKET)
    for n in range(POOL):
        bad, good = pool.invalid(n), pool.valid(n)
        assert not pool.is_valid(bad)
        with pytest.raises(pydantic.ValidationError):
            Ticket.model_validate(bad)
        missing = set(good) - set(bad)
        wrong = {k for k in bad if k in good and type(bad[k]) is not type(good[k])}
        assert len(missing) + len(wrong) == 1, (good, bad)  # one required field left out, or one wrong type
    assert InputPool({"type": "object", "properties": {}}).invalid(0) == {}  # nothing to break: a valid input


def test_most_generated_inputs_are_schema_valid_and_a_few_are_not() -> None:
    import random

    codec = strategies.calls_codec(tool_key(DEFAULT_TOOLS))
    pools = {t.name: pool_for(t.input_schema) for t in DEFAULT_TOOLS}
    rng = random.Random(0)
    calls = [c for _ in range(2000) for c in codec.decode(Digits(rng.randbytes(codec.size)))]
    share = sum(pools[c.name].is_valid(c.input) for c in calls) / len(calls)
    assert 0.92 <= share <= 0.98  # one in twenty invalid, drawn apart


def test_calls_shrink_to_the_simplest_valid_input() -> None:
    calls = find(strategies.tool_calls(DEFAULT_TOOLS), lambda calls: any(c.name == "send_email" for c in calls))
    assert [c for c in calls if c.name == "send_email"] == [ToolCall(name="send_email", input={"to": "ann@example.com"})]
    assert len(calls) <= 2
    queries = pool_for(SEARCH.input_schema)
    bad = find(strategies.tool_calls(DEFAULT_TOOLS),
               lambda calls: calls[0].name == "search" and not queries.is_valid(calls[0].input))
    assert bad[0] in (ToolCall(name="search", input={}), ToolCall(name="search", input={"q": 42}))  # a simple slip


def test_a_tools_inputs_follow_the_schema_the_request_sends() -> None:
    # the model answers the request: a loop whose typed tools send their own schemas gets inputs for those
    runs: list[Sim] = []
    simloop.verify(recording(drive_of("correct_typed"), runs), limits=LIMITS, max_examples=30, seed=0)
    sent = [b for sim in runs for r in sim.transcript.responses if r.message for b in r.message["content"]
            if b.get("type") == "tool_use" and r.message["stop_reason"] == "tool_use"]
    assert len(sent) > 20
    schemas = {t["name"]: t["input_schema"] for t in runs[0].transcript.requests[0].body["tools"] if "input_schema" in t}
    assert schemas["send_email"]["additionalProperties"] is False  # the typed model's schema, not the scenario's
    valid = sum(pool_for(schemas[b["name"]]).is_valid(b["input"]) for b in sent)
    assert valid / len(sent) >= 0.9


# -- typed tools: generated writes run (the done-when of the issue) -----------------------------------------


def _writes_run(runs: list[Sim]) -> tuple[int, int]:
    """(runs whose model asked for send_email in a tool_use reply, those of them in which it ran)."""
    called = ran = 0
    for sim in runs:
        t: Transcript = sim.transcript
        asked = any(
            b.get("type") == "tool_use" and b.get("name") == "send_email"
            for r in t.responses if r.message and r.message.get("stop_reason") == "tool_use"
            for b in r.message["content"]
        )
        if asked:
            called += 1
            ran += any(e.tool == "send_email" for e in t.of(ToolStart))
    return called, ran


def _input(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


def test_sdk_beta_tool_functions_run_generated_writes() -> None:
    def drive(sim: Sim) -> simloop.Outcome:
        @anthropic.beta_tool
        def search(q: str) -> str:
            """Search the knowledge base."""
            return sim.run_tool("search", {"q": q})

        @anthropic.beta_tool
        def send_email(to: str, body: str | None = None) -> str:
            """Send an email to a customer."""
            return sim.run_tool("send_email", _input(to=to, body=body))

        runner = sim.client.beta.messages.tool_runner(
            model=sim.model, max_tokens=1024, max_iterations=8, tools=[search, send_email],
            messages=[{"role": "user", "content": sim.task}],
        )
        try:
            last = runner.until_done()
        except anthropic.APIError as exc:
            return simloop.Outcome("error", str(exc))
        return simloop.Outcome("final", "".join(b.text for b in last.content if b.type == "text"))

    runs: list[Sim] = []
    simloop.verify(recording(drive, runs), limits=LIMITS, max_examples=60, seed=0, invariants=["pairing"])
    called, ran = _writes_run(runs)
    assert called >= 15 and ran / called >= 0.9, (called, ran)


def test_pydantic_ai_typed_tools_run_generated_writes() -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (pip install simloop[pydantic-ai])")
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import AgentRunError
    from pydantic_ai.usage import UsageLimits

    from simloop.adapters import pydantic_ai as pai

    async def drive(sim: Sim) -> simloop.Outcome:
        async def search(q: str) -> str:
            """Search the knowledge base."""
            return await sim.arun_tool("search", {"q": q})

        async def send_email(to: str, body: str | None = None) -> str:
            """Send an email to a customer."""
            return await sim.arun_tool("send_email", _input(to=to, body=body))

        agent: Agent[None, str] = Agent(pai.model(sim), tools=[search, send_email])
        try:
            result = await agent.run(sim.task, usage_limits=UsageLimits(request_limit=8))
        except AgentRunError as exc:
            return simloop.Outcome("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - a tool's own exception escapes pydantic-ai (its design)
            return simloop.Outcome("error", str(exc))
        return simloop.Outcome("final", result.output)

    runs: list[Sim] = []
    simloop.verify(recording(drive, runs), limits=LIMITS, max_examples=60, seed=0, invariants=["pairing"])
    called, ran = _writes_run(runs)
    assert called >= 15 and ran / called >= 0.9, (called, ran)


# -- wide fan-out -------------------------------------------------------------------------------------------


def test_a_reply_makes_up_to_eight_calls_several_of_one_tool_with_different_inputs() -> None:
    calls = find(
        strategies.tool_calls(DEFAULT_TOOLS),
        lambda cs: len(cs) == 8 and len({repr(c.input) for c in cs if c.name == "send_email"}) >= 3,
    )
    assert len(calls) == 8
    assert strategies.calls_codec(tool_key(DEFAULT_TOOLS)).size == 1 + 3 * 8
    with pytest.raises(Exception, match="No examples found"):
        find(strategies.tool_calls(DEFAULT_TOOLS), lambda cs: len(cs) > 9)


# -- cut multi-call replies ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_cut_multi_call_reply_has_complete_calls_then_a_cut_one(stream: bool) -> None:
    with Sim(ROOT / "scenarios" / "max-tokens-after-calls.yaml", seed=0) as sim:
        client = anthropic.Anthropic(api_key="k", base_url=str(sim.client.base_url), http_client=sim.http_client,
                                     _strict_response_validation=True)
        kwargs: dict[str, Any] = {"model": sim.model, "max_tokens": 1024, "tools": sim.tool_schemas,
                                  "messages": [{"role": "user", "content": sim.task}]}
        if stream:
            with client.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**kwargs)
    assert message.stop_reason == "max_tokens"
    kinds = [b.type for b in message.content]
    assert kinds == ["text", "tool_use", "tool_use", "tool_use"]
    first, second, cut = message.content[1:]
    assert first.input == {"q": "order 1234"} and second.input == {"q": "refund policy"}  # type: ignore[union-attr]
    assert cut.name == "send_email" and cut.input == {"to": "ann@example.com"}  # type: ignore[union-attr]  # what parsed


def test_generated_cut_endings_hold_several_calls_for_the_requests_tools() -> None:
    runs: list[Sim] = []
    plan = strategies.plans(ending_kinds=("max_tokens_tool",), personas=(("finishes", 1),), faults=False,
                            slow=((False, 1),), heavy=((False, 1),))
    simloop.verify(recording(drive_of("correct_typed"), runs), limits=LIMITS, plan=plan, max_examples=40, seed=0)
    cut = [r.message for sim in runs for r in sim.transcript.responses
           if r.message and r.message["stop_reason"] == "max_tokens"]
    sizes = {sum(b["type"] == "tool_use" for b in m["content"]) for m in cut}
    assert 1 in sizes and max(sizes) >= 3  # one cut call, or complete calls then a cut one
    assert all(b["name"] in ("search", "send_email") for m in cut for b in m["content"] if b["type"] == "tool_use")


# -- persistent endings --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pause_turn", "max_tokens", "refusal"])
def test_an_ending_comes_again_as_often_as_the_plan_says(kind: str) -> None:
    plan = strategies.plans(ending_kinds=(kind,), ending_repeats=((3, 1),), min_steps=0, max_steps=0,
                            personas=(("finishes", 1),), faults=False, slow=((False, 1),), heavy=((False, 1),))
    drawn = find(plan, lambda p: True)
    model = GeneratedModel(lambda strategy: find(strategy, lambda x: True), drawn)
    from simloop.models import ModelRequest

    tools = [SEARCH.schema_dict(), {"type": "web_search_20250305", "name": "web_search"}]  # a pause needs a server tool
    request = ModelRequest(call=1, attempt=0, body={"tools": tools}, conversation=[], stream=False)
    served = [model.reply(request).kind for _ in range(5)]
    assert served == [kind, kind, kind, "end_turn", "end_turn"]


def test_a_pause_continued_three_times_is_honest_for_the_correct_loop() -> None:
    runs: list[Sim] = []
    plan = strategies.plans(ending_kinds=("pause_turn",), ending_repeats=((3, 1),), personas=(("finishes", 1),),
                            faults=False, slow=((False, 1),), heavy=((False, 1),), max_steps=2)
    simloop.verify(recording(drive_of("correct_sync"), runs), limits=LIMITS, plan=plan, max_examples=10, seed=0)
    kinds = [r.kind for r in runs[-1].transcript.responses]
    assert kinds[-4:] == ["pause_turn", "pause_turn", "pause_turn", "end_turn"]


# -- stages interleaved --------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [20, 50, 200, 1000, 10_000])
def test_every_stage_runs_within_the_first_twenty_examples(budget: int) -> None:
    searches = _split(budget, strategies.stages())
    order: list[str] = []

    def done() -> int:
        return len(order)

    for stage, _, _, size in _schedule(searches, budget, done, set()):
        order.extend([stage] * size)
    assert len(order) == budget
    assert {s for s, _, _ in searches} == set(order[: len(searches) * _FIRST_ROUND])
    assert len(searches) * _FIRST_ROUND <= 20


def test_every_kind_of_run_comes_in_the_first_twenty_examples_of_a_search() -> None:
    runs: list[Sim] = []

    def drive(sim: Sim) -> simloop.Outcome:  # one model call (a drive must reach the model): the plans are looked at
        sim.client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])
        return simloop.Outcome("error", "")

    simloop.verify(recording(drive, runs), max_examples=200, seed=0, invariants=[])
    first = [sim.policy.plan for sim in runs[:20]]  # type: ignore[attr-defined]
    assert {p.persona for p in first} == {"finishes", "stuck", "wanders"}
    assert any(p.outage is not None for p in first) and any(p.slow for p in first) and any(p.heavy for p in first)
    assert any(p.fault_rate for p in first) and any(p.tool_fault_rate for p in first)


def test_the_report_says_how_many_examples_passed_before_the_first_failure(tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(drive_of("no_step_cap"), limits=simloop.Limits(), max_examples=200, seed=0, out_dir=tmp_path)
    err = info.value
    assert err.examples_before_failure is not None and err.examples_before_failure < 20  # the stuck stage is early
    assert f"first failing run: example {err.examples_before_failure + 1} of the search" in str(err)


# -- the defect loops of the wide world ------------------------------------------------------------------------

NEW_DEFECTS = {
    "typed_write_retried": {"no_rerun", "tool_errors"},
    "cut_calls_run": {"truncation"},
    "cut_retried_once": {"truncation"},
    "cache_control_every_block": {"request_valid"},
}


@pytest.mark.parametrize("max_examples", [50, 200])
@pytest.mark.parametrize("name", sorted(NEW_DEFECTS))
def test_the_wide_world_defects_are_caught(name: str, max_examples: int, tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(drive_of(name), limits=LIMITS, max_examples=max_examples, seed=3, out_dir=tmp_path)
    assert {v.invariant for v in info.value.violations} <= NEW_DEFECTS[name]


def test_a_loop_marking_every_block_sends_more_than_four_breakpoints_on_a_wide_turn() -> None:
    runs: list[Sim] = []
    plan = strategies.plans(personas=(("finishes", 1),), faults=False, min_steps=2, ending_kinds=("end_turn",))
    try:
        simloop.verify(recording(drive_of("cache_control_every_block"), runs), limits=LIMITS, plan=plan,
                       max_examples=40, seed=0)
    except simloop.InvariantViolation as e:  # with the validator's rule for more than 4 breakpoints
        assert {v.invariant for v in e.violations} == {"request_valid"}
    most = max(
        sum(1 for m in r.body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if isinstance(b, dict) and "cache_control" in b)
        for sim in runs for r in sim.transcript.requests
    )
    assert most > 4


def test_the_correct_typed_loop_holds_every_invariant() -> None:
    report = simloop.verify(drive_of("correct_typed"), limits=LIMITS, max_examples=60, seed=1)
    assert report.ok and report.examples is not None and report.examples >= 60
