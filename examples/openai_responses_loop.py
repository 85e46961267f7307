"""Correct agent loops on the ``openai`` SDK's Responses API, and three one-bug twins.

The loops are written as the OpenAI function-calling guide writes them: a plain list of input items, the
response's ``output`` appended as received, then one ``function_call_output`` per ``function_call``
(``drive``); or the same conversation kept on the server, each request naming ``previous_response_id`` and
sending only the new outputs (``drive_chained``).  Per step they:

* stop before calling the model when the step cap, the deadline (``time.monotonic()``) or the token budget
  (summed from ``usage.total_tokens``) is spent;
* leave transient API errors to the SDK's own retries, and when those give up return ``error`` without
  re-running any tool;
* read ``status``: ``incomplete`` for ``max_output_tokens`` -> ``truncated``, running none of the cut-off
  calls; ``content_filter`` or a ``refusal`` part -> ``refusal``; ``function_call`` items -> run every one and
  answer each (a tool that raised is answered with its error text); none -> ``final``.

The twins (``drive_partial_answers``, ``drive_tools_from_incomplete``, ``drive_rerun_after_500``) each change
one thing, the bug the field knows on this wire; ``simloop verify examples.openai_responses_loop:drive_...``
catches each (docs/design.md, The OpenAI wire, Responses API).  Needs ``pip install 'simloop[openai]'``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import openai
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseFunctionToolCall,
    ResponseInputItemParam,
)
from openai.types.responses.response_input_param import FunctionCallOutput

from simloop import Outcome

from ._common import RunTool, error_text
from .openai_loop import Budgets

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = [
    "drive", "drive_chained", "drive_partial_answers", "drive_rerun_after_500", "drive_tools_from_incomplete",
    "run_agent", "run_agent_chained",
]

MODEL = "gpt-4o"


def responses_tools(sim: Sim) -> list[FunctionToolParam]:
    """The scenario's tools as Responses function tools (the flat shape: name and parameters at the top)."""
    return [
        {"type": "function", "name": t["name"], "description": t.get("description", ""),
         "parameters": t["input_schema"], "strict": False}
        for t in sim.tool_schemas
    ]


def run_call(call: ResponseFunctionToolCall, run_tool: RunTool) -> FunctionCallOutput:
    """Run one call; the ``function_call_output`` answering it holds the output, or the error when the tool raised."""
    try:
        args: Any = json.loads(call.arguments or "{}")
        output = run_tool(call.name, args, tool_use_id=call.call_id)
    except Exception as exc:  # noqa: BLE001 - a tool failure is an observation for the model, never a retry
        output = f"Error: {error_text(exc)}"
    return {"type": "function_call_output", "call_id": call.call_id, "output": str(output)}


def function_calls(response: Response) -> list[ResponseFunctionToolCall]:
    return [item for item in response.output if item.type == "function_call"]


def refused(response: Response) -> str | None:
    """The refusal's text, when the response is one (a ``refusal`` part, or cut by the content filter)."""
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "refusal":
                    return part.refusal
    details = response.incomplete_details
    return "" if details is not None and details.reason == "content_filter" else None


def count(spend: Budgets, response: Response) -> None:
    spend.used += response.usage.total_tokens if response.usage else 0


def stop_for(response: Response) -> Outcome | None:
    """The outcome a response ends the turn with (cut off, refused, final), or None when its calls are to run."""
    if response.status == "incomplete" and response.incomplete_details is not None \
            and response.incomplete_details.reason == "max_output_tokens":  # a cut call may be partial: run none
        return Outcome(reason="truncated", text=response.output_text)
    if (refusal := refused(response)) is not None:
        return Outcome(reason="refusal", text=refusal)
    if not function_calls(response):
        return Outcome(reason="final", text=response.output_text)
    return None


def run_agent(
    client: openai.OpenAI, tools: list[FunctionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None, *, system: str | None = None,
) -> Outcome:
    """Run the task to an honest stop, the conversation kept as a list of input items; returns why it stopped."""
    spend = Budgets(limits)
    items: list[ResponseInputItemParam] = [{"role": "user", "content": task}]
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            response = client.responses.create(model=MODEL, instructions=system, input=items, tools=tools)
        except openai.APIError as exc:  # the SDK has already retried what is worth retrying
            return Outcome(reason="error", text=str(exc))
        count(spend, response)
        items += response.output  # type: ignore[arg-type]  # as the OpenAI guide does: output items are input items
        if (stop := stop_for(response)) is not None:
            return stop
        items += [run_call(call, run_tool) for call in function_calls(response)]
    return spend.capped()


def drive(sim: Sim) -> Outcome:
    """simloop adapter: the loop on the simulated API's Responses wire and the scenario's tools."""
    return run_agent(sim.openai_client, responses_tools(sim), sim.run_tool, sim.task, sim.limits, system=sim.system)


def run_agent_chained(
    client: openai.OpenAI, tools: list[FunctionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None, *, system: str | None = None,
) -> Outcome:
    """The same loop with the conversation kept on the server: each request names the previous response and sends
    only what is new (the task, then the calls' outputs)."""
    spend = Budgets(limits)
    new: list[ResponseInputItemParam] = [{"role": "user", "content": task}]
    previous: str | None = None
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            response = client.responses.create(model=MODEL, instructions=system, input=new, tools=tools,
                                               previous_response_id=previous)
        except openai.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        count(spend, response)
        if (stop := stop_for(response)) is not None:
            return stop
        previous = response.id
        new = [run_call(call, run_tool) for call in function_calls(response)]
    return spend.capped()


def drive_chained(sim: Sim) -> Outcome:
    """simloop adapter: the ``previous_response_id`` loop."""
    return run_agent_chained(sim.openai_client, responses_tools(sim), sim.run_tool, sim.task, sim.limits,
                             system=sim.system)


# -- the twins: one bug each ------------------------------------------------------------------------------------------


def run_agent_partial_answers(
    client: openai.OpenAI, tools: list[FunctionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: answers only the first of a response's function calls (written for one call at a time).

    The real API then answers 400 ("No tool output found for function call call_...").  Caught by: ``pairing``.
    """
    spend = Budgets(limits)
    items: list[ResponseInputItemParam] = [{"role": "user", "content": task}]
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            response = client.responses.create(model=MODEL, input=items, tools=tools)
        except openai.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        count(spend, response)
        items += response.output  # type: ignore[arg-type]
        if (stop := stop_for(response)) is not None:
            return stop
        items.append(run_call(function_calls(response)[0], run_tool))  # BUG: the other calls go unanswered
    return spend.capped()


def drive_partial_answers(sim: Sim) -> Outcome:
    return run_agent_partial_answers(sim.openai_client, responses_tools(sim), sim.run_tool, sim.task, sim.limits)


def run_agent_tools_from_incomplete(
    client: openai.OpenAI, tools: list[FunctionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: runs whatever function calls a response holds, also from one ``incomplete`` for
    ``max_output_tokens`` (whose last call's arguments are cut off).  Caught by: ``truncation``."""
    spend = Budgets(limits)
    items: list[ResponseInputItemParam] = [{"role": "user", "content": task}]
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        try:
            response = client.responses.create(model=MODEL, input=items, tools=tools)
        except openai.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        count(spend, response)
        items += response.output  # type: ignore[arg-type]
        if (refusal := refused(response)) is not None:
            return Outcome(reason="refusal", text=refusal)
        calls = function_calls(response)
        if not calls:  # BUG: "no function calls" taken for "done", and an incomplete response's calls are run
            return Outcome(reason="truncated" if response.status == "incomplete" else "final",
                           text=response.output_text)
        items += [run_call(call, run_tool) for call in calls]
    return spend.capped()


def drive_tools_from_incomplete(sim: Sim) -> Outcome:
    return run_agent_tools_from_incomplete(sim.openai_client, responses_tools(sim), sim.run_tool, sim.task,
                                           sim.limits)


STEP_ATTEMPTS = 3


def run_agent_rerun_after_500(
    client: openai.OpenAI, tools: list[FunctionToolParam], run_tool: RunTool, task: str,
    limits: Limits | None = None,
) -> Outcome:
    """Defect: "run the pending calls, then ask the model" is one step, retried whole when the API call fails
    (a burst of 500s outlasting the SDK's retries): the tools that already ran, a write among them, run again.
    Caught by: ``no_rerun``."""
    spend = Budgets(limits)
    items: list[ResponseInputItemParam] = [{"role": "user", "content": task}]
    pending: list[ResponseFunctionToolCall] = []
    for step in range(spend.max_steps):
        if (stop := spend.spent(step)) is not None:
            return stop
        for attempt in range(STEP_ATTEMPTS):
            results = [run_call(call, run_tool) for call in pending]  # BUG: re-run on every attempt
            if (stop := spend.spent(step)) is not None:  # the tools took the time that was left
                return stop
            try:
                response = client.responses.create(model=MODEL, input=[*items, *results], tools=tools)
                break
            except openai.APIError as exc:
                if attempt == STEP_ATTEMPTS - 1:
                    return Outcome(reason="error", text=str(exc))
        count(spend, response)
        items += [*results, *response.output]  # type: ignore[list-item]
        if (stop := stop_for(response)) is not None:
            return stop
        pending = function_calls(response)
    return spend.capped()


def drive_rerun_after_500(sim: Sim) -> Outcome:
    return run_agent_rerun_after_500(sim.openai_client, responses_tools(sim), sim.run_tool, sim.task, sim.limits)
