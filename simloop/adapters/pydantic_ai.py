"""Drives for a pydantic-ai ``Agent`` with ``AnthropicModel`` on simloop's simulated API.

pydantic-ai's `AnthropicProvider` takes an ``AsyncAnthropic`` client, so the
agent talks to ``sim.async_client`` unmodified.  The scenario's tools are
registered as pydantic-ai tools built from their JSON schema
(`pydantic_ai.Tool.from_schema`), each awaiting ``sim.arun_tool``.

Limits map onto pydantic-ai's own: ``max_steps`` -> ``UsageLimits.request_limit``,
``max_total_tokens`` -> ``UsageLimits.total_tokens_limit``, ``deadline_s`` -> the
run's ``timeout=``.  Without declared limits the agent keeps its defaults
(``UsageLimits()``: 50 requests, no token limit, no timeout).

The way a run ends maps onto an `Outcome`:

* it returned: ``final``, or ``truncated`` / ``refusal`` when its last response
  stopped at ``max_tokens`` / was refused (pydantic-ai returns cut-off text and
  a refusal's text as the run's output; the drive reads
  ``result.response.finish_reason``, ``drive_trusting_output`` does not);
* `UsageLimitExceeded` -> ``max_steps`` / ``token_budget``; `RunTimedOut` ->
  ``deadline``; `ContentFilterError` (a refusal) -> ``refusal``;
  `OutputTokenLimitExceeded` -> ``truncated``; any other `AgentRunError`
  (the API failed, unexpected model behaviour), or an ``anthropic``/``httpx2``
  error it lets through -> ``error``: the agent raises these by design, so the
  drive catches them (anything else that escapes is a ``crash``).

With ``make_drive(tools="mcp")`` the agent reaches the tools through pydantic-ai's ``MCPToolset``
connected in memory to ``sim.mcp_server()`` (`mcp_toolset`): the scenario's tools served by the
official MCP SDK, each call matched to its tool_use by name and input.  A tool's failure reaches the
agent as an MCP tool error, which ``MCPToolset`` turns into a retry prompt by default
(``tool_error_behavior="retry"``); ``"error"`` lets it escape the run.  Needs ``simloop[mcp]`` and
``pydantic-ai-slim[mcp]``.

Stop: every drive runs a turn with `run_until_stop`, which leaves the run when ``sim.abort`` is set and
returns ``aborted`` with the history that keeps the finished tools' results (a bare ``break`` out of
``agent.iter`` loses them: docs/findings.md, "Stopping a run").  ``drive_mcp`` too: the agent sends a reply's calls
together, so when they take no time the in-memory MCP server may start the second after Stop fired in the first;
the server records that its request had arrived before the Stop (``ToolStart.arrived``), and ``abort`` does not
hold it against the loop (docs/design.md, Abort).

A tool's exception propagates as it would from a plain pydantic-ai tool
(pydantic-ai only turns `ModelRetry` and `ToolFailed` into results the model
sees); ``on_tool_error="tool_failed"`` wraps it in `ToolFailed`, the way
pydantic-ai recommends reporting a terminal failure.

Example::

    from simloop.adapters import pydantic_ai as pai

    simloop.verify(pai.drive, limits=simloop.Limits(max_steps=8, deadline_s=120), max_examples=50)
    simloop.verify(pai.make_drive(on_tool_error="tool_failed"))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anthropic
import httpx2

from simloop.adapters._common import missing_extra
from simloop.outcome import Outcome

try:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.exceptions import (
        AgentRunError,
        ContentFilterError,
        OutputTokenLimitExceeded,
        RunTimedOut,
        ToolFailed,
        UsageLimitExceeded,
    )
    from pydantic_ai.messages import ModelMessage, repair_messages
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
    from pydantic_ai.usage import UsageLimits
except ModuleNotFoundError as e:  # the harness is an extra: say which one
    raise missing_extra(e, adapter="simloop.adapters.pydantic_ai", extra="pydantic-ai") from None

if TYPE_CHECKING:
    from simloop.scenario import Limits
    from simloop.sim import Sim

__all__ = [
    "drive", "drive_mcp", "drive_tool_failed", "drive_trusting_output", "make_drive", "mcp_toolset", "model",
    "outcome_of_error", "run_until_stop", "tools", "usage_limits",
]

ToolErrorPolicy = Literal["raise", "tool_failed"]

# a run that returned can still have ended on a cut-off or refused response: its finish_reason says so
_RETURNED = {"length": "truncated", "content_filter": "refusal"}


def model(sim: Sim) -> AnthropicModel:
    """An `AnthropicModel` whose provider talks to ``sim.async_client``."""
    return AnthropicModel(sim.model, provider=AnthropicProvider(anthropic_client=sim.async_client))


def tools(sim: Sim, *, on_tool_error: ToolErrorPolicy = "raise") -> list[Tool[Any]]:
    """The scenario's tools as pydantic-ai tools (schema as given, input passed through to ``sim.arun_tool``).

    Example::

        agent = Agent(model(sim), tools=tools(sim))
    """
    return [
        Tool.from_schema(
            _call(sim, schema["name"], on_tool_error),
            name=schema["name"],
            description=schema.get("description"),
            json_schema=schema["input_schema"],
        )
        for schema in sim.tool_schemas
    ]


def _call(sim: Sim, name: str, on_tool_error: ToolErrorPolicy) -> Callable[..., Awaitable[str]]:
    async def call(**input: Any) -> str:
        if on_tool_error == "raise":
            return await sim.arun_tool(name, input)
        try:
            return await sim.arun_tool(name, input)
        except Exception as exc:  # every tool failure becomes an observation, as ToolFailed asks
            raise ToolFailed(f"{type(exc).__name__}: {exc}") from exc

    call.__name__ = name
    return call


def mcp_toolset(sim: Sim, *, tool_error_behavior: Literal["retry", "error", "failed"] = "retry") -> Any:
    """``MCPToolset(sim.mcp_server(), tool_error_behavior=...)``: pydantic-ai's MCP toolset on the scenario's tools,
    in memory (a user writes the same line themselves; over HTTP: ``MCPToolset(sim.mcp_url)``).

    Example::

        agent = Agent(model(sim), toolsets=[mcp_toolset(sim)])
    """
    try:
        from pydantic_ai.mcp import MCPToolset
    except ImportError:
        raise ModuleNotFoundError(
            "simloop.adapters.pydantic_ai.mcp_toolset needs pydantic-ai's MCP client and the MCP SDK: "
            "pip install 'simloop[mcp]' 'pydantic-ai-slim[mcp]'", name="fastmcp"
        ) from None
    return MCPToolset(sim.mcp_server(), tool_error_behavior=tool_error_behavior)


def _warm_mcp() -> None:
    """Import the MCP client and server now, not in the first run (where the import's real time counts against
    the run's watchdog); a missing one is reported when the drive runs (`mcp_toolset`)."""
    try:
        import mcp_types  # noqa: F401
        import pydantic_ai.mcp  # noqa: F401
        from mcp.server.mcpserver import MCPServer  # noqa: F401
    except ImportError:
        pass


def usage_limits(limits: Limits | None) -> UsageLimits:
    """pydantic-ai's `UsageLimits` for the declared limits (its defaults for what is not declared)."""
    if limits is None or (limits.max_steps is None and limits.max_total_tokens is None):
        return UsageLimits()
    kwargs: dict[str, Any] = {}
    if limits.max_steps is not None:
        kwargs["request_limit"] = limits.max_steps
    if limits.max_total_tokens is not None:
        kwargs["total_tokens_limit"] = limits.max_total_tokens
    return UsageLimits(**kwargs)


def outcome_of_error(exc: AgentRunError) -> Outcome:
    """The `Outcome` of a run that raised one of pydantic-ai's run errors."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, UsageLimitExceeded):
        return Outcome("token_budget" if "tokens_limit" in str(exc) else "max_steps", text)
    if isinstance(exc, RunTimedOut):
        return Outcome("deadline", text)
    if isinstance(exc, ContentFilterError):
        return Outcome("refusal", text)
    if isinstance(exc, OutputTokenLimitExceeded):
        return Outcome("truncated", text)
    return Outcome("error", text)


async def run_until_stop(
    agent: Agent[Any, Any],
    user_prompt: str,
    message_history: Sequence[ModelMessage] = (),
    *,
    stop: Callable[[], bool],
    check_finish_reason: bool = True,
    **run_kwargs: Any,
) -> tuple[Outcome, list[ModelMessage]]:
    """Run one turn of ``agent`` (``agent.iter``) and leave it at the first node after ``stop()`` turns true.

    Returns the turn's `Outcome` and the history to pass as the next turn's ``message_history``.  At Stop the
    outcome is ``aborted`` and the history keeps the finished tools' results (the pending request node's, which
    a bare ``break`` loses) with every call that never ran closed by ``repair_messages``.  A run error maps
    through `outcome_of_error` (an API error pydantic-ai lets through: ``error``), the history left as it was.
    ``run_kwargs`` go to ``agent.iter`` (``usage_limits=``, ``timeout=``, ``deps=``, ...).

    Example::

        history = []
        for text in sim.user_turns:
            outcome, history = await run_until_stop(agent, text, history, stop=sim.abort.is_set)
    """
    history = list(message_history)
    node: Any = None
    agent_run: Any = None
    try:
        async with agent.iter(user_prompt, message_history=history, **run_kwargs) as agent_run:
            async for node in agent_run:
                if stop():
                    break
    except AgentRunError as exc:  # a limit, a refusal, the API failed past its retries
        if stop() and agent_run is not None:  # it failed after Stop (a tool out of retries): the turn is stopped,
            return Outcome("aborted"), repair_messages(agent_run.all_messages())  # what ran kept, the rest closed
        return outcome_of_error(exc), history
    except (anthropic.APIError, httpx2.HTTPError) as exc:  # the API failed and pydantic-ai let it through
        return Outcome("error", f"{type(exc).__name__}: {exc}"), history
    if stop():
        pending: list[ModelMessage] = [node.request] if Agent.is_model_request_node(node) else []  # tools' results
        return Outcome("aborted"), repair_messages(agent_run.all_messages() + pending)
    result = agent_run.result
    if result is None:  # the run ended without a result and without Stop: pydantic-ai's own contract broke
        return Outcome("error", "agent.iter ended without a result"), agent_run.all_messages()
    reason = result.response.finish_reason if check_finish_reason else None
    return Outcome(_RETURNED.get(reason or "", "final"), str(result.output)), result.all_messages()


def make_drive(
    *,
    on_tool_error: ToolErrorPolicy = "raise",
    check_finish_reason: bool = True,
    tools_via: Literal["python", "mcp"] = "python",
    mcp_tool_errors: Literal["retry", "error", "failed"] = "retry",
) -> Callable[[Sim], Any]:
    """An ``async`` drive running a pydantic-ai `Agent` on the scenario (the ready-made drives are made here).

    Args:
        on_tool_error: ``"raise"`` lets a tool's exception propagate (pydantic-ai's default for a plain
            exception); ``"tool_failed"`` reports it to the model as `ToolFailed`.
        check_finish_reason: read ``result.response.finish_reason`` when the run returns (``length`` ->
            ``truncated``, ``content_filter`` -> ``refusal``); ``False`` takes a returned run as ``final``,
            as a caller that uses ``result.output`` does.
        tools_via: ``"python"`` registers the tools as pydantic-ai tools; ``"mcp"`` serves them over MCP
            (`mcp_toolset`), with ``mcp_tool_errors`` as its ``tool_error_behavior``.

    Example::

        simloop.verify(make_drive(on_tool_error="tool_failed"), limits=simloop.Limits(max_steps=8))
    """

    if tools_via == "mcp":
        _warm_mcp()

    async def adrive(sim: Sim) -> list[Outcome]:
        if tools_via == "mcp":
            agent: Agent[None, str] = Agent(
                model(sim), toolsets=[mcp_toolset(sim, tool_error_behavior=mcp_tool_errors)],
                system_prompt=sim.system or (),
            )
        else:
            agent = Agent(model(sim), tools=tools(sim, on_tool_error=on_tool_error), system_prompt=sim.system or ())
        limits = sim.limits
        timeout = limits.deadline_s if limits is not None else None
        history: list[ModelMessage] = []  # the conversation so far: pydantic-ai's message_history
        outcomes = []
        for text in sim.user_turns:
            outcome, history = await run_until_stop(
                agent, text, history, stop=sim.abort.is_set, check_finish_reason=check_finish_reason,
                usage_limits=usage_limits(limits), timeout=timeout,
            )
            outcomes.append(outcome)
        return outcomes

    return adrive


def _named(fn: Callable[[Sim], Any], name: str) -> Callable[[Sim], Any]:
    # a module-level name makes `verify` print a replay line that imports the drive (`--drive module:name`)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"simloop drive: a pydantic-ai Agent with AnthropicModel ({name.replace('_', ' ')})."
    return fn


drive = _named(make_drive(), "drive")
drive_tool_failed = _named(make_drive(on_tool_error="tool_failed"), "drive_tool_failed")
drive_trusting_output = _named(make_drive(check_finish_reason=False), "drive_trusting_output")
drive_mcp = _named(make_drive(tools_via="mcp"), "drive_mcp")
