"""Small helpers the example loops share: limit defaults, reply text, token counting.

Little of this is where a loop goes right or wrong; the decisions (what a stop
reason means, how tool results are sent back) stay in each loop's own module
so a reader sees them there.  `StopPolicies` is the exception: the declared
error budget, write budget and repetition limit, kept in one place so that the
three correct loops apply them alike (each defect loop that ignores one says so
in its own module).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from anthropic.types import (
    ContentBlock,
    Message,
    MessageParam,
    ThinkingConfigParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
    WebSearchTool20250305Param,
)

from simloop.outcome import Outcome
from simloop.pricing import cost_usd

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = [
    "CUT_STOPS",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MODEL",
    "DEFAULT_TOKEN_BUDGET",
    "MAX_TOKENS",
    "THINKING",
    "WEB_SEARCH",
    "ARunTool",
    "CostMeter",
    "Denied",
    "RunTool",
    "StopPolicies",
    "aconverse",
    "budgets",
    "converse",
    "durable_arun_tool",
    "durable_run_tool",
    "error_text",
    "gated_arun_tool",
    "gated_run_tool",
    "settle",
    "start_turn",
    "text_of",
    "tokens_used",
    "tool_calls",
    "tool_params",
    "tool_result",
    "with_web_search",
    "writes_of",
]

#: The stop reasons of a reply cut off mid-way: at ``max_tokens``, or because the response filled the model's
#: context window (``model_context_window_exceeded``, Anthropic: treat it as truncated).  Neither is an answer, and
#: a cut tool call's input may be partial: run nothing, report ``truncated``.
CUT_STOPS = ("max_tokens", "model_context_window_exceeded")
#: Per-request output limit; generous, so a ``max_tokens`` stop is a real event.
MAX_TOKENS = 4096
#: Extended thinking, on as current models run it.  Thinking tokens count against
#: MAX_TOKENS, and a tool-use turn's signed thinking blocks must go back unchanged:
#: appending ``reply.content`` as received does that.
THINKING: ThinkingConfigParam = {"type": "enabled", "budget_tokens": 2048}
DEFAULT_MODEL = "claude-sonnet-4-5"
#: The server tool the reference loops declare besides the scenario's tools: the API runs the search itself, and
#: a long search turn may pause (``pause_turn``), which a loop sends back to continue.  The real API pauses only
#: for a request that declares a server tool, and so does simloop's generated model.
WEB_SEARCH: WebSearchTool20250305Param = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
# The loops' own limits when the caller declares none (a cap is a safety net, not a budget).
DEFAULT_MAX_STEPS = 10
DEFAULT_DEADLINE_S = 300.0
DEFAULT_TOKEN_BUDGET = 200_000


class RunTool(Protocol):
    """How the loops run a tool: ``run_tool(name, input, tool_use_id=...) -> str`` (may raise)."""

    def __call__(self, name: str, input: object, *, tool_use_id: str | None = None) -> str: ...


class ARunTool(Protocol):
    """How the async loops run a tool: ``await run_tool(name, input, tool_use_id=...)`` (may raise)."""

    def __call__(self, name: str, input: object, *, tool_use_id: str | None = None) -> Coroutine[Any, Any, str]: ...


def budgets(limits: Limits | None) -> tuple[int, float, int]:
    """``(max_steps, deadline_s, max_total_tokens)``, each filled with the loop's default when not declared."""
    if limits is None:
        return DEFAULT_MAX_STEPS, DEFAULT_DEADLINE_S, DEFAULT_TOKEN_BUDGET
    return (
        limits.max_steps or DEFAULT_MAX_STEPS,
        limits.deadline_s or DEFAULT_DEADLINE_S,
        limits.max_total_tokens or DEFAULT_TOKEN_BUDGET,
    )


def text_of(content: Iterable[ContentBlock]) -> str:
    """The visible text of a reply (thinking and tool calls left out)."""
    return "".join(block.text for block in content if block.type == "text")


def tokens_used(message: Message) -> int:
    """Tokens one reply cost: everything read (cached or not) plus everything written."""
    u = message.usage
    return u.input_tokens + u.output_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)


def tool_calls(message: Message) -> list[ToolUseBlock]:
    """The tool_use blocks of a reply, in the order the model wrote them."""
    return [block for block in message.content if block.type == "tool_use"]


def error_text(exc: BaseException) -> str:
    """An exception as the model should read it (never empty: the API rejects empty text)."""
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def tool_result(call: ToolUseBlock, output: str | Exception) -> ToolResultBlockParam:
    """The tool_result block answering ``call``: the output, or the error with ``is_error``."""
    if isinstance(output, Exception):
        return {"type": "tool_result", "tool_use_id": call.id, "content": error_text(output), "is_error": True}
    return {"type": "tool_result", "tool_use_id": call.id, "content": output}


def tool_params(tools: Sequence[Mapping[str, Any]]) -> list[ToolParam]:
    """``tools`` (``sim.tool_schemas``: plain dicts) typed as the loops' tool lists, unchanged."""
    return cast("list[ToolParam]", list(tools))


def with_web_search(tools: Sequence[Mapping[str, Any]]) -> list[ToolParam]:
    """``tools`` (the API's ``tools`` parameter) with `WEB_SEARCH` after them (typed as the loops' tool lists)."""
    return [*(cast("ToolParam", dict(t)) for t in tools), cast("ToolParam", WEB_SEARCH)]


def writes_of(sim: Sim) -> frozenset[str]:
    """The names of the scenario's write tools (what a loop's author knows: which tools have side effects)."""
    return frozenset(t.name for t in sim.scenario.tools if t.kind == "write")


class CostMeter:
    """The declared cost budget (``max_cost_usd``), if any: each reply's ``usage`` priced at its model's list
    price (`simloop.pricing`; ``prices``: the scenario's overrides, ``sim.prices``).  A loop asks `stop`
    before each model call and tells `add` each reply."""

    def __init__(self, limits: Limits | None, prices: Mapping[str, Any] | None = None) -> None:
        self.budget = limits.max_cost_usd if limits is not None else None
        self.prices = prices
        self.spent = 0.0  # US dollars

    def add(self, reply: Message) -> None:
        """Count what one reply cost."""
        self.spent += cost_usd(reply.usage.model_dump(), reply.model, self.prices)

    def stop(self) -> Outcome | None:
        """The outcome to stop with instead of calling the model again (the budget is spent), or None."""
        if self.budget is not None and self.spent >= self.budget:
            return Outcome(reason="cost_budget", text=f"${self.spent:.4f} spent of a budget of ${self.budget:g}")
        return None


class StopPolicies:
    """The stop policies a loop declares besides its step, deadline and token limits, each only when declared.

    The seeds' stop conditions: an error budget (stop after ``max_tool_errors`` failed tool runs, reason
    ``error_budget``), one write (``max_writes``: the N-th successful write is terminal, reason ``final``:
    the write is the result) and repetition (never run a tool with the same input more than ``max_repeats``
    times; stop with ``repetition`` instead).  A loop asks `before` each tool run and tells `after` it.
    """

    def __init__(self, limits: Limits | None, writes: Collection[str] = ()) -> None:
        self.max_tool_errors = limits.max_tool_errors if limits is not None else None
        self.max_writes = limits.max_writes if limits is not None else None
        self.max_repeats = limits.max_repeats if limits is not None else None
        self.writes = frozenset(writes)
        self.errors = 0
        self.writes_done = 0
        self.runs: Counter[tuple[str, str]] = Counter()

    @property
    def declared(self) -> bool:
        """Whether any policy is declared (a loop may take a simpler path when none is)."""
        return any(x is not None for x in (self.max_tool_errors, self.max_writes, self.max_repeats))

    def before(self, name: str, input: object) -> Outcome | None:
        """The outcome to stop with instead of running this call, or None to run it."""
        if self.max_repeats is not None and self.runs[_key(name, input)] >= self.max_repeats:
            return Outcome(reason="repetition", text=f"{name} was asked for with the same input a "
                                                     f"{self.max_repeats + 1}th time; stopped instead of running it")
        return None

    def after(self, name: str, input: object, output: str | Exception) -> Outcome | None:
        """Count one run of a tool; the outcome to stop with now, or None to go on."""
        if isinstance(output, (NotRun, Denied)):  # not run (a write attempted before, a call denied): nothing to count
            return None
        self.runs[_key(name, input)] += 1
        if isinstance(output, Exception):
            self.errors += 1
            if self.max_tool_errors is not None and self.errors >= self.max_tool_errors:
                return Outcome(reason="error_budget", text=f"{self.errors} tool errors, the budget; last: "
                                                           f"{error_text(output)}")
        elif name in self.writes:
            self.writes_done += 1
            if self.max_writes is not None and self.writes_done >= self.max_writes:
                return Outcome(reason="final", text=output)  # the write is done: that is the result
        return None


def _key(name: str, input: object) -> tuple[str, str]:
    return name, json.dumps(input, sort_keys=True, default=repr)


# -- conversations: one history through every user turn ----------------------------------------------------------


def start_turn(history: list[MessageParam] | None, text: str) -> list[MessageParam]:
    """The messages of a new user turn: ``history`` (kept, and grown in place) with the user's ``text`` added.

    When the history ends in a user message (the results of a turn that stopped after its tools ran), the text
    joins it: the API takes one user message there, results first.
    """
    messages = history if history is not None else []
    if messages and messages[-1]["role"] == "user" and isinstance(messages[-1]["content"], list):
        content: list[Any] = list(messages[-1]["content"])
        messages[-1] = {"role": "user", "content": [*content, {"type": "text", "text": text}]}
    else:
        messages.append({"role": "user", "content": text})
    return messages


def _kind(block: Any) -> str | None:
    return block.get("type") if isinstance(block, dict) else getattr(block, "type", None)


def _field(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, dict) else getattr(block, name, None)


def settle(history: list[MessageParam]) -> None:
    """Leave ``history`` so that the next user turn can be sent after it, whatever ended this turn.

    A turn may stop anywhere: at its step cap in the middle of a paused server tool call, cut off in a tool
    call, after a tool failure spent its error budget, on an empty final answer.  The real API refuses a
    request whose history has an assistant message with no content, a ``server_tool_use`` left without its
    result before a later message, or a ``tool_use`` not answered by the next message (400).  So: drop
    trailing assistant messages that are empty or paused mid server call, and answer every tool_use the
    last assistant message left open with an ``is_error`` result saying it was not run.
    """
    while history and history[-1]["role"] == "assistant":
        content = history[-1]["content"]
        blocks = ([content] if content else []) if isinstance(content, str) else list(content)
        if isinstance(content, str) and content:
            return
        answered = {_field(b, "tool_use_id") for b in blocks if str(_kind(b)).endswith("_tool_result")}
        dangling = any(_kind(b) == "server_tool_use" and _field(b, "id") not in answered for b in blocks)
        if blocks and not dangling:
            break
        history.pop()  # empty, or paused in the middle of a server tool call: the next turn cannot follow it
    for i in range(len(history) - 1, -1, -1):
        if history[i]["role"] != "assistant":
            continue
        content = history[i]["content"]
        uses = [] if isinstance(content, str) else [b for b in content if _kind(b) == "tool_use"]
        if not uses:
            return
        after = history[i + 1]["content"] if i + 1 < len(history) else []
        done = [] if isinstance(after, str) else list(after)
        sent = {_field(b, "tool_use_id") for b in done if _kind(b) == "tool_result"}
        missing: list[Any] = [
            {"type": "tool_result", "tool_use_id": _field(b, "id"), "is_error": True,
             "content": "Not run: the turn stopped before this tool ran."}
            for b in uses if _field(b, "id") not in sent
        ]
        if missing and i + 1 < len(history):
            history[i + 1] = {"role": "user", "content": [*done, *missing]}
        elif missing:
            history.append({"role": "user", "content": missing})
        return


def converse(turns: Iterable[str], run_turn: Callable[[str, list[MessageParam]], Outcome]) -> list[Outcome]:
    """Run every user turn through one history (``run_turn(text, history)``), settling it after each turn."""
    history: list[MessageParam] = []
    outcomes = []
    for text in turns:
        outcomes.append(run_turn(text, history))
        settle(history)
    return outcomes


async def aconverse(
    turns: Iterable[str], run_turn: Callable[[str, list[MessageParam]], Awaitable[Outcome]]
) -> list[Outcome]:
    """`converse` for an async loop."""
    history: list[MessageParam] = []
    outcomes = []
    for text in turns:
        outcomes.append(await run_turn(text, history))
        settle(history)
    return outcomes


# -- durability: a write runs once, across a simulated process death ------------------------------------------------


def _write_key(name: str, input: object) -> str:
    return f"{name}:{json.dumps(input, sort_keys=True, default=repr)}"


class NotRun(str):
    """What `durable_run_tool` answers for a write it did not run again: the model's tool_result, and not a run
    for the stop policies (a skipped write is not the `max_writes`-th write done)."""

    __slots__ = ()


NOT_RUN = NotRun("Not run again: this write was attempted before (it may have taken effect); not repeated.")


def durable_run_tool(sim: Sim) -> RunTool:
    """``sim.run_tool`` with an idempotency key per write, kept in ``sim.store`` (which survives a crash): the key
    is saved before the write runs, and a write whose key is there is not run again, after a restart or after
    it raised (it may have committed before it failed): the answer is `NOT_RUN`."""
    writes = writes_of(sim)
    done: dict[str, str] = sim.store.setdefault("writes", {})

    def run_tool(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        if name not in writes:
            return sim.run_tool(name, input, tool_use_id=tool_use_id)
        key = _write_key(name, input)
        if key in done:
            return NOT_RUN
        done[key] = "started"  # before the write: a crash after its commit leaves the key behind
        return sim.run_tool(name, input, tool_use_id=tool_use_id)

    return run_tool


def durable_arun_tool(sim: Sim) -> ARunTool:
    """`durable_run_tool` for ``sim.arun_tool``."""
    writes = writes_of(sim)
    done: dict[str, str] = sim.store.setdefault("writes", {})

    async def arun_tool(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        if name not in writes:
            return await sim.arun_tool(name, input, tool_use_id=tool_use_id)
        key = _write_key(name, input)
        if key in done:
            return NOT_RUN
        done[key] = "started"
        return await sim.arun_tool(name, input, tool_use_id=tool_use_id)

    return arun_tool


# -- the permission gate: a call that needs approval runs only on the person's yes ------------------------------------


class Denied(PermissionError):
    """A call the person did not approve (or the user stopped while it waited): the loop's error path answers it
    with an ``is_error`` tool_result saying so, and it is not a failed run for the stop policies."""


def _needs_approval(sim: Sim) -> frozenset[str]:
    """The tools whose calls need a person's yes: those that say so, and the writes that do not say otherwise."""
    return frozenset(t.name for t in sim.scenario.tools if t.gated)


def gated_run_tool(sim: Sim, run_tool: RunTool) -> RunTool:
    """``run_tool`` behind the permission gate: a call that needs approval asks ``sim.approve`` first (bound to its
    tool_use), and is not run on a no or no answer (`Denied`), nor when the user pressed Stop during the wait."""
    gated = _needs_approval(sim)

    def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        if name in gated:
            if not sim.approve(name, input, tool_use_id=tool_use_id):
                raise Denied(f"the user did not approve {name}; it was not run")
            if sim.abort.is_set():
                raise Denied(f"the user stopped the turn while {name} waited for approval; it was not run")
        return run_tool(name, input, tool_use_id=tool_use_id)

    return run


def gated_arun_tool(sim: Sim, arun_tool: ARunTool) -> ARunTool:
    """`gated_run_tool` for an async loop (``await sim.aapprove``)."""
    gated = _needs_approval(sim)

    async def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        if name in gated:
            if not await sim.aapprove(name, input, tool_use_id=tool_use_id):
                raise Denied(f"the user did not approve {name}; it was not run")
            if sim.abort.is_set():
                raise Denied(f"the user stopped the turn while {name} waited for approval; it was not run")
        return await arun_tool(name, input, tool_use_id=tool_use_id)

    return run
