"""Stopping: `stops` (the loop returned within the runaway budget) and `limits` (it honours what it declares)."""

from __future__ import annotations

from collections import Counter

from simloop.invariants._base import MESSAGES_PATH, Violation, _canon, _is_reply, _View, _view
from simloop.transcript import Request, Response, Transcript

__all__ = ["limits", "stops"]

# -- stops ------------------------------------------------------------------------------------------------------


def stops(t: Transcript) -> list[Violation]:
    """The loop returned on its own: no `Halt` (runaway budget) in the transcript."""
    halt = t.halt
    if halt is None:
        return []
    v = _view(t)
    step = v.model_requests[-1][1].call if v.model_requests else None
    ran_out = {
        "model_calls": f"the loop made {t.model_calls} model calls without stopping",
        "virtual_time": f"the loop ran for {halt.t:g} virtual seconds without stopping",
        "watchdog": "the loop did not return before the real-time watchdog fired",
    }.get(halt.budget, f"simloop halted the loop (budget {halt.budget!r})")
    fix = {
        "virtual_time": "a correct loop enforces a deadline and bounds its retries, backoff and tool timeouts",
        "watchdog": "a correct loop never blocks or spins without a bound: every wait has a timeout",
    }.get(halt.budget, "a correct loop caps its steps (max_steps) and stops on repeated identical tool calls")
    message = f"{ran_out}; {_runaway(v)}; {fix}"
    evidence = {"budget": halt.budget, "model_calls": t.model_calls, "t": halt.t, "detail": halt.detail}
    return [Violation("stops", message, step, evidence)]


def _runaway(v: _View) -> str:
    """What the loop kept doing before it was halted, in a phrase."""
    if not v.model_requests:
        return "it made no model call at all (it was blocked or busy elsewhere)"
    calls = Counter(
        (str(b.get("name")), _canon(b.get("input"))) for _, r in v.replies for b in r.tool_uses
    )
    if calls:
        (name, _), n = calls.most_common(1)[0]
        if n >= 3:
            return f"the model kept asking for {name} with the same input ({n} times)"
    responses = v.t.responses
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
    return "the loop kept calling the model"



# -- limits -----------------------------------------------------------------------------------------------------


def limits(t: Transcript) -> list[Violation]:
    """The loop honours the limits it declared: max_steps, deadline_s, max_total_tokens (each only if declared)."""
    v = _view(t)
    declared = t.header.limits
    max_steps, deadline, budget = declared.get("max_steps"), declared.get("deadline_s"), declared.get("max_total_tokens")
    out: list[Violation] = []
    done: set[str] = set()
    calls_seen: set[int] = set()
    used = 0
    reply_positions = {pos for pos, _ in v.replies}
    for pos, e in enumerate(t.events):
        if isinstance(e, Response) and pos in reply_positions:
            used += e.input_tokens + e.output_tokens
        if not isinstance(e, Request) or e.path != MESSAGES_PATH or e.call in calls_seen:
            continue
        calls_seen.add(e.call)  # the first attempt of a logical call; SDK retries are the same call
        if max_steps is not None and e.call > max_steps and "max_steps" not in done:
            done.add("max_steps")
            message = (
                f"the loop declared max_steps={max_steps} but made model call {e.call} ({t.model_calls} in all); "
                "a correct loop checks its step count before each call and stops with reason 'max_steps'"
            )
            evidence = {"request": e.index, "max_steps": max_steps, "model_calls": t.model_calls}
            out.append(Violation("limits", message, e.call, evidence))
        if deadline is not None and e.t >= deadline and "deadline_s" not in done:
            done.add("deadline_s")
            message = (
                f"model call {e.call} started at t={e.t:g}s, at or after the declared deadline_s={deadline:g}; a "
                "correct loop checks the clock before each call and stops with reason 'deadline'"
            )
            out.append(Violation("limits", message, e.call, {"request": e.index, "deadline_s": deadline, "t": e.t}))
        if budget is not None and used >= budget and "max_total_tokens" not in done:
            done.add("max_total_tokens")
            message = (
                f"model call {e.call} started after {used} tokens were used, reaching the declared "
                f"max_total_tokens={budget}; a correct loop sums usage.input_tokens + usage.output_tokens after "
                "each reply and stops with reason 'token_budget' once the budget is reached"
            )
            evidence = {"request": e.index, "max_total_tokens": budget, "used": used}
            out.append(Violation("limits", message, e.call, evidence))
    return out

