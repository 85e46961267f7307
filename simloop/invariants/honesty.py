"""What the loop says and does with the model's endings: `truncation`, `refusal` and `honest_outcome`."""

from __future__ import annotations

from typing import Any

from simloop.invariants._base import (
    _FINAL_STOPS,
    MESSAGES_PATH,
    REASONS,
    RESPONSES_PATH,
    Violation,
    _canon,
    _is_write,
    _View,
    _view,
    per_turn,
)
from simloop.protocol.render import CUT_STOPS
from simloop.transcript import AbortEvent, Request, Response, Restart, Transcript

__all__ = ["honest_outcome", "refusal", "truncation"]

# -- truncation -------------------------------------------------------------------------------------------------


def truncation(t: Transcript) -> list[Violation]:
    """No tool from a max_tokens reply runs, and a max_tokens reply is not reported as final."""
    v = _view(t)
    out: list[Violation] = []
    for _, s in v.starts:
        if s.matched in v.issued and v.issued[s.matched][1].stop_reason in CUT_STOPS:
            reply = v.issued[s.matched][1]
            cut = _cut(v, reply)
            message = (
                f"{s.tool} was executed (exec {s.exec}) from a reply cut off at {cut}; its input may be "
                f"partial; a correct loop never runs tool calls from a {cut} reply: it retries the turn with a "
                "larger max_tokens or stops with reason 'truncated'"
            )
            evidence = {"request": reply.index, "exec": s.exec, "tool": s.tool, "tool_use_id": s.matched}
            out.append(Violation("truncation", message, reply.call, evidence))
    last = _last_reply(v)
    outcome = v.outcome
    if outcome is not None and outcome.reason == "final" and last is not None and last.stop_reason in CUT_STOPS:
        cut = _cut(v, last)
        message = (
            f"the loop reported 'final' but the last reply was cut off at {cut}; a correct loop treats "
            f"{cut} as unfinished: it continues or retries with more room, or stops with reason 'truncated'"
        )
        evidence = {"request": last.index, "reason": "final", "last_stop_reason": last.stop_reason}
        out.append(Violation("truncation", message, last.call, evidence))
    return out


def _cut(v: _View, reply: Response) -> str:
    """How the reply's wire names a cut-off reply: ``max_tokens``, ``finish_reason "length"`` (Chat Completions) or
    ``status "incomplete"`` (Responses)."""
    req = v.request_at.get(reply.index)
    if req is None or req.path == MESSAGES_PATH:
        return "model_context_window_exceeded" if reply.stop_reason == "model_context_window_exceeded" else "max_tokens"
    return 'status "incomplete" (max_output_tokens)' if req.path == RESPONSES_PATH else 'finish_reason "length"'


def _refusal_words(v: _View, reply: Response | None) -> str:
    """How the reply's wire marks a refusal, for a loop that missed it (Chat Completions: by ``finish_reason``
    "stop", like an answer; Responses: a ``refusal`` part with no ``output_text``)."""
    req = v.request_at.get(reply.index) if reply is not None else None
    if req is None or req.path == MESSAGES_PATH:
        return ""
    if req.path == RESPONSES_PATH:
        return ": its message holds a 'refusal' content part and no output_text; read the part"
    return (': on Chat Completions a refusal ends with finish_reason "stop" like an answer, its text in '
            "message.refusal and content null; read message.refusal, not finish_reason alone")


def _last_reply(v: _View) -> Response | None:
    replies = [r for pos, r in v.replies if v.before_outcome(pos)]
    return replies[-1] if replies else None


# -- refusal ----------------------------------------------------------------------------------------------------
#
# The seeds: "refusal: the model declined for safety reasons. Stop and surface this; do not retry the same request in
# a loop" (a classic bug: "retrying in a loop after a refusal instead of stopping and explaining").  The API's own
# guidance (Streaming refusals; Refusals and fallback): after a refusal, reset the context before continuing (remove
# or rephrase the turn that triggered it, or clear the history; continuing without a reset meets more refusals),
# or retry the refused request on another model.  So a further call of the same user turn that keeps the refused
# conversation, on the same model, is the bug; a reset or a fallback model is a recovery, and a new user turn is new.


def _continues(refused: Request, later: Request) -> bool:
    """Whether ``later`` carries on the conversation ``refused`` was refused for: the same model, and its messages
    start with all of the refused request's (the refusal appended, a nudge added, or the very same request)."""
    body = refused.body if isinstance(refused.body, dict) else {}
    again = later.body if isinstance(later.body, dict) else {}
    if again.get("model") != body.get("model"):
        return False  # a fallback model: the guidance's other recovery
    before, after = refused.conversation, later.conversation
    return len(after) >= len(before) and all(_canon(a) == _canon(b) for a, b in zip(before, after, strict=False))


def refusal(t: Transcript) -> list[Violation]:
    """After a refusal, no further model call in that user turn carries on the refused conversation, and a turn
    that stops at a refusal reports reason ``refusal`` (per turn: a new user turn may follow)."""
    return _refusal_each(t)


def _refusal(t: Transcript) -> list[Violation]:
    """`refusal` over one user turn."""
    v = _view(t)
    aborted = any(isinstance(e, AbortEvent) for e in t.events)
    for pos, reply in v.replies:
        req = v.request_at.get(reply.index)
        if reply.stop_reason != "refusal" or req is None or not v.before_outcome(pos):
            continue
        # within the life it was refused in: a restarted process has forgotten it (its store may not)
        died = next((p for p, e in enumerate(t.events) if p > pos and isinstance(e, Restart)), len(t.events))
        # the SDK's own retries of one call (x-stainless-retry-count > 0) are that call, not another
        later = [r for p, r in v.model_requests if pos < p < died and r.attempt == 0 and r.call > req.call]
        carried = [r for r in later if _continues(req, r)]
        if carried:
            message = (
                f"the model refused at step {req.call} and the loop called the model again in the same user turn "
                f"({len(carried)} more call(s) carrying on the refused conversation, the first at step "
                f"{carried[0].call}); a correct loop stops the turn on a refusal and reports reason 'refusal' to "
                "the user (a new user turn may follow); to recover instead, reset the context first (remove or "
                "rephrase the refused turn, or clear the history) or retry on another model"
            )
            evidence: dict[str, Any] = {"request": carried[0].index, "refused_request": req.index,
                                        "calls_after": len(carried)}
            return [Violation("refusal", message, carried[0].call, evidence)]
        outcome = v.outcome
        if later or died < len(t.events) or outcome is None or outcome.exception is not None:
            continue  # a recovery went on (judged by what came of it), or the life died, or an exception escaped
        if outcome.reason in ("refusal", "final") or (outcome.reason == "aborted" and aborted):
            continue  # ('final' after a refusal is honest_outcome's to report)
        message = (
            f"the model refused at step {req.call} and the loop stopped there reporting reason "
            f"{outcome.reason!r}; a correct loop reports the refusal as the turn's outcome: reason 'refusal'"
        )
        return [Violation("refusal", message, req.call, {"request": req.index, "reason": outcome.reason})]
    return []


_refusal_each = per_turn(_refusal)


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
            "model_context_window_exceeded": "the last reply was cut off when it filled the model's context window "
                                             "(model_context_window_exceeded)",
            "tool_use": "the last reply asked for tools and the loop never sent their results back",
            "refusal": "the last reply was a refusal (reason 'refusal')" + _refusal_words(v, last),
        }.get(last.stop_reason if last else None, f"the last reply stopped with {last.stop_reason if last else None}")
    elif outcome.reason == "refusal" and not any(r.stop_reason == "refusal" for r in replies):
        lie = "the loop reported 'refusal' but no reply was a refusal"
    elif outcome.reason == "truncated" and not any(r.stop_reason in CUT_STOPS for r in replies):
        lie = "the loop reported 'truncated' but no reply was cut off at max_tokens"
    if lie is None:
        return []
    fix = "a correct loop reports why it actually stopped: 'final' only after end_turn or stop_sequence"
    return [Violation("honest_outcome", f"{lie}; {fix}", step, evidence)]



_honest_each = per_turn(_honest_outcome)
