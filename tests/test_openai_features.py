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
from simloop.transcript import Request, ToolStart, TurnStart

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
    return _chained_reply(sim, {"model": MODEL, "input": items, "tools": tools}, stream, stop)


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
    """One Responses call; None when Stop was pressed while it streamed.  Streamed, the response is the one the last
    event carries (the SDK's ``get_final_response()`` raises on an ``incomplete`` one)."""
    if not stream:
        return sim.openai_client.responses.create(**args)
    final = None
    with sim.openai_client.responses.stream(**args) as events:
        for event in events:
            if stop():
                return None
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    return final  # (None only if the stream ended without either: the SDK raises first)


def _turn(wire: str) -> tuple[Callable[..., Outcome], bool]:
    return (chat_turn if wire.startswith("chat") else responses_turn), wire.endswith("stream")


def _fabricated(name: str, input: Any, tool_use_id: str | None = None) -> str:
    return "done"  # BUG (bug="fabricates"): a stub's success; the tool never ran


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
                outcomes.append(chained_turn(sim, state, stop=sim.abort.is_set, stream=stream, bug=bug,
                                             run_tool=_fabricated if bug == "fabricates" else None))
            return outcomes
        for text in sim.user_turns:
            if bug == "drops_tool_results":  # BUG: "only the talk matters": the tool messages are left out
                history[:] = [m for m in history if m.get("role") != "tool" and m.get("type") != "function_call_output"]
            history.append({"role": "user", "content": text})
            outcomes.append(turn(sim, history, stop=sim.abort.is_set, stream=stream, bug=bug,
                                 run_tool=_fabricated if bug == "fabricates" else None))
        return outcomes

    return drive


# -- durable loops (README: Crash and restart) ---------------------------------------------------------------------


def _keyed(sim: Sim, bug: str | None = None) -> Callable[..., str]:
    """``sim.run_tool`` with each call keyed in ``sim.store`` by name and input: the key saved before the call and
    the result after it, so a call that may have taken effect is never repeated (``bug="no_keys"``: no keys)."""
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

    return run_tool


def durable(wire: str, bug: str | None = None) -> Callable[[Sim], Outcome]:
    """A loop that resumes from ``sim.store`` after a crash: its conversation checkpointed after each round of tools,
    its budget, and each tool call keyed by name and input (the key saved before the call, the result after it), so a
    call that may have taken effect is never repeated.  ``bug="no_keys"``: the checkpoint alone (a crash between a
    write's commit and the checkpoint sends it twice: `examples/durable_resend.py` on this wire)."""
    turn, stream = _turn(wire)

    def drive(sim: Sim) -> Outcome:
        run_tool = _keyed(sim, bug)
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
    return final  # (None only if the stream ended without either: the SDK raises first)


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


def _pending(history: list[Any], chat: bool) -> list[tuple[str, str, str]]:
    """The calls of the conversation's last reply not yet answered: (call id, name, arguments)."""
    if chat:
        last = history[-1]
        calls = last.get("tool_calls", []) if last.get("role") == "assistant" else []
        return [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls]
    answered = {i["call_id"] for i in history if i.get("type") == "function_call_output"}
    return [(i["call_id"], i["name"], i["arguments"]) for i in history
            if i.get("type") == "function_call" and i["call_id"] not in answered]


def _ask(sim: Sim, history: list[Any], chat: bool) -> str | None:
    """One model call, its reply appended to ``history``; returns how the turn ended (None: calls to run)."""
    if chat:
        reply = sim.openai_client.chat.completions.create(
            model=MODEL, messages=history, parallel_tool_calls=False,
            tools=[{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
                   for t in sim.tool_schemas])
        choice = reply.choices[0]
        history.append(choice.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        ended = {"tool_calls": None, "length": "truncated"}
        return ended.get(choice.finish_reason, "refusal" if choice.message.refusal else "final")
    response = sim.openai_client.responses.create(
        model=MODEL, input=history, parallel_tool_calls=False,
        tools=[{"type": "function", "name": t["name"], "parameters": t["input_schema"], "strict": False}
               for t in sim.tool_schemas])
    history += [item.model_dump(exclude_none=True) for item in response.output]
    if response.status == "incomplete":
        return "truncated"
    if any(p.type == "refusal" for i in response.output if i.type == "message" for p in i.content):
        return "refusal"
    return None if any(i.type == "function_call" for i in response.output) else "final"


def forgets_finished_writes(wire: str) -> Callable[[Sim], Outcome]:
    """Defect (tests/test_restart.py's `_forgets_finished_writes` on these wires): a durable loop that checkpoints its
    conversation in ``sim.store`` as each reply arrives, and keeps a mark for each write while it runs, dropped once
    the write returned (its result is in the conversation now, the loop reasons: but that is saved only with the next
    reply).  A crash during the next model call leaves neither mark nor result: the resumed loop runs the saved
    reply's calls again.  One call a reply (``parallel_tool_calls=False``), so only a crash in a model call shows it."""
    chat = wire.startswith("chat")

    def drive(sim: Sim) -> Outcome:
        saved: list[Any] = sim.store.setdefault("history", [{"role": "user", "content": sim.task}])
        running: set[str] = sim.store.setdefault("running", set())
        history = copy.deepcopy(saved)
        for _ in range(LIMITS.max_steps):
            for call_id, name, arguments in _pending(history, chat):
                if name + arguments in running:
                    out = "Not run again: this write was attempted before (it may have taken effect)."
                else:
                    running.add(name + arguments)
                    out = _run(sim, sim.run_tool, name, arguments, call_id)
                    running.discard(name + arguments)  # BUG: forgotten before the checkpoint records the result
                history.append({"role": "tool", "tool_call_id": call_id, "content": out} if chat else
                               {"type": "function_call_output", "call_id": call_id, "output": out})
            try:
                ended = _ask(sim, history, chat)
            except openai.APIError as exc:
                return Outcome("error", str(exc))
            saved[:] = copy.deepcopy(history)  # the checkpoint: as each reply arrives
            if ended is not None:
                return Outcome(ended, "")
        return Outcome("max_steps", "")

    return drive


# == helpers for the tests ==========================================================================================

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
STREAMED = [w for w in WIRES if w.endswith("stream")]
UNSTREAMED = [w for w in WIRES if w not in STREAMED]
#: How each wire names a tool's result and its call (reports speak the loop's wire).
WORDS = {w: ("tool message", "tool call") if w.startswith("chat") else ("function_call_output", "function_call")
         for w in WIRES}
SEARCH = {"name": "search", "kind": "read", "input_schema": {"type": "object"}, "results": ["found"]}
EMAIL = {"name": "send_email", "kind": "write", "input_schema": {"type": "object"}, "results": ["sent"]}


def run(scenario: Any, drive: Callable[[Sim], Any]) -> tuple[Sim, simloop.Report]:
    with Sim(scenario) as sim:
        outcome = sim.run(drive)
    return sim, sim.check(outcome)


def found(report: simloop.Report) -> set[str]:
    return {v.invariant for v in report.violations}


def caught(drive: Callable[[Sim], Any], tmp_path: Path, **kw: Any) -> simloop.InvariantViolation:
    with pytest.raises(simloop.InvariantViolation) as failure:
        simloop.verify(drive, limits=LIMITS, seed=0, out_dir=tmp_path, **kw)
    return failure.value


# == the user's Stop ================================================================================================


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("file", ["stop-button-during-tool", "stop-button-while-streaming"])
def test_stop_holds_for_the_correct_loop_and_catches_a_loop_that_runs_tools_after_it(wire: str, file: str) -> None:
    sim, report = run(SCENARIOS / f"{file}.yaml", conversation(wire))
    assert report.ok, report
    assert [o.reason for o in sim.outcomes] == ["aborted", "final"]
    assert [e.tool for e in sim.transcript.of(ToolStart)] == (["search"] if file == "stop-button-during-tool" else [])
    for bug in ("ignores_stop", "reads_to_end"):  # Stop read before model calls only; a stream read to its end
        sim, report = run(SCENARIOS / f"{file}.yaml", conversation(wire, bug))
        assert found(report) == {"abort"}, (bug, report)
        assert "the loop then ran send_email" in str(report), report


@pytest.mark.parametrize("wire", WIRES)
def test_a_stop_that_leaves_the_replys_calls_unanswered_is_caught_on_the_next_turn(wire: str) -> None:
    # Stop while the reply is on its way: a loop that reads it whole, sees Stop and returns without answering its
    # calls leaves a history the next turn's request is refused for; a streaming loop that stops reading drops the
    # reply and leaves nothing open
    _, report = run(SCENARIOS / "stop-button-while-streaming.yaml", conversation(wire, "leaves_calls_open"))
    if wire in STREAMED:
        assert report.ok, report
    else:
        assert found(report) == {"abort", "pairing"}, report
        [stop] = [v for v in report.violations if v.invariant == "abort"]
        assert stop.message.startswith("the history the aborted turn left was refused on the next turn"), stop
        result, call = WORDS[wire]  # (it said "no tool_use without its result" on every wire)
        assert stop.message.endswith(f"a correct loop leaves no {call} without its {result} when it stops"), stop


@pytest.mark.parametrize("wire", WIRES)
def test_a_write_that_ran_as_stop_came_reported_not_run_breaks_results_real(wire: str) -> None:
    world = {"name": "stop", "task": "Email ann.", "followups": ["Did it go?"], "tools": [EMAIL], "then": "end_turn",
             "model": [{"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com"}}]}, {"end_turn": "Yes."}],
             "abort": {"tool_call": 1}}  # Stop while the email goes out: its effect is done
    _, report = run(world, conversation(wire))
    assert report.ok, report
    _, report = run(world, conversation(wire, "hides_result"))
    assert found(report) == {"results_real"}, report
    # in the words of the wire the loop speaks (they were the Messages API's: "the tool_result ... (tool_use ...)")
    result, call = WORDS[wire]
    assert report.violations[0].message.startswith(f"the {result} for send_email ({call} call_"), report


@pytest.mark.parametrize("wire", WIRES)
def test_a_success_no_tool_produced_is_reported_in_the_wires_words(wire: str) -> None:
    world = {"name": "stub", "task": "Email ann.", "tools": [EMAIL], "then": "end_turn",
             "model": [{"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com"}}]}, {"end_turn": "Sent."}]}
    _, report = run(world, conversation(wire, "fabricates"))
    assert found(report) == {"results_real"}, report
    result, call = WORDS[wire]
    message = report.violations[0].message
    assert message.startswith(f"the {result} for send_email ({call} call_") and "is_error" not in message, message
    assert message.endswith(f"or says it did not run it (a {result} saying so)"), message


@pytest.mark.parametrize("wire", WIRES)
def test_verify_abort_and_turns_hold_for_the_correct_loop(wire: str) -> None:
    report = simloop.verify(conversation(wire), limits=LIMITS, abort=True, turns=2, seed=0, max_examples=60)
    assert report.ok and report.examples == 60


@pytest.mark.parametrize("wire", WIRES)
def test_verify_abort_finds_the_loops_that_ignore_stop(wire: str, tmp_path: Path) -> None:
    for bug in ("ignores_stop", *(("reads_to_end",) if wire in STREAMED else ())):
        failure = caught(conversation(wire, bug), tmp_path, abort=True, max_examples=100)
        assert {v.invariant for v in failure.violations} == {"abort"}, (bug, failure)
        assert failure.scenario is not None and failure.scenario.abort is not None


_POINTS = [*({"after_call": n} for n in (1, 2, 3)), *({"tool_call": n} for n in (1, 2)),
           *({"at": s} for s in (0.0, 0.5, 1.5, 2.5))]
_ASYNC = {"chat": async_chat, "responses": async_responses}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", sorted(_ASYNC))
def test_the_async_stop_recipe_ends_in_a_sound_verdict_wherever_stop_lands(api: str, stream: bool) -> None:
    model = [{"tool_use": [{"name": "search", "input": {"q": "a"}}], "latency": 1},
             {"tool_use": [{"name": "search", "input": {"q": "b"}}], "latency": 1},
             {"end_turn": "done", "latency": 1}]

    async def drive(sim: Sim) -> Outcome:
        return await _ASYNC[api](sim, stream)

    for point in _POINTS:
        sim, report = run({"name": "stop", "task": "Hi.", "tools": [SEARCH], "model": model, "then": "end_turn",
                           "abort": point}, drive)
        assert report.ok, (point, report)
        # Stop after the final reply arrived (after_call 3) may be reported as the answer it is
        assert sim.outcomes[-1].reason == ("final" if point == {"after_call": 3} else "aborted"), point
    assert simloop.verify(drive, limits=LIMITS, abort=True, seed=1, max_examples=40).ok


# == crash and restart ==============================================================================================


@pytest.mark.parametrize("wire", WIRES)
def test_a_durable_loop_sends_the_email_once_across_a_crash_and_a_naive_one_twice(wire: str) -> None:
    sim, report = run(SCENARIOS / "crash-after-email.yaml", durable(wire))
    assert report.ok and sim.lives == 2, report
    assert sim.store["calls"], "the loop kept its keys in sim.store"
    sim, report = run(SCENARIOS / "crash-after-email.yaml", durable(wire, "no_keys"))
    assert found(report) == {"no_rerun"}, report
    assert "after the process died and restarted" in str(report)


@pytest.mark.parametrize("wire", WIRES)
def test_a_crash_with_a_model_call_in_flight_resumes_soundly(wire: str) -> None:
    world = {"name": "c", "task": "Email the customer.", "tools": [EMAIL], "then": "end_turn", "model": [
        {"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]},
        {"end_turn": "Done.", "crash": True},  # answered, and the process dies before the loop reads it
        {"end_turn": "Sent."}]}
    sim, report = run(world, durable(wire))
    assert report.ok and sim.lives == 2 and sim.outcomes[-1] == Outcome("final", "Sent."), report
    if not wire.startswith("chained"):  # the checkpoint-as-replies-arrive defect (one wire of each API suffices)
        _, report = run(world, forgets_finished_writes(wire))
        assert found(report) == {"no_rerun"}, report


@pytest.mark.parametrize("wire", WIRES)
def test_verify_restarts_holds_for_the_durable_loop(wire: str) -> None:
    assert simloop.verify(durable(wire), limits=LIMITS, restarts=1, seed=0, max_examples=40).ok


@pytest.mark.parametrize("wire", UNSTREAMED)  # (the scripted test above catches it streamed too)
def test_verify_restarts_finds_the_naive_durable_loop(wire: str, tmp_path: Path) -> None:
    failure = caught(durable(wire, "no_keys"), tmp_path, restarts=1, max_examples=100)
    assert {v.invariant for v in failure.violations} == {"no_rerun"}, failure
    assert failure.scenario is not None and any(f.kind == "crash" for f in failure.scenario.faults)
    assert simloop.replay(durable(wire), failure.scenario_path or "").ok


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_verify_restarts_crashes_model_calls_in_flight_on_the_openai_wires(wire: str, tmp_path: Path) -> None:
    failure = caught(forgets_finished_writes(wire), tmp_path, restarts=1, max_examples=100)
    assert {v.invariant for v in failure.violations} == {"no_rerun"}, failure
    scenario = failure.scenario
    assert scenario is not None and [r.crash for r in scenario.model].count(True) == 1
    assert not any(f.kind == "crash" for f in scenario.faults)  # a write's crash leaves its mark: not this bug
    assert simloop.replay(durable(wire), failure.scenario_path or "").ok


# == conversations ==================================================================================================

_CHAT = {"name": "chat", "task": "Find the refund policy.", "followups": ["Now email it to ann.", "Thanks."],
         "tools": [SEARCH, EMAIL], "then": "end_turn", "model": [
             {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]},
             {"end_turn": "Refunds within 30 days."},
             {"max_tokens": {"text": "Emailing.", "tool_use": [
                 {"name": "search", "input": {"q": "ann"}},
                 {"name": "send_email", "input": {"to": "ann@example.com", "body": "Refunds within 30 days of"}}]}},
             {"end_turn": "You're welcome."}]}


@pytest.mark.parametrize("wire", WIRES)
def test_each_turn_carries_the_conversation_and_the_defects_that_break_it_are_caught(wire: str) -> None:
    sim, report = run(_CHAT, conversation(wire))
    assert report.ok, report
    assert [o.reason for o in sim.outcomes] == ["final", "truncated", "final"]
    last = sim.transcript.requests[-1].conversation  # the whole conversation (a chain expanded)
    assert "Find the refund policy." in json.dumps(last[0]) and "found" in json.dumps(last)
    # the tool messages left out of the next turn's history; a cut reply's calls left unanswered
    # (kept on the server, the history is whole: what a chained loop can drop is what it owes, the cut calls' answers)
    for bug, turn in (("drops_tool_results", 3 if wire.startswith("chained") else 2), ("cut_calls_unanswered", 3)):
        sim, report = run(_CHAT, conversation(wire, bug))
        assert found(report) == {"pairing"}, (bug, report)
        assert _turn_of(sim, report.violations[0].step) == turn - 1  # the turn whose request was refused


def _turn_of(sim: Sim, step: int | None) -> int:
    """The (0-based) user turn model call ``step`` was made in."""
    turn = 0
    for e in sim.transcript.events:
        if isinstance(e, TurnStart):
            turn = e.turn
        elif isinstance(e, Request) and e.call == step:
            return turn
    raise AssertionError(f"no model call {step}")


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("first", [{"end_turn": ""}, {"refusal": "I can't help with that."}], ids=["empty", "refusal"])
def test_an_empty_answer_or_a_refusal_kept_in_the_history_is_sendable(wire: str, first: dict[str, Any]) -> None:
    world = {"name": "c", "task": "Hi.", "followups": ["And?"], "tools": [SEARCH], "then": "end_turn",
             "model": [first, {"end_turn": "Sure."}]}
    sim, report = run(world, conversation(wire))
    assert report.ok and [o.reason for o in sim.outcomes] == ["refusal" if "refusal" in first else "final", "final"]


@pytest.mark.parametrize("wire", UNSTREAMED)
def test_verify_turns_finds_a_history_broken_between_turns(wire: str, tmp_path: Path) -> None:
    for bug in ("drops_tool_results", "cut_calls_unanswered"):
        failure = caught(conversation(wire, bug), tmp_path, turns=2, max_examples=100)
        assert {v.invariant for v in failure.violations} == {"pairing"}, (bug, failure)
        assert failure.scenario is not None and len(failure.scenario.followups) == 1
        assert simloop.replay(conversation(wire), failure.scenario_path or "").ok


# == a durable conversation: crash and restart across user turns =====================================================


def durable_conversation(wire: str, bug: str | None = None) -> Callable[[Sim], list[Outcome]]:
    """README, Conversations and Crash and restart together: one history through the user turns, kept in
    ``sim.store`` with each finished turn's outcome, so a restarted drive goes through the finished turns (giving their
    outcomes, one per turn taken, as a conversation's drive does) and resumes the one the process died in.
    ``bug="skips_the_turn_it_died_in"``: after a restart the turn the process died in is taken as done.  The history is
    the loop's (``wire``: chat or responses, streamed or not), Stop wired."""
    assert not wire.startswith("chained"), "a durable conversation here keeps its own history"
    turn, stream = _turn(wire)

    def drive(sim: Sim) -> list[Outcome]:
        done: list[list[str]] = sim.store.setdefault("outcomes", [])
        outcomes = []
        for n, text in enumerate(sim.user_turns):
            if n < len(done):  # finished before the crash: its outcome is in the store
                outcomes.append(Outcome(*done[n]))
                continue
            if sim.store.get("turn") == n and bug == "skips_the_turn_it_died_in":
                done.append(["final", ""])
                outcomes.append(Outcome("final", ""))
                continue
            if sim.store.get("turn") != n:  # a new turn: its message joins the history, its budget starts
                sim.store.update(turn=n, budget={}, history=[*sim.store.get("history", []), {"role": "user",
                                                                                            "content": text}])
            history = copy.deepcopy(sim.store["history"])
            outcome = turn(sim, history, stream=stream, run_tool=_keyed(sim), kept=sim.store["budget"],
                           stop=sim.abort.is_set, save=lambda h=history: sim.store.__setitem__("history", copy.deepcopy(h)))
            sim.store["history"] = copy.deepcopy(history)
            done.append([outcome.reason, outcome.text])
            outcomes.append(outcome)
        return outcomes

    return drive


_TWO_TURNS = {"name": "c", "task": "Find the refund policy.", "followups": ["Email it to ann."], "tools": [SEARCH, EMAIL],
              "then": "end_turn", "model": [
                  {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]},
                  {"end_turn": "Refunds within 30 days."},
                  {"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com"}}]},
                  {"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com"}}]},  # asked again
                  {"end_turn": "Sent."}],
              "faults": [{"tool": "send_email", "call": 1, "kind": "crash"}]}  # the process dies in turn 2


@pytest.mark.parametrize("wire", ["chat", "chat-stream", "responses", "responses-stream"])
def test_a_durable_conversation_resumes_the_turn_it_died_in_and_keeps_the_finished_ones(wire: str) -> None:
    # the restarted drive goes through turn 1 again (finished: its outcome from the store) and resumes turn 2; that
    # turn 1 made no model call in the new life was read as "the model never replied" (a false honest_outcome)
    sim, report = run(_TWO_TURNS, durable_conversation(wire))
    assert report.ok, report
    assert sim.lives == 2 and [o.reason for o in sim.outcomes] == ["final", "final"]
    assert [e.tool for e in sim.transcript.of(ToolStart)] == ["search", "send_email"]  # the email once
    # a drive that takes the turn it died in as done still lies about it
    _, report = run(_TWO_TURNS, durable_conversation(wire, "skips_the_turn_it_died_in"))
    assert found(report) == {"honest_outcome"}, report
    assert "in user turn 2: the loop reported 'final' but the model never replied" in str(report)


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_verify_turns_restarts_and_abort_hold_for_a_durable_conversation(wire: str) -> None:
    assert simloop.verify(durable_conversation(wire), limits=LIMITS, turns=2, restarts=1, abort=True, seed=0,
                          max_examples=60).ok


def _messages_durable_conversation(sim: Sim) -> list[Outcome]:
    """The same durable conversation on the Messages wire (tests/loops/readme.py's loop, the README's `durable`
    resume): the fix in `turn_slices` is the wires' own, not this file's."""
    from tests.loops.readme import run_agent

    done: list[list[str]] = sim.store.setdefault("outcomes", [])
    history: list[Any] = sim.store.setdefault("history", [])  # kept in place: it survives the crash
    outcomes = []
    for n, text in enumerate(sim.user_turns):
        if n < len(done):
            outcomes.append(Outcome(*done[n]))
            continue
        resume = sim.store.get("turn") == n
        if resume and history and history[-1]["role"] == "assistant":
            history.pop()  # the round that died: the model asks again, and the store answers what had run
        sim.store["turn"] = n
        reason, answer = run_agent(sim.client, sim.tool_schemas, _keyed(sim), text, history=history, resume=resume,
                                   budget=sim.store.setdefault(f"budget{n}", {}))
        done.append([reason, answer])
        outcomes.append(Outcome(reason, answer))
    return outcomes


def test_a_durable_conversation_on_the_messages_wire_holds_too() -> None:
    sim, report = run(_TWO_TURNS, _messages_durable_conversation)
    assert report.ok and sim.lives == 2 and [o.reason for o in sim.outcomes] == ["final", "final"], report
