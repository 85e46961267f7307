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
from simloop.transcript import SubagentEnd, SubagentStart

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
    include_usage: bool = True,
) -> Outcome:
    """A loop on ``wire``: stops before a call once its step cap or cost budget is spent, leaves retries to the
    SDK (``retry_errors`` > 0: the defect that resends after any API error), runs no call of a cut reply, answers
    every call (a tool that raised with its error text), and ``fit``s its history before each call.  ``sim`` is a
    Sim, or a sub-agent (``sim.subagent(...)``: the same loop, started fresh)."""
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
            return Outcome({"cut": "truncated", "broken": "error"}.get(how, how), text)
        for call_id, name, arguments in calls:
            try:
                output = sim.run_tool(name, json.loads(arguments), tool_use_id=call_id)
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


def ids(report: simloop.Report) -> set[str]:
    return {v.invariant for v in report.violations}


# -- sub-agents ----------------------------------------------------------------------------------------------------

SUBAGENT_FILE = ROOT / "scenarios" / "subagent-truncated.yaml"
DELEGATE = {"name": "delegate", "kind": "read", "description": "Hand a research task to a sub-agent.",
            "input_schema": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}}


def delegating(wire: str, *, honest: bool = True) -> Callable[[Sim], Outcome]:
    """The README's delegate tool on ``wire``: the sub-agent is the same loop, started fresh (``sub``'s client,
    task, tools and limits); a sub-run that did not finish is the tool's error (``honest``), or, the defect, its
    last text is handed back as the result."""

    def drive(sim: Sim) -> Outcome:
        def delegate(task: str = "") -> str:
            outcome = sim.subagent(task, limits=Limits(max_steps=4)).run(lambda sub: loop(sub, wire))
            if honest and outcome.reason != "final":  # cut, capped or failed: an error, never a result
                raise RuntimeError(f"the sub-agent stopped early ({outcome.reason})")
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
