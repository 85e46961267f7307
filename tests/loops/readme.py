"""Correct agent loops written the way a user writes them from simloop's README alone.

The reference loops in ``examples/`` know simloop well (they pass tool ids, settle histories with simloop's
own helpers).  These do not: they follow the README's adapter, conversation, Stop and restart sections and
the SDK's documentation, pass no tool ids, keep a plain history list and read the clock through module-level
aliases (``from time import monotonic``), as real code does.  They are correct loops, so any violation
simloop reports on them is a false alarm: ``tests/test_readme_loops.py`` and ``bench/detect.py`` hold them
to none.  Plain module, no pytest: bench imports it too.
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Callable
from datetime import UTC, datetime
from time import monotonic
from typing import Any

import anthropic

import simloop
import simloop.strategies

MODEL = "claude-sonnet-4-5"
MAX_STEPS = 10
DEADLINE_S = 300.0
TOKEN_BUDGET = 200_000
#: What these loops declare (``verify(drive, limits=LIMITS)``).
LIMITS = simloop.Limits(max_steps=MAX_STEPS, deadline_s=DEADLINE_S, max_total_tokens=TOKEN_BUDGET)

RunTool = Callable[[str, Any], str]
#: USD per million tokens for MODEL, from Anthropic's pricing page: input, output, cache write (5 min), cache read.
PRICE = {"input": 3.00, "output": 15.00, "cache_write": 3.75, "cache_read": 0.30}
#: What the budgeted loop declares (``verify(drive, limits=BUDGETED)``): a cent a task.
BUDGETED = LIMITS.model_copy(update={"max_cost_usd": 0.01})


def _cost(usage: Any) -> float:
    """What one reply cost, in USD."""
    return (usage.input_tokens * PRICE["input"] + usage.output_tokens * PRICE["output"]
            + (usage.cache_creation_input_tokens or 0) * PRICE["cache_write"]
            + (usage.cache_read_input_tokens or 0) * PRICE["cache_read"]) / 1_000_000


def _blocks(content: Any) -> list[Any]:
    return [content] if isinstance(content, str) else list(content)


def _text(reply: Any) -> str:
    return "".join(b.text for b in reply.content if b.type == "text")


def _answer_open_calls(messages: list[Any]) -> None:
    """Before a new user message: every tool_use the last assistant message left open gets an error result."""
    if not messages or messages[-1]["role"] != "assistant":
        return
    content = messages[-1]["content"]
    open_calls = [b for b in _blocks(content) if getattr(b, "type", None) == "tool_use"]
    if open_calls:
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "is_error": True, "content": "Not run: stopped."}
            for b in open_calls
        ]})


def run_agent(
    client: anthropic.Anthropic,
    tools: list[dict[str, Any]],
    run_tool: RunTool,
    task: str,
    *,
    history: list[Any] | None = None,
    stop: Callable[[], bool] | None = None,
    resume: bool = False,
    budget: dict[str, Any] | None = None,
    max_cost_usd: float | None = None,
    max_steps: int = MAX_STEPS,
    review: Callable[[list[Any]], dict[str, bool]] | None = None,
) -> tuple[str, str]:
    """One user turn: call the model, run the tools it asks for, repeat until it answers or a limit stops it.

    ``resume``: the history already ends with this turn's last user message (a restart goes on from it).
    ``budget``: where the turn's steps, start time and tokens are kept (a durable loop keeps them in its store,
    so that a restart does not start them over).
    ``review``: asks the person about a reply's calls together before any runs (tool_use id -> approved); a call not
    approved is answered as denied, not run."""
    messages = history if history is not None else []
    _answer_open_calls(messages)
    if resume:
        pass
    elif messages and messages[-1]["role"] == "user" and not isinstance(messages[-1]["content"], str):
        messages[-1]["content"] = [*messages[-1]["content"], {"type": "text", "text": task}]
    else:
        messages.append({"role": "user", "content": task})
    kept = budget if budget is not None else {}
    kept.setdefault("started", monotonic())
    while True:
        if stop is not None and stop():
            return "aborted", ""
        if kept.get("steps", 0) >= max_steps:
            return "max_steps", ""
        if monotonic() - kept["started"] >= DEADLINE_S:
            return "deadline", ""
        if kept.get("tokens", 0) >= TOKEN_BUDGET:
            return "token_budget", ""
        if max_cost_usd is not None and kept.get("usd", 0.0) >= max_cost_usd:
            return "cost_budget", ""
        kept["steps"] = kept.get("steps", 0) + 1
        try:
            reply = client.messages.create(model=MODEL, max_tokens=1024, tools=tools, messages=messages)
        except anthropic.APIError as e:
            return "error", str(e)
        kept["tokens"] = kept.get("tokens", 0) + reply.usage.input_tokens + reply.usage.output_tokens
        kept["usd"] = kept.get("usd", 0.0) + _cost(reply.usage)
        if reply.stop_reason in ("max_tokens", "model_context_window_exceeded"):  # cut off: not an answer
            return "truncated", _text(reply)  # never run the calls of a cut reply, never keep it
        if reply.stop_reason == "refusal":
            return "refusal", _text(reply)
        if reply.content:
            messages.append({"role": "assistant", "content": reply.content})
        if stop is not None and stop():
            _answer_open_calls(messages)
            return "aborted", ""
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason != "tool_use":
            return "final", _text(reply)
        results = []
        approved = review([b for b in reply.content if b.type == "tool_use"]) if review is not None else {}
        for block in reply.content:
            if block.type != "tool_use":
                continue
            if not approved.get(block.id, True):
                results.append({"type": "tool_result", "tool_use_id": block.id, "is_error": True,
                                "content": "Denied by the user; not sent."})
                continue
            if stop is not None and stop():
                results.append({"type": "tool_result", "tool_use_id": block.id, "is_error": True,
                                "content": "Not run: the user pressed Stop."})
                continue
            try:
                results.append({"type": "tool_result", "tool_use_id": block.id,
                                "content": run_tool(block.name, block.input)})
            except Exception as e:  # noqa: BLE001 (a tool's failure is an observation for the model)
                results.append({"type": "tool_result", "tool_use_id": block.id, "is_error": True,
                                "content": f"{type(e).__name__}: {e}"})
        messages.append({"role": "user", "content": results})
        if stop is not None and stop():
            return "aborted", ""


def plain(sim: simloop.Sim) -> simloop.Outcome:
    """The README's five-line adapter."""
    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task)
    return simloop.Outcome(reason=reason, text=text)


def recorded(sim: simloop.Sim) -> simloop.Outcome:
    """The five-line adapter that files a record of each run, as harnesses do for a dashboard or a queue: pickled,
    with when the run started and ended."""
    started = datetime.now(UTC)
    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task)
    record = {"task": sim.task, "reason": reason, "started": started, "ended": datetime.now(UTC)}
    sim.store["record"] = pickle.dumps(record)
    return simloop.Outcome(reason=reason, text=text)


def conversation(sim: simloop.Sim) -> list[simloop.Outcome]:
    """Every user turn through one history, with the Stop button wired (README: Conversations, The Stop button)."""
    history: list[Any] = []
    outcomes = []
    for text in sim.user_turns:
        reason, answer = run_agent(sim.client, sim.tool_schemas, sim.run_tool, text, history=history,
                                   stop=sim.abort.is_set)
        outcomes.append(simloop.Outcome(reason=reason, text=answer))
    return outcomes


def durable(sim: simloop.Sim) -> simloop.Outcome:
    """Resumes after a crash from ``sim.store`` (README: Crash and restart): its history, its step count, start time
    and tokens, and every tool call keyed by name and input: the key is saved before the call and the result after
    it, so a call that may have taken effect is never repeated, and one that finished answers from the store."""
    calls: dict[str, Any] = sim.store.setdefault("calls", {})

    def run_tool(name: str, input: Any) -> str:
        key = name + json.dumps(input, sort_keys=True)
        if key in calls:
            if calls[key] is None:
                raise RuntimeError(f"{name} was interrupted by a crash and may have taken effect; not repeated")
            return str(calls[key])
        calls[key] = None
        calls[key] = result = sim.run_tool(name, input)
        return result

    history: list[Any] = sim.store.setdefault("history", [])
    if history and history[-1]["role"] == "assistant":
        history.pop()  # the round that died: the model asks again, and the store answers what had run
    reason, text = run_agent(sim.client, sim.tool_schemas, run_tool, sim.task, history=history, resume=bool(history),
                             budget=sim.store.setdefault("budget", {}))
    return simloop.Outcome(reason=reason, text=text)


async def async_stop(sim: simloop.Sim) -> simloop.Outcome:
    """An asyncio loop with the README's Stop recipe: the Stop cancels the task, which answers ``aborted``."""
    sim.abort.add_callback(asyncio.current_task().cancel)  # type: ignore[union-attr]
    client = sim.async_client
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    started = monotonic()
    tokens = 0
    try:
        for _ in range(MAX_STEPS):
            if monotonic() - started >= DEADLINE_S:
                return simloop.Outcome("deadline")
            if tokens >= TOKEN_BUDGET:
                return simloop.Outcome("token_budget")
            try:
                reply = await client.messages.create(model=MODEL, max_tokens=1024, tools=sim.tool_schemas,
                                                     messages=messages)
            except anthropic.APIError as e:
                return simloop.Outcome("error", str(e))
            tokens += reply.usage.input_tokens + reply.usage.output_tokens
            if reply.stop_reason in ("max_tokens", "model_context_window_exceeded"):  # cut off: not an answer
                return simloop.Outcome("truncated", _text(reply))
            if reply.stop_reason == "refusal":
                return simloop.Outcome("refusal", _text(reply))
            if reply.content:
                messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason == "pause_turn":
                continue
            if reply.stop_reason != "tool_use":
                return simloop.Outcome("final", _text(reply))
            calls = [b for b in reply.content if b.type == "tool_use"]
            outputs = await asyncio.gather(*(sim.arun_tool(b.name, b.input) for b in calls), return_exceptions=True)
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "is_error": True, "content": f"{type(out).__name__}: {out}"}
                if isinstance(out, BaseException) else {"type": "tool_result", "tool_use_id": b.id, "content": out}
                for b, out in zip(calls, outputs)
            ]})
        return simloop.Outcome("max_steps")
    except asyncio.CancelledError:
        return simloop.Outcome("aborted")


def gated(sim: simloop.Sim) -> simloop.Outcome:
    """The five-line adapter with the permission gate (README: A person at the permission gate): a call that needs
    approval asks the person first, and a no is the tool's error, which the loop reports to the model."""

    def run_tool(name: str, input: Any) -> str:
        if name in sim.scenario.gated_tools and not sim.approve(name, input):
            raise PermissionError(f"{name} was denied by the user")
        return sim.run_tool(name, input)

    reason, text = run_agent(sim.client, sim.tool_schemas, run_tool, sim.task)
    return simloop.Outcome(reason=reason, text=text)


def gated_review(sim: simloop.Sim) -> simloop.Outcome:
    """The permission gate as a review screen: the person sees every call of a reply that needs approval before any
    runs, newest first (a stack of notifications), and the loop runs the approved ones and answers the others as
    denied.  It passes no ids: identical calls are told apart by what the loop did with each."""

    def review(calls: list[Any]) -> dict[str, bool]:
        return {c.id: sim.approve(c.name, c.input) for c in reversed(calls) if c.name in sim.scenario.gated_tools}

    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, review=review)
    return simloop.Outcome(reason=reason, text=text)


def budgeted(sim: simloop.Sim) -> simloop.Outcome:
    """The five-line adapter with a cost budget (README: the limits, ``max_cost_usd``): the loop adds up what each
    reply cost at its model's list price and makes no call once the task has spent a cent."""
    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task,
                             max_cost_usd=BUDGETED.max_cost_usd)
    return simloop.Outcome(reason=reason, text=text)


def delegating(sim: simloop.Sim) -> simloop.Outcome:
    """README: Sub-agents, as written there: the delegate tool runs the same loop as a sub-agent, and a sub-run that
    did not finish is the tool's error, never its result."""

    def delegate(task: str) -> str:
        outcome = sim.subagent(task, limits=simloop.Limits(max_steps=4)).run(
            lambda sub: simloop.Outcome(*run_agent(sub.client, sub.tool_schemas, sub.run_tool, sub.task, max_steps=4)))
        if outcome.reason != "final":   # cut, capped or failed: an error, never a result
            raise RuntimeError(f"the sub-agent stopped early ({outcome.reason})")
        return outcome.text

    if any(t["name"] == "delegate" for t in sim.tool_schemas):
        sim.bind_tool("delegate", delegate)
    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task)
    return simloop.Outcome(reason=reason, text=text)


#: The delegate tool the delegating loop is verified with, beside verify's default tools (README: Sub-agents).
DELEGATE = {"name": "delegate", "kind": "read", "description": "Hand a self-contained research task to a sub-agent.",
            "input_schema": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}}

#: name -> (drive, the verify options it claims: what the loop can do, and what it declares beyond LIMITS).
LOOPS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "plain": (plain, {}),
    "recorded": (recorded, {}),
    "conversation": (conversation, {"turns": 3, "abort": True}),
    "durable": (durable, {"restarts": 1}),
    "async_stop": (async_stop, {"abort": True}),
    "gated": (gated, {"approvals": True}),
    "gated_review": (gated_review, {"approvals": True}),
    "budgeted": (budgeted, {"limits": BUDGETED}),
    "delegating": (delegating, {"tools": [*simloop.strategies.DEFAULT_TOOLS, DELEGATE]}),
}
