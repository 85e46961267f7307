"""Fault-injecting tools and the execution ledger.

`ToolBox.run` / `ToolBox.arun` execute the scenario's tools for the loop under
test (``sim.run_tool`` / ``await sim.arun_tool``): a canned result, or the
ToolSpec's function, with the scenario's faults injected per execution:

* ``raise`` — a realistic exception (``ConnectionError`` unless ``error:`` names another builtin type);
* ``timeout`` — waits ``latency`` virtual seconds (default 30), then raises ``TimeoutError``;
* ``slow`` — waits ``latency`` virtual seconds (default 30), then answers;
* ``huge_output`` — answers ``size`` characters (default 400,000: about 100k tokens);
* ``commit_then_raise`` — the effect happens, then the reply is lost (``ConnectionError``):
  the classic cause of double writes.

Every execution is written to the transcript (`ToolStart` / `ToolEnd`) and
matched to the tool_use block it answers: by id when the loop passes one,
else by name and input among the tool_use blocks not yet executed, chosen by
evidence and never by age (docs/design.md, How an execution is bound to its
tool_use): a live reply's calls before a dead one's (a reply cut at
max_tokens, refused, followed by a Stop or by a restart), the latest reply's
first.  The invariants' view refines the match afterwards by where each
output went (`simloop.invariants._base`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import json
import threading
from collections.abc import Callable
from typing import Any

from simloop._runtime.order import acting, turn
from simloop.errors import SimulatedCrash, UsageError
from simloop.protocol.render import CUT_STOPS
from simloop.scenario import Fault, Scenario, ToolSpec
from simloop.transcript import SUBRUN, AbortEvent, ApprovalEvent, Response, Restart, ToolEnd, ToolStart, Transcript

__all__ = ["FaultSource", "ToolBox", "UnknownToolError"]

#: Decides a tool execution's fault, given the tool, its execution number and the tool_use id it answers
#: (None when it answers none): what a generated run uses instead of the scenario's ``faults``.
FaultSource = Callable[[ToolSpec, int, "str | None"], "Fault | None"]

DEFAULT_LATENCY = 30.0
DEFAULT_HUGE = 400_000
_RAISABLE = {
    "ConnectionError", "TimeoutError", "ValueError", "KeyError", "PermissionError", "RuntimeError", "OSError",
    "FileNotFoundError", "LookupError", "ConnectionResetError",
}


# The tool execution running in this context (thread or task): where a sub-agent started inside a tool runs.
_RUNNING: contextvars.ContextVar[ToolStart | None] = contextvars.ContextVar("simloop_tool_running", default=None)


class UnknownToolError(LookupError):
    """The loop asked to run a tool the scenario does not define (the model may have made it up)."""


class ToolBox:
    """The scenario's tools for one run, with their faults and the ledger in ``transcript``.

    ``now`` reads the virtual clock; ``sleep`` spends virtual time for sync
    executions; ``on_call`` runs before each execution (the Sim's budgets).
    """

    def __init__(
        self,
        scenario: Scenario,
        transcript: Transcript,
        *,
        now: Callable[[], float],
        sleep: Callable[[float], None],
        on_call: Callable[[], None] | None = None,
        fault_source: FaultSource | None = None,
        allow_functions: bool = False,
    ) -> None:
        self.scenario = scenario
        self.fault_source = fault_source
        self.transcript = transcript
        self.now = now
        self.sleep = sleep
        self.on_call = on_call
        self.on_end: Callable[[ToolStart], None] | None = None  # set by the Sim (the abort trigger)
        self.world: Callable[[float], None] | None = None  # set by the Sim: told of the time a tool_use's run takes
        self._timed: set[str] = set()  # tool_use ids whose execution's latency the world was told of
        self.own: Callable[[], float | None] | None = None  # the caller's own time when behind (set by the Sim)
        self.heard: Callable[[], int | None] | None = None  # the answers the caller has heard, when not all (the Sim)
        self.executions = 0
        self._nth: dict[str, int] = {}
        self._fired: set[int] = set()
        self._executed: set[str] = set()
        self._seen_events = 0
        self._pending: list[dict[str, Any]] = []  # tool_use blocks issued, not yet executed
        self._issued: dict[str, dict[str, Any]] = {}
        self._reply_of: dict[str, tuple[int, bool]] = {}  # tool_use id -> (its reply's position, reply dead at birth)
        self._last_death = -1  # position of the last Stop or restart: a reply before it was left by its turn or life
        self._refused: dict[str, bool] = {}  # tool_use id -> its last request for approval was not a yes
        self._functions: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()
        self._specs: dict[str, ToolSpec] = {}
        for t in scenario.tools:
            self._specs.setdefault(t.name, t)  # the first of a name, as the loop's lookups find it
        for t in scenario.tools:  # resolved now: a bad path is the user's error, never a tool error mid-run
            if isinstance(t.function, str):
                self._functions[t.name] = _resolve(t, allow=allow_functions)

    # -- public -----------------------------------------------------------------

    def run(self, name: str, input: Any, *, tool_use_id: str | None = None, arrived: int | None = None) -> str:
        """Execute one tool call now (sync); returns its output or raises its fault.  ``arrived``: when the MCP
        request for it reached simloop's server (a transcript position: `simloop._arrivals`)."""
        with acting():  # one turn among the run's threads, latency included (simloop._runtime.order)
            start, spec, fault = self._begin(name, input, tool_use_id, arrived)
            if fault is not None and fault.kind in ("slow", "timeout"):
                self.sleep(self._latency(start, fault))
            return self._finish(start, spec, fault, input)

    def _latency(self, start: ToolStart, fault: Fault) -> float:
        """A slow or timed-out execution's latency; the first execution answering a tool_use tells ``world`` of it
        (a retry of the same call is the loop's own time)."""
        latency = fault.latency if fault.latency is not None else DEFAULT_LATENCY
        if self.world is not None and start.matched is not None and start.matched not in self._timed:
            self._timed.add(start.matched)
            self.world(latency)
        return latency

    async def arun(self, name: str, input: Any, *, tool_use_id: str | None = None, arrived: int | None = None) -> str:
        """Execute one tool call on the running event loop; latency is a (virtual) timer, so calls overlap."""
        start, spec, fault = self._begin(name, input, tool_use_id, arrived)
        try:
            if fault is not None and fault.kind in ("slow", "timeout"):
                await asyncio.sleep(self._latency(start, fault))
            else:
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.transcript.append(ToolEnd(t=self.now(), exec=start.exec, status="cancelled"))
            raise
        return self._finish(start, spec, fault, input)

    def running(self) -> ToolStart | None:
        """The tool execution in progress in the caller's context (a tool's own code calls this), or None."""
        return _RUNNING.get()

    def bind(self, name: str, fn: Callable[..., Any]) -> None:
        """Make ``fn`` the implementation of tool ``name`` from now on (`simloop.Sim.bind_tool`)."""
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(self._specs) or "none"
            raise UsageError(
                f"bind_tool: {name!r} is not a tool of this run (its tools: {known}); a drive shared by runs with "
                f"other tools binds it only where the run has it: if any(t['name'] == {name!r} for t in "
                "sim.tool_schemas): ..."
            )
        if not callable(fn):
            raise UsageError(f"bind_tool: the implementation of {name!r} must be callable, got {fn!r}")
        self._specs[name] = spec.model_copy(update={"function": fn})

    def unfired_faults(self) -> list[str]:
        """Faults for a given execution number that never fired (strict teardown reports them)."""
        return [
            f"faults[{i}] ({f.kind} on {f.tool} call {f.call}) never fired: {f.tool} ran "
            f"{self._nth.get(f.tool, 0)} time(s)"
            for i, f in enumerate(self.scenario.faults)
            if f.call is not None and i not in self._fired
        ]

    # -- internals ------------------------------------------------------------------

    def _begin(
        self, name: str, input: Any, tool_use_id: str | None, arrived: int | None = None
    ) -> tuple[ToolStart, ToolSpec | None, Fault | None]:
        turn()  # a run's threads execute simultaneous tools in start/submit order (simloop._runtime.order)
        if self.on_call is not None:
            self.on_call()
        if not isinstance(name, str):
            raise UsageError(f"run_tool(name, input): name must be the tool's name as a string, got {name!r}")
        with self._lock:  # a loop may run several tools at once, on threads: number and match them one by one
            self.executions += 1
            nth = self._nth[name] = self._nth.get(name, 0) + 1
            spec = self._specs.get(name)
            matched = self._match(name, input, tool_use_id)
            fault = self._fault_for(spec, name, nth, matched)
            start = ToolStart(
                t=self.now(), exec=self.executions, tool=name, input=_jsonable(input), nth=nth,
                kind=spec.kind if spec else "read", tool_use_id=tool_use_id,
                matched=matched, fault=fault.kind if fault else None, subrun=SUBRUN.get(), arrived=arrived,
                own=self.own() if self.own is not None else None,
                heard=self.heard() if self.heard is not None else None,
            )
            self.transcript.append(start)
        return start, spec, fault

    def _finish(self, start: ToolStart, spec: ToolSpec | None, fault: Fault | None, input: Any) -> str:
        end = ToolEnd(t=0.0, exec=start.exec, status="ok")
        running = _RUNNING.set(start)
        try:
            if spec is None:
                known = ", ".join(t.name for t in self.scenario.tools) or "none"
                raise UnknownToolError(f"unknown tool {start.tool!r} (the tools are: {known})")
            kind = fault.kind if fault else None
            if kind == "raise":
                raise _exception(fault, start.tool)
            if kind == "timeout":
                latency = fault.latency if fault and fault.latency is not None else DEFAULT_LATENCY
                raise TimeoutError(f"{start.tool} timed out after {latency:g}s")
            result = self._output(spec, input, start.nth)
            if kind == "huge_output":
                size = fault.size if fault and fault.size else DEFAULT_HUGE
                result = _huge(result, size)
            end.committed = spec.kind == "write"
            if kind == "crash":  # the effect happened, then the process died before the tool returned
                end.committed = True
                raise SimulatedCrash(f"the process died while {start.tool} ran (its effect was applied)")
            if kind == "commit_then_raise":
                end.committed = True
                raise ConnectionResetError(f"{start.tool}: connection reset before the reply arrived (the effect was applied)")
            end.result = result if len(result) <= 2000 else result[:2000] + f"... [{len(result)} chars]"
            return result
        except SimulatedCrash as e:
            end.status = "crashed"  # the process died: not an error the loop could report
            end.error = str(e)
            raise
        except BaseException as e:
            end.status = "raised"
            end.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            _RUNNING.reset(running)
            end.t = self.now()
            if self.on_end is not None:
                self.on_end(start)  # the effect is done, the result not yet returned: where a Stop may land
            self.transcript.append(end)

    def _fault_for(self, spec: ToolSpec | None, name: str, nth: int, matched: str | None) -> Fault | None:
        if self.fault_source is not None:
            return self.fault_source(spec, nth, matched) if spec is not None else None
        for i, f in enumerate(self.scenario.faults):
            if f.tool == name and (f.call is None or f.call == nth):
                self._fired.add(i)
                return f
        return None

    def _output(self, spec: ToolSpec, input: Any, nth: int) -> str:
        if spec.function is not None:
            fn = self._function(spec)
            out = fn(**input) if isinstance(input, dict) else fn(input)
            return out if isinstance(out, str) else json.dumps(out, default=str)
        if spec.results:
            return spec.results[(nth - 1) % len(spec.results)]
        shown = _SHOWN.encode(input)
        return f"{spec.name} ok: {shown}" if spec.kind == "write" else f"result {nth} of {spec.name}({shown})"

    def _function(self, spec: ToolSpec) -> Callable[..., Any]:
        fn = spec.function
        if callable(fn):
            return fn
        return self._functions[spec.name]

    def _match(self, name: str, input: Any, tool_use_id: str | None) -> str | None:
        """The tool_use id this execution answers (None: the model never asked for it).

        Without an id: among the pending tool_uses of this name and input, a live one before a dead one (its
        reply was cut at max_tokens or refused, or a Stop or a restart came after it, or the person did not approve
        it: a correct loop leaves such calls unrun, so they are never a better match than a fresh call), then the
        latest reply's first.
        """
        self._sync_issued()
        if tool_use_id is not None:
            block = self._issued.get(tool_use_id)
            if block is None or block.get("name") != name:
                return None
            self._mark(tool_use_id)
            return tool_use_id
        candidates = [
            (self._rank(str(b["id"])), i) for i, b in enumerate(self._pending)
            if b.get("name") == name and b.get("input") == input
        ]
        if candidates:
            tid = str(self._pending[min(candidates)[1]]["id"])
            self._mark(tid)
            return tid
        for tid, block in reversed(list(self._issued.items())):  # a rerun of something already executed
            if block.get("name") == name and block.get("input") == input:
                return str(tid)
        return None

    def _rank(self, tid: str) -> tuple[bool, int]:
        """Sort key of a pending tool_use: live before dead, then the latest reply first."""
        pos, dead = self._reply_of[tid]
        return dead or pos < self._last_death or self._refused.get(tid, False), -pos

    def _mark(self, tid: str) -> None:
        self._executed.add(tid)
        self._pending = [b for b in self._pending if b.get("id") != tid]

    def _sync_issued(self) -> None:
        events = self.transcript.events
        for pos in range(self._seen_events, len(events)):
            event = events[pos]
            if isinstance(event, Response):
                dead = event.stop_reason in _DEAD_STOPS
                for block in event.tool_uses:
                    tid = block.get("id")
                    if isinstance(tid, str) and tid not in self._issued:
                        self._issued[tid] = block
                        self._reply_of[tid] = (pos, dead)
                        self._pending.append(block)
            elif isinstance(event, (AbortEvent, Restart)):
                self._last_death = pos
            elif isinstance(event, ApprovalEvent) and event.matched is not None:
                self._refused[event.matched] = not event.approved
        self._seen_events = len(events)


#: Replies whose tool calls a correct loop never runs: cut off (the last input may be partial), or refused.
_DEAD_STOPS = frozenset({*CUT_STOPS, "refusal"})


def _resolve(spec: ToolSpec, *, allow: bool) -> Callable[..., Any]:
    """A tool's ``function`` import path as its callable, when the person running it opted in."""
    from simloop._loading.functions import FUNCTIONS_OPT_IN, resolve_function

    assert isinstance(spec.function, str)
    if not allow:
        raise UsageError(
            f"tool {spec.name!r}: function {spec.function!r} is an import path, which simloop resolves only when "
            f"you opt in with {FUNCTIONS_OPT_IN}; or pass the callable itself: Sim(scenario, tools="
            f"{{{spec.name!r}: fn}})"
        )
    return resolve_function(spec.function, tool=spec.name)


def _exception(fault: Fault | None, tool: str) -> BaseException:
    name = fault.error if fault and fault.error else "ConnectionError"
    if name not in _RAISABLE:
        name = "RuntimeError"
    cls = getattr(builtins, name)
    messages = {
        "ConnectionError": f"{tool}: could not reach the backend",
        "TimeoutError": f"{tool}: timed out",
        "PermissionError": f"{tool}: permission denied",
        "KeyError": f"{tool}: missing key",
        "ValueError": f"{tool}: invalid input",
    }
    return cls(messages.get(name, f"{tool}: failed"))  # type: ignore[no-any-return]


def _huge(seed: str, size: int) -> str:
    unit = (seed or "x") + "\n"
    return (unit * (size // len(unit) + 1))[:size]


_SHOWN = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)  # one encoder, not one a call
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _jsonable(value: Any) -> Any:
    if type(value) is dict and all(type(k) is str and type(v) in _SCALARS for k, v in value.items()):
        return value  # what a model's tool input mostly is: JSON as it stands, without a trial dump
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
