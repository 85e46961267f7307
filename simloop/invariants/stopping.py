"""Stopping: `stops` (the loop returned within the runaway budget) and `limits` (it honours the limits and stop
policies it declares)."""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any

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
    """`limits` over one turn."""
    v = _view(t)
    declared = t.header.limits
    max_steps, deadline, budget = declared.get("max_steps"), declared.get("deadline_s"), declared.get("max_total_tokens")
    max_cost = declared.get("max_cost_usd")
    out: list[Violation] = []
    done: set[str] = set()
    calls_seen: set[int] = set()
    lost: set[int] = set()  # calls in flight when the process died: forgiven (the loop never saw them answered)
    used = 0
    spent = 0.0
    reply_positions = {pos for pos, _ in v.replies}
    answered = {r.index for _, r in v.replies}  # requests that got a reply
    retries = 0  # the loop's own retries: the same request sent again after it got no reply (an SDK's are one call)
    last: Request | None = None
    for pos, e in enumerate(t.events):
        if isinstance(e, Response) and pos in reply_positions:
            used += e.input_tokens + e.output_tokens
            if max_cost is not None:
                spent += reply_cost(e, t.header.prices)
        elif isinstance(e, Response) and e.fault == "crash":
            lost.add(e.call)
        if not isinstance(e, Request) or e.path not in MODEL_PATHS or e.call in calls_seen:
            if isinstance(e, Request) and e.path in MODEL_PATHS:
                last = e
            continue
        calls_seen.add(e.call)  # the first attempt of a logical call; SDK retries are the same call
        if last is not None and last.index not in answered and last.path == e.path and last.body == e.body:
            retries += 1  # a retry the loop made itself, of a call that failed: the same step
        last = e
        if max_steps is not None and e.call - len(lost) - retries > max_steps and "max_steps" not in done:
            done.add("max_steps")
            restarted = any(isinstance(x, Restart) for x in t.events[:pos])
            message = (
                f"{_lead(t, 'max_steps', max_steps)} but {_pre(t, 'max_steps')}made model call {e.call} "
                f"({t.model_calls} in all{', across a simulated crash and restart' if restarted else ''}); "
                "a correct loop checks its step count before each call and stops with reason 'max_steps'"
                + ("; a durable loop keeps the count in its store with its history (a count that starts over in "
                   "each life lets a crash loop run for ever)" if restarted else "")
            )
            evidence = {"request": e.index, "max_steps": max_steps, "model_calls": t.model_calls}
            out.append(Violation("limits", message, e.call, evidence))
        if deadline is not None and e.t >= deadline and "deadline_s" not in done:
            done.add("deadline_s")
            message = (
                f"model call {e.call} started at t={e.t:g}s, at or after {_the(t, 'deadline_s', f'{deadline:g}')}; a "
                "correct loop checks the clock before each call and stops with reason 'deadline'"
            )
            out.append(Violation("limits", message, e.call, {"request": e.index, "deadline_s": deadline, "t": e.t}))
        if budget is not None and used >= budget and "max_total_tokens" not in done:
            done.add("max_total_tokens")
            message = (
                f"model call {e.call} started after {used} tokens were used, reaching "
                f"{_the(t, 'max_total_tokens', budget)}; a correct loop sums usage.input_tokens + usage.output_tokens after "
                "each reply and stops with reason 'token_budget' once the budget is reached"
            )
            evidence = {"request": e.index, "max_total_tokens": budget, "used": used}
            out.append(Violation("limits", message, e.call, evidence))
        if max_cost is not None and spent >= max_cost and "max_cost_usd" not in done:
            done.add("max_cost_usd")
            message = (
                f"model call {e.call} started after the replies had cost ${spent:.4f}, reaching "
                f"{_the(t, 'max_cost_usd', f'{max_cost:g}')}; a correct loop prices each reply's usage (input, "
                "output, cache writes and cache reads, each at the model's price per million tokens) and stops with "
                "reason 'cost_budget' once the budget is reached"
            )
            evidence = {"request": e.index, "max_cost_usd": max_cost, "cost_usd": round(spent, 6)}
            out.append(Violation("limits", message, e.call, evidence))
    if any(declared.get(k) is not None for k in _POLICIES):
        out.extend(_policies(t, v))
    return out


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
    out: list[Violation] = []
    done: set[str] = set()
    starts: dict[int, ToolStart] = {}
    errors = writes = 0
    spent: dict[str, ToolStart] = {}  # policy -> the execution that spent its budget
    runs: Counter[tuple[str, str]] = Counter()
    first_run: dict[tuple[str, str], int] = {}
    calls_seen: set[int] = set()
    for e in t.events:
        if isinstance(e, ToolStart):
            starts[e.exec] = e
            if "max_writes" in spent and "max_writes" not in done and _is_write(t, e):
                done.add("max_writes")
                last = spent["max_writes"]
                message = (
                    f"{_lead(t, 'max_writes', max_writes)} and {max_writes} write(s) had succeeded (the last: "
                    f"{last.tool}, exec {last.exec}), but {_it(t, 'max_writes')} ran {e.tool} (exec {e.exec}), another write; a correct loop "
                    "treats its last allowed write as terminal: it runs no further write and stops"
                )
                evidence = {"limit": "max_writes", "max_writes": max_writes, "exec": e.exec, "tool": e.tool,
                            "spent_by": last.exec}
                out.append(Violation("limits", message, v.step_at(_position(v, e)), evidence))
            if max_repeats is not None and "max_repeats" not in done:
                key = (e.tool, v.input_of(e))
                runs[key] += 1
                first_run.setdefault(key, e.exec)
                if runs[key] > max_repeats:
                    done.add("max_repeats")
                    message = (
                        f"{_lead(t, 'max_repeats', max_repeats)} but {_pre(t, 'max_repeats')}ran {e.tool} with the "
                        f"same input {runs[key]} times (exec {first_run[key]} first, exec {e.exec} last); a correct loop counts "
                        "each tool and input it runs and, rather than run one again past the limit, stops with "
                        "reason 'repetition'"
                    )
                    evidence = {"limit": "max_repeats", "max_repeats": max_repeats, "exec": e.exec, "tool": e.tool,
                                "first_exec": first_run[key], "runs": runs[key]}
                    out.append(Violation("limits", message, v.step_at(_position(v, e)), evidence))
        elif isinstance(e, ToolEnd):
            s = starts.get(e.exec)
            if s is None:
                continue
            if e.status == "raised":
                errors += 1
                if max_errors is not None and errors == max_errors:
                    spent["max_tool_errors"] = s
            elif e.status == "ok" and _is_write(t, s):
                writes += 1
                if max_writes is not None and writes == max_writes:
                    spent["max_writes"] = s
        elif isinstance(e, Request) and e.path in MODEL_PATHS and e.call not in calls_seen:
            calls_seen.add(e.call)
            if "max_tool_errors" in spent and "max_tool_errors" not in done:
                done.add("max_tool_errors")
                last = spent["max_tool_errors"]
                message = (
                    f"{_lead(t, 'max_tool_errors', max_errors)} and {max_errors} tool execution(s) had failed "
                    f"(the last: {last.tool}, exec {last.exec}), but {_it(t, 'max_tool_errors')} made model call {e.call}; a correct loop counts "
                    "failed tool executions and, once the budget is spent, stops with reason 'error_budget' "
                    "instead of calling the model again"
                )
                evidence = {"limit": "max_tool_errors", "max_tool_errors": max_errors, "request": e.index,
                            "spent_by": last.exec}
                out.append(Violation("limits", message, e.call, evidence))
            if "max_writes" in spent and "max_writes" not in done:
                done.add("max_writes")
                last = spent["max_writes"]
                message = (
                    f"{_lead(t, 'max_writes', max_writes)} and {max_writes} write(s) had succeeded (the last: "
                    f"{last.tool}, exec {last.exec}), but {_it(t, 'max_writes')} made model call {e.call}; a correct loop treats its last "
                    "allowed write as terminal: it stops (reason 'final': the write is the result) instead of "
                    "calling the model again"
                )
                evidence = {"limit": "max_writes", "max_writes": max_writes, "request": e.index, "spent_by": last.exec}
                out.append(Violation("limits", message, e.call, evidence))
    return out


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

