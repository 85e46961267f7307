"""How the loop returns: `crash` (no exception escapes it) and `no_work_after_return` (nothing it started is
still running)."""

from __future__ import annotations

from simloop.invariants._base import Violation, _view
from simloop.timeline import unstarted_turn
from simloop.transcript import OutcomeEvent, Request, Response, ThreadLeft, ToolStart, Transcript

__all__ = ["crash", "no_work_after_return"]

# -- crash ------------------------------------------------------------------------------------------------------


def crash(t: Transcript) -> list[Violation]:
    """No exception escapes the loop (whatever its type, SystemExit and KeyboardInterrupt included).

    Not checked after a `Halt`: the exception that ended the run is simloop's own unwinding (`stops` says why).
    When the escaped exception is a tool's, `tool_errors` reports it instead (see ``check``'s overlaps).
    """
    v = _view(t)
    if v.outcome_pos is None:
        return []
    outcome = t.events[v.outcome_pos]
    if not isinstance(outcome, OutcomeEvent) or outcome.exception is None or t.halt is not None:
        return []
    step = v.step_at(v.outcome_pos)
    when = f"at step {step}" if step is not None else "before its first model call"
    waiting = unstarted_turn(t)
    if waiting is not None:
        step = None  # no step of the turn it crashed in: the report names the turn
        when = f"at the start of user turn {waiting.turn + 1}, before its first model call (after step {v.step_at(v.outcome_pos)})"
    where = f" (raised at {outcome.where})" if outcome.where else ""
    raised = outcome.exception.strip().removesuffix(":")
    message = (
        f"the loop crashed {when}: {raised} escaped the drive{where}; a correct loop ends gracefully: it catches "
        "what it cannot handle and returns an Outcome saying why it stopped (reason 'error' with the error's text) "
        "instead of raising (a library loop that raises API errors by design is adapted by catching them in the "
        "drive and returning Outcome(reason='error', text=...))"
    )
    if raised.startswith("ProcessExit"):
        message = (
            f"the loop ended its process {when}: {raised.removeprefix('ProcessExit: ')}; a correct loop never ends "
            "the process it runs in: it returns an Outcome saying why it stopped (reason 'error' with the error's "
            "text), and leaves exiting to its caller"
        )
    elif raised.startswith("CancelledError"):
        message += (
            "; an async loop that cancels its task on Stop (sim.abort.add_callback(asyncio.current_task().cancel)) "
            "catches the CancelledError around every await of its turn and returns Outcome(reason='aborted')"
        )
    elif raised.startswith(_TRANSPORT_ERRORS):
        message += (
            "; a stream cut off mid-reply raises the HTTP library's own error, not an APIError, on SDKs that do not "
            "wrap errors met while a stream is read (anthropic before 2.17): catch httpx.TransportError "
            "(httpx2.TransportError) too, or upgrade the SDK (anthropic 2.17 raises APIConnectionError)"
        )
    evidence = {"exception": outcome.exception, "where": outcome.where, "t": outcome.t}
    return [Violation("crash", message, step, evidence)]


_EPS = 1e-9


def _returned_at(outcome: object) -> float | None:
    """When the loop returned in its own thread's time, when that is behind the clock (`OutcomeEvent.own`)."""
    return outcome.own if isinstance(outcome, OutcomeEvent) else None


def _began(e: Request | ToolStart) -> float:
    """When a model call or tool execution began in its own thread's time."""
    return e.own if e.own is not None else e.t


#: What the SDKs raise, unwrapped, when a stream breaks while it is read (httpx's and httpx2's names).
_TRANSPORT_ERRORS = ("RemoteProtocolError", "ReadError", "ReadTimeout", "LocalProtocolError")


# -- no_work_after_return ---------------------------------------------------------------------------------------


def no_work_after_return(t: Transcript) -> list[Violation]:
    """When the loop returns, nothing it started is still running and nothing new starts.

    Not checked after a `Halt`: simloop itself cut the work short (and `stops` reports why).
    """
    v = _view(t)
    at = v.outcome_pos
    if at is None or t.halt is not None:
        return []
    out: list[Violation] = []
    fix = "a correct loop waits for (or cancels and awaits) every tool and model call it started before it returns"
    returned = _returned_at(t.events[at])
    for pos, s in v.starts:
        end = v.ends.get(s.exec)
        if returned is not None and pos < at and _began(s) > returned + _EPS:
            message = (f"{s.tool} (exec {s.exec}) started after the loop returned: at {_began(s):g}s, and the loop "
                       f"returned at {returned:g}s of its own time (a thread it left behind ran on); {fix}")
            out.append(Violation("no_work_after_return", message, v.step_at(pos), {"exec": s.exec, "tool": s.tool}))
            continue
        if end is not None and end[0] < at:
            continue
        state = "started after the loop returned" if pos > at else (
            "was still running when the loop returned" + ("" if end else " (it never ended)")
        )
        message = f"{s.tool} (exec {s.exec}) {state}; {fix}"
        out.append(Violation("no_work_after_return", message, v.step_at(pos), {"exec": s.exec, "tool": s.tool}))
    reported: set[int] = set()
    if returned is not None:  # model calls a thread left behind made after the return, recorded before it
        for pos, r in v.model_requests:
            if pos < at and r.index not in reported and _began(r) > returned + _EPS:
                reported.add(r.index)
                message = (f"model call {r.call} (request {r.index}) started after the loop returned: at "
                           f"{_began(r):g}s, and the loop returned at {returned:g}s of its own time (a thread it left "
                           f"behind ran on); {fix}")
                out.append(Violation("no_work_after_return", message, r.call, {"request": r.index}))
    for e in t.events[at + 1:]:
        if isinstance(e, ThreadLeft) and e.pid is not None:
            message = (f"{e.name} was still running when the loop returned (simloop killed it); a correct loop "
                       "waits for (or terminates and waits for) every process it starts: Popen.wait(), "
                       "Process.join()")
            out.append(Violation("no_work_after_return", message, v.step_at(at), {"process": e.pid, "name": e.name}))
        elif isinstance(e, ThreadLeft):
            message = (f"thread {e.name!r} was still running at {e.where} when the loop returned; a correct loop "
                       "joins (or stops and joins) every thread it starts, and shuts down its executors")
            out.append(Violation("no_work_after_return", message, v.step_at(at), {"thread": e.name, "where": e.where}))
        elif isinstance(e, (Request, Response)) and e.index not in reported:
            reported.add(e.index)
            req = v.request_at.get(e.index)
            state = "started after the loop returned" if isinstance(e, Request) else "was still running when it returned"
            message = f"model call {req.call if req else e.call} (request {e.index}) {state}; {fix}"
            out.append(Violation("no_work_after_return", message, req.call if req else e.call, {"request": e.index}))
    return out

