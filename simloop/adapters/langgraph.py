"""Drives for LangGraph's prebuilt ReAct agent with langchain-anthropic's ``ChatAnthropic``.

``ChatAnthropic`` builds its own ``anthropic`` clients from its settings; the
drive builds the same clients (same API key, retries, timeout and headers,
taken from the model's ``_client_params``) on simloop's httpx2 clients, so
every request reaches the simulated API and nothing else about the model
changes.  The scenario's tools become LangChain ``StructuredTool`` objects with
the scenario's JSON schema as ``args_schema``, calling ``sim.run_tool`` /
``sim.arun_tool``; the agent is ``langgraph.prebuilt.create_react_agent``.

Conversations and restarts, as a LangGraph chat is written: the agent has a checkpointer (an ``InMemorySaver``
kept in ``sim.store`` under `CHECKPOINTER`, so it survives a simulated crash) and the conversation one thread
(``config["configurable"]["thread_id"]``, `THREAD_ID`); each of ``sim.user_turns`` is a new user message on that
thread, so the graph's own state carries the history.  A turn stopped early (a budget, the recursion limit) leaves
tool calls open: the next turn first answers them as not run (``update_state(..., as_node="tools")``).  After a
restart the drive goes through the turns finished before the crash (their outcomes are in the store), resumes
the turn the process died in from the thread's last checkpoint (``stream(None, config)``, as LangGraph resumes a
thread: it runs the interrupted node again, see docs/findings.md F15) and takes the turns after it.

Limits: ``max_steps`` N -> ``recursion_limit`` 2N (one model step and one tool
step per turn), so the agent makes at most N model calls.  LangGraph has no
run deadline or token budget, so the drive streams the graph's updates and
stops it between steps when ``deadline_s`` or ``max_total_tokens`` is spent.
Without declared limits the graph keeps LangGraph's default recursion limit.

The ending maps onto an `Outcome` through the last AI message's
``response_metadata["stop_reason"]`` (``end_turn``/``stop_sequence`` ->
``final``, ``max_tokens`` -> ``truncated``, ``refusal`` -> ``refusal``); the
agent's own "Sorry, need more steps to process this request." (its answer when
the recursion budget runs out) and `GraphRecursionError` -> ``max_steps``; an
``anthropic.APIError`` or ``httpx2.HTTPError`` -> ``error`` (the agent raises them by design when the API
fails, so the drive catches them; anything else that escapes is a ``crash``).  ``drive_trusting_output`` instead takes a
graph that returned as ``final``, as a caller that reads the last message does;
``drive_handle_tool_errors`` runs the tools in ``ToolNode(handle_tool_errors=True)``.

Stop: the drives run the tools in `stop_aware_tool_node` (a call not yet started when ``sim.abort`` is set is
answered "not run") and stream each turn with `stream_until_stop`, which leaves the stream once the last
reply's calls all have results and writes those back to the thread (a stream closed mid-step drops them:
docs/findings.md, "Stopping a run"); the turn returns ``aborted``.

Example::

    from simloop.adapters import langgraph as lg

    simloop.verify(lg.drive, limits=simloop.Limits(max_steps=8), max_examples=50)
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Sequence
from contextlib import aclosing, closing
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

import anthropic
import httpx2
from pydantic import SecretStr

from simloop.adapters._common import Guard, missing_extra
from simloop.outcome import Outcome

try:
    from langchain_anthropic import ChatAnthropic
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.errors import GraphRecursionError
except ModuleNotFoundError as e:  # the harness is an extra: say which one
    raise missing_extra(e, adapter="simloop.adapters.langgraph", extra="langgraph") from None

if TYPE_CHECKING:
    from simloop.sim import Sim

__all__ = [
    "CHECKPOINTER",
    "NEED_MORE_STEPS",
    "THREAD",
    "THREAD_ID",
    "async_drive",
    "chat_model",
    "drive",
    "drive_handle_tool_errors",
    "drive_trusting_output",
    "make_drive",
    "outcome_of",
    "recursion_limit",
    "stop_aware_tool_node",
    "stream_until_stop",
    "tools",
]

#: What the prebuilt ReAct agent answers, in place of the model's reply, when its recursion budget runs out.
NEED_MORE_STEPS = "Sorry, need more steps to process this request."

# What the agent lets escape when the API fails, by design: the SDK's errors once its retries give up, and the
# transport's when a streamed reply is cut.  The drive catches them and returns Outcome("error"), as an
# application would; anything else escaping is a `crash` (a tool's exception: `tool_errors`).
_API_ERRORS = (anthropic.APIError, httpx2.HTTPError)

_STOPS = {"end_turn": "final", "stop_sequence": "final", "max_tokens": "truncated",
          "model_context_window_exceeded": "truncated", "refusal": "refusal"}


def chat_model(sim: Sim, *, streaming: bool = False, **settings: Any) -> ChatAnthropic:
    """A ``ChatAnthropic`` whose clients reach the simulated API (its own settings otherwise untouched)."""
    key = SecretStr(sim.client.api_key or "sk-ant-simloop")
    model = ChatAnthropic(model_name=sim.model, api_key=key, streaming=streaming, **settings)
    params = {**model._client_params, "base_url": str(sim.http_client.base_url)}
    # ChatAnthropic keeps its clients in cached properties: filling them in is the one seam it has for a transport
    model.__dict__["_client"] = anthropic.Anthropic(**params, http_client=sim.http_client)
    model.__dict__["_async_client"] = anthropic.AsyncAnthropic(**params, http_client=sim.async_http_client)
    return model


# The tool_use id of the call a tool is running for.  A LangChain tool's function is not told it (an
# injected argument needs a pydantic ``args_schema``; these keep the scenario's JSON schema), so the tool
# sets it around its run: the ToolBox then matches the execution to that very call, which by name and
# input alone it cannot do for two identical calls run at once on the ToolNode's threads.
_CALL_ID: ContextVar[str | None] = ContextVar("simloop_tool_call_id", default=None)


class _SimTool(StructuredTool):
    def run(self, *args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(kwargs.get("tool_call_id"))
        try:
            return super().run(*args, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def arun(self, *args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(kwargs.get("tool_call_id"))
        try:
            return await super().arun(*args, **kwargs)
        finally:
            _CALL_ID.reset(token)


def tools(sim: Sim) -> list[StructuredTool]:
    """The scenario's tools as LangChain tools (schema as given; sync and async both reach the scenario's tools,
    told the tool_use id of the call they run for)."""
    return [
        _SimTool.from_function(
            func=_sync_call(sim, schema["name"]),
            coroutine=_async_call(sim, schema["name"]),
            name=schema["name"],
            description=schema.get("description") or schema["name"],
            args_schema=schema["input_schema"],
        )
        for schema in sim.tool_schemas
    ]


def _sync_call(sim: Sim, name: str) -> Callable[..., str]:
    def call(**input: Any) -> str:
        return sim.run_tool(name, input, tool_use_id=_CALL_ID.get())

    return call


def _async_call(sim: Sim, name: str) -> Callable[..., Awaitable[str]]:
    async def call(**input: Any) -> str:
        return await sim.arun_tool(name, input, tool_use_id=_CALL_ID.get())

    return call


def recursion_limit(max_steps: int | None) -> int | None:
    """The ``recursion_limit`` that allows ``max_steps`` model calls (None: LangGraph's default)."""
    return None if max_steps is None else 2 * max_steps


def outcome_of(last: BaseMessage | None, *, check_stop_reason: bool = True) -> Outcome:
    """The `Outcome` of a graph that returned, from its last message."""
    if not isinstance(last, AIMessage):
        return Outcome("error", f"the graph ended on {type(last).__name__}, not on the model's answer")
    text = last.text if isinstance(last.text, str) else str(last.text)
    if not check_stop_reason:
        return Outcome("final", text)
    stop = last.response_metadata.get("stop_reason")
    if stop is None and text == NEED_MORE_STEPS:
        return Outcome("max_steps", text)
    if stop in _STOPS:
        return Outcome(_STOPS[stop], text)
    return Outcome("error", f"the agent stopped on stop_reason {stop!r}: {text}")


_NOT_RUN = "Not run: the user pressed Stop."


def stop_aware_tool_node(
    tools: Sequence[Any], *, stop: Callable[[], bool], **tool_node_kwargs: Any
) -> Any:
    """A ``ToolNode(tools, ...)`` that starts no tool call once ``stop()`` is true: each is answered with an error
    ``ToolMessage`` saying it was not run (LangGraph's own ``ToolNode`` runs every call of the reply).

    ``tool_node_kwargs`` go to ``ToolNode`` (``handle_tool_errors=``, ...).  Give the node to
    ``create_react_agent`` (or your graph) in place of the tool list, and stream it with `stream_until_stop`.

    Example::

        agent = create_react_agent(model, stop_aware_tool_node(tools, stop=sim.abort.is_set), checkpointer=saver)
    """
    from langgraph.prebuilt import ToolNode

    def not_run(request: Any) -> ToolMessage:
        return ToolMessage(_NOT_RUN, tool_call_id=request.tool_call["id"], name=request.tool_call["name"],
                           status="error")

    def unless_stopped(request: Any, execute: Callable[[Any], Any]) -> Any:
        return not_run(request) if stop() else execute(request)

    async def aunless_stopped(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        return not_run(request) if stop() else await execute(request)

    return ToolNode(tools, wrap_tool_call=unless_stopped, awrap_tool_call=aunless_stopped, **tool_node_kwargs)


def stream_until_stop(
    agent: Any, inputs: Any, config: Any, *, stop: Callable[[], bool]
) -> Generator[dict[str, Any], None, None]:
    """``agent.stream(inputs, config, stream_mode="updates")``, left cleanly at Stop: the updates are yielded as
    they come; once ``stop()`` is true the stream is left as soon as every call of the last reply has a result,
    and those results are written back to the thread (``update_state(..., as_node="tools")``: a stream closed
    mid-step drops its step's results from the thread, and the next message on it then fails).

    Run the tools in a `stop_aware_tool_node`, so that no call starts after Stop, and do not ``break`` at Stop
    yourself: the tools of one reply run as parallel tasks, and a stream left before the last of them reports
    drops its call unanswered (the generator ends by itself once they all have).

    Example::

        inputs = {"messages": [("user", text)]}
        for update in stream_until_stop(agent, inputs, config, stop=sim.abort.is_set):
            ...
        last = agent.get_state(config).values["messages"][-1]
        outcome = Outcome("aborted") if sim.abort.is_set() else outcome_of(last)
    """
    seen: list[BaseMessage] = []
    ended = False
    try:
        with closing(agent.stream(inputs, config, stream_mode="updates")) as updates:
            for update in updates:
                seen += _messages_of(update)
                yield update
                if stop() and not _open_calls(seen):
                    return
        ended = True
    finally:
        written = _written_back(seen) if not ended and stop() else None
        if written is not None:
            agent.update_state(config, written, as_node="tools")


async def _astream_until_stop(
    agent: Any, inputs: Any, config: Any, *, stop: Callable[[], bool]
) -> AsyncGenerator[dict[str, Any], None]:
    """`stream_until_stop` for ``astream`` (the async drive's)."""
    seen: list[BaseMessage] = []
    ended = False
    try:
        async with aclosing(agent.astream(inputs, config, stream_mode="updates")) as updates:
            async for update in updates:
                seen += _messages_of(update)
                yield update
                if stop() and not _open_calls(seen):
                    return
        ended = True
    finally:
        written = _written_back(seen) if not ended and stop() else None
        if written is not None:
            await agent.aupdate_state(config, written, as_node="tools")


def _messages_of(update: Any) -> list[BaseMessage]:
    """The messages one ``stream_mode="updates"`` update carries."""
    if not isinstance(update, dict):
        return []
    return [m for node in update.values() if isinstance(node, dict) for m in node.get("messages", [])]


def _last_calls(seen: list[BaseMessage]) -> list[Any]:
    """The tool calls of the last reply the stream gave."""
    asked = [m for m in seen if isinstance(m, AIMessage)]
    return list(asked[-1].tool_calls) if asked else []


def _open_calls(seen: list[BaseMessage]) -> set[str]:
    """The ids of the last reply's calls the stream has given no result for yet."""
    answered = {m.tool_call_id for m in seen if isinstance(m, ToolMessage)}
    return {c["id"] for c in _last_calls(seen)} - answered


def _written_back(seen: list[BaseMessage]) -> dict[str, Any] | None:
    """The results of the last reply's calls the stream gave, as the tools' state update (None: none)."""
    ids = {c["id"] for c in _last_calls(seen)}
    results = [m for m in seen if isinstance(m, ToolMessage) and m.tool_call_id in ids]
    return {"messages": results} if results else None


def make_drive(
    *, is_async: bool = False, streaming: bool = False, check_stop_reason: bool = True,
    handle_tool_errors: bool = False,
) -> Callable[[Sim], Any]:
    """A drive running ``create_react_agent(ChatAnthropic, tools)`` (the ready-made drives are made here).

    Args:
        is_async: run the graph with ``astream`` on the async client (an ``async def`` drive).
        streaming: ``ChatAnthropic(streaming=True)``: each model call streams.
        check_stop_reason: map the last message's ``stop_reason``; ``False`` takes a returned graph as ``final``.
        handle_tool_errors: run the tools in ``ToolNode(tools, handle_tool_errors=True)``, which makes every tool
            exception an error ToolMessage (LangGraph's default lets all but invalid-argument errors propagate).

    Example::

        simloop.verify(make_drive(is_async=True), limits=simloop.Limits(max_steps=8))
    """

    def setup(sim: Sim) -> tuple[Any, dict[str, Any]]:
        return _agent(sim, streaming=streaming, handle_tool_errors=handle_tool_errors)

    if is_async:
        @_prepared
        async def adrive(sim: Sim) -> Outcome | list[Outcome]:
            return await _aconverse(sim, *setup(sim), check_stop_reason=check_stop_reason)

        return adrive

    @_prepared
    def sdrive(sim: Sim) -> Outcome | list[Outcome]:
        return _converse(sim, *setup(sim), check_stop_reason=check_stop_reason)

    return sdrive


def _agent(sim: Sim, *, streaming: bool, handle_tool_errors: bool) -> tuple[Any, dict[str, Any]]:
    """The prebuilt ReAct agent on the sim's model and tools, and its config (the thread, the recursion limit)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    # one thread per conversation, its checkpoints in the store a restart keeps: the graph a LangGraph user
    # builds for a chat, which resumes the same thread after the process died
    saver = sim.store.setdefault(CHECKPOINTER, InMemorySaver())
    thread_id = sim.store.setdefault(THREAD, THREAD_ID)
    node_kwargs: dict[str, Any] = {"handle_tool_errors": True} if handle_tool_errors else {}
    bridged = stop_aware_tool_node(tools(sim), stop=sim.abort.is_set, **node_kwargs)
    with warnings.catch_warnings():
        # LangGraph 1.x points at langchain.agents.create_agent; the prebuilt agent is what is tested here
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(chat_model(sim, streaming=streaming), bridged, prompt=sim.system,
                                   checkpointer=saver)
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
    limit = recursion_limit(sim.limits.max_steps)
    if limit is not None:
        config["recursion_limit"] = limit
    return agent, config


def _converse(sim: Sim, agent: Any, config: dict[str, Any], *, check_stop_reason: bool) -> Outcome | list[Outcome]:
    """Each of ``sim.user_turns`` on the thread (``stream``), after closing calls a stopped turn left open."""
    turns = _Turns(sim)
    for i, text in enumerate(sim.user_turns):
        if turns.finished(i):
            continue
        state = agent.get_state(config)
        inputs = turns.inputs(i, text, state, _closing_update(state))
        if inputs is _SETTLE:
            agent.update_state(config, _closing_update(state), as_node="tools")
            inputs = turns.message(text)
        guard, messages = Guard(sim.limits), list[BaseMessage]()
        outcome: Outcome | None = None
        try:
            stream = stream_until_stop(agent, inputs, config, stop=sim.abort.is_set)
            with closing(stream) as updates:
                for update in updates:
                    outcome = _step(update, guard, messages)
                    if outcome is not None:
                        break
        except GraphRecursionError as exc:
            outcome = Outcome("max_steps", f"GraphRecursionError: {exc}")
        except _API_ERRORS as exc:
            outcome = Outcome("error", f"{type(exc).__name__}: {exc}")
        turns.done(_turn_outcome(sim, outcome, messages, check_stop_reason=check_stop_reason))
    return turns.outcomes()


async def _aconverse(
    sim: Sim, agent: Any, config: dict[str, Any], *, check_stop_reason: bool
) -> Outcome | list[Outcome]:
    """`_converse` on the async graph (``astream``, ``aget_state``, ``aupdate_state``)."""
    turns = _Turns(sim)
    for i, text in enumerate(sim.user_turns):
        if turns.finished(i):
            continue
        state = await agent.aget_state(config)
        inputs = turns.inputs(i, text, state, _closing_update(state))
        if inputs is _SETTLE:
            await agent.aupdate_state(config, _closing_update(state), as_node="tools")
            inputs = turns.message(text)
        guard, messages = Guard(sim.limits), list[BaseMessage]()
        outcome: Outcome | None = None
        try:
            stream = _astream_until_stop(agent, inputs, config, stop=sim.abort.is_set)
            async with aclosing(stream) as updates:
                async for update in updates:
                    outcome = _step(update, guard, messages)
                    if outcome is not None:
                        break
        except GraphRecursionError as exc:
            outcome = Outcome("max_steps", f"GraphRecursionError: {exc}")
        except _API_ERRORS as exc:
            outcome = Outcome("error", f"{type(exc).__name__}: {exc}")
        turns.done(_turn_outcome(sim, outcome, messages, check_stop_reason=check_stop_reason))
    return turns.outcomes()


def _step(update: dict[str, Any], guard: Guard, messages: list[BaseMessage]) -> Outcome | None:
    """Take one streamed update's messages (and their tokens, into ``guard``); the outcome once a limit is spent."""
    for node in (update or {}).values():
        for message in (node or {}).get("messages", []) if isinstance(node, dict) else []:
            messages.append(message)
            if isinstance(message, AIMessage) and message.usage_metadata:
                guard.used += message.usage_metadata["input_tokens"] + message.usage_metadata["output_tokens"]
    last = messages[-1] if messages else None
    if isinstance(last, AIMessage) and not last.tool_calls:
        return None  # the graph is about to end by itself
    return guard.spent()


def _turn_outcome(
    sim: Sim, outcome: Outcome | None, messages: list[BaseMessage], *, check_stop_reason: bool
) -> Outcome:
    """How a turn ended: the Stop, else what ended the stream early, else the last message's ``stop_reason``."""
    if sim.abort.is_set():  # the Stop first, whatever else ended the step it stopped
        outcome = Outcome("aborted")
    return outcome or outcome_of(messages[-1] if messages else None, check_stop_reason=check_stop_reason)


#: Where the drives keep their checkpointer and the conversation's thread id in ``sim.store`` (kept across a
#: simulated crash, so the restarted drive resumes the same thread), and that id.
CHECKPOINTER = "langgraph_checkpointer"
THREAD = "langgraph_thread_id"
THREAD_ID = "simloop-conversation"
_SETTLE = object()  # a turn that first closes the tool calls an earlier, stopped turn left open


class _Turns:
    """The conversation's turns across lives: the outcomes of those finished are in ``sim.store``, so a restarted
    drive goes through them without running them again, resumes the turn the process died in from its thread's
    last checkpoint, and takes the next ones.  A restarted life reports the turn it ends on (its earlier turns ran
    in the life that died: their outcomes are that life's)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.finished_turns: list[tuple[str, str]] = sim.store.setdefault("langgraph_turns", [])
        self.resumed = sim.lives > 1
        self.taken: list[Outcome] = []

    def finished(self, i: int) -> bool:
        if i < len(self.finished_turns):
            self.taken.append(Outcome(*self.finished_turns[i]))
            return True
        return False

    def inputs(self, i: int, text: str, state: Any, closing: dict[str, Any] | None) -> Any:
        """None to resume the thread (the turn the process died in), else the turn's message (or `_SETTLE`)."""
        if self.resumed and i == len(self.finished_turns) and state.next:
            return None
        return _SETTLE if closing is not None else self.message(text)

    @staticmethod
    def message(text: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}]}

    def done(self, outcome: Outcome) -> None:
        self.finished_turns.append((outcome.reason, outcome.text))
        self.taken.append(outcome)

    def outcomes(self) -> Outcome | list[Outcome]:
        if self.resumed or len(self.taken) == 1:
            return self.taken[-1]
        return self.taken


def _closing_update(state: Any) -> dict[str, Any] | None:
    """The tool results that close the calls a stopped turn left open on the thread (its last message asks for
    tools no node ran), so that the next user message makes a history the API accepts; None when none is open."""
    from langchain_core.messages import ToolMessage

    messages = (state.values or {}).get("messages", []) if state is not None else []
    last = messages[-1] if messages else None
    if not isinstance(last, AIMessage) or not last.tool_calls:
        return None
    return {"messages": [ToolMessage("Not run: the turn stopped before this tool ran.", tool_call_id=call["id"],
                                     status="error") for call in last.tool_calls]}


def _prepare() -> None:
    """What the drives import on the loop's behalf, imported before the run (simloop._runtime.prepare)."""
    from simloop._runtime.prepare import once
    from simloop.sim import warm_up_sdk

    warm_up_sdk()
    once("langgraph", _import_prebuilt)


def _import_prebuilt() -> None:
    import langgraph.prebuilt  # noqa: F401


F = TypeVar("F", bound=Callable[..., Any])


def _prepared(fn: F) -> F:
    fn.simloop_prepare = _prepare  # type: ignore[attr-defined]
    return fn


def _named(fn: Callable[[Sim], Any], name: str) -> Callable[[Sim], Any]:
    # a module-level name makes `verify` print a replay line that imports the drive (`--drive module:name`)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"simloop drive: LangGraph's ReAct agent with ChatAnthropic ({name.replace('_', ' ')})."
    return fn


drive = _named(make_drive(), "drive")
async_drive = _named(make_drive(is_async=True), "async_drive")
drive_trusting_output = _named(make_drive(check_stop_reason=False), "drive_trusting_output")
drive_handle_tool_errors = _named(make_drive(handle_tool_errors=True), "drive_handle_tool_errors")
