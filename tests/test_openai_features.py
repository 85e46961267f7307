"""The user's Stop, crash and restart, and conversations on the OpenAI wires (Chat Completions and Responses).

Each feature's correct loop passes its scripted scenarios and `verify` with the feature on, and each defect loop
(the Messages wire's catalogue defects, written on these wires) is caught with the right invariant, on both wires,
streamed too where the feature meets streaming.  The loops are written from the README alone: the `openai` SDK's
plain calls, `sim.openai_client`, `sim.abort.is_set`, `sim.store`, `sim.user_turns`; a defect is the same loop with
one named bug (``bug=...``).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import simloop
from simloop import Outcome, Sim

openai = pytest.importorskip("openai", reason="the OpenAI wires need the openai SDK: pip install 'simloop[openai]'")

MODEL = "gpt-4o"
LIMITS = simloop.Limits(max_steps=10, deadline_s=300, max_total_tokens=200_000)
NOT_RUN = "Not run: the user pressed Stop before it ran."
CUT = "Not run: the reply was cut off."
Stop = Callable[[], bool]
WIRES = ["chat", "chat-stream", "responses", "responses-stream", "chained", "chained-stream"]


def _never() -> bool:
    return False


class Budget:
    """The turn's declared limits (LIMITS), checked before each model call."""

    def __init__(self, kept: dict[str, Any] | None = None) -> None:
        self.kept = kept if kept is not None else {}  # a durable loop keeps them in its store
        self.kept.setdefault("started", time.monotonic())

    def spent(self) -> Outcome | None:
        kept = self.kept
        if kept.get("steps", 0) >= LIMITS.max_steps:
            return Outcome("max_steps", "")
        if time.monotonic() - kept["started"] >= LIMITS.deadline_s:
            return Outcome("deadline", "")
        if kept.get("tokens", 0) >= LIMITS.max_total_tokens:
            return Outcome("token_budget", "")
        kept["steps"] = kept.get("steps", 0) + 1
        return None

    def count(self, usage: Any) -> None:
        self.kept["tokens"] = self.kept.get("tokens", 0) + (usage.total_tokens if usage else 0)


def _run(sim: Sim, run_tool: Any, name: str, arguments: str, call_id: str) -> str:
    try:
        return str(run_tool(name, json.loads(arguments or "{}"), tool_use_id=call_id))
    except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the model
        return f"Error: {exc}"


# -- Chat Completions ------------------------------------------------------------------------------------------------


def _chat_reply(sim: Sim, messages: list[Any], tools: list[Any], stream: bool, stop: Stop) -> Any:
    """One model call; None when Stop was pressed while the reply streamed (the partial reply is dropped)."""
    if not stream:
        return sim.openai_client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    with sim.openai_client.chat.completions.stream(model=MODEL, messages=messages, tools=tools,
                                                   stream_options={"include_usage": True}) as events:
        for _ in events:
            if stop():
                return None
        try:
            return events.get_final_completion()
        except openai.LengthFinishReasonError as exc:  # the helper raises on a cut reply: it is still the reply
            return exc.completion


def chat_turn(sim: Sim, messages: list[Any], *, stop: Stop = _never, stream: bool = False, run_tool: Any = None,
              bug: str | None = None, kept: dict[str, Any] | None = None,
              save: Callable[[], None] = lambda: None) -> Outcome:
    """One user turn on Chat Completions: Stop checked before each call, while streaming, after each reply and
    before each tool; a call not run is answered so (the history stays sendable)."""
    tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
             for t in sim.tool_schemas]
    run_tool = run_tool or sim.run_tool
    looks = stop if bug not in ("ignores_stop", "reads_to_end") else _never  # the bugs: Stop read at the top only
    budget = Budget(kept)
    while True:
        if stop():
            return Outcome("aborted", "")
        if (spent := budget.spent()) is not None:
            return spent
        try:
            reply = _chat_reply(sim, messages, tools, stream, looks)
        except openai.APIError as exc:
            return Outcome("error", str(exc))
        if reply is None:
            return Outcome("aborted", "")
        budget.count(reply.usage)
        choice = reply.choices[0]
        message = choice.message
        messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls", "refusal"}))
        calls = message.tool_calls or []
        if choice.finish_reason == "length":  # a cut reply's calls are never run; answered, so the history is valid
            messages += [{"role": "tool", "tool_call_id": c.id, "content": CUT} for c in calls
                         if bug != "cut_calls_unanswered"]
            return Outcome("truncated", message.content or "")
        if message.refusal:
            return Outcome("refusal", message.refusal)
        if choice.finish_reason != "tool_calls":
            return Outcome("final", message.content or "")
        if bug == "leaves_calls_open" and stop():  # BUG: returns at Stop, the reply's calls left unanswered
            return Outcome("aborted", "")
        for call in calls:
            out = NOT_RUN if looks() else _run(sim, run_tool, call.function.name, call.function.arguments, call.id)
            out = NOT_RUN if bug == "hides_result" and stop() else out  # BUG: what ran as Stop came is "not run"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
        save()  # a round is done: a durable loop checkpoints here
        if looks():
            return Outcome("aborted", "")


# -- Responses -------------------------------------------------------------------------------------------------------


def _responses_reply(sim: Sim, items: list[Any], tools: list[Any], stream: bool, stop: Stop) -> Any:
    if not stream:
        return sim.openai_client.responses.create(model=MODEL, input=items, tools=tools)
    with sim.openai_client.responses.stream(model=MODEL, input=items, tools=tools) as events:
        for event in events:
            if stop():
                return None
            if event.type in ("response.completed", "response.incomplete"):  # get_final_response() wants completed
                final = event.response
        return final


def responses_turn(sim: Sim, items: list[Any], *, stop: Stop = _never, stream: bool = False, run_tool: Any = None,
                   bug: str | None = None, kept: dict[str, Any] | None = None,
              save: Callable[[], None] = lambda: None) -> Outcome:
    """One user turn on the Responses API, the conversation a list of input items kept by the loop."""
    tools = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False}
             for t in sim.tool_schemas]
    run_tool = run_tool or sim.run_tool
    looks = stop if bug not in ("ignores_stop", "reads_to_end") else _never
    budget = Budget(kept)
    while True:
        if stop():
            return Outcome("aborted", "")
        if (spent := budget.spent()) is not None:
            return spent
        try:
            response = _responses_reply(sim, items, tools, stream, looks)
        except openai.APIError as exc:
            return Outcome("error", str(exc))
        if response is None:
            return Outcome("aborted", "")
        budget.count(response.usage)
        items += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        if response.status == "incomplete":  # cut off: run nothing, answer the cut calls
            items += [{"type": "function_call_output", "call_id": c.call_id, "output": CUT} for c in calls
                      if bug != "cut_calls_unanswered"]
            return Outcome("truncated", response.output_text)
        refusal = next((p.refusal for i in response.output if i.type == "message" for p in i.content
                        if p.type == "refusal"), None)
        if refusal is not None:
            return Outcome("refusal", refusal)
        if not calls:
            return Outcome("final", response.output_text)
        if bug == "leaves_calls_open" and stop():  # BUG: returns at Stop, the reply's calls left unanswered
            return Outcome("aborted", "")
        for call in calls:
            out = NOT_RUN if looks() else _run(sim, run_tool, call.name, call.arguments, call.call_id)
            out = NOT_RUN if bug == "hides_result" and stop() else out  # BUG: what ran as Stop came is "not run"
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": out})
        save()
        if looks():
            return Outcome("aborted", "")


def chained_turn(sim: Sim, state: dict[str, Any], *, stop: Stop = _never, stream: bool = False,
                 run_tool: Any = None, bug: str | None = None, kept: dict[str, Any] | None = None,
              save: Callable[[], None] = lambda: None) -> Outcome:
    """One user turn on the Responses API, the conversation kept on the server: each request names the previous
    response and sends only what is new (``state["new"]``); what a turn owes (the answers to calls it did not run)
    goes with the next turn's message."""
    tools = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False}
             for t in sim.tool_schemas]
    run_tool = run_tool or sim.run_tool
    looks = stop if bug not in ("ignores_stop", "reads_to_end") else _never
    budget = Budget(kept)
    while True:
        if stop():
            return Outcome("aborted", "")
        if (spent := budget.spent()) is not None:
            return spent
        args: dict[str, Any] = {"model": MODEL, "input": state["new"], "tools": tools}
        if state.get("previous"):
            args["previous_response_id"] = state["previous"]
        try:
            response = _chained_reply(sim, args, stream, looks)
        except openai.APIError as exc:
            return Outcome("error", str(exc))
        if response is None:
            return Outcome("aborted", "")
        budget.count(response.usage)
        calls = [item for item in response.output if item.type == "function_call"]
        new: list[Any] = []
        if response.status == "incomplete":  # cut off: run nothing; the cut calls are answered with the next message
            state["previous"], state["new"] = response.id, [{"type": "function_call_output", "call_id": c.call_id, "output": CUT} for c in calls
                            if bug != "cut_calls_unanswered"]
            return Outcome("truncated", response.output_text)
        refusal = next((p.refusal for i in response.output if i.type == "message" for p in i.content
                        if p.type == "refusal"), None)
        if refusal is not None:
            state["previous"], state["new"] = response.id, []
            return Outcome("refusal", refusal)
        if not calls:
            state["previous"], state["new"] = response.id, []
            return Outcome("final", response.output_text)
        if bug == "leaves_calls_open" and stop():
            state["previous"], state["new"] = response.id, []
            return Outcome("aborted", "")
        for call in calls:
            out = NOT_RUN if looks() else _run(sim, run_tool, call.name, call.arguments, call.call_id)
            out = NOT_RUN if bug == "hides_result" and stop() else out  # BUG: what ran as Stop came is "not run"
            new.append({"type": "function_call_output", "call_id": call.call_id, "output": out})
        state["previous"], state["new"] = response.id, new
        save()
        if looks():
            return Outcome("aborted", "")


def _chained_reply(sim: Sim, args: dict[str, Any], stream: bool, stop: Stop) -> Any:
    if not stream:
        return sim.openai_client.responses.create(**args)
    final = None
    with sim.openai_client.responses.stream(**args) as events:
        for event in events:
            if stop():
                return None
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    return final


def _turn(wire: str) -> tuple[Callable[..., Outcome], bool]:
    return (chat_turn if wire.startswith("chat") else responses_turn), wire.endswith("stream")


def conversation(wire: str, bug: str | None = None) -> Callable[[Sim], list[Outcome]]:
    """README, Conversations and The Stop button: every user turn through one history, Stop wired."""
    turn, stream = _turn(wire)

    def drive(sim: Sim) -> list[Outcome]:
        history: list[Any] = []
        outcomes = []
        if wire.startswith("chained"):
            state: dict[str, Any] = {"new": []}
            for text in sim.user_turns:
                state["new"] = [*(state["new"] if bug != "drops_tool_results" else []), {"role": "user", "content": text}]
                outcomes.append(chained_turn(sim, state, stop=sim.abort.is_set, stream=stream, bug=bug))
            return outcomes
        for text in sim.user_turns:
            if bug == "drops_tool_results":  # BUG: "only the talk matters": the tool messages are left out
                history[:] = [m for m in history if m.get("role") != "tool" and m.get("type") != "function_call_output"]
            history.append({"role": "user", "content": text})
            outcomes.append(turn(sim, history, stop=sim.abort.is_set, stream=stream, bug=bug))
        return outcomes

    return drive


# -- durable loops (README: Crash and restart) ---------------------------------------------------------------------


def durable(wire: str, bug: str | None = None) -> Callable[[Sim], Outcome]:
    """A loop that resumes from ``sim.store`` after a crash: its conversation checkpointed after each round of tools,
    its budget, and each tool call keyed by name and input (the key saved before the call, the result after it), so a
    call that may have taken effect is never repeated.  ``bug="no_keys"``: the checkpoint alone (a crash between a
    write's commit and the checkpoint sends it twice: `examples/durable_resend.py` on this wire)."""
    turn, stream = _turn(wire)

    def drive(sim: Sim) -> Outcome:
        calls: dict[str, Any] = sim.store.setdefault("calls", {})

        def run_tool(name: str, input: Any, tool_use_id: str | None = None) -> str:
            key = name + json.dumps(input, sort_keys=True)
            if bug != "no_keys":
                if key in calls:
                    if calls[key] is None:
                        raise RuntimeError(f"{name} was interrupted by a crash and may have taken effect; not repeated")
                    return str(calls[key])
                calls[key] = None
            calls[key] = result = sim.run_tool(name, input, tool_use_id=tool_use_id)
            return result

        kept = sim.store.setdefault("budget", {})
        if wire.startswith("chained"):
            state = copy.deepcopy(sim.store.setdefault("state", {"new": [{"role": "user", "content": sim.task}]}))
            return chained_turn(sim, state, stream=stream, run_tool=run_tool, kept=kept,
                                save=lambda: sim.store.__setitem__("state", copy.deepcopy(state)))
        history = copy.deepcopy(sim.store.setdefault("history", [{"role": "user", "content": sim.task}]))
        return turn(sim, history, stream=stream, run_tool=run_tool, kept=kept,
                    save=lambda: sim.store.__setitem__("history", copy.deepcopy(history)))

    return drive


# -- an asyncio loop with the README's Stop recipe (cancel the task, catch CancelledError) ------------------------


async def _achat(sim: Sim, messages: list[Any], stream: bool) -> Any:
    client = sim.async_openai_client
    tools: Any = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
                  for t in sim.tool_schemas]
    if not stream:
        return await client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    async with client.chat.completions.stream(model=MODEL, messages=messages, tools=tools,
                                              stream_options={"include_usage": True}) as events:
        try:
            return await events.get_final_completion()
        except openai.LengthFinishReasonError as exc:
            return exc.completion


async def async_chat(sim: Sim, stream: bool = False) -> Outcome:
    """README, The Stop button: an async loop whose Stop cancels the call (or the tools) in flight."""
    sim.abort.add_callback(asyncio.current_task().cancel)  # type: ignore[union-attr]
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    budget = Budget()
    try:
        while (spent := budget.spent()) is None:
            try:
                reply = await _achat(sim, messages, stream)
            except openai.APIError as exc:
                return Outcome("error", str(exc))
            budget.count(reply.usage)
            choice = reply.choices[0]
            if choice.finish_reason == "length":
                return Outcome("truncated", choice.message.content or "")
            if choice.message.refusal:
                return Outcome("refusal", choice.message.refusal)
            messages.append(choice.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            if choice.finish_reason != "tool_calls":
                return Outcome("final", choice.message.content or "")
            calls = choice.message.tool_calls or []
            outs = await asyncio.gather(*(sim.arun_tool(c.function.name, json.loads(c.function.arguments),
                                                        tool_use_id=c.id) for c in calls), return_exceptions=True)
            messages += [{"role": "tool", "tool_call_id": c.id, "content": f"Error: {out}"
                          if isinstance(out, BaseException) else str(out)} for c, out in zip(calls, outs)]
        return spent
    except asyncio.CancelledError:
        return Outcome("aborted", "")


async def _aresponses(sim: Sim, items: list[Any], stream: bool) -> Any:
    client = sim.async_openai_client
    tools: Any = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False}
                  for t in sim.tool_schemas]
    if not stream:
        return await client.responses.create(model=MODEL, input=items, tools=tools)
    final = None
    async with client.responses.stream(model=MODEL, input=items, tools=tools) as events:
        async for event in events:
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    return final


async def async_responses(sim: Sim, stream: bool = False) -> Outcome:
    """The same on the Responses API."""
    sim.abort.add_callback(asyncio.current_task().cancel)  # type: ignore[union-attr]
    items: list[Any] = [{"role": "user", "content": sim.task}]
    budget = Budget()
    try:
        while (spent := budget.spent()) is None:
            try:
                response = await _aresponses(sim, items, stream)
            except openai.APIError as exc:
                return Outcome("error", str(exc))
            budget.count(response.usage)
            if response.status == "incomplete":
                return Outcome("truncated", response.output_text)
            refusal = next((p.refusal for i in response.output if i.type == "message" for p in i.content
                            if p.type == "refusal"), None)
            if refusal is not None:
                return Outcome("refusal", refusal)
            items += [item.model_dump(exclude_none=True) for item in response.output]
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return Outcome("final", response.output_text)
            outs = await asyncio.gather(*(sim.arun_tool(c.name, json.loads(c.arguments), tool_use_id=c.call_id)
                                          for c in calls), return_exceptions=True)
            items += [{"type": "function_call_output", "call_id": c.call_id, "output": f"Error: {out}"
                       if isinstance(out, BaseException) else str(out)} for c, out in zip(calls, outs)]
        return spent
    except asyncio.CancelledError:
        return Outcome("aborted", "")
