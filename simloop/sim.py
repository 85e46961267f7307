"""`Sim`: one simulated run of a loop under test, assembled from a Scenario.

A Sim owns the world of one run: the simulated API (`SimServer`) behind real
``anthropic`` clients, the fault-injecting tools (`ToolBox`), the virtual
clock, the runaway budgets and the transcript.  `Sim.run` drives the loop
(sync or async), keeps whatever escapes it in the `Outcome`, and `Sim.check`
hands the transcript to the invariants.

It is a facade: each concern of the run is a small object of its own in
`simloop._sim` (the clients, the budgets, the user turns, the drive's lives,
the run on its worker thread, what it leaves behind, the tools over MCP), and
the Sim hands each the parts of the world it needs.

Example::

    with simloop.Sim("scenarios/stuck-search.yaml", seed=0) as sim:
        outcome = sim.run(drive)
    sim.check(outcome).raise_for_violations()
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from simloop._abort import AbortSignal, recorder
from simloop._arrivals import Arrivals
from simloop._runtime.clock import VirtualClock
from simloop._runtime.netguard import NetworkPolicy, check_policy
from simloop._runtime.prepare import once
from simloop._runtime.watchdog import Watchdog
from simloop._sim import clients as _clients
from simloop._sim import guard as _guard
from simloop._sim import lives as _lives
from simloop._sim import runner as _runner
from simloop._sim.assemble import ScenarioLike, configured, gate, header, stop_button, virtual_bound
from simloop._sim.clients import Clients
from simloop._sim.forwarded import Forwarded
from simloop._sim.guard import Guard, default_budget
from simloop._sim.lives import Lives
from simloop._sim.mcptools import McpTools
from simloop._sim.runner import Runner
from simloop._sim.turns import UserTurns
from simloop._subagent import SubAgent
from simloop.errors import ScriptExhaustedError, UsageError
from simloop.invariants import Report, check
from simloop.models import Ids, ModelPolicy, Script
from simloop.outcome import Outcome
from simloop.scenario import Abort, Approval, Limits
from simloop.tools import FaultSource, ToolBox
from simloop.transcript import ApprovalEvent, Transcript
from simloop.wire.server import Budget, SimServer

if TYPE_CHECKING:
    import anthropic
    import httpx2
    import mcp.server.mcpserver
    import openai

__all__ = ["DEFAULT_MODEL", "ScriptExhaustedError", "Sim", "warm_up_sdk"]

DEFAULT_MODEL = "claude-sonnet-5"
# Names that lived here before the Sim's pieces moved to simloop._sim (docs/design.md refers to them here).
API_KEY, BASE_URL = _clients.API_KEY, _clients.BASE_URL
OPENAI_API_KEY, OPENAI_BASE_URL = _clients.OPENAI_API_KEY, _clients.OPENAI_BASE_URL
RUNAWAY_MODEL_CALLS, RUNAWAY_SUBRUNS = _guard.RUNAWAY_MODEL_CALLS, _guard.RUNAWAY_SUBRUNS
RUNAWAY_TOTAL_CALLS, MAX_LIVES, MAX_HALTS = _guard.RUNAWAY_TOTAL_CALLS, _lives.MAX_LIVES, _runner.MAX_HALTS

Drive = Callable[["Sim"], Outcome | tuple[str, str] | list[Outcome] | Awaitable[Any]]
T = TypeVar("T")


class Sim:
    """The simulated world for one run of a loop.

    Args:
        scenario: a `Scenario`, a path to a scenario file, or a dict in the file format.
        seed: all randomness of the run (ids, the SDK's retry jitter) flows from it.
        model: a model policy replacing the scenario's script (`FunctionModel`, a generated or recorded model).
        limits: the limits the loop declares, replacing the scenario's ``limits`` (reports then say the loop
            declared them; without it, that the scenario did).
        budget: when to unwind a loop that does not stop (model calls); virtual time is capped by ``max_virtual_s``.
        watchdog_s: real seconds a loop may spin without calling the model or a tool before it is unwound
            (simloop's own set-up and a module being imported do not count).
        fault_source: decides each tool execution's fault instead of the scenario's ``faults`` (generated runs).
        network: ``"block"`` (default) stops the loop at its first real connection or host-name lookup and reports
            it; ``"loopback"`` allows this machine (a local service); ``"allow"`` turns the guard off.
        tools: implementations of the scenario's tools, by name: ``{"search": my_search}`` (called with the input as
            keywords; what it returns is the tool's output).
        allow_functions: resolve the tools' ``function: "pkg.module:fn"`` import paths (a scenario file's
            opt-in, docs/security.md); off by default, so a file cannot make simloop import and run code.
        abort: when the user presses Stop, replacing the scenario's ``abort`` (see `sim.abort`).
        approvals: the person at the permission gate (see `approve`): a list of `Approval` answers replacing the
            scenario's ``approvals``, or True for the approval policy with the scenario's answers (all yes if none).

    The loop runs on a worker thread: one blocked in C or swallowing every halt is abandoned with a ``stops`` report.
    """

    def __init__(
        self,
        scenario: ScenarioLike,
        *,
        seed: int = 0,
        model: ModelPolicy | None = None,
        limits: Limits | None = None,
        budget: Budget | None = None,
        max_virtual_s: float | None = None,
        watchdog_s: float = 10.0,
        fault_source: FaultSource | None = None,
        network: NetworkPolicy = "block",
        tools: Mapping[str, Callable[..., Any]] | None = None,
        allow_functions: bool = False,
        abort: Abort | None = None,
        approvals: bool | Sequence[Approval] | None = None,
    ) -> None:
        self.network: NetworkPolicy = check_policy(network)
        self.scenario, declared_by = configured(scenario, allow_functions=allow_functions, tools=tools, limits=limits,
                                                abort=abort, approvals=approvals)
        self.seed = int(seed)
        self.limits: Limits = self.scenario.limits
        self.policy: ModelPolicy = model if model is not None else Script.from_scenario(self.scenario)
        max_virtual_s = virtual_bound(self.limits, max_virtual_s)
        self.clock = clock = VirtualClock(end=max_virtual_s)
        clock.halt_on_deadlock = True
        self.watchdog = Watchdog(seconds=watchdog_s)
        self.watchdog.companions = clock._thread_ids  # an import in any of the loop's threads is no spin
        guard = self._guard = Guard(clock, self.watchdog, budget or default_budget(self.limits), max_virtual_s)
        self.transcript = transcript = guard.transcript = Transcript(header=header(self.scenario, self.seed, declared_by))
        self.server = SimServer(self.policy, transcript, ids=Ids(random.Random(self.seed)), now=clock.now,
                                on_request=guard.on_request)
        self.tools = ToolBox(self.scenario, transcript, now=clock.now, sleep=guard.sleep, on_call=guard.on_tool,
                             fault_source=fault_source, allow_functions=allow_functions)
        self.tools.world = guard.world
        # each thread's own time, where another thread of the run moved the shared clock on (see VirtualClock.own_now)
        self.tools.own = self.server.own = clock.own_now
        # (the parts, not self: a finished run is freed by reference counting, no cycle through it)
        arrivals = Arrivals(lambda: len(transcript.events))  # when each MCP request arrived
        #: The user's Stop button: ``sim.abort.is_set()``; ``sim.abort.add_callback(task.cancel)`` for async loops.
        self.abort = AbortSignal(recorder(transcript, clock.now, arrivals))
        stop_button(self.scenario, self.abort, clock, self.server, self.tools, guard)
        self._gate = gate(self.scenario, transcript, clock, self.tools, guard)
        self.model = DEFAULT_MODEL
        self.outcomes: list[Outcome] = []  # one per user turn when the drive returned a list, else the one outcome
        #: What a durable loop persists: it survives a simulated process death (a ``crash`` fault), as a
        #: database or a checkpointer's storage would; everything else of the loop is gone at a restart.
        self.store: dict[str, Any] = {}
        self._turns = UserTurns([self.scenario.task, *self.scenario.followups], transcript=transcript, clock=clock,
                                guard=guard, server=self.server, abort=self.abort)
        self._lives = Lives(transcript, clock, self._turns, self.abort)  # the drive's runs (restarts after crashes)
        self._clients = Clients(self.server, guard, self.watchdog)
        self._mcp = McpTools(self.tools, clock, self.watchdog, arrivals)
        self._subagents = 0  # sub-agent runs started (`subagent`)
        self._ran = False

    #: When the run unwinds a loop that does not stop (model calls, requests).
    budget: Forwarded[Budget] = Forwarded("_guard")
    #: Virtual seconds of the loop's own time after which the run unwinds it.
    max_virtual_s: Forwarded[float] = Forwarded("_guard")
    #: The drive's runs: 1, plus one per restart after a crash.
    lives: Forwarded[int] = Forwarded("_lives", "count")

    # -- what the drive uses ---------------------------------------------------------

    @property
    def task(self) -> str:
        """The user's task text, the first user message."""
        return self.scenario.task

    @property
    def user_turns(self) -> UserTurns:
        """The user's messages: the task, then the scenario's ``followups``.  Iterate it as the turns happen
        (``for text in sim.user_turns: ...``): taking a turn marks where it begins in the transcript.  A drive returns
        one `Outcome` per turn (a list), or the last (docs/design.md, Conversations)."""
        return self._turns

    @property
    def system(self) -> str | None:
        return self.scenario.system

    @property
    def prices(self) -> dict[str, dict[str, float]]:
        """The scenario's ``prices:``: ``simloop.pricing.cost_usd(reply.usage.model_dump(), reply.model, sim.prices)``."""
        return {name: p.model_dump() for name, p in self.scenario.prices.items()}

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as the API's ``tools`` parameter takes them."""
        return [t.schema_dict() for t in self.scenario.tools]

    def run_tool(self, name: str, input: Any, *, tool_use_id: str | None = None) -> str:
        """Run a tool as the scenario defines it (faults included); may raise what the tool raises."""
        return self.tools.run(name, input, tool_use_id=tool_use_id)

    def bind_tool(self, name: str, fn: Callable[..., Any]) -> None:
        """Make ``fn`` tool ``name``'s implementation from inside the drive (a delegate tool that starts a `subagent`)."""
        self.tools.bind(name, fn)

    def subagent(
        self, task: str, *, tools: Sequence[str] | None = None, limits: Limits | Mapping[str, Any] | None = None
    ) -> SubAgent:
        """A sub-agent run: a loop a tool runs on this run's simulated API and tools, with a fresh context.

        ``tools``: the tools it gets (default: all but the one it runs in); ``limits``: what its loop declares.
        ``.run(drive)`` returns its `Outcome`; the invariants hold inside it and ``subagent_honest`` holds the
        parent's tool_result to it (docs/design.md, Sub-agents).
        """
        if limits is not None and not isinstance(limits, Limits):
            limits = Limits.model_validate(limits)
        self._subagents += 1
        return SubAgent(self, self._subagents, str(task), tools=tools, limits=limits)

    async def arun_tool(self, name: str, input: Any, *, tool_use_id: str | None = None) -> str:
        """Async twin of `run_tool`: latency is a timer on the (virtual) event loop, so calls can overlap."""
        return await self.tools.arun(name, input, tool_use_id=tool_use_id)

    def approve(self, tool: str, input: Any, *, tool_use_id: str | None = None, timeout: float | None = None) -> bool:
        """Ask the person to approve one tool call before running it; True only for a yes.

        Blocks in virtual time until the person answers, ``timeout`` seconds pass, or the loop's own deadline: no
        answer by then is False.  Pass the call's ``tool_use_id`` to bind the request to it.  Without the approval
        policy it answers yes at once.  A denied call is not run: answer it with an ``is_error`` tool_result saying
        so (docs/design.md, Approvals)::

            if not sim.approve(call.name, call.input, tool_use_id=call.id):
                results.append({"type": "tool_result", "tool_use_id": call.id, "is_error": True, "content": "denied"})
        """
        return self._gate.approve(tool, input, tool_use_id=tool_use_id, timeout=timeout)

    async def aapprove(
        self, tool: str, input: Any, *, tool_use_id: str | None = None, timeout: float | None = None
    ) -> bool:
        """Async twin of `approve`: the wait is a timer on the (virtual-time) event loop."""
        return await self._gate.aapprove(tool, input, tool_use_id=tool_use_id, timeout=timeout)

    @property
    def approvals(self) -> list[ApprovalEvent]:
        """Each request for approval, in order: tool, input, bound tool_use, asked at, answer, answered at (``t``)."""
        return self._gate.log

    def mcp_server(self) -> mcp.server.mcpserver.MCPServer[Any]:
        """The scenario's tools as an in-memory MCP server (the SDK's ``MCPServer``) on this run's world.

        Hand it to any MCP client in this process: ``mcp.Client(sim.mcp_server())``, ``fastmcp.Client(...)``,
        pydantic-ai's ``MCPToolset(...)``.  Each ``tools/call`` runs like `arun_tool`, bound to the tool_use its
        ``_meta`` names or else by name and input (docs/design.md, Tools over MCP).  Needs ``simloop[mcp]``.
        """
        return self._mcp.server(self.tool_schemas)

    @property
    def mcp_url(self) -> str:
        """The scenario's tools over MCP streamable HTTP, for the clients that take a URL: ``http://127.0.0.1:PORT/mcp``.

        Read it in the drive: the server starts then, on a free loopback port the network guard lets the loop reach,
        and stops when the run ends; each call runs as `mcp_server`'s do, in virtual time (docs/design.md, Tools over
        MCP).  Needs ``simloop[mcp]``.
        """
        return self._mcp.url(self.tool_schemas)

    @property
    def http_client(self) -> httpx2.Client:
        """An httpx2 client whose requests reach the simulated API (for frameworks that take one)."""
        return self._clients.http()  # type: ignore[no-any-return]

    @property
    def async_http_client(self) -> httpx2.AsyncClient:
        return self._clients.async_http()  # type: ignore[no-any-return]

    @property
    def client(self) -> anthropic.Anthropic:
        """An `anthropic.Anthropic` client talking to the simulated API (SDK defaults, retries included)."""
        return self._clients.anthropic(False)  # type: ignore[no-any-return]

    @property
    def async_client(self) -> anthropic.AsyncAnthropic:
        """An `anthropic.AsyncAnthropic` client talking to the simulated API."""
        return self._clients.anthropic(True)  # type: ignore[no-any-return]

    @property
    def openai_client(self) -> openai.OpenAI:
        """An `openai.OpenAI` client on the Chat Completions wire of the same world as `client` (docs/design.md, The
        OpenAI wire).  Needs ``simloop[openai]``."""
        return self._clients.openai(False)  # type: ignore[no-any-return]

    @property
    def async_openai_client(self) -> openai.AsyncOpenAI:
        """An `openai.AsyncOpenAI` client on the simulated API's Chat Completions wire (see `openai_client`)."""
        return self._clients.openai(True)  # type: ignore[no-any-return]

    # -- running and checking ------------------------------------------------------------

    def run(self, drive: Drive) -> Outcome:
        """Run the loop under test once; returns its `Outcome`.

        What escapes ``drive`` (an exception, the loop's own `SystemExit`) is kept in the outcome with the line that
        raised it, not raised.  Raises `ScriptExhaustedError` when the loop outlives a ``then: fail`` script.  The
        drive runs on a worker thread, in a copy of the caller's context: a run that cannot end is abandoned with a
        ``stops`` report, and objects bound to the calling thread (signal handlers, an sqlite3 connection) are not
        usable from it (docs/design.md, Runs end, and stay in the simulator).
        """
        if self._ran:
            raise UsageError("a Sim runs one loop; make a new Sim (same scenario and seed) to run it again")
        self._ran = True
        return Runner(self).start(drive, warm_up_sdk)

    def check(self, outcome: Outcome | None = None, *, invariants: Iterable[str] | None = None) -> Report:
        """Check the run's transcript against the invariants (``outcome``, what `run` returned, reads well here)."""
        return check(self.transcript, invariants=invariants)

    def leftovers(self) -> list[str]:
        """What the scenario scripted and the run never used: unserved replies, faults that never fired."""
        return [*self.policy.leftovers(), *self.tools.unfired_faults()]

    # -- life cycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the clients (idempotent)."""
        self._clients.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Sim({self.scenario.name!r}, seed={self.seed})"


def off_loop(fn: Callable[[], T]) -> T:
    """``fn()`` here, or in a helper thread when an asyncio event loop is running in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:  # called outside the except block: fn's own exceptions must not chain to this one
        return fn()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the calling thread as is
            box["error"] = e

    worker = threading.Thread(target=target, name="simloop-off-loop", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


# -- the SDK's first calls, made before any run is timed (see simloop._runtime.prepare) -----------------------------


def warm_up_sdk(asynchronous: bool = True) -> None:
    """Import the SDK and make its first calls through a throwaway Sim, once per process, on nobody's time;
    with ``asynchronous`` (an ``async def`` drive's run) also the async client's first call on a virtual-time loop."""
    once("sdk", _warm_up_sdk)
    if asynchronous:
        once("sdk-async", _warm_up_async)


_WARM_UP: dict[str, Any] = {
    "name": "simloop-warm-up",
    "task": "Warm up.",
    "tools": [{"name": "search"}],
    "model": [{"tool_use": [{"name": "search", "input": {"q": "x"}}]}, {"end_turn": "ok"}, {"end_turn": "ok"}],
}


def _warm_up_sdk() -> None:
    """Import the SDK and make its first calls (sync, a tool round trip, a stream) through a throwaway Sim."""
    import anthropic  # noqa: F401
    import httpx2  # noqa: F401

    import simloop.wire.transport  # noqa: F401

    with Sim(_WARM_UP) as sim:  # never run(): its clock is never patched, nothing is watched
        client = sim.client
        tools: Any = sim.tool_schemas
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        reply = client.messages.create(model=sim.model, max_tokens=64, messages=messages, tools=tools)
        messages += [
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": block.id, "content": sim.run_tool(block.name, block.input)}
                for block in reply.content if block.type == "tool_use"
            ]},
        ]
        client.messages.create(model=sim.model, max_tokens=64, messages=messages, tools=tools)
        with client.messages.stream(model=sim.model, max_tokens=64, messages=messages, tools=tools) as s:
            s.get_final_message()


def _warm_up_async() -> None:
    """The async client's first call through a throwaway Sim, on a virtual-time loop as an async drive runs (a sync
    drive's process does not pay it).  anyio's asyncio backend is not imported for it: the clock patches the backend
    only once something imports it (`simloop._runtime.jobs`)."""
    with Sim({**_WARM_UP, "model": [{"end_turn": "ok"}]}) as sim:
        async def async_call() -> None:
            await sim.async_client.messages.create(
                model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])

        off_loop(lambda: sim.clock.run(async_call()))
