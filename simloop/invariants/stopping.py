"""Stopping: `stops` (the loop returned within the runaway budget) and `limits` (it honours the limits and stop
policies it declares)."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from simloop.invariants._base import MODEL_PATHS, Violation, _canon, _is_reply, _is_write, _View, _view, per_turn
from simloop.pricing import cost_usd
from simloop.transcript import ApprovalEvent, Halt, Request, Response, Restart, ToolEnd, ToolStart, Transcript

__all__ = ["FORK_FIX", "limits", "reply_cost", "stops"]

#: How a loop runs tools in another process and keeps them in the run (the message of a fork failure).
FORK_FIX = (
    "a child process of a run finds the run's tools at $SIMLOOP_TOOLS_URL (POST $SIMLOOP_TOOLS_URL/NAME, the input "
    "as the JSON body) and its simulated API at $ANTHROPIC_BASE_URL in its environment: call those from the child, "
    "not the copy of the Sim it inherited (or call sim.run_tool in the loop's own process and hand the child only "
    "the work; a loop in another language runs as simloop verify --command CMD, with the same variables and MCP "
    "at $SIMLOOP_MCP_URL)"
)

# -- stops ------------------------------------------------------------------------------------------------------


def stops(t: Transcript) -> list[Violation]:
    """The loop returned on its own: no `Halt` (runaway budget, watchdog, deadlock, blocked network) in the transcript."""
    halts: list[Halt] = t.of(Halt)
    if not halts:
        return []
    halt = halts[0]
    v = _view(t)
    at = t.events.index(halt)
    before = v.model_requests[: bisect.bisect_left(v.model_requests, at, key=lambda pr: pr[0])]
    calls = len({r.call for _, r in before})
    step = before[-1][1].call if before else None
    made = f"{calls} model call{'' if calls == 1 else 's'}"
    where = f" at {halt.where}" if halt.where else ""
    if halt.budget == "model_calls":
        what = f"the loop made {made} without stopping; {_runaway(v, at)}"
        fix = "a correct loop caps its steps (max_steps) and stops on repeated identical tool calls"
    elif halt.budget == "virtual_time" and (wait := _person_wait(t, at, halt)) is not None:
        what = (f"the loop waited for a person's answer on {wait.tool} from {wait.asked:g} virtual seconds until simloop "
                f"unwound it at {halt.t:g} s: the person never answered, and the loop set no bound on the wait")
        fix = ("a correct loop bounds the wait for a person: sim.approve(..., timeout=...), or a deadline it declares "
               "(deadline_s), and treats no answer as a no")
    elif halt.budget == "virtual_time":
        what = f"the loop ran for {halt.t:g} virtual seconds without stopping; {_runaway(v, at)}"
        fix = "a correct loop enforces a deadline and bounds its retries, backoff and tool timeouts"
    elif halt.budget == "watchdog":
        what = (f"after {made} the loop ran on{where} without calling the model or a tool until the real-time "
                "watchdog halted it (it spun, or waited on something with no timeout)")
        fix = "a correct loop never blocks or spins without a bound: every wait has a timeout"
    elif halt.budget == "deadlock":
        what = (f"the loop deadlocked after {made}: it awaits{where} something nothing will ever complete "
                "(no task, timer, thread or socket could wake its event loop)")
        fix = "a correct loop awaits only what something will complete, and puts a timeout on every wait"
    elif halt.budget == "network":
        what = (f"the loop bypassed the simulator: after {made} it opened a real network connection to "
                f"{halt.target or 'a host'}{where}, which simloop blocked")
        fix = ("a loop under test reaches the model only through sim.client, sim.async_client or sim.http_client; "
               "for a loop that must reach a local service, run with network='loopback' (--network loopback)")
    elif halt.budget == "subagents":
        what = f"the loop kept starting sub-agents: {halt.detail}"
        fix = ("a correct loop bounds its delegation: a delegate call is a step of the parent like any other, and a "
               "tool starts a bounded number of sub-agents (never one after another until something else stops it)")
    elif halt.budget == "fork":
        what = (f"after {made} the loop made calls in a child process forked during the run, which simloop refused "
                f"there (the child's copy of the simulator records nothing the run sees): {halt.detail}")
        fix = FORK_FIX
    else:
        what = f"simloop halted the loop after {made} (budget {halt.budget!r}): {halt.detail}"
        fix = "a correct loop returns on its own"
    abandoned = next((h for h in halts[1:] if h.budget == "abandoned"), None)
    message = f"{what}; " + (f"{abandoned.detail}; " if abandoned is not None else "") + fix
    evidence: dict[str, Any] = {"budget": halt.budget, "model_calls": calls, "t": halt.t, "detail": halt.detail}
    evidence.update({k: getattr(halt, k) for k in ("where", "target") if getattr(halt, k)})
    if abandoned is not None:
        evidence["abandoned"] = abandoned.detail
    return [Violation("stops", message, step, evidence)]


def _person_wait(t: Transcript, at: int, halt: Halt) -> ApprovalEvent | None:
    """The request for approval whose wait the halt at event position ``at`` unwound (recorded unanswered at that very
    moment, just before or after the halt), or None."""
    for event in t.events[max(0, at - 1): at + 2]:
        if isinstance(event, ApprovalEvent) and event.answer == "none" and event.t == halt.t:
            return event
    return None


def _runaway(v: _View, until: int) -> str:
    """What the loop kept doing before it was halted (at event position ``until``), in a phrase."""
    requests = [r for pos, r in v.model_requests if pos < until]
    if not requests:
        return "it made no model call at all"
    replies = [r for pos, r in v.replies if pos < until]
    calls = Counter((str(b.get("name")), _canon(b.get("input"))) for r in replies for b in r.tool_uses)
    if calls:
        (name, _), n = calls.most_common(1)[0]
        if n >= 3:
            return f"the model kept asking for {name} with the same input ({n} times)"
    responses = [e for e in v.t.events[:until] if isinstance(e, Response)]
    failed = 0
    for r in reversed(responses):
        if _is_reply(r):
            break
        failed += 1
    if failed >= 2:
        kinds = ", ".join(sorted({r.fault or r.kind for r in responses[-failed:]}))
        return f"the last {failed} model calls failed ({kinds}) and the loop kept retrying"
    if calls:
        return f"the model kept asking for tools ({sum(calls.values())} tool calls) and the loop kept running them"
    if len({r.call for r in requests}) <= 2:
        return "it spent the time between model calls (sleeping, or waiting on timeouts)"
    return "the loop kept calling the model"


# -- limits -----------------------------------------------------------------------------------------------------


def limits(t: Transcript) -> list[Violation]:
    """The loop honours the limits it declared: max_steps, deadline_s, max_total_tokens, max_cost_usd, and the stop policies
    max_tool_errors, max_writes, max_repeats (each only if declared; see `simloop.Limits`); in a conversation,
    per user turn (a turn's steps, time and tokens count from its start)."""
    return _limits_each(t)


def _limits(t: Transcript) -> list[Violation]:
    """`limits` over one turn: each declared budget checked at every model call, then the stop policies."""
    v = _view(t)
    declared = t.header.limits
    out: list[Violation] = []
    done: set[str] = set()  # the budgets already reported: each once, at the first call past it
    budgets = [(key, check, declared[key]) for key, check in _BUDGETS if declared.get(key) is not None]
    for call in _calls(t, v, priced=declared.get("max_cost_usd") is not None):
        for key, check, limit in budgets:
            if key in done:
                continue
            found = check(t, call, limit)
            if found is not None:
                done.add(key)
                out.append(found)
    if any(declared.get(k) is not None for k in _POLICIES):
        out.extend(_policies(t, v))
    return out


class _Call(NamedTuple):
    """A logical model call (its first attempt) as the budgets see it: its step, and what was spent before it."""

    pos: int  # its event position
    request: Request
    step: int  # its call number, less the calls lost to a crash and the loop's own retries
    used: int  # the tokens of the replies before it
    spent: float  # what those replies cost in US dollars (0.0 unless a cost budget is declared)


def _calls(t: Transcript, v: _View, *, priced: bool) -> Iterator[_Call]:
    """Each logical model call of ``t``, in order (SDK retries are the same call), with what it counts as.

    A retry the loop makes itself (the same request sent again after it got no reply) is the same step, and a
    call in flight when the process died is forgiven (the loop never saw it answered).  The replies' cost is
    summed only when ``priced`` (a cost budget is declared): pricing each reply is work no other budget needs.
    """
    calls_seen: set[int] = set()
    lost: set[int] = set()  # calls in flight when the process died: forgiven (the loop never saw them answered)
    used = 0
    spent = 0.0
    reply_positions = {pos for pos, _ in v.replies}
    answered = {r.index for _, r in v.replies}  # requests that got a reply
    retries = 0  # the loop's own retries: the same request sent again after it got no reply (an SDK's are one call)
    last: Request | None = None
    for pos, e in enumerate(t.events):
        if isinstance(e, Response):
            if pos in reply_positions:
                used += e.input_tokens + e.output_tokens
                if priced:
                    spent += reply_cost(e, t.header.prices)
            elif e.fault == "crash":
                lost.add(e.call)
            continue
        if not isinstance(e, Request) or e.path not in MODEL_PATHS:
            continue
        if e.call in calls_seen:
            last = e
            continue
        calls_seen.add(e.call)  # the first attempt of a logical call; SDK retries are the same call
        if last is not None and last.index not in answered and last.path == e.path and last.body == e.body:
            retries += 1  # a retry the loop made itself, of a call that failed: the same step
        last = e
        yield _Call(pos, e, e.call - len(lost) - retries, used, spent)


def _over_steps(t: Transcript, call: _Call, max_steps: Any) -> Violation | None:
    """The call is a step past the declared ``max_steps`` (a count that starts over after a restart included)."""
    e = call.request
    if not call.step > max_steps:
        return None
    restarted = any(isinstance(x, Restart) for x in t.events[:call.pos])
    message = (
        f"{_lead(t, 'max_steps', max_steps)} but {_pre(t, 'max_steps')}made model call {e.call} "
        f"({t.model_calls} in all{', across a simulated crash and restart' if restarted else ''}); "
        "a correct loop checks its step count before each call and stops with reason 'max_steps'"
        + ("; a durable loop keeps the count in its store with its history (a count that starts over in "
           "each life lets a crash loop run for ever)" if restarted else "")
    )
    evidence = {"request": e.index, "max_steps": max_steps, "model_calls": t.model_calls}
    return Violation("limits", message, e.call, evidence)


def _past_deadline(t: Transcript, call: _Call, deadline: Any) -> Violation | None:
    """The call started at or after the declared ``deadline_s``."""
    e = call.request
    if not e.t >= deadline:
        return None
    message = (
        f"model call {e.call} started at t={e.t:g}s, at or after {_the(t, 'deadline_s', f'{deadline:g}')}; a "
        "correct loop checks the clock before each call and stops with reason 'deadline'"
    )
    return Violation("limits", message, e.call, {"request": e.index, "deadline_s": deadline, "t": e.t})


def _over_tokens(t: Transcript, call: _Call, budget: Any) -> Violation | None:
    """The call started once the replies before it had used the declared ``max_total_tokens``."""
    e, used = call.request, call.used
    if not used >= budget:
        return None
    message = (
        f"model call {e.call} started after {used} tokens were used, reaching "
        f"{_the(t, 'max_total_tokens', budget)}; a correct loop sums usage.input_tokens + usage.output_tokens after "
        "each reply and stops with reason 'token_budget' once the budget is reached"
    )
    evidence = {"request": e.index, "max_total_tokens": budget, "used": used}
    return Violation("limits", message, e.call, evidence)


def _over_cost(t: Transcript, call: _Call, max_cost: Any) -> Violation | None:
    """The call started once the replies before it had cost the declared ``max_cost_usd``."""
    e, spent = call.request, call.spent
    if not spent >= max_cost:
        return None
    message = (
        f"model call {e.call} started after the replies had cost ${spent:.4f}, reaching "
        f"{_the(t, 'max_cost_usd', f'{max_cost:g}')}; a correct loop prices each reply's usage (input, "
        "output, cache writes and cache reads, each at the model's price per million tokens) and stops with "
        "reason 'cost_budget' once the budget is reached"
    )
    evidence = {"request": e.index, "max_cost_usd": max_cost, "cost_usd": round(spent, 6)}
    return Violation("limits", message, e.call, evidence)


#: The budgets checked at each model call, in the order their violations are reported: name -> its check (None
#: unless the call is past the limit; each tests ``not past``, so a limit no number passes, NaN, never fires).
_BUDGETS: tuple[tuple[str, Callable[[Transcript, _Call, Any], Violation | None]], ...] = (
    ("max_steps", _over_steps), ("deadline_s", _past_deadline), ("max_total_tokens", _over_tokens),
    ("max_cost_usd", _over_cost),
)


_POLICIES = ("max_tool_errors", "max_writes", "max_repeats")


def reply_cost(r: Response, prices: dict[str, Any] | None = None) -> float:
    """What one reply cost in US dollars: its usage at its model's price (`simloop.pricing`)."""
    msg = r.message or {}
    return cost_usd(msg.get("usage"), msg.get("model"), prices)
_limits_each = per_turn(_limits)


def _policies(t: Transcript, v: _View) -> list[Violation]:
    """The declared stop policies: the error budget, the write budget ("one write") and repetition."""
    declared = t.header.limits
    max_errors, max_writes, max_repeats = (declared.get(k) for k in _POLICIES)
    walk = _PolicyWalk(t, v, max_errors, max_writes, max_repeats)
    for e in t.events:
        if isinstance(e, ToolStart):
            walk.started(e)
        elif isinstance(e, ToolEnd):
            walk.ended(e)
        elif isinstance(e, Request) and e.path in MODEL_PATHS and e.call not in walk.calls_seen:
            walk.called(e)
    return walk.out


@dataclass
class _PolicyWalk:
    """`_policies`' walk over one turn's events: what each policy has counted so far, and what it found.

    A policy's budget is spent by the execution that reaches it (``spent``); the next write (``max_writes``) or
    model call (``max_tool_errors``, ``max_writes``) after that is its violation, one each (``done``).
    """

    t: Transcript
    v: _View
    max_errors: Any
    max_writes: Any
    max_repeats: Any
    out: list[Violation] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    starts: dict[int, ToolStart] = field(default_factory=dict)
    errors: int = 0
    writes: int = 0
    spent: dict[str, ToolStart] = field(default_factory=dict)  # policy -> the execution that spent its budget
    runs: Counter[tuple[str, str]] = field(default_factory=Counter)
    first_run: dict[tuple[str, str], int] = field(default_factory=dict)
    calls_seen: set[int] = field(default_factory=set)

    def started(self, e: ToolStart) -> None:
        """A tool execution began: a write past the write budget, or a repeat past ``max_repeats``, is reported."""
        t, v = self.t, self.v
        self.starts[e.exec] = e
        if "max_writes" in self.spent and "max_writes" not in self.done and _is_write(t, e):
            self.done.add("max_writes")
            last = self.spent["max_writes"]
            message = (
                f"{_lead(t, 'max_writes', self.max_writes)} and {self.max_writes} write(s) had succeeded (the last: "
                f"{last.tool}, exec {last.exec}), but {_it(t, 'max_writes')} ran {e.tool} (exec {e.exec}), another "
                "write; a correct loop treats its last allowed write as terminal: it runs no further write and stops"
            )
            evidence = {"limit": "max_writes", "max_writes": self.max_writes, "exec": e.exec, "tool": e.tool,
                        "spent_by": last.exec}
            self.out.append(Violation("limits", message, v.step_at(_position(v, e)), evidence))
        if self.max_repeats is not None and "max_repeats" not in self.done:
            self._repeat(e)

    def _repeat(self, e: ToolStart) -> None:
        """Count ``e``'s tool and input; its run past ``max_repeats`` is reported."""
        t, v, max_repeats = self.t, self.v, self.max_repeats
        key = (e.tool, v.input_of(e))
        self.runs[key] += 1
        self.first_run.setdefault(key, e.exec)
        if self.runs[key] > max_repeats:
            self.done.add("max_repeats")
            message = (
                f"{_lead(t, 'max_repeats', max_repeats)} but {_pre(t, 'max_repeats')}ran {e.tool} with the "
                f"same input {self.runs[key]} times (exec {self.first_run[key]} first, exec {e.exec} last); a correct "
                "loop counts each tool and input it runs and, rather than run one again past the limit, stops with "
                "reason 'repetition'"
            )
            evidence = {"limit": "max_repeats", "max_repeats": max_repeats, "exec": e.exec, "tool": e.tool,
                        "first_exec": self.first_run[key], "runs": self.runs[key]}
            self.out.append(Violation("limits", message, v.step_at(_position(v, e)), evidence))

    def ended(self, e: ToolEnd) -> None:
        """A tool execution ended: a failure counts against the error budget, a succeeded write against the writes."""
        s = self.starts.get(e.exec)
        if s is None:
            return
        if e.status == "raised":
            self.errors += 1
            if self.max_errors is not None and self.errors == self.max_errors:
                self.spent["max_tool_errors"] = s
        elif e.status == "ok" and _is_write(self.t, s):
            self.writes += 1
            if self.max_writes is not None and self.writes == self.max_writes:
                self.spent["max_writes"] = s

    def called(self, e: Request) -> None:
        """A logical model call began: one after a spent error or write budget is reported."""
        t = self.t
        self.calls_seen.add(e.call)
        if "max_tool_errors" in self.spent and "max_tool_errors" not in self.done:
            self.done.add("max_tool_errors")
            last = self.spent["max_tool_errors"]
            max_errors = self.max_errors
            message = (
                f"{_lead(t, 'max_tool_errors', max_errors)} and {max_errors} tool execution(s) had failed "
                f"(the last: {last.tool}, exec {last.exec}), but {_it(t, 'max_tool_errors')} made model call "
                f"{e.call}; a correct loop counts failed tool executions and, once the budget is spent, stops with "
                "reason 'error_budget' instead of calling the model again"
            )
            evidence = {"limit": "max_tool_errors", "max_tool_errors": max_errors, "request": e.index,
                        "spent_by": last.exec}
            self.out.append(Violation("limits", message, e.call, evidence))
        if "max_writes" in self.spent and "max_writes" not in self.done:
            self.done.add("max_writes")
            last = self.spent["max_writes"]
            message = (
                f"{_lead(t, 'max_writes', self.max_writes)} and {self.max_writes} write(s) had succeeded (the last: "
                f"{last.tool}, exec {last.exec}), but {_it(t, 'max_writes')} made model call {e.call}; a correct "
                "loop treats its last allowed write as terminal: it stops (reason 'final': the write is the result) "
                "instead of calling the model again"
            )
            evidence = {"limit": "max_writes", "max_writes": self.max_writes, "request": e.index,
                        "spent_by": last.exec}
            self.out.append(Violation("limits", message, e.call, evidence))


def _by_scenario(t: Transcript, key: str) -> bool:
    """Whether the scenario's own ``limits:`` declared ``key`` (not the loop; older transcripts do not say)."""
    return t.header.limits_from.get(key) == "scenario"


def _lead(t: Transcript, key: str, value: object) -> str:
    """``the loop declared max_writes=1``, or, when the scenario declared it, ``the scenario declares ...``."""
    if _by_scenario(t, key):
        return f"the scenario declares {key}={value} (its limits:)"
    return f"the loop declared {key}={value}"


def _the(t: Transcript, key: str, value: object) -> str:
    """``the declared deadline_s=60``, or ``the deadline_s=60 the scenario declares (its limits:)``."""
    if _by_scenario(t, key):
        return f"the {key}={value} the scenario declares (its limits:)"
    return f"the declared {key}={value}"


def _pre(t: Transcript, key: str) -> str:
    """The subject to repeat after `_lead`: nothing after "the loop declared ...", "the loop " otherwise."""
    return "the loop " if _by_scenario(t, key) else ""


def _it(t: Transcript, key: str) -> str:
    return "the loop" if _by_scenario(t, key) else "it"


def _position(v: _View, s: ToolStart) -> int:
    """The event position of a tool execution's start."""
    for pos, x in v.starts:
        if x is s:
            return pos
    return len(v.t.events)

