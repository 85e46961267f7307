"""What the loop says and does with the model's endings: `truncation`, `refusal` and `honest_outcome`."""

from __future__ import annotations

from simloop.invariants._base import (
    _FINAL_STOPS,
    _VOLATILE_BODY,
    REASONS,
    Violation,
    _canon,
    _is_write,
    _View,
    _view,
    per_turn,
)
from simloop.transcript import Request, Response, Restart, Transcript

__all__ = ["honest_outcome", "refusal", "truncation"]

# -- truncation -------------------------------------------------------------------------------------------------


def truncation(t: Transcript) -> list[Violation]:
    """No tool from a max_tokens reply runs, and a max_tokens reply is not reported as final."""
    v = _view(t)
    out: list[Violation] = []
    for _, s in v.starts:
        if s.matched in v.issued and v.issued[s.matched][1].stop_reason == "max_tokens":
            reply = v.issued[s.matched][1]
            message = (
                f"{s.tool} was executed (exec {s.exec}) from a reply cut off at max_tokens; its input may be "
                "partial; a correct loop never runs tool calls from a max_tokens reply: it retries the turn with a "
                "larger max_tokens or stops with reason 'truncated'"
            )
            evidence = {"request": reply.index, "exec": s.exec, "tool": s.tool, "tool_use_id": s.matched}
            out.append(Violation("truncation", message, reply.call, evidence))
    last = _last_reply(v)
    outcome = v.outcome
    if outcome is not None and outcome.reason == "final" and last is not None and last.stop_reason == "max_tokens":
        message = (
            "the loop reported 'final' but the last reply was cut off at max_tokens; a correct loop treats "
            "max_tokens as unfinished: it continues or retries with more room, or stops with reason 'truncated'"
        )
        evidence = {"request": last.index, "reason": "final", "last_stop_reason": "max_tokens"}
        out.append(Violation("truncation", message, last.call, evidence))
    return out


def _last_reply(v: _View) -> Response | None:
    replies = [r for pos, r in v.replies if v.before_outcome(pos)]
    return replies[-1] if replies else None


# -- refusal ----------------------------------------------------------------------------------------------------


def _signature(r: Request) -> str:
    body = r.body if isinstance(r.body, dict) else {}
    return _canon({"conversation": r.conversation, "body": {k: x for k, x in body.items() if k not in _VOLATILE_BODY}})


def refusal(t: Transcript) -> list[Violation]:
    """After a refusal, the loop does not send the same request again (as a new model call)."""
    v = _view(t)
    out: list[Violation] = []
    reported: set[str] = set()
    for pos, reply in v.replies:
        req = v.request_at.get(reply.index)
        if reply.stop_reason != "refusal" or req is None:
            continue
        sig = _signature(req)
        if sig in reported:
            continue
        # within the life it was refused in: a restarted process has forgotten it (its store may not)
        died = next((p for p, e in enumerate(t.events) if p > pos and isinstance(e, Restart)), len(t.events))
        again = [r for p, r in v.model_requests if pos < p < died and r.call > req.call and r.attempt == 0
                 and _signature(r) == sig]
        if not again:
            continue
        reported.add(sig)
        message = (
            f"the model refused at step {req.call} and the loop sent the same request again "
            f"({len(again)} time(s)); a correct loop stops on a refusal and reports reason 'refusal' "
            "(or changes the conversation), it does not resend the same request"
        )
        evidence = {"request": again[0].index, "refused_request": req.index, "resends": len(again)}
        out.append(Violation("refusal", message, again[0].call, evidence))
    return out


# -- honest_outcome ---------------------------------------------------------------------------------------------


def _wrote_last(v: _View) -> bool:
    """Did the loop stop on its declared write budget ("one write"): its last allowed write succeeded after the
    last reply?  Then 'final' is honest: the write is the result, as the seed's "one write" rule has it."""
    max_writes = v.t.header.limits.get("max_writes")
    if max_writes is None or v.outcome_pos is None:
        return False
    last_reply = max((pos for pos, _ in v.replies if pos < v.outcome_pos), default=-1)
    writes = 0
    spent_at = -1
    for pos, s in v.starts:
        end = v.ends.get(s.exec)
        if end is not None and end[0] < v.outcome_pos and end[1].status == "ok" and _is_write(v.t, s):
            writes += 1
            if writes == max_writes:
                spent_at = pos
    return writes >= max_writes and spent_at > last_reply


def honest_outcome(t: Transcript) -> list[Violation]:
    """The declared reason is not contradicted by the transcript (only clear lies are flagged), turn by turn
    in a conversation (each turn's outcome against that turn's replies)."""
    return _honest_each(t)


def _honest_outcome(t: Transcript) -> list[Violation]:
    """`honest_outcome` over one turn."""
    v = _view(t)
    outcome = v.outcome
    if outcome is None or outcome.exception is not None:
        return []  # an escaped exception is not a declared reason
    last = _last_reply(v)
    replies = [r for pos, r in v.replies if v.before_outcome(pos)]
    step = last.call if last else (v.model_requests[-1][1].call if v.model_requests else None)
    evidence = {
        "reason": outcome.reason,
        "last_stop_reason": last.stop_reason if last else None,
        "request": last.index if last else None,
    }
    lie: str | None = None
    if outcome.reason not in REASONS:
        lie = f"the loop declared reason {outcome.reason!r}, which is not one of {', '.join(REASONS)}"
    elif outcome.reason == "final" and (last is None or last.stop_reason not in _FINAL_STOPS) and not (
        last is not None and last.stop_reason == "tool_use" and _wrote_last(v)
    ):
        lie = "the loop reported 'final' but " + {
            None: "the model never replied",
            "pause_turn": "the last reply was pause_turn, which is continued (send it back), not final",
            "max_tokens": "the last reply was cut off at max_tokens",
            "tool_use": "the last reply asked for tools and the loop never sent their results back",
            "refusal": "the last reply was a refusal (reason 'refusal')",
        }.get(last.stop_reason if last else None, f"the last reply stopped with {last.stop_reason if last else None}")
    elif outcome.reason == "refusal" and not any(r.stop_reason == "refusal" for r in replies):
        lie = "the loop reported 'refusal' but no reply was a refusal"
    elif outcome.reason == "truncated" and not any(r.stop_reason == "max_tokens" for r in replies):
        lie = "the loop reported 'truncated' but no reply was cut off at max_tokens"
    if lie is None:
        return []
    fix = "a correct loop reports why it actually stopped: 'final' only after end_turn or stop_sequence"
    return [Violation("honest_outcome", f"{lie}; {fix}", step, evidence)]



_honest_each = per_turn(_honest_outcome)
