"""Broken agent loops written the way a user writes them from simloop's README: the false passes of issue #40.

Each is the README's loop (``tests/loops/readme.py``, `run_agent`) with one mistake at the permission gate, in
the threads it leaves behind or in its delegation.  `verify` must catch each on every seed: ``tests/`` hold them
to it with a modest budget, and ``bench/detect.py`` runs them as the ``readme_defect.*`` rows.  Plain module, no
pytest: bench imports it too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai

import simloop
import simloop.strategies
from tests.loops.readme import DELEGATE, MAX_STEPS, MODEL, run_agent


def _loop(sim: simloop.Sim, run_tool: Callable[[str, Any, str], str]) -> simloop.Outcome:
    """The README's loop, passing each call's id to ``run_tool(name, input, tool_use_id)``."""
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(MAX_STEPS):
        try:
            reply = sim.client.messages.create(model=MODEL, max_tokens=1024, tools=sim.tool_schemas, messages=messages)
        except anthropic.APIError as e:
            return simloop.Outcome("error", str(e))
        if reply.stop_reason in ("max_tokens", "refusal"):
            return simloop.Outcome("truncated" if reply.stop_reason == "max_tokens" else "refusal")
        if reply.content:
            messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason != "tool_use":
            return simloop.Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        results = []
        for b in reply.content:
            if b.type == "tool_use":
                try:
                    results.append({"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, b.input, b.id)})
                except Exception as e:  # noqa: BLE001 (a tool's failure is an observation for the model)
                    results.append({"type": "tool_result", "tool_use_id": b.id, "is_error": True,
                                    "content": f"{type(e).__name__}: {e}"})
        messages.append({"role": "user", "content": results})
    return simloop.Outcome("max_steps")


def asks_about_the_recipient_only(sim: simloop.Sim) -> simloop.Outcome:
    """Shows the person only who the call goes to (its first field), under the call's id, then runs the whole call:
    the yes is for another input than the one that runs (#40 item 2)."""

    def run_tool(name: str, input: Any, tool_use_id: str) -> str:
        if name in sim.scenario.gated_tools:
            shown = dict(list(input.items())[:1]) if isinstance(input, dict) and len(input) > 1 else {"call": input}
            if not sim.approve(name, shown, tool_use_id=tool_use_id):
                raise PermissionError(f"{name} was denied by the user")
        return sim.run_tool(name, input, tool_use_id=tool_use_id)

    return _loop(sim, run_tool)


def subagent_bomb(sim: simloop.Sim) -> simloop.Outcome:
    """A delegate tool that keeps starting sub-agents until one of them finds something (it never does here:
    a sub-agent capped at one step): each sub-run has a fresh budget, so only a run-wide bound halts it (#40 item
    5)."""

    def delegate(task: str) -> str:
        while True:
            outcome = sim.subagent(task, limits=simloop.Limits(max_steps=1)).run(
                lambda sub: simloop.Outcome(*run_agent(sub.client, sub.tool_schemas, sub.run_tool, sub.task,
                                                       max_steps=1)))
            if outcome.reason == "final" and "found" in outcome.text:
                return outcome.text

    if any(t["name"] == "delegate" for t in sim.tool_schemas):
        sim.bind_tool("delegate", delegate)
    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task)
    return simloop.Outcome(reason=reason, text=text)


def asks_in_the_background(sim: simloop.Sim) -> simloop.Outcome:
    """Asks the person on a thread of its own (a notification) and runs the call at once, without waiting for the
    answer: a yes that comes later, or a no, changes nothing (#40 item 3)."""

    def run_tool(name: str, input: Any) -> str:
        if name in sim.scenario.gated_tools:
            threading.Thread(target=sim.approve, args=(name, input)).start()
        return sim.run_tool(name, input)

    reason, text = run_agent(sim.client, sim.tool_schemas, run_tool, sim.task)
    return simloop.Outcome(reason=reason, text=text)


def _titles_later(create: Callable[[str], Any], text: str) -> None:
    """Half a second after the answer, three calls for a title for it (a background job the loop never waits on)."""

    def title() -> None:
        time.sleep(0.5)
        for _ in range(3):
            create(f"A title of five words for: {text[:200]}")

    threading.Thread(target=title, daemon=True).start()


def titles_after_return(sim: simloop.Sim) -> simloop.Outcome:
    """The README's loop, then a thread left behind that asks the model for a title after the loop returned (#40
    item 4)."""
    reason, text = run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task)
    _titles_later(lambda ask: sim.client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": ask}]), text)
    return simloop.Outcome(reason=reason, text=text)


def titles_after_return_openai(sim: simloop.Sim) -> simloop.Outcome:
    """The README's Chat Completions loop, with the same thread left behind (#40 item 4, on the OpenAI wire)."""
    tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
             for t in sim.tool_schemas]
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    reason, text = "max_steps", ""
    for _ in range(MAX_STEPS):
        try:
            reply = sim.openai_client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        except openai.APIError as exc:
            reason, text = "error", str(exc)
            break
        choice = reply.choices[0]
        messages.append(choice.message.model_dump(exclude_none=True))
        if choice.finish_reason != "tool_calls":
            reason = {"length": "truncated", "content_filter": "refusal"}.get(choice.finish_reason, "final")
            text = choice.message.content or choice.message.refusal or ""
            break
        for call in choice.message.tool_calls or []:
            try:
                out = sim.run_tool(call.function.name, json.loads(call.function.arguments), tool_use_id=call.id)  # type: ignore[union-attr]
            except Exception as exc:  # noqa: BLE001 (an observation for the model)
                out = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
    _titles_later(lambda ask: sim.openai_client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": ask}]), text)
    return simloop.Outcome(reason=reason, text=text)


#: name -> (drive, the verify options it claims, the invariant ids that are a correct report of it).
LOOPS: dict[str, tuple[Callable[..., Any], dict[str, Any], frozenset[str]]] = {
    # (its loop declares its step cap only: the README's deadline and budget checks are not what it is about)
    "asks_about_the_recipient_only": (asks_about_the_recipient_only, {
        "approvals": True, "limits": simloop.Limits(max_steps=MAX_STEPS)}, frozenset({"approval"})),
    "subagent_bomb": (subagent_bomb, {"tools": [*simloop.strategies.DEFAULT_TOOLS, DELEGATE]}, frozenset({"stops"})),
    "asks_in_the_background": (asks_in_the_background, {"approvals": True}, frozenset({"approval"})),
    "titles_after_return": (titles_after_return, {}, frozenset({"no_work_after_return"})),
    "titles_after_return_openai": (titles_after_return_openai, {}, frozenset({"no_work_after_return"})),
}

__all__ = ["LOOPS", "asks_about_the_recipient_only", "asks_in_the_background", "subagent_bomb", "titles_after_return",
           "titles_after_return_openai"]
