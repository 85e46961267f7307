"""Sub-agents, the context window and cost budgets on both OpenAI wires (Chat Completions and Responses), each with
a correct loop that passes and a defect loop that is caught, as on the Messages API (docs/design.md, Sub-agents,
The context window, Limits; The OpenAI wire).

The loops are written as the README writes them: the official ``openai`` client (``sim.openai_client``), a plain
history, no internal ids; one knob each for the bug its twin has.  A streamed variant reads the usage of a Chat
Completions stream from its last chunk (``stream_options={"include_usage": True}``) and a Responses stream's from
its ``response.completed`` event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import simloop
from simloop import Limits, Outcome, Sim
from simloop.pricing import cost_usd
from simloop.scenario import load_scenario
from simloop.transcript import OutcomeEvent, SubagentEnd, SubagentStart, ToolStart

openai = pytest.importorskip("openai", reason="the OpenAI wires need the openai SDK: pip install 'simloop[openai]'")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gpt-4o"
WIRES = ["chat", "chat-stream", "responses", "responses-stream"]

#: What a reply came to, whichever wire: the assistant's history entries, its calls (id, name, arguments), how it
#: ended ("tools", "final", "cut", "refusal", "broken"), its text, its usage as the API sent it, and its model.
Turn = tuple[list[Any], list[tuple[str, str, str]], str, str, Any, str]


# -- one model call on each wire -----------------------------------------------------------------------------------


def _chat(client: Any, history: list[Any], tools: list[Any], *, stream: bool, include_usage: bool = True) -> Turn:
    schema = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}} for t in tools]
    if not stream:
        reply = client.chat.completions.create(model=MODEL, messages=history, tools=schema)
        choice = reply.choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        how = _chat_ending(choice.finish_reason, choice.message.refusal)
        return ([choice.message.model_dump(exclude_none=True)], calls, how,
                choice.message.refusal or choice.message.content or "", reply.usage, reply.model)
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    text, refusal, finish, usage, model = "", "", None, None, MODEL
    parts: dict[int, dict[str, str]] = {}
    for chunk in client.chat.completions.create(model=MODEL, messages=history, tools=schema, stream=True, **extra):
        model, usage = chunk.model, chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            refusal += choice.delta.refusal or ""
            for call in choice.delta.tool_calls or []:
                part = parts.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                part["id"] = call.id or part["id"]
                part["name"] += (call.function and call.function.name) or ""
                part["arguments"] += (call.function and call.function.arguments) or ""
            finish = choice.finish_reason or finish
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if parts:
        message["tool_calls"] = [{"id": p["id"], "type": "function",
                                  "function": {"name": p["name"], "arguments": p["arguments"]}} for p in parts.values()]
    calls = [(p["id"], p["name"], p["arguments"]) for p in parts.values()]
    return [message], calls, _chat_ending(finish, refusal), refusal or text, usage, model


def _chat_ending(finish: str | None, refusal: str | None) -> str:
    if finish is None:
        return "broken"  # the stream stopped before its finish chunk
    if refusal or finish == "content_filter":
        return "refusal"
    return {"tool_calls": "tools", "length": "cut"}.get(finish, "final")


def _responses(client: Any, history: list[Any], tools: list[Any], *, stream: bool) -> Turn:
    schema = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False} for t in tools]
    if stream:
        response = None
        for event in client.responses.create(model=MODEL, input=history, tools=schema, stream=True):
            if event.type in ("response.completed", "response.incomplete"):
                response = event.response
        if response is None:
            return [], [], "broken", "", None, MODEL
    else:
        response = client.responses.create(model=MODEL, input=history, tools=schema)
    items = [item.model_dump(exclude_none=True) for item in response.output]
    calls = [(i.call_id, i.name, i.arguments) for i in response.output if i.type == "function_call"]
    refusals = [p.refusal for i in response.output if i.type == "message" for p in i.content if p.type == "refusal"]
    how = "cut" if response.status == "incomplete" else "refusal" if refusals else "tools" if calls else "final"
    return items, calls, how, refusals[0] if refusals else response.output_text, response.usage, response.model


def _answer(wire: str, call_id: str, output: str) -> dict[str, Any]:
    if wire.startswith("chat"):
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# -- the loop, as the README writes it -----------------------------------------------------------------------------

Fit = Callable[[list[Any]], None]
Price = Callable[[Any, str, Any], float]


def price_usage(usage: Any, model: str, prices: Any) -> float:
    """The README's way: the reply's usage as the API sent it, at the model's price."""
    return cost_usd(usage.model_dump() if usage is not None else None, model, prices)


def loop(
    sim: Any, wire: str, *, fit: Fit | None = None, price: Price | None = price_usage, retry_errors: int = 0,
    include_usage: bool = True, clip: int | None = None, cut_as: str = "truncated",
) -> Outcome:
    """A loop on ``wire``: stops before a call once its step cap or cost budget is spent, leaves retries to the
    SDK (``retry_errors`` > 0: the defect that resends after any API error), runs no call of a cut reply, answers
    every call (a tool that raised with its error text, a long output ``clip``ped), reports a cut reply ``cut_as``,
    and ``fit``s its history before each call.  ``sim`` is a Sim, or a sub-agent (``sim.subagent(...)``: the same
    loop, started fresh)."""
    client, stream = sim.openai_client, wire.endswith("stream")
    history: list[Any] = [{"role": "user", "content": sim.task}]
    spent, budget = 0.0, sim.limits.max_cost_usd if price is not None else None
    for _ in range(sim.limits.max_steps or 10):
        if budget is not None and spent >= budget:
            return Outcome("cost_budget", f"${spent:.6f} spent of ${budget:g}")
        if fit is not None:
            fit(history)
        for attempt in range(retry_errors + 1):
            try:
                if wire.startswith("chat"):
                    turn = _chat(client, history, sim.tool_schemas, stream=stream, include_usage=include_usage)
                else:
                    turn = _responses(client, history, sim.tool_schemas, stream=stream)
                break
            except openai.APIError as exc:  # the SDK has retried what is worth retrying
                if attempt == retry_errors:
                    return Outcome("error", str(exc))
        items, calls, how, text, usage, model = turn
        if price is not None:
            spent += price(usage, model, sim.prices)
        history += items
        if how != "tools":
            return Outcome({"cut": cut_as, "broken": "error"}.get(how, how), text)
        for call_id, name, arguments in calls:
            try:
                output = str(sim.run_tool(name, json.loads(arguments), tool_use_id=call_id))
                if clip is not None and len(output) > clip:
                    output = output[:clip] + f"\n[{len(output) - clip} more characters cut]"
            except Exception as exc:  # noqa: BLE001 - an observation for the model, never a retry
                output = f"Error: {exc}"
            history.append(_answer(wire, call_id, str(output)))
    return Outcome("max_steps", "no answer in the step cap")


def drive_for(wire: str, **kw: Any) -> Callable[[Sim], Outcome]:
    return lambda sim: loop(sim, wire, **kw)


def run(scenario: Any, drive: Callable[[Sim], Any], **kw: Any) -> tuple[Sim, simloop.Report]:
    with Sim(scenario, **kw) as sim:
        outcome = sim.run(drive)
    return sim, sim.check(outcome)


def reason(sim: Sim) -> str:
    """How the run's loop said it stopped."""
    return sim.transcript.of(OutcomeEvent)[-1].reason


def ids(report: simloop.Report) -> set[str]:
    return {v.invariant for v in report.violations}


# -- sub-agents ----------------------------------------------------------------------------------------------------

SUBAGENT_FILE = ROOT / "scenarios" / "subagent-truncated.yaml"
DELEGATE = {"name": "delegate", "kind": "read", "description": "Hand a research task to a sub-agent.",
            "input_schema": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}}


STOPPED_EARLY = "the sub-agent stopped early ({reason})"


def delegating(wire: str, *, honest: bool = True, says: str = STOPPED_EARLY) -> Callable[[Sim], Outcome]:
    """The README's delegate tool on ``wire``: the sub-agent is the same loop, started fresh (``sub``'s client,
    task, tools and limits); a sub-run that did not finish is the tool's error (``honest``; its message ``says``),
    or, the defect, its last text is handed back as the result."""

    def drive(sim: Sim) -> Outcome:
        def delegate(task: str = "") -> str:
            outcome = sim.subagent(task, limits=Limits(max_steps=4)).run(lambda sub: loop(sub, wire))
            if honest and outcome.reason != "final":  # cut, capped or failed: an error, never a result
                raise RuntimeError(says.format(reason=outcome.reason, text=outcome.text))
            return outcome.text or "Done."

        if any(t["name"] == "delegate" for t in sim.tool_schemas):
            sim.bind_tool("delegate", delegate)
        return loop(sim, wire)

    return drive


@pytest.mark.parametrize("wire", WIRES)
def test_a_sub_agent_on_the_openai_wires_is_a_run_of_its_own(wire: str) -> None:
    """The sub-agent's loop reads ``sub.openai_client`` as a drive reads ``sim.openai_client``; its calls are the
    sub-run's, and the correct delegate reports the cut sub-run as an error the parent reads."""
    sim, report = run(load_scenario(SUBAGENT_FILE), delegating(wire))
    assert report.ok, report
    (start,) = sim.transcript.of(SubagentStart)
    (end,) = sim.transcript.of(SubagentEnd)
    assert (start.tool, end.reason, end.exception) == ("delegate", "truncated", None)
    assert [r.subrun for r in sim.transcript.requests] == [None, 1, 1, None]
    assert "stopped early (truncated)" in json.dumps(sim.transcript.requests[-1].body["messages"][-1])


@pytest.mark.parametrize("wire", WIRES)
def test_a_sub_agents_partial_answer_reported_as_done_is_caught_on_the_openai_wires(wire: str) -> None:
    _, report = run(load_scenario(SUBAGENT_FILE), delegating(wire, honest=False))
    assert ids(report) == {"subagent_honest"}, report
    (v,) = report.violations
    assert v.evidence["reason"] == "truncated" and v.step == 4


@pytest.mark.parametrize("wire", WIRES)
def test_a_delegate_that_raises_is_an_error_the_parent_reads_on_the_openai_wires(wire: str) -> None:
    """Before: these wires have no ``is_error``, so a correct delegate whose error does not name the reason (the
    loop answers "Error: ...", as the README's loops do) was reported ``subagent_honest`` here and passed on the
    Messages API; a delegate that returns its partial text as the result is still caught."""
    says = "Sub-agent did not return an answer. Its last words: {text}"
    _, report = run(load_scenario(SUBAGENT_FILE), delegating(wire, says=says))
    assert report.ok, report
    partial = load_scenario(SUBAGENT_FILE).model_dump(exclude_none=True)
    partial["model"][-1] = {"max_tokens": "Error rates in March: a database failover on the 3rd, and"}
    _, report = run(partial, delegating(wire, honest=False))
    assert ids(report) == {"subagent_honest"}, report


def test_an_async_sub_agent_reads_sub_async_openai_client() -> None:
    """An async drive whose sub-agent runs on ``sub.async_openai_client``: its calls are the sub-run's, and a cut
    sub-run the drive takes for an answer is caught inside it (truncation)."""

    async def drive(sim: Sim) -> Outcome:
        with sim.subagent("Summarise the March reports.", limits={"max_steps": 2}) as sub:
            reply = await sub.async_openai_client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": sub.task}])
            sub.finish(("final", reply.choices[0].message.content or ""))  # BUG: a "length" reply is no answer
        reply = await sim.async_openai_client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": sim.task}])
        return Outcome("final", reply.choices[0].message.content or "")

    sim, report = run({"name": "a", "task": "t", "model": [{"max_tokens": "Two outages in"}, {"end_turn": "Done."}],
                       "strict": False}, drive)
    assert [r.subrun for r in sim.transcript.requests] == [1, None]
    assert [(v.invariant, v.evidence.get("subagent")) for v in report.violations] == [("truncation", 1)], report


BOMB = {"name": "bomb", "task": "Research the refund policy.", "tools": [DELEGATE, {"name": "search", "kind": "read"}],
        "model": [{"tool_use": [{"name": "delegate", "input": {"task": "find it"}}]}], "then": "end_turn"}


def bomb(wire: str) -> Callable[[Sim], Outcome]:
    """Defect: a delegate tool that starts sub-agents until one finds something (none does: each is capped at one
    step and the model keeps delegating), each with a fresh budget."""

    def drive(sim: Sim) -> Outcome:
        def delegate(task: str = "") -> str:
            while True:
                outcome = sim.subagent(task, limits=Limits(max_steps=1)).run(lambda sub: loop(sub, wire))
                if outcome.reason == "final" and "found" in outcome.text:
                    return outcome.text

        sim.bind_tool("delegate", delegate)
        return loop(sim, wire)

    return drive


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_the_runaway_bounds_hold_across_sub_runs_on_the_openai_wires(wire: str) -> None:
    from simloop.sim import RUNAWAY_MODEL_CALLS, RUNAWAY_SUBRUNS

    sim, report = run(BOMB, bomb(wire))
    assert [v.invariant for v in report.violations] == ["stops"], report
    assert report.violations[0].evidence["budget"] == "subagents" and "kept starting sub-agents" in str(report)
    assert len(sim.transcript.of(SubagentStart)) == RUNAWAY_SUBRUNS * RUNAWAY_MODEL_CALLS
    # ten delegations a reply, three replies, each sub-agent answering at once: bounded, no runaway
    ten = {"tool_use": [{"name": "delegate", "input": {"task": f"part {i}"}} for i in range(10)]}
    sim, report = run({**BOMB, "model": [ten, ten, ten], "then": "end_turn"}, delegating(wire))
    assert report.ok and len(sim.transcript.of(SubagentEnd)) == 30, report


@pytest.mark.parametrize("wire", ["chat-stream", "responses"])
def test_verify_with_a_delegate_tool_on_the_openai_wires(wire: str, tmp_path: Path) -> None:
    from simloop.strategies import DEFAULT_TOOLS

    kw: dict[str, Any] = {"tools": [*DEFAULT_TOOLS, simloop.ToolSpec(**DELEGATE)], "seed": 2, "out_dir": tmp_path}
    assert simloop.verify(delegating(wire), max_examples=40, **kw).ok
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(delegating(wire, honest=False), max_examples=100, **kw)
    assert {v.invariant for v in caught.value.violations} == {"subagent_honest"}, caught.value


# -- the context window ----------------------------------------------------------------------------------------------

BIG_BUDGET = Limits(max_steps=10)  # what these loops check (no clock, no token count)
#: Only long runs: five to eight tool rounds whose outputs are each a quarter of the window (tests/test_context.py).
LONG = simloop.strategies.plans(
    min_steps=5, max_steps=8, personas=(("finishes", 1),), faults=False, ending_kinds=("end_turn",),
    slow=((False, 1),), heavy=((False, 1),), ending_repeats=((1, 1),), long=((True, 1),),
)
#: The trimming loop's numbers for gpt-4o's window: each output clipped to about 5,000 tokens (a round of parallel
#: calls must fit too), the history kept to about 60,000.
CLIP, HISTORY_BUDGET = 20_000, 60_000


def _call_ids(item: dict[str, Any]) -> set[str]:
    if item.get("type") == "function_call":
        return {item["call_id"]}
    return {c["id"] for c in item.get("tool_calls") or []}


def _answers(item: dict[str, Any]) -> str | None:
    return item.get("tool_call_id") or (item.get("call_id") if item.get("type") == "function_call_output" else None)


def _oldest_round(history: list[Any]) -> tuple[int, int] | None:
    """Where the oldest tool round is (the items that called, then those that answered), unless it is the latest."""
    start = next((i for i, item in enumerate(history) if _call_ids(item)), None)
    if start is None:
        return None
    end, answered = start + 1, False
    while end < len(history) and (_answers(history[end]) or (_call_ids(history[end]) and not answered)):
        answered = answered or bool(_answers(history[end]))
        end += 1
    return (start, end) if end < len(history) else None


def fit(history: list[Any]) -> None:
    """Drop the oldest tool rounds, never the task nor the latest round, until the history is about
    ``HISTORY_BUDGET`` tokens (four characters of its JSON a token)."""
    while len(json.dumps(history)) // 4 > HISTORY_BUDGET and (where := _oldest_round(history)) is not None:
        del history[where[0]:where[1]]


@pytest.mark.parametrize("wire", WIRES)
def test_the_context_window_on_the_openai_wires(wire: str, tmp_path: Path) -> None:
    """A loop that trims its history keeps its claim over long runs; one that claims it and never trims is caught
    (request_valid); one that claims nothing stops at the wire's own 400 honestly, and resending the refused
    prompt is caught."""
    kw: dict[str, Any] = {"limits": BIG_BUDGET, "plan": LONG, "max_examples": 4, "seed": 1, "out_dir": tmp_path}
    assert simloop.verify(drive_for(wire, fit=fit, clip=CLIP), context=True, **kw).ok
    assert simloop.verify(drive_for(wire), **kw).ok
    for defect, claim in ((drive_for(wire), True), (drive_for(wire, retry_errors=2), False)):
        with pytest.raises(simloop.InvariantViolation) as caught:
            simloop.verify(defect, context=claim, **kw)
        assert {v.invariant for v in caught.value.violations} == {"request_valid"}, caught.value


@pytest.mark.parametrize(("model", "window"), [("gpt-4o", 128_000), ("gpt-4o-mini", 128_000), ("o3", 200_000),
                                               ("gpt-5-mini", 272_000), ("gpt-4.1", 1_047_576)])
def test_each_openai_model_has_its_own_window(model: str, window: int) -> None:
    """Before: every OpenAI model had the default 200k window (gpt-4.1's is 1M: a claiming loop keeping to 250k
    was reported, where the real API answers)."""
    prompt = "word " * 192_000  # some 240,000 tokens, as the simulator counts

    def drive(sim: Sim) -> Outcome:
        try:
            sim.openai_client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
        except openai.BadRequestError as exc:
            return Outcome("error", str(exc))
        return Outcome("final", "")

    sim, _ = run({"name": "w", "task": "t", "model": [{"end_turn": "ok"}], "strict": False}, drive)
    assert 200_000 < sim.transcript.requests[0].input_tokens < 272_000
    refused = [r.error["error"]["message"] for r in sim.transcript.responses if r.error is not None]
    said = (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
            f"{sim.transcript.requests[0].input_tokens} tokens. Please reduce the length of the messages.")
    assert refused == ([said] if window < 240_000 else [])


def chained(truncation: str | None = None) -> Callable[[Sim], Outcome]:
    """The README's Responses loop with the conversation kept on the server (``previous_response_id`` and only the
    new outputs as input); ``truncation="auto"`` is how it keeps inside the window: the API drops the oldest items."""

    def drive(sim: Sim) -> Outcome:
        tools: Any = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False}
                      for t in sim.tool_schemas]
        new: list[Any] = [{"role": "user", "content": sim.task}]
        previous = None
        for _ in range(10):
            try:
                response = sim.openai_client.responses.create(
                    model=MODEL, input=new, tools=tools, previous_response_id=previous,
                    **({"truncation": truncation} if truncation else {}))
            except openai.APIError as exc:  # the SDK has retried what is worth retrying
                return Outcome("error", str(exc))
            previous = response.id
            if response.status == "incomplete":
                return Outcome("truncated", response.output_text)
            refusals = [part.refusal for item in response.output if item.type == "message"
                        for part in item.content if part.type == "refusal"]
            if refusals:  # the model declined: a refusal, not an empty answer
                return Outcome("refusal", refusals[0])
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return Outcome("final", response.output_text)
            new = []
            for call in calls:
                try:
                    out = sim.run_tool(call.name, json.loads(call.arguments), tool_use_id=call.call_id)
                except Exception as exc:  # noqa: BLE001 - an observation for the model, never a retry
                    out = f"Error: {exc}"
                new.append({"type": "function_call_output", "call_id": call.call_id, "output": str(out)})
        return Outcome("max_steps", "no answer in 10 calls")

    return drive


def test_truncation_auto_keeps_a_chained_responses_loop_inside_the_window(tmp_path: Path) -> None:
    """Before: ``truncation: "auto"`` was not honoured, so a request over the window got the 400 the real API sends
    only with ``truncation: "disabled"`` (the default), and a loop keeping its claim the documented way was reported
    ``request_valid``."""
    sim, report = run(LONG_LOG, chained("auto"))
    assert report.ok and reason(sim) == "final", report
    assert sim.transcript.requests[-1].input_tokens == 128_000  # the model reads the window's worth
    _, report = run(LONG_LOG, chained())
    assert ids(report) == {"request_valid"}, report
    kw: dict[str, Any] = {"limits": BIG_BUDGET, "plan": LONG, "max_examples": 4, "seed": 1, "out_dir": tmp_path}
    assert simloop.verify(chained("auto"), context=True, **kw).ok


FILLED = {"name": "filled", "task": "Why did checkout fail?", "strict": False,
          "tools": [{"name": "read_log", "results": ["41,000 lines"]}],
          "model": [{"tool_use": [{"name": "read_log", "input": {}}]},
                    {"max_tokens": {"text": "The checkout failed because the pool", "tool_use": [
                        {"name": "read_log", "input": {}}], "stop_reason": "model_context_window_exceeded"}}]}


@pytest.mark.parametrize("wire", WIRES)
def test_a_reply_that_filled_the_window_is_a_cut_reply_on_the_openai_wires(wire: str) -> None:
    """``model_context_window_exceeded`` reaches Chat Completions as ``length`` and Responses as ``incomplete``:
    reported ``truncated`` it is honest, reported ``final`` it is caught, and its cut call never runs."""
    sim, report = run(FILLED, drive_for(wire))
    assert report.ok and reason(sim) == "truncated", report
    assert len(sim.transcript.of(ToolStart)) == 1  # the first reply's call; the cut one is not run
    _, report = run(FILLED, drive_for(wire, cut_as="final"))
    assert ids(report) == {"truncation"}, report


#: A log that a single read brings to about 150,000 tokens: inside the default 200k window, past gpt-4o's 128k.
LONG_LOG = {"name": "long-log", "task": "Why did checkout fail?", "strict": False, "requires": ["context"],
            "tools": [{"name": "read_log", "results": ["41,000 lines"]}],
            "model": [{"tool_use": [{"name": "read_log", "input": {}}]}, {"end_turn": "The pool ran dry."}],
            "faults": [{"tool": "read_log", "kind": "huge_output", "size": 600_000}]}
WINDOW_400 = {"chat": "This model's maximum context length is 128000 tokens. However, your messages resulted in ",
              "responses": "Your input exceeds the context window of this model."}


@pytest.mark.parametrize("wire", WIRES)
def test_gpt_4o_is_held_to_its_own_window(wire: str) -> None:
    """Before: every OpenAI model had the default 200k window, so a request of 150k tokens to gpt-4o was answered
    and a loop claiming to manage its context passed where the real API refuses it (gpt-4o's window is 128k)."""
    sim, report = run(LONG_LOG, drive_for(wire))
    assert 128_000 < sim.transcript.requests[-1].input_tokens < 200_000
    (refused,) = [r for r in sim.transcript.responses if r.kind == "rejected"]
    assert refused.error is not None and refused.error["error"]["code"] == "context_length_exceeded"
    assert refused.error["error"]["message"].startswith(WINDOW_400[wire.split("-")[0]])
    assert ids(report) == {"request_valid"} and report.violations[0].evidence["claim"] == "context", report
    sim, report = run(LONG_LOG, drive_for(wire, fit=fit, clip=CLIP))
    assert report.ok and reason(sim) == "final", report


# -- cost budgets --------------------------------------------------------------------------------------------------

COST_FILE = ROOT / "scenarios" / "cost-budget.yaml"
#: A few calls' worth of gpt-4o at its list price ($2.50 / $10 per million tokens) in the generated world.
SMALL_BUDGET = Limits(max_steps=10, max_cost_usd=0.003)


def output_only(usage: Any, model: str, prices: Any) -> float:
    """Defect: prices the completion alone, read from the wire's own field ("the output is what we pay for")."""
    out = getattr(usage, "completion_tokens", None) or getattr(usage, "output_tokens", 0)
    return cost_usd({"output_tokens": out}, model, prices)


@pytest.mark.parametrize("wire", WIRES)
def test_the_cost_budget_file_on_the_openai_wires(wire: str) -> None:
    """Priced as the README says, the cache writes and reads of the scripted usage reach each wire's usage and the
    loop stops before the fourth call; a loop that drops its budget, or prices the output alone, is caught."""
    scenario = load_scenario(COST_FILE)
    sim, report = run(scenario, drive_for(wire))
    assert report.ok and reason(sim) == "cost_budget", report
    assert len(sim.transcript.requests) == 3
    for defect in (drive_for(wire, price=None), drive_for(wire, price=output_only)):
        _, report = run(scenario, defect)
        assert ids(report) == {"limits"} and "max_cost_usd" in report.violations[0].message, report


def test_a_chat_stream_priced_without_include_usage_is_caught() -> None:
    """A Chat Completions stream carries its usage only when asked (``stream_options.include_usage``): without
    it there is none to price, so the budget never stops the loop."""
    scenario = load_scenario(COST_FILE)
    assert run(scenario, drive_for("chat-stream"))[1].ok
    _, report = run(scenario, drive_for("chat-stream", include_usage=False))
    assert ids(report) == {"limits"}, report


NEGOTIATED = {"input": 0.5, "output": 2.0, "cache_write": 0.5, "cache_read": 0.25}  # a fifth of gpt-4o's


def at_negotiated_price(usage: Any, model: str, prices: Any) -> float:
    """A loop that pays its own price for gpt-4o, whatever the scenario says."""
    return cost_usd(usage.model_dump(), model, {"gpt-4o": NEGOTIATED})


@pytest.mark.parametrize("wire", ["chat-stream", "responses-stream"])
def test_verify_takes_the_prices_the_loop_pays_on_the_openai_wires(wire: str, tmp_path: Path) -> None:
    kw: dict[str, Any] = {"limits": Limits(max_steps=10, max_cost_usd=0.0008), "seed": 4, "out_dir": tmp_path}
    drive = drive_for(wire, price=at_negotiated_price)
    assert simloop.verify(drive, prices={"gpt-4o": NEGOTIATED}, max_examples=30, **kw).ok
    with pytest.raises(simloop.InvariantViolation) as caught:  # at the list price the budget runs out sooner
        simloop.verify(drive, max_examples=100, **kw)
    assert {v.invariant for v in caught.value.violations} == {"limits"}, caught.value


PRICED = {"tool_use": [{"name": "search", "input": {"q": "it"}}], "usage": {"input_tokens": 1000, "output_tokens": 100}}
#: The parent delegates; its sub-agent searches three times at $0.0035 a reply (gpt-4o), then would answer.
SUB_COST = {"name": "sub-cost", "task": "Research the refund policy.", "then": "end_turn",
            "tools": [DELEGATE, {"name": "search", "kind": "read"}],
            "model": [{"tool_use": [{"name": "delegate", "input": {"task": "find it"}}]}, PRICED, PRICED, PRICED,
                      {"end_turn": "found"}, {"end_turn": "done"}]}


@pytest.mark.parametrize("wire", WIRES)
def test_a_sub_agents_cost_budget_is_its_own_on_the_openai_wires(wire: str) -> None:
    def drive(price: Price | None) -> Callable[[Sim], Outcome]:
        def delegate_drive(sim: Sim) -> Outcome:
            def delegate(task: str = "") -> str:
                sub = sim.subagent(task, limits=Limits(max_steps=6, max_cost_usd=0.005))
                outcome = sub.run(lambda sub: loop(sub, wire, price=price))
                if outcome.reason != "final":
                    raise RuntimeError(f"the sub-agent stopped early ({outcome.reason})")
                return outcome.text

            sim.bind_tool("delegate", delegate)
            return loop(sim, wire)

        return delegate_drive

    sim, report = run(SUB_COST, drive(price_usage))
    assert report.ok and [e.reason for e in sim.transcript.of(SubagentEnd)] == ["cost_budget"], report
    _, report = run(SUB_COST, drive(None))  # the sub-agent's loop prices nothing
    assert ids(report) == {"limits"} and report.violations[0].evidence["subagent"] == 1, report


@pytest.mark.parametrize("wire", WIRES)
def test_verify_holds_the_openai_loops_to_their_cost_budget(wire: str, tmp_path: Path) -> None:
    kw: dict[str, Any] = {"limits": SMALL_BUDGET, "seed": 3, "out_dir": tmp_path}
    assert simloop.verify(drive_for(wire), max_examples=40, **kw).ok
    if wire.endswith("stream"):
        return  # the twin on the plain wires (the scripted file catches it on all four)
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(drive_for(wire, price=output_only), max_examples=100, **kw)
    assert {v.invariant for v in caught.value.violations} == {"limits"}, caught.value
