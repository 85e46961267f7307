"""Drives for the SDK's own agent loop, ``client.beta.messages.tool_runner``.

The runner is used as its documentation shows: the scenario's tools become
`anthropic.lib.tools.BetaFunctionTool` / `BetaAsyncFunctionTool` objects (what
``@anthropic.beta_tool`` makes, built here from ``sim.tool_schemas`` and
``sim.run_tool`` without a decorator), the runner is iterated reply by reply,
and its ending is read off what it hands back:

* the last reply's ``stop_reason``: ``end_turn``/``stop_sequence`` -> ``final``,
  ``max_tokens``/``model_context_window_exceeded`` -> ``truncated``,
  ``refusal`` -> ``refusal``;
* the runner ran out of ``max_iterations`` (its last reply still asked for
  tools, or paused) -> ``max_steps``;
* an `anthropic.APIError` (the SDK's retries gave up) or an ``httpx2.HTTPError``
  (a stream cut mid-reply, which the SDK lets through) -> ``error``: the runner
  raises them by design, so the drive catches them (anything else that escapes
  is a ``crash``).

The declared `simloop.Limits` map onto the runner: ``max_steps`` is
``max_iterations``; the runner has no deadline or token budget, so the drive
checks ``deadline_s`` and ``max_total_tokens`` after each reply and each tool
and stops the runner with ``runner.close()`` (which, called from a tool, stops
it before its next request).  Without declared limits the runner runs with its
own defaults: no iteration cap at all.

Ready-made drives (message threads are the runner's default)::

    from simloop.adapters import tool_runner

    simloop.verify(tool_runner.drive, limits=simloop.Limits(max_steps=10))          # sync, threads
    simloop.verify(tool_runner.async_stream_drive_no_thread, max_examples=50)       # async, streaming, thread=False
    simloop.verify(tool_runner.make_drive(stream=True, run_tools_eagerly=True))     # any other combination
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
from anthropic.lib.tools import BetaAsyncFunctionTool, BetaFunctionTool

from simloop.adapters._common import Guard, text_of
from simloop.outcome import Outcome

if TYPE_CHECKING:
    from anthropic.types.beta import BetaMessage

    from simloop.sim import Sim

__all__ = [
    "async_drive",
    "async_drive_no_thread",
    "async_runnable_tools",
    "async_stream_drive",
    "async_stream_drive_no_thread",
    "drive",
    "drive_no_thread",
    "make_drive",
    "outcome_of",
    "runnable_tools",
    "stream_drive",
    "stream_drive_eager",
    "stream_drive_no_thread",
]

#: Per-request output limit: generous, so that a ``max_tokens`` stop is a real event.
MAX_TOKENS = 4096

_FINAL = ("end_turn", "stop_sequence")
_TRUNCATED = ("max_tokens", "model_context_window_exceeded")
_GOES_ON = ("tool_use", "pause_turn", "compaction")  # the runner sends another request after these
# What the runner lets escape when the API fails, by design: the SDK's errors once its retries give up, and
# the transport's when a stream is cut mid-reply (the SDK does not wrap a failed stream read).  The drive
# catches them and returns Outcome("error"), as an application would; anything else escaping is a `crash`.
_API_ERRORS = (anthropic.APIError, httpx2.HTTPError)


def runnable_tools(sim: Sim, *, after_call: Callable[[], None] | None = None) -> list[BetaFunctionTool[Any]]:
    """The scenario's tools as the runner's sync tools, each running ``sim.run_tool`` (faults included).

    The input goes through as the model wrote it (the schema is the scenario's,
    not one derived from a signature).  A tool's exception propagates to the
    runner, which sends it back as an ``is_error`` result.  ``after_call`` runs
    after every execution, also a failed one (the drives check their deadline there).

    Example::

        runner = sim.client.beta.messages.tool_runner(tools=runnable_tools(sim), ...)
    """
    return [
        BetaFunctionTool(
            _sync_call(sim, schema["name"], after_call),
            name=schema["name"],
            description=schema.get("description") or schema["name"],
            input_schema=schema["input_schema"],
        )
        for schema in sim.tool_schemas
    ]


def async_runnable_tools(
    sim: Sim, *, after_call: Callable[[], Awaitable[None]] | None = None
) -> list[BetaAsyncFunctionTool[Any]]:
    """Async twin of `runnable_tools`: each tool awaits ``sim.arun_tool`` (latency on the loop's clock)."""
    return [
        BetaAsyncFunctionTool(
            _async_call(sim, schema["name"], after_call),
            name=schema["name"],
            description=schema.get("description") or schema["name"],
            input_schema=schema["input_schema"],
        )
        for schema in sim.tool_schemas
    ]


def _sync_call(sim: Sim, name: str, after: Callable[[], None] | None) -> Callable[..., str]:
    def call(**input: Any) -> str:
        try:
            return sim.run_tool(name, input)
        finally:
            if after is not None:
                after()

    call.__name__ = name
    return call


def _async_call(sim: Sim, name: str, after: Callable[[], Awaitable[None]] | None) -> Callable[..., Awaitable[str]]:
    async def call(**input: Any) -> str:
        try:
            return await sim.arun_tool(name, input)
        finally:
            if after is not None:
                await after()

    call.__name__ = name
    return call


def outcome_of(last: BetaMessage | None, *, iterations: int, max_iterations: int | None) -> Outcome:
    """The `Outcome` of a runner that ended by itself, from its last reply and how many replies it asked for.

    Example::

        last = runner.until_done()
        return outcome_of(last, iterations=n, max_iterations=10)
    """
    if last is None:
        return Outcome("error", "the tool runner ended without a reply")
    text = text_of(last.content)
    reason = last.stop_reason
    if reason in _FINAL:
        return Outcome("final", text)
    if reason in _TRUNCATED:
        return Outcome("truncated", text)
    if reason == "refusal":
        return Outcome("refusal", text)
    if reason in _GOES_ON and max_iterations is not None and iterations >= max_iterations:
        return Outcome("max_steps", f"no final answer after {iterations} replies (max_iterations={max_iterations})")
    return Outcome("error", f"the tool runner stopped on stop_reason {reason!r} after {iterations} replies")


def make_drive(
    *,
    stream: bool = False,
    thread: bool = True,
    is_async: bool = False,
    run_tools_eagerly: bool = False,
    max_tokens: int = MAX_TOKENS,
    max_iterations: int | None = None,
) -> Callable[[Sim], Any]:
    """A drive for the tool runner with the given options (the ready-made drives are made here).

    Args:
        stream: use ``stream=True`` (the runner yields a stream per reply, which the drive reads to the end).
        thread: ``False`` passes ``thread=False`` (full history each request); by default the runner uses
            server-side message threads.
        is_async: run on ``sim.async_client`` with async tools (an ``async def`` drive).
        run_tools_eagerly: with ``stream``, run each tool call as soon as its block is complete.
        max_tokens: the per-request output limit.
        max_iterations: the runner's cap; by default the declared ``max_steps`` (none declared: no cap).

    Example::

        simloop.verify(make_drive(stream=True, thread=False), limits=simloop.Limits(max_steps=8))
    """
    options = {"stream": stream, "thread": thread, "run_tools_eagerly": run_tools_eagerly,
               "max_tokens": max_tokens, "max_iterations": max_iterations}
    if is_async:
        async def adrive(sim: Sim) -> Outcome:
            return await _arun(sim, **options)

        return adrive

    def sdrive(sim: Sim) -> Outcome:
        return _run(sim, **options)

    return sdrive


def _request(sim: Sim, *, stream: bool, thread: bool, run_tools_eagerly: bool, max_tokens: int,
             max_iterations: int | None) -> tuple[dict[str, Any], int | None]:
    cap = max_iterations if max_iterations is not None else sim.limits.max_steps
    kwargs: dict[str, Any] = {
        "model": sim.model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": sim.task}],
    }
    if sim.system:
        kwargs["system"] = sim.system
    if cap is not None:
        kwargs["max_iterations"] = cap
    if not thread:
        kwargs["thread"] = False
    if stream:
        kwargs["stream"] = True
        if run_tools_eagerly:
            kwargs["run_tools_eagerly"] = True
    return kwargs, cap


def _run(sim: Sim, **options: Any) -> Outcome:
    kwargs, cap = _request(sim, **options)
    guard = Guard(sim.limits)
    held: list[Any] = []
    stopped: list[Outcome] = []

    def after_call() -> None:  # a tool may be what spends the deadline: stop before the next request
        spent = guard.spent()
        if spent is not None and held:
            stopped.append(spent)
            held[0].close()

    runner = sim.client.beta.messages.tool_runner(tools=runnable_tools(sim, after_call=after_call), **kwargs)
    held.append(runner)
    last: BetaMessage | None = None
    iterations = 0
    try:
        for item in runner:
            last = item.get_final_message() if options["stream"] else item
            iterations += 1
            guard.add(last.usage)
            spent = guard.spent()
            if spent is not None and last.stop_reason in _GOES_ON:
                runner.close()
                return spent
    except _API_ERRORS as exc:  # the SDK has retried what is worth retrying
        return Outcome("error", f"{type(exc).__name__}: {exc}")
    if stopped:
        return stopped[0]
    return outcome_of(last, iterations=iterations, max_iterations=cap)


async def _arun(sim: Sim, **options: Any) -> Outcome:
    kwargs, cap = _request(sim, **options)
    guard = Guard(sim.limits)
    held: list[Any] = []
    stopped: list[Outcome] = []

    async def after_call() -> None:
        spent = guard.spent()
        if spent is not None and held:
            stopped.append(spent)
            await held[0].close()

    runner = sim.async_client.beta.messages.tool_runner(
        tools=async_runnable_tools(sim, after_call=after_call), **kwargs
    )
    held.append(runner)
    last: BetaMessage | None = None
    iterations = 0
    try:
        async for item in runner:
            last = await item.get_final_message() if options["stream"] else item
            iterations += 1
            guard.add(last.usage)
            spent = guard.spent()
            if spent is not None and last.stop_reason in _GOES_ON:
                await runner.close()
                return spent
    except _API_ERRORS as exc:
        return Outcome("error", f"{type(exc).__name__}: {exc}")
    if stopped:
        return stopped[0]
    return outcome_of(last, iterations=iterations, max_iterations=cap)


def _named(fn: Callable[[Sim], Any], name: str) -> Callable[[Sim], Any]:
    # a module-level name makes `verify` print a replay line that imports the drive (`--drive module:name`)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"simloop drive: the SDK's tool runner ({name.replace('_', ' ')})."
    return fn


drive = _named(make_drive(), "drive")
drive_no_thread = _named(make_drive(thread=False), "drive_no_thread")
stream_drive = _named(make_drive(stream=True), "stream_drive")
stream_drive_no_thread = _named(make_drive(stream=True, thread=False), "stream_drive_no_thread")
stream_drive_eager = _named(make_drive(stream=True, run_tools_eagerly=True), "stream_drive_eager")
async_drive = _named(make_drive(is_async=True), "async_drive")
async_drive_no_thread = _named(make_drive(is_async=True, thread=False), "async_drive_no_thread")
async_stream_drive = _named(make_drive(is_async=True, stream=True), "async_stream_drive")
async_stream_drive_no_thread = _named(
    make_drive(is_async=True, stream=True, thread=False), "async_stream_drive_no_thread"
)
