"""Drives for an agent loop on LiteLLM (``litellm.completion`` / ``acompletion``) on simloop's simulated OpenAI API.

LiteLLM is a client, not a loop: the loop here is the one its users write (a list of messages,
``litellm.completion(model=..., messages=..., tools=...)``, the assistant message appended, one ``tool``
message per call, a switch on ``finish_reason``), as `examples/openai_loop.py` writes it on the ``openai``
SDK.  LiteLLM reaches the simulator through the ``client=`` it accepts for OpenAI models: ``sim.openai_client``
/ ``sim.async_openai_client``, so no socket and no URL (``model="openai/gpt-4o"``).  LiteLLM sets that
client's ``max_retries`` to its own default (2, the SDK's too).

Importing this module sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless it is set: otherwise ``import
litellm`` fetches its price table from GitHub (and waits out three failed attempts offline).

Per step the loop stops before the model call when ``sim.abort`` is set, ``max_steps`` (default 10) is
reached, or ``deadline_s`` / ``max_total_tokens`` is spent (`Guard`); an API error LiteLLM raises once the
retries give up (``openai.APIError``, which LiteLLM's exceptions subclass, or ``httpx2.HTTPError``) ends the
turn with ``error``; ``finish_reason`` ``stop`` -> ``final``, ``length`` -> ``truncated`` (running none of its
calls), ``content_filter`` or a ``refusal`` -> ``refusal``, ``tool_calls`` -> run each call (a tool's
exception is answered with its text; a call not started when Stop comes is answered "not run").  The calls
of a reply that ended the turn unrun are answered "not run" before the next user message.

``drive_trusting_tool_calls`` is the loop of LiteLLM's tool-calling examples instead ("tool calls? run them;
else done"), which runs the calls of a reply cut at ``length``: ``truncation`` catches it.

``stream=True`` drives read the reply as LiteLLM's stream of chunks and rebuild it with
``litellm.stream_chunk_builder``, as its docs show.  LiteLLM's stream drops a refusal's text (the
``delta.refusal`` pieces): the rebuilt message has ``refusal: None`` and empty content, and its
``finish_reason`` is ``stop``, as the real API ends a refusal, so neither these drives nor
``stream_drive_reading_refusal`` (which reads the ``refusal`` field as OpenAI's docs do) can tell it from an
empty answer (docs/findings.md, L1).

Example::

    from simloop.adapters import litellm as lt

    simloop.verify(lt.drive, limits=simloop.Limits(max_steps=8, deadline_s=120), max_examples=50)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import httpx2

from simloop.adapters._common import Guard, missing_extra
from simloop.outcome import Outcome

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the price table over the network

try:
    import litellm
    import openai
except ModuleNotFoundError as e:  # the harness is an extra: say which one
    raise missing_extra(e, adapter="simloop.adapters.litellm", extra="litellm") from None

if TYPE_CHECKING:
    from simloop.sim import Sim

__all__ = [
    "DEFAULT_MAX_STEPS", "MODEL", "async_drive", "drive", "drive_trusting_tool_calls", "make_drive", "stream_drive",
    "stream_drive_reading_refusal", "tools",
]

#: LiteLLM's name for the model: the ``openai/`` provider (the simulator answers any model).
MODEL = "openai/gpt-4o"
#: The step cap of a loop that declares no ``max_steps``.
DEFAULT_MAX_STEPS = 10

RefusalVia = Literal["finish_reason", "message"]

_API_ERRORS = (openai.APIError, httpx2.HTTPError)
_NOT_RUN = "Not run: the user pressed Stop."
_NOT_RUN_ENDED = "Not run: the turn ended before this call (the reply was cut off or refused)."


def tools(sim: Sim) -> list[dict[str, Any]]:
    """The scenario's tools as Chat Completions function tools (LiteLLM's ``tools=``)."""
    return [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t["input_schema"]}}
        for t in sim.tool_schemas
    ]


class _Turn:
    """One user turn's loop state: the budgets and the way a reply ends it."""

    def __init__(self, sim: Sim, check_finish_reason: bool, refusal_via: RefusalVia) -> None:
        self.sim = sim
        self.check_finish_reason = check_finish_reason
        self.refusal_via = refusal_via
        limits = sim.limits
        self.max_steps = limits.max_steps if limits is not None and limits.max_steps else DEFAULT_MAX_STEPS
        self.guard = Guard(limits)

    def before_call(self, step: int) -> Outcome | None:
        """The outcome to stop with before model call ``step`` (0-based), or None to go on."""
        if self.sim.abort.is_set():
            return Outcome("aborted")
        if step >= self.max_steps:
            return Outcome("max_steps", f"no final answer after {self.max_steps} model calls")
        return self.guard.spent()

    def ending(self, reply: Any) -> Outcome | None:
        """Count the reply's usage; the outcome it ends the turn with, or None when its calls are to run."""
        usage = getattr(reply, "usage", None)
        if usage is not None:
            self.guard.used += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.guard.used += int(getattr(usage, "completion_tokens", 0) or 0)
        choice = reply.choices[0]
        message = choice.message
        if not self.check_finish_reason:  # the tutorials' loop: "tool calls? run them; else done"
            return None if message.tool_calls else Outcome("final", message.content or "")
        if choice.finish_reason == "length":  # cut off: a cut call's arguments may be partial, so run nothing
            return Outcome("truncated", message.content or "")
        refusal = getattr(message, "refusal", None)
        if refusal or (self.refusal_via == "finish_reason" and choice.finish_reason == "content_filter"):
            return Outcome("refusal", refusal or message.content or "")
        if choice.finish_reason != "tool_calls" or not message.tool_calls:
            return Outcome("final", message.content or "")
        return None


def _as_message(reply: Any) -> dict[str, Any]:
    """The assistant message as received, for the history (LiteLLM's own fields left out)."""
    message = reply.choices[0].message
    sent: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        sent["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return sent


def _close_open_calls(messages: list[dict[str, Any]]) -> None:
    """Answer the calls of a turn that ended on them unrun (a cut reply, a refusal with calls) as not run:
    the API refuses a conversation whose ``tool_calls`` go unanswered (400) when the next user message comes."""
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant" and last.get("tool_calls"):
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": _NOT_RUN_ENDED} for c in last["tool_calls"]]


def _input(call: Any) -> Any:
    return json.loads(call.function.arguments or "{}")


def make_drive(
    *, stream: bool = False, is_async: bool = False, check_finish_reason: bool = True,
    refusal_via: RefusalVia = "finish_reason",
) -> Callable[[Sim], Any]:
    """A drive running the LiteLLM loop on the scenario (the ready drives are made here).

    Args:
        stream: read each reply as LiteLLM's chunk stream, rebuilt with ``litellm.stream_chunk_builder``.
        is_async: ``litellm.acompletion`` on ``sim.async_openai_client`` (tools through ``sim.arun_tool``).
        check_finish_reason: ``False`` is the loop of LiteLLM's tool-calling examples: run the message's
            ``tool_calls`` when it has any, else take it as the answer (a reply cut at ``length`` included).
        refusal_via: ``"finish_reason"`` reads a refusal from ``content_filter`` or the ``refusal`` field;
            ``"message"`` from the ``refusal`` field alone, as OpenAI's docs check it (a streamed refusal then
            reads as an empty answer: LiteLLM drops its text, docs/findings.md).

    Example::

        simloop.verify(make_drive(stream=True), limits=simloop.Limits(max_steps=8))
    """

    def sdrive(sim: Sim) -> list[Outcome]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": sim.system}] if sim.system else []
        outcomes = []
        for text in sim.user_turns:
            outcomes.append(_user_turn(
                sim, messages, text, stream=stream, check_finish_reason=check_finish_reason, refusal_via=refusal_via
            ))
        return outcomes

    async def adrive(sim: Sim) -> list[Outcome]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": sim.system}] if sim.system else []
        outcomes = []
        for text in sim.user_turns:
            outcomes.append(await _auser_turn(
                sim, messages, text, stream=stream, check_finish_reason=check_finish_reason, refusal_via=refusal_via
            ))
        return outcomes

    return adrive if is_async else sdrive


def _user_turn(
    sim: Sim, messages: list[dict[str, Any]], text: str, *, stream: bool, check_finish_reason: bool,
    refusal_via: RefusalVia,
) -> Outcome:
    """One user turn: model calls and their tools' results until a reply, a limit, the Stop or an API error ends it."""
    _close_open_calls(messages)
    messages.append({"role": "user", "content": text})
    turn, step, outcome = _Turn(sim, check_finish_reason, refusal_via), 0, None
    while outcome is None:
        if (outcome := turn.before_call(step)) is not None:
            break
        step += 1
        try:
            reply = litellm.completion(
                model=MODEL, messages=messages, tools=tools(sim), client=sim.openai_client, stream=stream
            )
            if stream:
                reply = litellm.stream_chunk_builder(list(reply), messages=messages)
        except _API_ERRORS as exc:  # LiteLLM and the SDK have retried what is worth retrying
            outcome = Outcome("error", f"{type(exc).__name__}: {exc}")
            break
        messages.append(_as_message(reply))
        if (outcome := turn.ending(reply)) is None:
            _run_calls(sim, messages, reply.choices[0].message.tool_calls)
    return outcome


async def _auser_turn(
    sim: Sim, messages: list[dict[str, Any]], text: str, *, stream: bool, check_finish_reason: bool,
    refusal_via: RefusalVia,
) -> Outcome:
    """`_user_turn` with ``litellm.acompletion`` on the async client and the tools through ``sim.arun_tool``."""
    _close_open_calls(messages)
    messages.append({"role": "user", "content": text})
    turn, step, outcome = _Turn(sim, check_finish_reason, refusal_via), 0, None
    while outcome is None:
        if (outcome := turn.before_call(step)) is not None:
            break
        step += 1
        try:
            reply = await litellm.acompletion(
                model=MODEL, messages=messages, tools=tools(sim), client=sim.async_openai_client,
                stream=stream,
            )
            if stream:
                reply = litellm.stream_chunk_builder([chunk async for chunk in reply], messages=messages)
        except _API_ERRORS as exc:
            outcome = Outcome("error", f"{type(exc).__name__}: {exc}")
            break
        messages.append(_as_message(reply))
        if (outcome := turn.ending(reply)) is None:
            await _arun_calls(sim, messages, reply.choices[0].message.tool_calls)
    return outcome


def _run_calls(sim: Sim, messages: list[dict[str, Any]], calls: Any) -> None:
    """Run a reply's tool calls in order, each result (or failure) a ``tool`` message; after Stop, "not run"."""
    for call in calls:
        if sim.abort.is_set():  # Stop: start no further call, answer it as not run
            messages.append({"role": "tool", "tool_call_id": call.id, "content": _NOT_RUN})
            continue
        try:
            content = sim.run_tool(call.function.name, _input(call), tool_use_id=call.id)
        except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the model
            content = f"Error: {type(exc).__name__}: {exc}"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": content})


async def _arun_calls(sim: Sim, messages: list[dict[str, Any]], calls: Any) -> None:
    """`_run_calls` through ``sim.arun_tool``."""
    for call in calls:
        if sim.abort.is_set():
            messages.append({"role": "tool", "tool_call_id": call.id, "content": _NOT_RUN})
            continue
        try:
            content = await sim.arun_tool(call.function.name, _input(call), tool_use_id=call.id)
        except Exception as exc:  # noqa: BLE001 - an observation for the model
            content = f"Error: {type(exc).__name__}: {exc}"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": content})


def _named(fn: Callable[[Sim], Any], name: str) -> Callable[[Sim], Any]:
    # a module-level name makes `verify` print a replay line that imports the drive (`--drive module:name`)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"simloop drive: an agent loop on LiteLLM ({name.replace('_', ' ')})."
    return fn


drive = _named(make_drive(), "drive")
async_drive = _named(make_drive(is_async=True), "async_drive")
stream_drive = _named(make_drive(stream=True), "stream_drive")
drive_trusting_tool_calls = _named(make_drive(check_finish_reason=False), "drive_trusting_tool_calls")
stream_drive_reading_refusal = _named(make_drive(stream=True, refusal_via="message"), "stream_drive_reading_refusal")
