"""`Sim`: one simulated run of a loop under test, assembled from a Scenario.

A Sim owns the world of one run: the simulated API (`SimServer`) behind real
``anthropic`` clients, the fault-injecting tools (`ToolBox`), the virtual
clock, the runaway budgets and the transcript.  `Sim.run` drives the loop
(sync or async), keeps whatever escapes it in the `Outcome`, and `Sim.check`
hands the transcript to the invariants.

Example::

    with simloop.Sim("scenarios/stuck-search.yaml", seed=0) as sim:
        outcome = sim.run(drive)
    sim.check(outcome).raise_for_violations()
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import random
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

from simloop._abort import AbortSignal, _AbortTrigger, recorder
from simloop._approvals import Gate
from simloop._arrivals import Arrivals
from simloop._runtime import process as _process
from simloop._runtime.clock import VirtualClock
from simloop._runtime.frames import loop_frame
from simloop._runtime.halt import LoopHalted
from simloop._runtime.netguard import NetworkPolicy, check_policy, guarding, simloops_own
from simloop._runtime.prepare import before_run, once
from simloop._runtime.process import FAKE_OPENAI_KEY, ProcessExit, Run, forked_call, running
from simloop._runtime.realtime import REAL
from simloop._runtime.stack import on_held_stack
from simloop._runtime.watchdog import Watchdog, park, where_in, where_of
from simloop._runtime.worker import Abandoned, run_on_worker
from simloop._subagent import SubAgent
from simloop.errors import SimloopInternalError, SimulatedCrash, UsageError
from simloop.invariants import Report, check
from simloop.models import Ids, ModelPolicy, Script, ScriptExhausted
from simloop.outcome import Outcome
from simloop.scenario import Abort, Approval, Limits, Scenario, load_scenario
from simloop.tools import FaultSource, ToolBox
from simloop.transcript import (
    ApprovalEvent,
    Halt,
    Header,
    OutcomeEvent,
    Response,
    Restart,
    ThreadLeft,
    ToolEnd,
    Transcript,
    TurnStart,
)
from simloop.wire.server import Budget, InternalFailure, SimServer

if TYPE_CHECKING:
    import anthropic
    import httpx2
    import mcp.server.mcpserver
    import openai

__all__ = ["DEFAULT_MODEL", "ScriptExhaustedError", "Sim", "warm_up_sdk"]

DEFAULT_MODEL = "claude-sonnet-5"
API_KEY = "sk-ant-simloop-0000000000000000000000000000000000000000"  # a fake key: the simulator accepts any
BASE_URL = "https://api.anthropic.com"

Drive = Callable[["Sim"], Outcome | tuple[str, str] | list[Outcome] | Awaitable[Any]]
ScenarioLike = Scenario | str | Path | dict[str, Any]
T = TypeVar("T")

#: Halts a run may take before simloop gives up on the loop's thread: a loop that catches even
#: BaseException and goes on is halted again at its next model or tool call, and abandoned after this many.
MAX_HALTS = 5
# Real seconds a thread the loop started may take to finish after the loop returned, before it is
# reported as left running (a thread that is done anyway finishes within microseconds).
_THREAD_GRACE = 0.2


class ScriptExhaustedError(UsageError):
    """The loop asked for more model replies than the scenario scripts (``then: fail``)."""


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
        network: ``"block"`` (default) stops the loop at its first real network connection or host-name
            lookup and reports it (the loop bypassed the simulator); ``"loopback"`` allows connections to
            this machine (a loop that uses a local service); ``"allow"`` turns the guard off.
        tools: implementations of the scenario's tools, by name: ``{"search": my_search}`` (called with the
            tool input as keywords; what it returns is the tool's output).  This is how a tool's code is bound.
        allow_functions: resolve the tools' ``function: "pkg.module:fn"`` import paths (a scenario file's
            opt-in, docs/security.md); off by default, so a file cannot make simloop import and run code.
        abort: when the user presses Stop, replacing the scenario's ``abort`` (see `sim.abort`).
        approvals: the person at the permission gate (see `approve`): a list of `Approval` answers replacing the
            scenario's ``approvals``, or True for the approval policy with the scenario's answers (all yes if none).

    The loop runs on a worker thread: a loop blocked in C (a wait with no timeout) or one that swallows
    every halt is abandoned with a ``stops`` report instead of hanging the run.
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
        self.scenario = _as_scenario(scenario, allow_functions=allow_functions)
        if tools is not None:
            self.scenario = _bind_tools(self.scenario, tools)
        declared_by = "scenario"  # who declared the limits, for the reports: the scenario's limits:, or the loop
        if limits is not None:
            limits = limits if isinstance(limits, Limits) else Limits.model_validate(limits)
            self.scenario = self.scenario.model_copy(update={"limits": limits})
            declared_by = "loop"
        if abort is not None:
            self.scenario = self.scenario.model_copy(update={"abort": abort})
        if approvals is not None and approvals is not False:
            answers = list(self.scenario.approvals or ()) if approvals is True else list(approvals)
            self.scenario = self.scenario.model_copy(update={"approvals": answers})
        self.seed = int(seed)
        self.limits: Limits = self.scenario.limits
        self.policy: ModelPolicy = model if model is not None else Script.from_scenario(self.scenario)
        deadline = self.limits.deadline_s
        max_virtual_s = max_virtual_s or max(6 * 3600.0, 10 * deadline if deadline else 0.0)
        self.clock = VirtualClock(end=max_virtual_s)
        self.clock.halt_on_deadlock = True
        self.watchdog = Watchdog(seconds=watchdog_s)
        self.watchdog.companions = self.clock._thread_ids  # an import in any of the loop's threads is no spin
        self._guard = _Guard(self.clock, self.watchdog, budget or _default_budget(self.limits), max_virtual_s)
        limits_set = self.limits.model_dump(exclude_none=True)
        self.transcript = Transcript(
            header=Header(
                scenario=self.scenario.name,
                seed=self.seed,
                limits=limits_set,
                limits_from=dict.fromkeys(limits_set, declared_by),
                tools={t.name: t.kind for t in self.scenario.tools},
                approval=list(self.scenario.gated_tools) if self.scenario.approval_policy else None,
                context="context" in self.scenario.requires,
                prices={name: p.model_dump() for name, p in self.scenario.prices.items()},
            )
        )
        guard = self._guard
        guard.transcript = self.transcript
        self.server = SimServer(
            self.policy, self.transcript, ids=Ids(random.Random(self.seed)), now=self.clock.now,
            on_request=guard.on_request,
        )
        self.tools = ToolBox(
            self.scenario, self.transcript, now=self.clock.now, sleep=guard.sleep, on_call=guard.on_tool,
            fault_source=fault_source, allow_functions=allow_functions,
        )
        self.tools.world = guard.world
        # each thread's own time, where another thread of the run moved the shared clock on (see VirtualClock.own_now)
        self.tools.own = self.server.own = self.clock.own_now
        #: The user's Stop button: ``sim.abort.is_set()``; ``sim.abort.add_callback(task.cancel)`` for async loops.
        transcript = self.transcript  # (not self: a finished run is freed by reference counting, no cycle through it)
        self._arrivals = Arrivals(lambda: len(transcript.events))  # when each MCP request arrived
        self.abort = AbortSignal(recorder(self.transcript, self.clock.now, self._arrivals))
        if self.scenario.abort is not None:
            trigger = _AbortTrigger(self.scenario.abort, self.abort, self.clock.now)
            self.server.on_deliver = trigger.on_deliver
            self.tools.on_end = trigger.on_tool_end
            self._guard.on_time = trigger.on_time
            self._guard.abort_at = self.scenario.abort.at
        self._gate = Gate(
            self.scenario, self.transcript, now=self.clock.now, sleep=guard.sleep,
            turn_start=functools.partial(getattr, guard, "t_before"),
            forever=guard.forever,
        )
        if self._gate.on:  # the answers reach the thread that asked; the others once they wait on it (`heard`)
            self._gate.mark, self.tools.heard = self.clock.mark, self.clock.heard
        self.model = DEFAULT_MODEL
        self.outcomes: list[Outcome] = []  # one per user turn when the drive returned a list, else the one outcome
        #: What a durable loop persists: it survives a simulated process death (a ``crash`` fault), as a
        #: database or a checkpointer's storage would; everything else of the loop is gone at a restart.
        self.store: dict[str, Any] = {}
        self.lives = 1  # the drive's runs: 1, plus one per restart after a crash
        self._life_began = 0  # where this life's events begin in the transcript
        self._clients: dict[str, Any] = {}
        self._subagents = 0  # sub-agent runs started (`subagent`)
        self._ran = False
        self._halted_at: float | None = None  # REAL.monotonic() when the run was first seen halted
        self._turns = UserTurns(self)
        self._proc: Run | None = None  # the run's share of the process (simloop._runtime.process), while it runs
        self._ran_out = False  # the run is over (its closers ran)
        self._mcp_http: Any = None  # `mcp_url`'s server, while the run lasts

    @property
    def budget(self) -> Budget:
        """When the run unwinds a loop that does not stop (model calls, requests)."""
        return self._guard.budget

    @budget.setter
    def budget(self, value: Budget) -> None:
        self._guard.budget = value

    @property
    def max_virtual_s(self) -> float:
        """Virtual seconds after which the run unwinds the loop."""
        return self._guard.max_virtual_s

    @max_virtual_s.setter
    def max_virtual_s(self, value: float) -> None:
        self._guard.max_virtual_s = value

    # -- what the drive uses ---------------------------------------------------------

    @property
    def task(self) -> str:
        """The user's task text, the first user message."""
        return self.scenario.task

    @property
    def user_turns(self) -> UserTurns:
        """The user's messages of the conversation: the task, then each of the scenario's ``followups``.

        Iterate it as the turns happen (``for text in sim.user_turns: ...``): taking turn *n* marks where
        it begins in the transcript, so the invariants hold over every request of the conversation and
        ``honest_outcome`` is checked per turn.  A drive returns one `Outcome` per turn (a list), or the last.
        """
        return self._turns

    @property
    def system(self) -> str | None:
        return self.scenario.system

    @property
    def prices(self) -> dict[str, dict[str, float]]:
        """The scenario's price overrides (``prices:``), for a loop that prices its replies for ``max_cost_usd``:
        ``simloop.pricing.cost_usd(reply.usage.model_dump(), reply.model, sim.prices)``."""
        return {name: p.model_dump() for name, p in self.scenario.prices.items()}

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as the API's ``tools`` parameter takes them."""
        return [t.schema_dict() for t in self.scenario.tools]

    def run_tool(self, name: str, input: Any, *, tool_use_id: str | None = None) -> str:
        """Run a tool as the scenario defines it (faults included); may raise what the tool raises."""
        return self.tools.run(name, input, tool_use_id=tool_use_id)

    def bind_tool(self, name: str, fn: Callable[..., Any]) -> None:
        """Make ``fn`` tool ``name``'s implementation for the rest of the run, from inside the drive: a tool that
        needs the run itself, such as a delegate tool that starts a `subagent` (``Sim(tools=...)`` binds before)."""
        self.tools.bind(name, fn)

    def subagent(
        self, task: str, *, tools: Sequence[str] | None = None, limits: Limits | Mapping[str, Any] | None = None
    ) -> SubAgent:
        """A sub-agent run: a loop a tool runs on this run's simulated API and tools, with a fresh context.

        ``tools``: the names of the tools it gets (default: every tool but the one it runs in); ``limits``: what
        its loop declares (held by ``limits`` inside the sub-run).  ``.run(drive)`` runs ``drive(sub)`` and
        returns its `Outcome`; the transcript and the timeline show it as a nested run, the invariants hold
        inside it, and ``subagent_honest`` holds the parent's tool_result to what it did (docs/design.md,
        Sub-agents).
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

        Blocks in virtual time until the person answers (the scenario's ``approvals:``), or until ``timeout``
        seconds, or, without one, until the loop's own deadline (``sim.limits.deadline_s`` from the start of the
        user turn): no answer by then is False.  Pass the call's ``tool_use_id`` so the request is bound to it
        exactly.  Without the approval policy (no ``approvals:``, no ``needs_approval: true`` tool, no
        ``verify(approvals=True)``) it answers yes at once and records nothing.  A denied call is not run: answer
        it with an ``is_error`` tool_result saying so (docs/design.md, Approvals).

        Example::

            if not sim.approve(call.name, call.input, tool_use_id=call.id):
                results.append({"type": "tool_result", "tool_use_id": call.id, "is_error": True,
                                "content": "denied: the user did not approve this call"})
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
        """The scenario's tools as an in-memory MCP server on this run's world (virtual time).

        Hand it to any MCP client in this process, as is: the SDK's ``mcp.Client(sim.mcp_server())`` (its
        ``ClientSession`` is ``client.session``), FastMCP's ``fastmcp.Client(sim.mcp_server())`` or
        pydantic-ai's ``MCPToolset(sim.mcp_server())``.  It is the SDK's ``MCPServer`` serving one low-level
        ``Server`` (``.lowlevel``).  Each ``tools/call`` runs like `arun_tool` (faults, ledger, virtual time),
        bound to the tool_use its ``_meta`` names (``{"tool_use_id": ...}``) or else by name and input
        (docs/design.md, Tools over MCP).  For clients that take a URL, see `mcp_url`.
        Needs ``pip install 'simloop[mcp]'``.
        """
        with self.watchdog.paused():  # simloop's own set-up (a first import of the MCP SDK), not the loop's time
            from simloop.mcp import sdk_server, tool_server

            return sdk_server(tool_server(self.tool_schemas, self.tools.arun, arrivals=self._arrivals))

    @property
    def mcp_url(self) -> str:
        """The scenario's tools over MCP streamable HTTP, for the clients that take a URL: ``http://127.0.0.1:PORT/mcp``.

        ``fastmcp.Client(sim.mcp_url)``, pydantic-ai's ``MCPToolset(sim.mcp_url)``, the SDK's ``mcp.Client(sim.mcp_url)``
        or ``streamable_http_client(sim.mcp_url)`` with a ``ClientSession``.  Read it during the run (in the drive):
        the server starts then, on a free loopback port, and stops when the run ends.  The run's network guard lets
        the loop reach it; each call runs as `mcp_server`'s do, on the loop's virtual-time event loop (a ``slow``
        fault's latency is a timer there), and while a request is on its way the loop waits for the answer with
        virtual time standing still (docs/design.md, Tools over MCP).  Needs ``pip install 'simloop[mcp]'``.
        """
        if self._mcp_http is not None:
            return self._mcp_http.url  # type: ignore[no-any-return]
        proc = self._proc
        if proc is None or self._ran_out:
            raise UsageError(
                "sim.mcp_url serves the tools while the run lasts: read it inside the drive (the server starts "
                "then and stops when the run ends); outside a run, use sim.mcp_server() or `simloop serve --mcp`"
            )
        with self.watchdog.paused(), simloops_own():  # simloop's own set-up, not the loop's time or network
            from simloop._runtime.netguard import allow_own_port
            from simloop.mcp import HTTPServer, tool_server

            server = HTTPServer(tool_server(self.tool_schemas, self._mcp_call, arrivals=self._arrivals))
        forget = allow_own_port(server.port)
        self.clock.own_servers.append(server)
        self._arrivals.servers.append(server)

        def close() -> None:
            self.clock.own_servers.remove(server)
            self._arrivals.servers.remove(server)
            forget()
            server.close()

        proc.closers.append(close)
        self._mcp_http = server
        return server.url

    async def _mcp_call(
        self, name: str, input: dict[str, Any], *, tool_use_id: str | None = None, arrived: int | None = None
    ) -> str:
        """One MCP call over HTTP (on the server's thread): run on the loop's virtual-time event loop, as in memory;
        with no single such loop running (a sync client), run here, its latency spent on the virtual clock.

        On the loop, the tool starts only once the loop has run what else was due at this instant (`settled`): the
        client's other requests made ready with this one reach the server, and are stamped, before this one's
        zero-time answer can fire a Stop (in production they are all sent before any is answered)."""
        loop = self.clock.running_loop()
        try:
            if loop is None:
                return self.tools.run(name, input, tool_use_id=tool_use_id, arrived=arrived)

            async def call() -> str:
                await loop.settled()
                return await self.tools.arun(name, input, tool_use_id=tool_use_id, arrived=arrived)

            future = asyncio.run_coroutine_threadsafe(call(), loop)
            return await asyncio.wrap_future(future)
        except LoopHalted as halted:  # recorded when raised; the loop sees a tool error, its next call is halted
            raise RuntimeError(f"simloop stopped the run: {halted}") from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if loop is not None and future.cancelled() and task is not None and not task.cancelling():  # the loop ended
                raise RuntimeError(f"{name}: cancelled, the loop's event loop ended before the tool finished") from None
            raise

    @property
    def http_client(self) -> httpx2.Client:
        """An httpx2 client whose requests reach the simulated API (for frameworks that take one)."""
        if "http" not in self._clients:
            with self.watchdog.paused():  # (imported before the run already: see simloop._runtime.prepare)
                import httpx2

                from simloop.wire.transport import SimTransport

                self._clients["http"] = _http_client(httpx2.Client, SimTransport(self.server, sleep=self._guard.sleep,
                                                                                   world=self._guard.world))
        return self._clients["http"]  # type: ignore[no-any-return]

    @property
    def async_http_client(self) -> httpx2.AsyncClient:
        if "ahttp" not in self._clients:
            with self.watchdog.paused():
                import httpx2

                from simloop.wire.transport import AsyncSimTransport

                self._clients["ahttp"] = _http_client(
                    httpx2.AsyncClient, AsyncSimTransport(self.server, sleep=self._guard.sleep, world=self._guard.world)
                )
        return self._clients["ahttp"]  # type: ignore[no-any-return]

    @property
    def client(self) -> anthropic.Anthropic:
        """An `anthropic.Anthropic` client talking to the simulated API (SDK defaults, retries included)."""
        if "sync" not in self._clients:
            with self.watchdog.paused():
                import anthropic

                self._clients["sync"] = _sdk_client(anthropic.Anthropic, self.http_client)
        return self._clients["sync"]  # type: ignore[no-any-return]

    @property
    def async_client(self) -> anthropic.AsyncAnthropic:
        """An `anthropic.AsyncAnthropic` client talking to the simulated API."""
        if "async" not in self._clients:
            with self.watchdog.paused():
                import anthropic

                self._clients["async"] = _sdk_client(anthropic.AsyncAnthropic, self.async_http_client)
        return self._clients["async"]  # type: ignore[no-any-return]

    @property
    def openai_client(self) -> openai.OpenAI:
        """An `openai.OpenAI` client on the simulated API's Chat Completions wire (SDK defaults, retries included).

        The same world as `client`: the model, the faults, the clock and the transcript are one, and the
        invariants read both wires (docs/design.md, The OpenAI wire).  Needs ``pip install 'simloop[openai]'``.
        """
        if "openai" not in self._clients:
            with self.watchdog.paused():
                self._clients["openai"] = _openai_client(False, self.http_client)
        return self._clients["openai"]  # type: ignore[no-any-return]

    @property
    def async_openai_client(self) -> openai.AsyncOpenAI:
        """An `openai.AsyncOpenAI` client on the simulated API's Chat Completions wire (see `openai_client`)."""
        if "aopenai" not in self._clients:
            with self.watchdog.paused():
                self._clients["aopenai"] = _openai_client(True, self.async_http_client)
        return self._clients["aopenai"]  # type: ignore[no-any-return]

    # -- running and checking ------------------------------------------------------------

    def run(self, drive: Drive) -> Outcome:
        """Run the loop under test once; returns its `Outcome`.

        An exception escaping ``drive`` is kept in the outcome (reason ``error``),
        not raised, with the line that raised it (the ``crash`` invariant reports
        it); so are a `SystemExit` and a `KeyboardInterrupt` the loop raises itself
        (signals reach the caller's thread only, so a real Ctrl-C of the user aborts
        the run at once).  Raises `ScriptExhaustedError` when the loop outlives a
        ``then: fail`` script, and `SimloopInternalError` for a bug in simloop.

        The drive runs on a worker thread (in a copy of the caller's context), so that a run which
        cannot end is abandoned: halted and neither unwound within ``watchdog_s`` real seconds nor
        done after `MAX_HALTS` halts (blocked in C, or catching every halt).  Its thread is then
        parked for good and the outcome is a ``stops`` report.  Objects bound to the calling thread
        (an sqlite3 connection made without ``check_same_thread=False``, signal handlers) are not
        usable from the drive.
        """
        if self._ran:
            raise UsageError("a Sim runs one loop; make a new Sim (same scenario and seed) to run it again")
        self._ran = True
        before_run(drive, warm_up_sdk)  # simloop's own imports and first SDK calls, once per process, on nobody's time
        # The loop runs on a worker thread (also the way out of a running event loop, for an async drive
        # called from an async test): a run that cannot end is abandoned there (see `_give_up`).
        state = random.getstate()
        random.seed(self.seed)  # the SDK's retry jitter reads the global PRNG
        try:
            with _process.bounded():  # the command's last resort: a run holding the GIL past it ends the process
                return run_on_worker(lambda: self._run(drive), give_up=self._give_up, on_abandon=self._let_go)
        except Abandoned as e:
            return self._abandoned(e.thread_id)
        except KeyboardInterrupt:  # a real Ctrl-C reached the caller: the loop's thread is left as it is
            self._guard.abandoned = True  # parked at its next model or tool call
            if self.watchdog._thread_id is not None:
                self.watchdog.abandon(self.watchdog._thread_id, interrupt=False)
            self.clock.release()  # the rest of the process runs in real time
            _process.release(self.clock)
            raise
        finally:
            random.setstate(state)

    def _halts(self) -> int:
        """How many times this run was halted: by its budgets, its clock and the watchdog."""
        return self._guard.halts + self.clock.halts + self.watchdog.halts

    def _give_up(self, thread_id: int) -> bool:
        """Whether the run has to be abandoned: halted, and neither unwound within the grace nor done halting."""
        halts = self._halts()
        if not halts:
            return False
        now = REAL.monotonic()
        if self._halted_at is None:
            self._halted_at = now
        return halts >= MAX_HALTS or now - self._halted_at >= self.watchdog.seconds

    def _let_go(self, thread_id: int) -> None:
        """The run's thread is abandoned (the run would not end, or a real Ctrl-C): park it, stop watching it."""
        self._guard.abandoned = True  # its next model or tool call parks it
        self.watchdog.abandon(thread_id)  # and so does its next line of Python

    def _abandoned(self, thread_id: int) -> Outcome:
        """Report a run whose thread would not end (blocked in C, or swallowing every halt)."""
        self.clock.release()  # its patched() block never exits: the rest of the process runs in real time
        _process.release(self.clock)  # nor does its share of the process: the environment is restored
        where = where_in(thread_id)
        halts = self._halts()
        now = self.clock.now()
        first = self.clock.first_halt
        if self.transcript.halt is None and isinstance(first, LoopHalted):  # the clock's halt, swallowed
            self.transcript.append(Halt(t=now, budget=first.reason, detail=first.detail, where=first.where))
        if self.transcript.halt is None:  # the halt never reached the loop: it is blocked in C
            self.transcript.append(Halt(
                t=now, budget="watchdog", where=where,
                detail=f"no model call or tool call for {self.watchdog.seconds:g} s of real time; the drive was "
                       f"blocked at {where} and did not come back to Python",
            ))
            how = f"it stayed blocked at {where} (in a call that does not return, such as a wait with no timeout)"
        else:
            how = f"it caught simloop's halt and went on ({halts} halts), last seen at {where}"
        self.transcript.append(Halt(t=now, budget="abandoned", where=where, detail=(
            f"the loop did not unwind: {how}; simloop abandoned its thread (parked, a daemon: it never holds "
            "the process)")))
        halted = LoopHalted("abandoned", self.transcript.of(Halt)[-1].detail, where)
        return self._record_error(halted)

    def _run(self, drive: Drive) -> Outcome:
        tid = threading.get_ident()
        with self.clock.patched(), guarding(self.clock, self.network, self._guard.blocked), \
                running(self.clock) as proc:
            self._proc = proc
            proc.on_spawn = self._serve_children
            try:
                with self.watchdog.watching():
                    result = self._drive(drive)
            except LoopHalted:  # a halt delivered while the run was being recorded: the run is over anyway
                result = self._record_error(LoopHalted("watchdog", "halted while the run was being recorded"))
            # simloop's own teardown, on no budget of the loop's: the threads and processes it left running
            if self.transcript.halt is None:
                self._threads_left(tid)
            self._forks_seen()
        self._ran_out = True
        self._mcp_http = None
        return result

    def _drive(self, drive: Drive) -> Outcome:
        """The drive, its lives, and what it returned or raised, as the run's outcome."""
        try:
            if inspect.iscoroutinefunction(drive):
                return on_held_stack(self.clock.run, self._arun(drive))
            return self._record(on_held_stack(self._sync_lives, drive))
        except LoopHalted as halted:
            if self.transcript.halt is None:
                self.transcript.append(Halt(t=self.clock.now(), budget=halted.reason, detail=halted.detail,
                                            where=halted.where, target=halted.target))
            return self._record_error(halted)
        except ScriptExhausted as e:
            self._record_error(e)
            raise ScriptExhaustedError(e.message) from None
        except InternalFailure as e:
            raise SimloopInternalError(f"simloop failed while simulating the API: {e.error!r}") from e.error
        except UsageError:
            raise
        except (Exception, SystemExit, KeyboardInterrupt, asyncio.CancelledError, ProcessExit) as e:  # noqa: BLE001
            # the loop raised (even SystemExit, a KeyboardInterrupt of its own or a CancelledError its Stop wiring
            # caused): an outcome the `crash` invariant reports, not simloop's exit (a real Ctrl-C reaches the
            # caller's thread: see run)
            return self._record_error(e)

    def _serve_children(self) -> None:
        """The run is about to start a child process: serve this world on loopback, and put its base URL and
        tools endpoint in the environment the child inherits (its model calls and tools reach this transcript)."""
        from simloop.wire.loopback import LoopbackServer

        assert self._proc is not None
        with simloops_own():  # the server is simloop's, not the loop's (see simloop._runtime.netguard)
            server = LoopbackServer(self.server, tools=self.tools, mcp=False, fast_retries=True)
        self._proc.closers.append(server.close)
        self._proc.set_env({"ANTHROPIC_BASE_URL": server.base_url, "OPENAI_BASE_URL": server.openai_base_url,
                            "SIMLOOP_TOOLS_URL": server.base_url + "/simloop/tools"})

    def _forks_seen(self) -> None:
        """A child forked during the run made a model call or ran a tool in its own copy of the simulator: the
        run cannot be checked, so it fails (`stops`, budget ``fork``) with how to expose such tools."""
        reports = self._proc.fork_reports() if self._proc is not None else []
        if reports:
            detail = "; ".join(reports[:5]) + (f"; and {len(reports) - 5} more" if len(reports) > 5 else "")
            self.transcript.append(Halt(t=self.clock.now(), budget="fork", detail=detail))

    def _threads_left(self, tid: int) -> None:
        """Record the threads the loop started that are still running now it returned (not idle pool workers),
        and the pool jobs, threads started by hand and child processes it left (`simloop._runtime.process`)."""
        deadline = REAL.monotonic() + _THREAD_GRACE
        assert self._proc is not None
        for name, where, pid in self._proc.left(_THREAD_GRACE):
            self.transcript.append(ThreadLeft(t=self.clock.now(), name=name, where=where, pid=pid))
        others = self.clock._thread_ids - {tid}
        if not others:
            return
        for thread in threading.enumerate():
            if thread.ident not in others or _idle_worker(thread):
                continue
            thread.join(max(0.0, deadline - REAL.monotonic()))
            if thread.is_alive() and not _idle_worker(thread):
                self.transcript.append(ThreadLeft(t=self.clock.now(), name=thread.name,
                                                  where=where_in(thread.ident or 0)))

    async def _arun(self, drive: Drive) -> Outcome:
        plan = self.scenario.abort
        timer = None
        if plan is not None and plan.at is not None and self._guard.on_time is not None:
            # on the virtual-time event loop the Stop lands on time, in the middle of an awaited call
            timer = asyncio.get_running_loop().call_later(max(plan.at - self.clock.now(), 0.0), self._guard.on_time)
        kept: list[Any] = []  # what the drive returned, and the CancelledError that escaped it

        async def lives() -> None:
            while True:
                try:
                    returned = await drive(self)  # type: ignore[misc]
                except SimulatedCrash as crash:
                    self._restart(crash)
                    continue
                except asyncio.CancelledError as e:
                    kept.append(_Escaped(e))
                    raise
                except Exception:
                    if not self._died_unseen():
                        raise
                    continue
                if not self._died_unseen():
                    kept.append(returned)
                    return

        # The drive runs as a task of its own: the README's Stop recipe cancels ``asyncio.current_task()``, and a
        # Stop that fires after the loop's last ``await`` cancels that task once its coroutine has returned.  The
        # cancellation is then the drive task's, and the returned value is still in ``kept``: never a
        # CancelledError out of simloop's own event loop.
        task = asyncio.get_running_loop().create_task(lives())
        try:
            await task
        except asyncio.CancelledError:
            own = asyncio.current_task()
            if own is not None and own.cancelling():  # the drive cancelled simloop's task too: not a Stop of ours
                own.uncancel()
            if not kept:  # cancelled before the drive's coroutine ever ran
                kept.append(_Escaped(asyncio.CancelledError()))
        finally:
            if timer is not None:
                timer.cancel()  # the loop returned: no Stop after that
        returned = kept[0]
        if isinstance(returned, _Escaped):
            raise returned.error
        return self._record(returned)

    def _sync_lives(self, drive: Drive) -> Any:
        """Run the drive; after a simulated process death, run it again (the restart), up to `MAX_LIVES`."""
        while True:
            try:
                returned = drive(self)
            except SimulatedCrash as crash:
                self._restart(crash)
                continue
            except Exception:
                if not self._died_unseen():
                    raise
                continue
            if not self._died_unseen():
                return returned

    def _died_unseen(self) -> bool:
        """Did the process die in this life although no `SimulatedCrash` reached simloop?  A framework may turn it
        into an error of its own (langchain's ``agenerate`` gathers with ``return_exceptions=True`` and then reads
        the crash as a result) or swallow it; a process that died is dead all the same: then the next life begins
        (or the run halts), and this says so."""
        for e in self.transcript.events[self._life_began:]:
            if isinstance(e, ToolEnd) and e.status == "crashed" or isinstance(e, Response) and e.fault == "crash":
                self._restart(SimulatedCrash(str(e.error) if isinstance(e, ToolEnd) else
                                             f"the process died while model call {e.call} was in flight"))
                return True
        return False

    def _restart(self, crash: SimulatedCrash) -> None:
        """The process died: only ``sim.store`` and the world remain; the next life begins (or the run halts)."""
        if self.lives >= MAX_LIVES:
            raise LoopHalted("restarts", f"the process died {self.lives} times; simloop stops a run after {MAX_LIVES} lives")
        self.lives += 1
        self.transcript.append(Restart(t=self.clock.now(), life=self.lives, detail=str(crash)))
        self._life_began = len(self.transcript.events)
        self._turns.started = 0
        self.abort.clear(forget_callbacks=True)

    def _record(self, returned: Any) -> Outcome:
        if self._proc is not None and self._proc.exited is not None:  # it ended the process, then swallowed that
            return self._record_error(self._proc.exited)
        if isinstance(returned, list):
            return self._record_turns(returned)
        outcome = Outcome.coerce(returned)
        self.outcomes = [outcome]
        if self.transcript.outcome is None and not self._guard.abandoned:
            self.transcript.append(OutcomeEvent(t=self.clock.now(), reason=outcome.reason, text=outcome.text,
                                                own=self.clock.own_now()))
        return outcome

    def _record_turns(self, returned: list[Any]) -> Outcome:
        """One outcome per user turn, recorded with its turn number; the last is the run's outcome."""
        started = max(self._turns.started, 1)
        if len(returned) != started:
            raise UsageError(
                f"the drive ran {started} user turn(s) (taken from sim.user_turns) but returned {len(returned)} "
                "outcome(s); return one Outcome per turn taken, in order, or only the last turn's Outcome"
            )
        outcomes = [Outcome.coerce(r) for r in returned]
        self.outcomes = outcomes
        if self.transcript.outcome is None:
            now, own = self.clock.now(), self.clock.own_now()
            for n, outcome in enumerate(outcomes):
                self.transcript.append(OutcomeEvent(t=now, reason=outcome.reason, text=outcome.text, turn=n, own=own))
        return outcomes[-1]

    def _record_error(self, error: BaseException) -> Outcome:
        text = f"{type(error).__name__}: {error}"
        if self.transcript.outcome is None and (not self._guard.abandoned or isinstance(error, LoopHalted)):
            where = None if isinstance(error, LoopHalted) else loop_frame(error)
            self.transcript.append(
                OutcomeEvent(t=self.clock.now(), reason="error", text=text, exception=text, where=where)
            )
        return Outcome(reason="error", text=text, exception=error)

    def check(self, outcome: Outcome | None = None, *, invariants: Iterable[str] | None = None) -> Any:
        """Check the run's transcript against the invariants; returns a `Report`.

        ``outcome`` is what `run` returned (already in the transcript; accepted for readability).
        """
        report: Report = check(self.transcript, invariants=invariants)
        return report

    def leftovers(self) -> list[str]:
        """What the scenario scripted and the run never used: unserved replies, faults that never fired."""
        return [*self.policy.leftovers(), *self.tools.unfired_faults()]

    # -- life cycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the clients (idempotent)."""
        # Only the http clients hold anything (the transport holds the run); closing an SDK client too
        # would only close its http client, after a runtime protocol check that costs more than a request.
        http = self._clients.get("http")
        for name in ("sync", "async"):
            if name in self._clients:
                _drop_resources(self._clients[name])
        self._clients.clear()
        if http is not None:
            http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Sim({self.scenario.name!r}, seed={self.seed})"


class _Escaped:
    """An exception that escaped an async drive (kept apart from what a drive may return)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class UserTurns(Sequence[str]):
    """``sim.user_turns``: the task, then each follow-up; taking turn *n* records where it begins.

    Turns are taken in order: iterating, or indexing turn after turn.  A turn taken again (its text read
    twice) is not a new turn.
    """

    # What it needs of the Sim, not the Sim: Sim -> UserTurns -> Sim would be a reference cycle that keeps every
    # finished run alive until the garbage collector finds it (slow for runs made by the hundred).
    __slots__ = ("_abort", "_clock", "_guard", "_server", "_texts", "_transcript", "started")

    def __init__(self, sim: Sim) -> None:
        self._texts: list[str] = [sim.scenario.task, *sim.scenario.followups]
        self._transcript, self._clock, self._guard = sim.transcript, sim.clock, sim._guard
        self._server, self._abort = sim.server, sim.abort
        self.started = 0  # how many turns the drive has taken

    def __len__(self) -> int:
        return len(self._texts)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            raise UsageError("sim.user_turns is taken one turn at a time: iterate it (for text in sim.user_turns)")
        texts = self._texts
        n = index + len(texts) if index < 0 else index
        if not 0 <= n < len(texts):
            raise IndexError(f"the conversation has {len(texts)} user turn(s); turn {index} does not exist")
        if n > self.started:
            raise UsageError(
                f"sim.user_turns[{index}] taken before turn {self.started}: take the turns in order "
                "(for text in sim.user_turns: ...)"
            )
        if n == self.started:
            self._begin(n, texts[n])
        return texts[n]

    def __iter__(self) -> Iterator[str]:
        for n in range(len(self)):
            yield self[n]

    def _begin(self, n: int, text: str) -> None:
        self.started = n + 1
        self._transcript.append(TurnStart(t=self._clock.now(), turn=n, text=text))
        self._guard.turn_began(self._server)
        self._abort.clear()  # Stop applies to the turn it was pressed in

    def __repr__(self) -> str:
        return f"UserTurns({self._texts!r})"


class _Guard:
    """The run's runaway budgets, checked on every request, tool call and virtual sleep.

    The server, the tools and the transports hold its bound methods as callbacks.  Bound methods of
    the Sim would close reference cycles (Sim -> server -> Sim) that keep every finished run, its
    transcript included, alive until a full garbage collection: slow for runs made by the hundred.
    """

    __slots__ = (
        "abandoned", "abort_at", "budget", "calls_before", "clock", "halts", "max_virtual_s", "on_time",
        "requests_before", "sub_calls", "sub_requests", "subs", "subs_begun", "t_before", "transcript", "watchdog",
        "world_s",
    )

    def __init__(self, clock: VirtualClock, watchdog: Watchdog, budget: Budget, max_virtual_s: float) -> None:
        self.clock = clock
        self.watchdog = watchdog
        self.budget = budget
        self.max_virtual_s = max_virtual_s
        self.halts = 0  # LoopHalted raised here (the run's budgets, blocked connections)
        self.abandoned = False  # the run gave up on the loop's thread: a call from it now parks it
        self.transcript: Transcript | None = None  # where a blocked connection is recorded (set by the Sim)
        # the budgets are per user turn: what earlier turns of a conversation spent is left out
        self.calls_before = self.requests_before = 0
        # sub-agent runs (`Sim.subagent`) have runaway budgets of their own: each open one's [calls and requests
        # at its start, its budget, its nested runs' calls and requests]; the run's own count leaves theirs out
        self.subs: list[list[Any]] = []
        self.sub_calls = self.sub_requests = 0
        self.subs_begun = 0  # sub-agent runs started in this turn, nested ones included (the run-wide bound)
        self.t_before = 0.0
        self.world_s = 0.0  # virtual seconds the world took this turn (model and tool latencies): not the loop's own
        self.on_time: Callable[[], None] | None = None  # the abort trigger's clock check
        self.abort_at: float | None = None  # when it fires (virtual seconds), for a wait that spans it

    def turn_began(self, server: SimServer) -> None:
        if not server.requests:  # the first turn: the run's own budgets
            return
        self.calls_before, self.requests_before = server.calls, server.requests
        self.sub_calls = self.sub_requests = self.subs_begun = 0
        self.t_before = self.clock.now()
        self.world_s = 0.0
        self.clock.end_at(self.t_before + self.max_virtual_s)

    def forever(self) -> float:
        """Virtual seconds from the start of the turn past which a wait is unwound as a runaway (`Gate`: a person who
        never answers a loop that sets no bound)."""
        return self.max_virtual_s + self.world_s

    def world(self, seconds: float) -> None:
        """The simulated world is about to take ``seconds`` (a model call's latency, a timed-out call's read timeout, a
        tool's latency for the tool_use it answers): the runaway bound on virtual time moves on by as much.

        Why: the bound is for a loop that runs on in time of its own (sleeps, backoff, waits); a loop inside its
        declared step cap in a slow world (nine rounds of a 590 s model call and an 1,800 s tool) is not a runaway.
        The world's time stays bounded: by the model-call budget, and by the tool_use blocks the model issued.
        """
        if seconds > 0:
            self.world_s += seconds
            self.clock.end_at(self.t_before + self.max_virtual_s + self.world_s)

    def on_request(self, server: SimServer) -> None:
        if _process._FORKED:  # in a child forked during the run: its copy of the simulator is not the run's
            raise forked_call("a model call")
        if self.subs:
            began_calls, began_requests, budget, nested_calls, nested_requests = self.subs[-1]
            calls, requests = server.calls - began_calls - nested_calls, server.requests - began_requests - nested_requests
        else:
            budget = self.budget
            calls = server.calls - self.calls_before - self.sub_calls
            requests = server.requests - self.requests_before - self.sub_requests
        if self.halts or calls > budget.model_calls or requests > budget.requests:
            # a halted loop that calls again caught the halt: no feeding the watchdog, count it (MAX_HALTS)
            where = " in a sub-agent run" if self.subs else " in one user turn" if self.calls_before else ""
            raise self._halt(
                "model_calls",
                f"the loop made {calls} model calls ({requests} requests){where} without stopping; "
                f"simloop stops a {'turn' if where else 'run'} after {budget.model_calls}",
            )
        if self.subs_begun:
            total = server.calls - self.calls_before
            if total > RUNAWAY_TOTAL_CALLS * self.budget.model_calls:
                raise self._halt("subagents", self._bomb(server))
        self.watchdog.feed()
        self.check_time()

    def sub_began(self, server: SimServer, limits: Limits) -> None:
        """A sub-agent run began: its model calls count against a runaway budget of its own, and the run's sub-runs
        against the run-wide bound (`RUNAWAY_SUBRUNS` times the run's own budget, in one user turn)."""
        self.subs_begun += 1
        if self.halts or self.subs_begun > RUNAWAY_SUBRUNS * self.budget.model_calls:
            raise self._halt("subagents", self._bomb(server))
        self.subs.append([server.calls, server.requests, _default_budget(limits), 0, 0])

    def _bomb(self, server: SimServer) -> str:
        """What ran away across the sub-runs, in words (a fresh budget each cannot see it)."""
        where = " in one user turn" if self.calls_before else ""
        return (f"the loop started {self.subs_begun} sub-agent runs and made {server.calls - self.calls_before} "
                f"model calls in all{where} without stopping; each sub-run has a runaway budget of its own, and "
                f"simloop stops a {'turn' if where else 'run'} after {RUNAWAY_SUBRUNS * self.budget.model_calls} "
                f"sub-agent runs or {RUNAWAY_TOTAL_CALLS * self.budget.model_calls} model calls across them")

    def sub_ended(self, server: SimServer) -> None:
        if not self.subs:
            return
        began_calls, began_requests = self.subs.pop()[:2]
        calls, requests = server.calls - began_calls, server.requests - began_requests
        if self.subs:
            self.subs[-1][3] += calls
            self.subs[-1][4] += requests
        else:
            self.sub_calls += calls
            self.sub_requests += requests

    def on_tool(self) -> None:
        if _process._FORKED:
            raise forked_call("a tool execution")
        if self.halts:
            raise self._halt("model_calls", "the loop called a tool after simloop halted it")
        self.watchdog.feed()
        self.check_time()

    def sleep(self, seconds: float) -> None:
        at = self.abort_at
        if at is not None and self.clock.now() < at < self.clock.now() + seconds:  # Stop lands mid-wait: then
            rest = self.clock.now() + seconds - at
            self.clock.sleep(at - self.clock.now())
            self.check_time()
            seconds = rest
        self.clock.sleep(seconds)
        self.check_time()

    def check_time(self) -> None:
        if self.on_time is not None:
            self.on_time()
        if self.clock.now() - self.t_before - self.world_s > self.max_virtual_s:
            world = f" beyond the {self.world_s:g} s the model and the tools took" if self.world_s else ""
            raise self._halt(
                "virtual_time",
                f"the run passed {self.max_virtual_s:g} virtual seconds of the loop's own time{world} without stopping",
            )

    def blocked(self, target: str, where: str) -> BaseException:
        """The network guard blocked a connection: halt the loop."""
        return self._halt(
            "network",
            f"the loop opened a real network connection to {target} at {where}; simloop blocked it",
            where=where, target=target,
        )

    def _halt(self, reason: str, detail: str, *, where: str | None = None, target: str | None = None) -> LoopHalted:
        """The halt to raise; the first one is recorded now, in case the loop swallows it."""
        if self.abandoned:
            park()  # the run is over and reported: this thread stops here for good
        self.halts += 1
        if self.transcript is not None and self.transcript.halt is None:
            if where is None:
                where = where_of(sys._getframe(2), skip_libraries=True)
            self.transcript.append(Halt(t=self.clock.now(), budget=reason, detail=detail, where=where, target=target))
        return LoopHalted(reason, detail, where, target)


@functools.cache
def _base_url() -> httpx2.URL:
    # Parsed once: URL parsing is a good part of building a client, and each Sim builds its own.
    # The trailing slash is the one the clients would add.
    import httpx2

    return httpx2.URL(BASE_URL + "/")


def _idle_worker(thread: threading.Thread) -> bool:
    """A thread-pool worker waiting for work (not work left running): its innermost frame is the pool's loop."""
    frame = sys._current_frames().get(thread.ident or 0)
    return frame is not None and frame.f_code.co_name == "_worker" and frame.f_code.co_filename.endswith(
        ("concurrent/futures/thread.py", "concurrent\\futures\\thread.py"))


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


def _sdk_client(cls: Any, http_client: Any) -> Any:
    """A new SDK client of ``cls`` (with SDK defaults) whose requests go through ``http_client``.

    Building an ``anthropic`` client takes about 100 µs (credential discovery, runtime protocol checks),
    and every Sim builds one.  A shallow copy of a prototype that was never used, with its http client
    swapped, is the same fresh client for a twentieth of that.  The prototype proves the swap is
    complete (the http client is held in exactly one attribute); otherwise the client is built.
    """
    proto, slot = _prototype(cls)
    if slot is None:
        return cls(api_key=API_KEY, base_url=_base_url(), http_client=http_client)
    if _plain_copy(cls):  # what copy.copy does for such a class, without its generic machinery
        client = cls.__new__(cls)
        vars(client).update(vars(proto))
    else:
        client = copy.copy(proto)
    setattr(client, slot, http_client)
    return client


@functools.cache
def _plain_copy(cls: Any) -> bool:
    """Whether ``copy.copy`` of a ``cls`` instance is ``cls.__new__(cls)`` with the instance's ``__dict__``:
    no class in its MRO has copy or pickle hooks, or slots holding state."""
    hooks = ("__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__",
             "__getnewargs_ex__")
    return all(not any(h in vars(k) for h in hooks) and not vars(k).get("__slots__") for k in cls.__mro__[:-1])


def _http_client(cls: Any, transport: Any) -> Any:
    """A new httpx2 client of ``cls`` on ``transport`` with simloop's base URL, as ``cls(transport=..., base_url=...)``.

    Building one takes some 45 µs (default headers, cookie jar, URL and timeout objects), and every Sim
    builds one.  A shallow copy of a never-used prototype, with its own transport, headers, cookies, event
    hooks and mounts, is the same fresh client for a fraction of that.  The prototype proves the copy is
    complete: every other attribute holds an immutable value; otherwise the client is built.
    """
    proto = _http_prototype(cls)
    if proto is None:
        return cls(transport=transport, base_url=_base_url())
    client = cls.__new__(cls)
    state = vars(client)
    state.update(vars(proto))
    state["_transport"] = transport
    state["_headers"] = proto._headers.copy()
    state["_cookies"] = type(proto._cookies)()
    state["_event_hooks"] = {"request": [], "response": []}
    state["_mounts"] = {}
    return client


@functools.cache
def _http_prototype(cls: Any) -> Any:
    import enum

    import httpx2

    placeholder = httpx2.AsyncBaseTransport() if "Async" in cls.__name__ else httpx2.BaseTransport()
    proto = cls(transport=placeholder, base_url=_base_url())
    immutable = (httpx2.URL, httpx2.QueryParams, httpx2.Timeout, bool, int, str, type(None), enum.Enum)
    fresh: dict[str, Any] = {  # the attributes a copy gets anew, as a new client holds them
        "_transport": lambda v: v is placeholder,
        "_headers": lambda v: type(v) is httpx2.Headers,
        "_cookies": lambda v: type(v) is httpx2.Cookies and not len(v),
        "_event_hooks": lambda v: v == {"request": [], "response": []},
        "_mounts": lambda v: v == {},
    }
    for name, value in vars(proto).items():
        check = fresh.pop(name, None)
        if not (check(value) if check is not None else isinstance(value, immutable)):
            return None
    return None if fresh else proto


def _drop_resources(client: Any) -> None:
    """Forget the SDK client's cached resources (``client.messages``, ``client.beta``): built again if used.

    Each holds the client's bound methods, and the client holds it: a reference cycle that keeps the client,
    its http client and everything they hold alive until the garbage collector finds them.  A Sim builds a
    client per run, and a collection of that garbage costs far more than freeing it as the run ends.
    """
    cached = vars(client)
    cls: Any = type(client)
    for name in _cached_properties(cls).intersection(cached):  # (the ones the run used: a few of ~20)
        if getattr(cached[name], "_client", None) is client:
            del cached[name]


@functools.cache
def _cached_properties(cls: Any) -> frozenset[str]:
    """The names of ``cls``'s cached properties (an SDK client's resources), worked out once per class."""
    return frozenset(name for name in dir(cls)
                     if isinstance(inspect.getattr_static(cls, name), functools.cached_property))


@functools.cache
def _prototype(cls: Any) -> tuple[Any, str | None]:
    import httpx2

    placeholder: Any = (  # never sends: a bare transport, not the default one (that loads TLS certificates)
        httpx2.AsyncClient(transport=httpx2.AsyncBaseTransport())
        if "Async" in cls.__name__
        else httpx2.Client(transport=httpx2.BaseTransport())
    )
    proto = cls(api_key=API_KEY, base_url=_base_url(), http_client=placeholder)
    slots = [name for name, value in vars(proto).items() if value is placeholder]
    return proto, slots[0] if len(slots) == 1 else None


OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_API_KEY = FAKE_OPENAI_KEY  # fake: the simulator takes any


def _openai_client(is_async: bool, http_client: Any) -> Any:
    """An ``openai`` SDK client (async or not) whose requests go through ``http_client`` to the simulated API."""
    try:
        import openai
    except ImportError:
        raise UsageError(
            "sim.openai_client needs the openai SDK: pip install 'simloop[openai]' (or pip install 'openai>=3.50,<4')"
        ) from None
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    return cls(api_key=OPENAI_API_KEY, base_url=OPENAI_BASE_URL, http_client=http_client)


def _as_scenario(scenario: ScenarioLike, *, allow_functions: bool = False) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario, allow_functions=allow_functions)
    if isinstance(scenario, dict):
        return Scenario._from_data(scenario, path=None, allow_functions=allow_functions)
    raise UsageError(
        f"Sim(scenario) takes a simloop.Scenario, a path to a scenario file or a dict; got {type(scenario).__name__}"
    )


def _bind_tools(scenario: Scenario, tools: Mapping[str, Callable[..., Any]]) -> Scenario:
    """The scenario with ``tools``' callables as its tools' functions (`Sim`'s ``tools=``)."""
    if not isinstance(tools, Mapping):
        raise UsageError(f"Sim(tools=...) takes a mapping of tool name to callable, got {type(tools).__name__}")
    names = [t.name for t in scenario.tools]
    for name, fn in tools.items():
        if name not in names:
            raise UsageError(
                f"Sim(tools=...): {name!r} is not a tool of scenario {scenario.name!r} "
                f"(its tools: {', '.join(names) or 'none'})"
            )
        if not callable(fn):
            raise UsageError(f"Sim(tools=...): the implementation of {name!r} must be callable, got {fn!r}")
    bound = [t.model_copy(update={"function": tools[t.name]}) if t.name in tools else t for t in scenario.tools]
    return scenario.model_copy(update={"tools": bound})


#: Model calls after which a loop that declares no step cap is unwound as a runaway (`stops`): one more than
#: the largest cap a common agent framework applies by default, so that a framework's own cap is never taken
#: for a runaway.  pydantic-ai's ``UsageLimits.request_limit`` is 50 requests; LangGraph's ``recursion_limit``
#: was 25 supersteps (about 12 model calls) before 1.x and is 10007 since (no cap in practice); the SDK tool
#: runner's ``max_iterations`` is unset (no cap).  A runaway run of 51 calls takes well under a second, and a
#: loop declaring ``max_steps=N`` gets ``2N + 5`` when that is more.
RUNAWAY_MODEL_CALLS = 51
#: The run-wide bound across sub-agent runs (docs/design.md, Sub-agents), in one user turn: at most this many sub-runs,
#: and this many model calls in all (the run's and its sub-runs'), per model call of the run's own runaway budget.
#: Each sub-run has a fresh budget of its own, so a delegate tool that starts sub-agents for ever is halted here
#: (``stops``, budget ``subagents``).  A parent capped at 10 calls (budget 51) may start 204 sub-runs and make
#: 1,020 calls: three delegations a step to sub-agents capped at 10 (30 sub-runs, at most 310 calls) stay well under.
RUNAWAY_SUBRUNS = 4
RUNAWAY_TOTAL_CALLS = 20
#: Lives of one run (the first, plus a restart after each simulated process death): past them, `stops` reports it.
MAX_LIVES = 10


def _default_budget(limits: Limits) -> Budget:
    steps = limits.max_steps or 0
    calls = max(RUNAWAY_MODEL_CALLS, 2 * steps + 5)
    return Budget(model_calls=calls, requests=4 * calls + 8)


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
    """The async client's first call through a throwaway Sim, on a virtual-time loop as an async drive runs.

    Its first run imports anyio's asyncio backend (the clock counts anyio's worker-thread jobs): some 10 ms, which a
    sync drive's process does not pay (a sync drive that starts an event loop itself pays it then, as an import).
    """
    with Sim({**_WARM_UP, "model": [{"end_turn": "ok"}]}) as sim:
        async def async_call() -> None:
            await sim.async_client.messages.create(
                model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])

        off_loop(lambda: sim.clock.run(async_call()))
