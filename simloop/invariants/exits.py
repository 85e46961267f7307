"""How the loop returns: `no_work_after_return` (nothing it started is still running)."""

from __future__ import annotations

from simloop.invariants._base import Violation, _view
from simloop.transcript import Request, Response, Transcript

__all__ = ["no_work_after_return"]

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
    for pos, s in v.starts:
        end = v.ends.get(s.exec)
        if end is not None and end[0] < at:
            continue
        state = "started after the loop returned" if pos > at else (
            "was still running when the loop returned" + ("" if end else " (it never ended)")
        )
        message = f"{s.tool} (exec {s.exec}) {state}; {fix}"
        out.append(Violation("no_work_after_return", message, v.step_at(pos), {"exec": s.exec, "tool": s.tool}))
    reported: set[int] = set()
    for e in t.events[at + 1:]:
        if isinstance(e, (Request, Response)) and e.index not in reported:
            reported.add(e.index)
            req = v.request_at.get(e.index)
            state = "started after the loop returned" if isinstance(e, Request) else "was still running when it returned"
            message = f"model call {req.call if req else e.call} (request {e.index}) {state}; {fix}"
            out.append(Violation("no_work_after_return", message, req.call if req else e.call, {"request": e.index}))
    return out

