"""Drives for the OpenAI Agents SDK's ``Runner`` (``openai-agents``) on simloop's simulated OpenAI API.

The agent's model is the SDK's own `OpenAIChatCompletionsModel` on ``sim.async_openai_client``, unmodified
(``api="chat"``), or its `OpenAIResponsesModel` on the same client (``api="responses"``, the SDK's default
wire: ``drive_responses``).  The scenario's tools are
`FunctionTool` objects with the scenario's JSON schema (``strict_json_schema=False``: a scenario's schema is
not written for strict mode), each awaiting ``sim.arun_tool``.  Tracing is off (`set_tracing_disabled`): it
would export to OpenAI's servers.

Limits: ``max_steps`` -> ``Runner.run(max_turns=...)`` (a turn is one model call); without it the SDK's
default (10).  The SDK has no run deadline or token budget, so a `RunHooks` stops the run before a model
call when ``deadline_s`` or ``max_total_tokens`` is spent (`Guard`, as the LangGraph drive does).

The way a run ends maps onto an `Outcome`: it returned -> ``final`` (the SDK keeps no ``finish_reason``, so a
reply cut at ``length`` or a refusal's text cannot be told apart: docs/findings.md); `MaxTurnsExceeded` ->
``max_steps``; `ModelRefusalError` -> ``refusal``; a spent budget -> ``deadline`` / ``token_budget``; any
other `AgentsException` (`ModelBehaviorError`: a reply cut before any output, invalid tool JSON; `UserError`)
and ``openai.APIError`` / ``httpx2.HTTPError`` (the API failed past the SDK's retries) -> ``error``: the
Runner raises them by design, so the drive catches them (anything else that escapes is a ``crash``).

Tool errors: a `FunctionTool`'s exception fails the run (``UserError("Error running tool ...")``, as the SDK
documents for ``on_invoke_tool``; the model never hears of it: docs/findings.md, OA4) in ``drive``;
``drive_tool_messages`` (``on_tool_error="message"``) answers the call with the exception's type and text.
(``@function_tool`` tools get the SDK's fixed text instead: "An error occurred while running the tool.")

Stop: every drive runs a turn with `run_until_stop` (``Runner.run_streamed``), which cancels the run
(``result.cancel()``, the SDK's ``"immediate"`` mode) when ``sim.abort`` is set and returns ``aborted``; the
items of the turn so far (``to_input_list()``) keep the results of the tools that ran.  ``cancel(mode=
"after_turn")`` would run the reply's tool calls first, a write the user stopped among them.

Example::

    from simloop.adapters import openai_agents as oa

    simloop.verify(oa.drive, limits=simloop.Limits(max_steps=8, deadline_s=120), max_examples=50)
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import httpx2

from simloop.adapters._common import Guard, missing_extra
from simloop.errors import UsageError
from simloop.outcome import Outcome

try:
    import openai
    from agents import (
        Agent,
        AgentsException,
        FunctionTool,
        MaxTurnsExceeded,
        ModelRefusalError,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        RunHooks,
        Runner,
        TResponseInputItem,
        set_tracing_disabled,
    )
    from agents.models.interface import Model
    from agents.run import DEFAULT_MAX_TURNS
except ModuleNotFoundError as e:  # the harness is an extra: say which one
    raise missing_extra(e, adapter="simloop.adapters.openai_agents", extra="openai-agents") from None

if TYPE_CHECKING:
    from simloop.scenario import Limits
    from simloop.sim import Sim

__all__ = [
    "DEFAULT_MAX_TURNS", "MODEL", "drive", "drive_cancel_after_turn", "drive_responses", "drive_tool_messages",
    "make_drive",
    "max_turns", "model", "outcome_of_error", "run_until_stop", "tools",
]

Api = Literal["chat", "responses"]
ToolErrorPolicy = Literal["raise", "message"]
CancelMode = Literal["immediate", "after_turn"]

#: The model name the agent asks for (the simulator answers any).
MODEL = "gpt-4o"

set_tracing_disabled(True)  # the SDK's tracing exports to api.openai.com: never from a simulated run


def model(sim: Sim, *, api: Api = "chat") -> Model:
    """The Agents SDK's OpenAI model on ``sim.async_openai_client``: Chat Completions (``api="chat"``) or the
    Responses API (``api="responses"``)."""
    if api == "responses":
        return OpenAIResponsesModel(model=MODEL, openai_client=sim.async_openai_client)
    if api != "chat":
        raise UsageError(f"model(sim, api=...) takes 'chat' (Chat Completions) or 'responses', got {api!r}")
    return OpenAIChatCompletionsModel(model=MODEL, openai_client=sim.async_openai_client)


def tools(sim: Sim, *, on_tool_error: ToolErrorPolicy = "raise") -> list[FunctionTool]:
    """The scenario's tools as Agents SDK `FunctionTool` objects (the scenario's schema, ``sim.arun_tool``).

    ``on_tool_error``: ``"raise"`` lets a tool's exception fail the run, as a `FunctionTool`'s does (the SDK
    raises ``UserError("Error running tool ...")``); ``"message"`` returns ``"Error: <type>: <text>"`` to the
    model instead, as the SDK's docstring suggests for errors the model should see.

    Example::

        agent = Agent(name="assistant", model=model(sim), tools=tools(sim, on_tool_error="message"))
    """
    return [
        FunctionTool(
            name=schema["name"],
            description=schema.get("description") or schema["name"],
            params_json_schema=schema["input_schema"],
            on_invoke_tool=_call(sim, schema["name"], on_tool_error),
            strict_json_schema=False,
        )
        for schema in sim.tool_schemas
    ]


def _call(sim: Sim, name: str, on_tool_error: ToolErrorPolicy) -> Callable[[Any, str], Awaitable[str]]:
    async def call(ctx: Any, arguments: str) -> str:
        input = json.loads(arguments or "{}")
        call_id = getattr(ctx, "tool_call_id", None)
        if on_tool_error == "raise":
            return await sim.arun_tool(name, input, tool_use_id=call_id)
        try:
            return await sim.arun_tool(name, input, tool_use_id=call_id)
        except Exception as exc:  # noqa: BLE001 - every tool failure becomes an observation for the model
            return f"Error: {type(exc).__name__}: {exc}"

    return call


def max_turns(limits: Limits | None) -> int:
    """``Runner.run``'s ``max_turns`` for the declared limits (the SDK's default, 10, without ``max_steps``)."""
    return limits.max_steps if limits is not None and limits.max_steps is not None else DEFAULT_MAX_TURNS


class _Spent(Exception):
    """A declared budget the SDK has no form of was spent before a model call."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.text)
        self.outcome = outcome


class _Budgets(RunHooks[Any]):
    """Stops the run before a model call once ``deadline_s`` or ``max_total_tokens`` is spent."""

    def __init__(self, limits: Limits | None) -> None:
        self.guard = Guard(limits)

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self.guard.used = context.usage.input_tokens + context.usage.output_tokens
        if (spent := self.guard.spent()) is not None:
            raise _Spent(spent)


def outcome_of_error(exc: BaseException) -> Outcome:
    """The `Outcome` of a run that raised one of the Agents SDK's errors (or the API's, past its retries)."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, _Spent):
        return exc.outcome
    if isinstance(exc, MaxTurnsExceeded):
        return Outcome("max_steps", text)
    if isinstance(exc, ModelRefusalError):
        return Outcome("refusal", text)
    return Outcome("error", text)


_ERRORS = (AgentsException, _Spent, openai.APIError, httpx2.HTTPError)


async def run_until_stop(
    agent: Agent[Any],
    input: list[TResponseInputItem],
    *,
    stop: Callable[[], bool],
    cancel_mode: CancelMode = "immediate",
    **run_kwargs: Any,
) -> tuple[Outcome, list[TResponseInputItem]]:
    """Run one turn of ``agent`` streamed (``Runner.run_streamed``) and cancel it once ``stop()`` turns true.

    Returns the turn's `Outcome` and the items to pass as the next turn's input (with the next user message
    appended).  At Stop the outcome is ``aborted`` and the items keep the results of the tools that ran.
    ``cancel_mode`` is ``result.cancel``'s: ``"immediate"`` (the SDK's default) cancels at once;
    ``"after_turn"`` lets the turn finish, which runs the reply's tool calls after the Stop (docs/findings.md).
    ``run_kwargs`` go to ``Runner.run_streamed`` (``max_turns=``, ``hooks=``, ``run_config=``).

    Example::

        items = []
        for text in sim.user_turns:
            items.append({"role": "user", "content": text})
            outcome, items = await run_until_stop(agent, items, stop=sim.abort.is_set, max_turns=8)
    """
    result = Runner.run_streamed(agent, input, **run_kwargs)
    try:
        async for _event in result.stream_events():
            if stop():
                result.cancel(mode=cancel_mode)
    except _ERRORS as exc:
        return outcome_of_error(exc), result.to_input_list()
    if stop():
        return Outcome("aborted"), result.to_input_list()
    return Outcome("final", str(result.final_output)), result.to_input_list()


def make_drive(
    *, api: Api = "chat", on_tool_error: ToolErrorPolicy = "raise", cancel_mode: CancelMode = "immediate"
) -> Callable[[Sim], Any]:
    """An ``async`` drive running an Agents SDK `Agent` with ``Runner`` on the scenario (the ready drives).

    Args:
        api: the model's wire: ``"chat"`` (Chat Completions) or ``"responses"`` (the Responses API).
        on_tool_error: ``"raise"`` lets a tool's exception fail the run (the SDK's contract for a
            `FunctionTool`); ``"message"`` answers the call with the exception's type and text.
        cancel_mode: how `run_until_stop` cancels the run at Stop (``"after_turn"`` shows docs/findings.md's
            finding: the reply's tools run after the Stop).

    Example::

        simloop.verify(make_drive(on_tool_error="message"), limits=simloop.Limits(max_steps=8))
    """

    async def adrive(sim: Sim) -> list[Outcome]:
        agent: Agent[Any] = Agent(
            name="assistant", instructions=sim.system, model=model(sim, api=api),
            tools=list(tools(sim, on_tool_error=on_tool_error)),
        )
        items: list[TResponseInputItem] = []
        outcomes = []
        for text in sim.user_turns:
            items = [*items, {"role": "user", "content": text}]
            outcome, items = await run_until_stop(
                agent, items, stop=sim.abort.is_set, cancel_mode=cancel_mode, max_turns=max_turns(sim.limits),
                hooks=_Budgets(sim.limits), run_config=RunConfig(tracing_disabled=True),
            )
            outcomes.append(outcome)
        return outcomes

    return adrive


def _named(fn: Callable[[Sim], Any], name: str) -> Callable[[Sim], Any]:
    # a module-level name makes `verify` print a replay line that imports the drive (`--drive module:name`)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"simloop drive: an OpenAI Agents SDK Agent with Runner ({name.replace('_', ' ')})."
    return fn


drive = _named(make_drive(), "drive")
drive_tool_messages = _named(make_drive(on_tool_error="message"), "drive_tool_messages")
drive_cancel_after_turn = _named(make_drive(cancel_mode="after_turn"), "drive_cancel_after_turn")
drive_responses = _named(make_drive(api="responses"), "drive_responses")
