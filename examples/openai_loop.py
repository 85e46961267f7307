"""A correct agent loop on the ``openai`` SDK's Chat Completions API, and three one-bug twins.

The loop is written as its users write it: a plain list of messages, ``client.chat.completions.create``,
the assistant message appended as received and one ``tool`` message per call.  Per step it:

* stops before calling the model when the step cap, the deadline (``time.monotonic()``) or the token
  budget (summed from ``usage.total_tokens``) is spent;
* leaves transient API errors to the SDK's own retries, and when those give up returns ``error``
  without re-running any tool;
* switches on ``finish_reason``: ``stop`` -> ``final``; ``tool_calls`` -> run every call and answer each
  with a ``tool`` message (a tool that raised is answered with its error text); ``length`` ->
  ``truncated``, running none of the cut-off calls; a ``refusal`` (``finish_reason`` ``stop`` with the text in
  ``message.refusal``, as the real API answers one) or ``content_filter`` (the moderation's cut-off) -> ``refusal``.

The twins (``drive_partial_answers``, ``drive_tools_from_length``, ``drive_rerun_after_500``,
``drive_refusal_from_finish_reason``) each change
one thing, the bug the field knows on this wire; ``simloop verify examples.openai_loop:drive_...`` catches
each (docs/design.md, The OpenAI wire).  Needs ``pip install 'simloop[openai]'``.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)

from simloop import Outcome

from ._common import RunTool, budgets, error_text

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = [
    "drive", "drive_partial_answers", "drive_refusal_from_finish_reason", "drive_rerun_after_500",
    "drive_tools_from_length", "run_agent",
]

MODEL = "gpt-4o"


def openai_tools(sim: Sim) -> list[ChatCompletionToolParam]:
    """The scenario's tools as Chat Completions function tools."""
    return [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t["input_schema"]}}
        for t in sim.tool_schemas
    ]


def run_tool_call(call: ChatCompletionMessageFunctionToolCall, run_tool: RunTool) -> ChatCompletionToolMessageParam:
    """Run one call; the ``tool`` message answering it holds the output, or the error when the tool raised."""
    try:
        args: Any = json.loads(call.function.arguments or "{}")
        output = run_tool(call.function.name, args, tool_use_id=call.id)
    except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the model, never a retry
        output = f"Error: {error_text(exc)}"
    return {"role": "tool", "tool_call_id": call.id, "content": output}


def function_calls(reply: ChatCompletion) -> list[ChatCompletionMessageFunctionToolCall]:
    return [c for c in reply.choices[0].message.tool_calls or [] if c.type == "function"]


def append_reply(messages: list[ChatCompletionMessageParam], reply: ChatCompletion) -> None:
    """The assistant message, as received, goes into the history."""
    messages.append(reply.choices[0].message.model_dump(exclude_none=True))  # type: ignore[arg-type]


class Budgets:
    """The declared step cap, deadline and token budget: checked before every model call."""

    def __init__(self, limits: Limits | None) -> None:
        self.max_steps, self.deadline_s, self.token_budget = budgets(limits)
        self.started = time.monotonic()
        self.used = 0

    def spent(self, step: int) -> Outcome | None:
        """The outcome to stop with before model call ``step`` (0-based), or None to go on."""
        if time.monotonic() - self.started >= self.deadline_s:
            return Outcome(reason="deadline", text=f"deadline of {self.deadline_s:g}s reached after {step} model calls")
        if self.used >= self.token_budget:
            return Outcome(reason="token_budget", text=f"{self.used} tokens used of a budget of {self.token_budget}")
        return None

    def count(self, reply: ChatCompletion) -> None:
        self.used += reply.usage.total_tokens if reply.usage else 0

    def capped(self) -> Outcome:
        return Outcome(reason="max_steps", text=f"no final answer after {self.max_steps} model calls")


def run_agent(
    client: openai.OpenAI, tools: list[ChatCompletionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None, *, system: str | None = None,
) -> Outcome:
    """Run the task to an honest stop; returns why it stopped and the last text."""
    spend = Budgets(limits)
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": task})
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        except openai.APIError as exc:  # the SDK has already retried what is worth retrying
            return Outcome(reason="error", text=str(exc))
        spend.count(reply)
        choice = reply.choices[0]
        append_reply(messages, reply)
        if choice.finish_reason == "length":  # cut off: a cut call's arguments may be partial, so run nothing
            return Outcome(reason="truncated", text=choice.message.content or "")
        if choice.finish_reason == "content_filter" or choice.message.refusal:
            return Outcome(reason="refusal", text=choice.message.refusal or choice.message.content or "")
        if choice.finish_reason != "tool_calls":
            return Outcome(reason="final", text=choice.message.content or "")
        messages += [run_tool_call(call, run_tool) for call in function_calls(reply)]
    return spend.capped()


def drive(sim: Sim) -> Outcome:
    """simloop adapter: the loop on the simulated API's Chat Completions wire and the scenario's tools."""
    return run_agent(sim.openai_client, openai_tools(sim), sim.run_tool, sim.task, sim.limits, system=sim.system)


# -- the twins: one bug each ------------------------------------------------------------------------------------------


def run_agent_partial_answers(
    client: openai.OpenAI, tools: list[ChatCompletionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: answers only the first of a reply's parallel tool calls (written for one call at a time).

    The real API then answers 400 ("An assistant message with 'tool_calls' must be followed by tool messages
    responding to each 'tool_call_id'...").  Caught by: ``pairing``.
    """
    spend = Budgets(limits)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task}]
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        except openai.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        spend.count(reply)
        choice = reply.choices[0]
        append_reply(messages, reply)
        if choice.finish_reason == "length":
            return Outcome(reason="truncated", text=choice.message.content or "")
        if choice.finish_reason == "content_filter" or choice.message.refusal:
            return Outcome(reason="refusal", text=choice.message.refusal or "")
        if choice.finish_reason != "tool_calls":
            return Outcome(reason="final", text=choice.message.content or "")
        messages.append(run_tool_call(function_calls(reply)[0], run_tool))  # BUG: the other calls go unanswered
    return spend.capped()


def drive_partial_answers(sim: Sim) -> Outcome:
    return run_agent_partial_answers(sim.openai_client, openai_tools(sim), sim.run_tool, sim.task, sim.limits)


def run_agent_tools_from_length(
    client: openai.OpenAI, tools: list[ChatCompletionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: runs whatever tool calls a reply holds, also from a reply cut at ``finish_reason: "length"``
    (whose last call's arguments are cut off).  Caught by: ``truncation``."""
    spend = Budgets(limits)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task}]
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        except openai.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        spend.count(reply)
        choice = reply.choices[0]
        append_reply(messages, reply)
        if choice.finish_reason == "content_filter" or choice.message.refusal:
            return Outcome(reason="refusal", text=choice.message.refusal or "")
        calls = function_calls(reply)
        if not calls:  # BUG: "no tool calls" taken for "done", and a cut reply's calls are run
            reason = "truncated" if choice.finish_reason == "length" else "final"
            return Outcome(reason=reason, text=choice.message.content or "")
        messages += [run_tool_call(call, run_tool) for call in calls]
    return spend.capped()


def drive_tools_from_length(sim: Sim) -> Outcome:
    return run_agent_tools_from_length(sim.openai_client, openai_tools(sim), sim.run_tool, sim.task, sim.limits)


def run_agent_refusal_from_finish_reason(
    client: openai.OpenAI, tools: list[ChatCompletionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: decides how a turn ended from ``finish_reason`` alone, never reading ``message.refusal``: the real
    API answers a refusal with ``finish_reason: "stop"``, so the refusal is reported as a ``final`` answer with
    empty text (``content_filter`` is the moderation's cut-off, not the model declining).
    Caught by: ``honest_outcome``."""
    spend = Budgets(limits)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task}]
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        except openai.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        spend.count(reply)
        choice = reply.choices[0]
        append_reply(messages, reply)
        if choice.finish_reason != "tool_calls":  # BUG: a refusal is "stop" too; message.refusal is never read
            reason = {"length": "truncated", "content_filter": "refusal"}.get(choice.finish_reason, "final")
            return Outcome(reason=reason, text=choice.message.content or "")
        messages += [run_tool_call(call, run_tool) for call in function_calls(reply)]
    return spend.capped()


def drive_refusal_from_finish_reason(sim: Sim) -> Outcome:
    return run_agent_refusal_from_finish_reason(sim.openai_client, openai_tools(sim), sim.run_tool, sim.task,
                                                sim.limits)


STEP_ATTEMPTS = 3


def run_agent_rerun_after_500(
    client: openai.OpenAI, tools: list[ChatCompletionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: "run the pending calls, then ask the model" is one step, retried whole when the API call fails
    (a burst of 500s outlasting the SDK's retries): the tools that already ran, a write among them, run again.
    Caught by: ``no_rerun``."""
    spend = Budgets(limits)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task}]
    pending: list[ChatCompletionMessageFunctionToolCall] = []
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        for attempt in range(STEP_ATTEMPTS):
            results = [run_tool_call(call, run_tool) for call in pending]  # BUG: re-run on every attempt
            if (stop := spend.spent(step)) is not None:  # the tools took the time that was left
                return stop
            try:
                reply = client.chat.completions.create(model=MODEL, messages=[*messages, *results], tools=tools)
                break
            except openai.APIError as exc:
                if attempt == STEP_ATTEMPTS - 1:
                    return Outcome(reason="error", text=str(exc))
        spend.count(reply)
        messages += results
        choice = reply.choices[0]
        append_reply(messages, reply)
        if choice.finish_reason == "length":
            return Outcome(reason="truncated", text=choice.message.content or "")
        if choice.finish_reason == "content_filter" or choice.message.refusal:
            return Outcome(reason="refusal", text=choice.message.refusal or "")
        if choice.finish_reason != "tool_calls":
            return Outcome(reason="final", text=choice.message.content or "")
        pending = function_calls(reply)
    return spend.capped()


def drive_rerun_after_500(sim: Sim) -> Outcome:
    return run_agent_rerun_after_500(sim.openai_client, openai_tools(sim), sim.run_tool, sim.task, sim.limits)
