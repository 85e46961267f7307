"""Plain ``openai`` SDK tool loops, Chat Completions and Responses, with follow-up turns: the loops a recording of
either wire was made by, as its users write them (the README's switch on ``finish_reason`` / ``status``).

``loop(api, stream=..., chained=...)`` gives a drive: ``api`` is ``"chat"`` or ``"responses"``; ``stream`` uses
the SDK's stream helpers (``.stream(...)`` and the final object they build); ``chained`` keeps a Responses
conversation on the server (``previous_response_id``, sending only what is new).  Each user turn of
``sim.user_turns`` runs to a stop; the drive returns one `Outcome` per turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai

from simloop import Outcome, Sim

MODEL = "gpt-4o"
NOT_RUN = "not run: the reply was cut off"


def _run(sim: Sim, name: str, arguments: str, call_id: str) -> str:
    try:
        return sim.run_tool(name, json.loads(arguments or "{}"), tool_use_id=call_id)
    except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the model
        return f"Error: {exc}"


def _chat_turn(sim: Sim, messages: list[Any], tools: list[Any], stream: bool) -> Outcome:
    client = sim.openai_client
    for _ in range(50):
        args: dict[str, Any] = {"model": MODEL, "messages": messages}
        if tools:
            args["tools"] = tools
        try:
            if stream:
                with client.chat.completions.stream(**args) as events:
                    reply: Any = events.get_final_completion()
            else:
                reply = client.chat.completions.create(**args)
        except openai.APIError as exc:
            return Outcome("error", str(exc))
        choice = reply.choices[0]
        message = choice.message
        messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls", "refusal"}))
        if choice.finish_reason == "length":  # a cut call is never run; it is answered, so the history stays valid
            messages += [{"role": "tool", "tool_call_id": c.id, "content": NOT_RUN} for c in message.tool_calls or []]
            return Outcome("truncated", message.content or "")
        if choice.finish_reason == "content_filter" or message.refusal:
            return Outcome("refusal", message.refusal or message.content or "")
        if choice.finish_reason != "tool_calls":
            return Outcome("final", message.content or "")
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": _run(sim, call.function.name, call.function.arguments, call.id)})
    return Outcome("max_steps", "")


def _chat(stream: bool) -> Callable[[Sim], list[Outcome]]:
    def drive(sim: Sim) -> list[Outcome]:
        tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                   "parameters": t["input_schema"]}} for t in sim.tool_schemas]
        messages: list[Any] = [{"role": "system", "content": sim.system}] if sim.system else []
        outcomes = []
        for text in sim.user_turns:
            messages.append({"role": "user", "content": text})
            outcomes.append(_chat_turn(sim, messages, tools, stream))
        return outcomes

    return drive


def _responses_turn(sim: Sim, state: dict[str, Any], new: list[Any], tools: list[Any], stream: bool,
                    chained: bool) -> Outcome:
    client = sim.openai_client
    for _ in range(50):
        if not chained:
            state["items"] += new
        args: dict[str, Any] = {"model": MODEL, "input": new if chained else state["items"]}
        if tools:
            args["tools"] = tools
        if sim.system:
            args["instructions"] = sim.system
        if chained and state.get("previous"):
            args["previous_response_id"] = state["previous"]
        try:
            if stream:
                with client.responses.stream(**args) as events:
                    response: Any = events.get_final_response()
            else:
                response = client.responses.create(**args)
        except openai.APIError as exc:
            return Outcome("error", str(exc))
        state["previous"] = response.id
        if not chained:
            state["items"] += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        refusal = next((p.refusal for item in response.output if item.type == "message" for p in item.content
                        if p.type == "refusal"), None)
        if response.status == "incomplete":  # cut calls are answered, never run (the next turn's history is valid)
            answers = [{"type": "function_call_output", "call_id": c.call_id, "output": NOT_RUN} for c in calls]
            state["items"] += [] if chained else answers
            state["owed"] = answers if chained else []
            return Outcome("truncated", response.output_text)
        if refusal is not None:
            return Outcome("refusal", refusal)
        if not calls:
            return Outcome("final", response.output_text)
        new = [{"type": "function_call_output", "call_id": c.call_id, "output": _run(sim, c.name, c.arguments, c.call_id)}
               for c in calls]
    return Outcome("max_steps", "")


def _responses(stream: bool, chained: bool) -> Callable[[Sim], list[Outcome]]:
    def drive(sim: Sim) -> list[Outcome]:
        tools = [{"type": "function", "name": t["name"], "description": t.get("description", ""),
                  "parameters": t["input_schema"], "strict": False} for t in sim.tool_schemas]
        state: dict[str, Any] = {"items": [], "previous": None}
        outcomes = []
        for text in sim.user_turns:
            owed, state["owed"] = state.get("owed", []), []
            outcomes.append(_responses_turn(sim, state, [*owed, {"role": "user", "content": text}], tools, stream,
                                            chained))
        return outcomes

    return drive


def loop(api: str, *, stream: bool = False, chained: bool = False) -> Callable[[Sim], list[Outcome]]:
    """The plain loop on ``api`` (``chat`` or ``responses``)."""
    return _chat(stream) if api == "chat" else _responses(stream, chained)
