"""The user's Stop: `abort` (once the abort fires, the loop starts nothing more, returns ``aborted`` and leaves a
history the next turn can send)."""

from __future__ import annotations

from simloop.invariants._base import _FINAL_STOPS, MESSAGES_PATH, MODEL_PATHS, Violation, _is_reply, _view, too_large
from simloop.protocol.render import CUT_STOPS
from simloop.transcript import AbortEvent, OutcomeEvent, Request, Response, Restart, ToolStart, Transcript, TurnStart

__all__ = ["abort"]


def abort(t: Transcript) -> list[Violation]:
    """After the abort fires: no new model call, no tool execution, reason ``aborted`` for that turn (or ``error`` /
    ``error_budget`` when the call in flight failed; or, when the call in flight answered with a reply that ends the
    turn by itself and the loop started nothing after Stop, that reply's reason: ``final``, ``refusal``,
    ``truncated``), and the next turn's first request is not refused for the history the aborted turn left.

    Each Stop holds the turn of the life it was pressed in: a restart after it begins a life that never saw it
    (``sim.abort`` is clear there), so the new life is judged by a Stop of its own, if one fires.

    A tool execution that came over MCP and whose request arrived before the Stop (``ToolStart.arrived``: the client
    had sent it, e.g. a reply's calls sent together) is not the loop's doing, even when it begins after the Stop.
    """
    out: list[Violation] = []
    for at, event in enumerate(t.events):
        if isinstance(event, AbortEvent) and not _returned_before(t, at):
            out += _after_stop(t, at, event)
    return out


def _after_stop(t: Transcript, at: int, event: AbortEvent) -> list[Violation]:
    """What the turn (of this life) that ``event`` stopped did after it."""
    v = _view(t)
    out: list[Violation] = []
    in_flight = v.step_at(at) or 0  # the model call sent last before Stop (it may still be answering)
    stopped_at = event.at if event.at is not None else at  # in the count `ToolStart.arrived` is in
    turn = next((e.turn for e in reversed(t.events[:at]) if isinstance(e, TurnStart)), 0)
    end = next((p for p in range(at + 1, len(t.events))
                if isinstance(t.events[p], (TurnStart, OutcomeEvent, Restart))), len(t.events))
    fix = ("a correct loop checks the abort signal before each model call and each tool execution (and after "
           "each reply), and returns reason 'aborted' at once")
    for pos in range(at + 1, end):
        e = t.events[pos]
        if isinstance(e, Request) and e.path in MODEL_PATHS and e.call > in_flight:
            message = f"the user pressed Stop ({event.trigger}, t={event.t:g}s) and the loop then made model call {e.call}; {fix}"
            out.append(Violation("abort", message, e.call, {"request": e.index, "abort_t": event.t}))
            break
    for pos in range(at + 1, end):
        e = t.events[pos]
        # an MCP call whose request the loop had sent before Stop (a reply's calls sent together) is not the loop's
        # doing: it could not have known; one whose request arrived after Stop is
        if isinstance(e, ToolStart) and not (e.arrived is not None and e.arrived <= stopped_at):
            sent = " (its MCP request arrived after Stop)" if e.arrived is not None else ""
            message = (f"the user pressed Stop ({event.trigger}, t={event.t:g}s) and the loop then ran {e.tool} "
                       f"(exec {e.exec}){sent}; {fix}")
            out.append(Violation("abort", message, v.step_at(pos),
                                 {"exec": e.exec, "tool": e.tool, "tool_use_id": v.bound(e), "abort_t": event.t}))
            break
    died_later = any(isinstance(e, Restart) for e in t.events[at:])
    outcome = None if died_later else _outcome_of(t, turn)  # the outcomes recorded are the last life's
    # the call in flight when Stop came may fail (the SDK's retries give up, a stream is cut): a failure reason is
    # then honest too
    answers = [e for e in t.events[:end] if isinstance(e, Response) and e.call == in_flight]
    failed_in_flight = bool(answers) and not _is_reply(answers[-1])
    # the call in flight may also have answered with a reply that ends the turn by itself (a final answer, a
    # refusal, a cut-off): when the loop started nothing after Stop, the reason that reply gives is honest too
    ended_by_reply = _ENDS_TURN.get(answers[-1].stop_reason or "") if answers and _is_reply(answers[-1]) and not out else None
    if (outcome is not None and outcome.exception is None and outcome.reason not in ("aborted", ended_by_reply)
            and not (outcome.reason in ("error", "error_budget") and failed_in_flight)):
        message = (f"the user pressed Stop ({event.trigger}, t={event.t:g}s) and the loop returned with reason "
                   f"{outcome.reason!r}; {fix}")
        out.append(Violation("abort", message, in_flight or None, {"reason": outcome.reason, "abort_t": event.t}))
    nxt = next((p for p in range(at + 1, len(t.events)) if isinstance(t.events[p], (TurnStart, Restart))), None)
    if nxt is not None and isinstance(t.events[nxt], TurnStart):
        first = next((e for e in t.events[nxt:] if isinstance(e, Request) and e.path in MODEL_PATHS), None)
        answer = t.response_to(first.index) if first is not None else None
        # (a prompt refused for its size is the window's, not the aborted turn's: see request_valid)
        if first is not None and isinstance(answer, Response) and answer.kind == "rejected" and not too_large(answer):
            why = (answer.rejection or {}).get("message", "")
            left = _OPEN.get(first.path, _OPEN[MESSAGES_PATH])
            message = (f"the history the aborted turn left was refused on the next turn (400: {why}); a correct loop "
                       f"leaves {left} when it stops")
            out.append(Violation("abort", message, first.call, {"request": first.index, "abort_t": event.t}))
    return out


#: What a stopped turn must not leave open, in the words of each wire.
_OPEN = {MESSAGES_PATH: "no tool_use without its result and no empty assistant message",
         "/v1/chat/completions": "no tool call without its tool message",
         "/v1/responses": "no function_call without its function_call_output"}

#: The replies that end a turn by themselves, and the reason a loop honestly gives for each.
_ENDS_TURN = {**dict.fromkeys(_FINAL_STOPS, "final"), "refusal": "refusal", **dict.fromkeys(CUT_STOPS, "truncated")}


def _returned_before(t: Transcript, at: int) -> bool:
    """Did the turn in progress return before Stop was pressed (a timer that fired after the loop was done)?"""
    for e in reversed(t.events[:at]):
        if isinstance(e, TurnStart):
            return False
        if isinstance(e, OutcomeEvent):
            return True
    return False


def _outcome_of(t: Transcript, turn: int) -> OutcomeEvent | None:
    outcomes: list[OutcomeEvent] = t.of(OutcomeEvent)
    tagged = [o for o in outcomes if o.turn == turn]
    if tagged:
        return tagged[-1]
    later_turns = any(isinstance(e, TurnStart) and e.turn > turn for e in t.events)
    untagged = [o for o in outcomes if o.turn is None]
    return untagged[-1] if untagged and not later_turns else None
