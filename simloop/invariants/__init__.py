"""The invariant catalogue (docs/design.md, Invariants): pure functions from a `Transcript` to violations.

Each invariant is a function ``Transcript -> list[Violation]``.  They read the
recorded run only and never import the simulator, so a transcript written to
disk (or built by hand in a test) is checked exactly like a live one, and a new
invariant is one more function in `CATALOGUE`.

Conventions shared by every invariant:

* A *step* is a logical model call: a `Request` to ``/v1/messages``, numbered
  by ``Request.call``.  SDK retries keep the call number, so they count once.
* A violation names the step, a message path (``messages[4].content[0]``)
  when there is one, and says what a correct loop does instead.
* Rules only flag clear faults.  A loop may stop early for its own reasons;
  it may not claim a reason the transcript contradicts.

Example::

    report = check(transcript)                      # every invariant
    report = check(transcript, invariants=["pairing", "no_rerun"])
    report.raise_for_violations()                   # InvariantViolation if any
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from simloop.errors import InvariantViolation, SimloopInternalError, UsageError
from simloop.invariants import _base
from simloop.invariants._base import MESSAGES_PATH as MESSAGES_PATH
from simloop.invariants._base import REASONS, Invariant, Violation
from simloop.invariants.aborts import abort
from simloop.invariants.approvals import approval
from simloop.invariants.conversation import _walk as _walk  # the pairing walk, for its property test
from simloop.invariants.conversation import pairing, request_valid
from simloop.invariants.execution import no_rerun, results_real, results_sent, results_together, tool_errors
from simloop.invariants.exits import crash, no_work_after_return
from simloop.invariants.honesty import honest_outcome, refusal, truncation
from simloop.invariants.interleaved import split_conversations
from simloop.invariants.stopping import limits, stops
from simloop.invariants.subagents import split_runs, subagent_honest
from simloop.protocol.render import CUT_STOPS
from simloop.scenario import INVARIANT_IDS
from simloop.transcript import Transcript

__all__ = ["CATALOGUE", "REASONS", "Invariant", "Report", "Violation", "check"]

Violation.__module__ = __name__  # its public home (defined in the private _base, which the families share)


@dataclass
class Report:
    """The result of `check`: the violations found and the invariant ids that were checked."""

    violations: list[Violation]
    checked: tuple[str, ...]
    transcript: Transcript | None = field(default=None, repr=False)
    examples: int | None = None  # how many runs `verify` tried (None for a single check)
    # why `simloop.replay` did not run the file: it needs what the loop does not claim (nothing was checked)
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        """True when no checked invariant was violated."""
        return not self.violations

    def raise_for_violations(self) -> None:
        """Raise `simloop.InvariantViolation` (an AssertionError) listing every violation; do nothing if ok."""
        if self.violations:
            raise InvariantViolation(str(self), violations=list(self.violations))

    def __str__(self) -> str:
        run = ""
        if self.transcript is not None:
            run = f" in scenario {self.transcript.header.scenario!r} (seed {self.transcript.header.seed})"
        if self.skipped is not None:
            return f"simloop: skipped{run}: {self.skipped}"
        if self.ok:
            return f"simloop: all {len(self.checked)} invariants hold{run}: {', '.join(self.checked)}"
        broken = list(dict.fromkeys(v.invariant for v in self.violations))
        head = (
            f"simloop: {len(self.violations)} violation(s) of {len(broken)} invariant(s){run} "
            f"({', '.join(broken)}; {len(self.checked)} checked)"
        )
        return "\n".join([head, *(f"  {v}" for v in self.violations)])



# -- the catalogue and check() ----------------------------------------------------------------------------------

CATALOGUE: dict[str, Invariant] = {
    "stops": stops,
    "pairing": pairing,
    "request_valid": request_valid,
    "no_rerun": no_rerun,
    "truncation": truncation,
    "refusal": refusal,
    "honest_outcome": honest_outcome,
    "limits": limits,
    "tool_errors": tool_errors,
    "no_work_after_return": no_work_after_return,
    "crash": crash,
    "results_sent": results_sent,
    "results_together": results_together,
    "abort": abort,
    "results_real": results_real,
    "approval": approval,
    "subagent_honest": subagent_honest,
}
if tuple(CATALOGUE) != INVARIANT_IDS:  # pragma: no cover - a development-time consistency check
    raise SimloopInternalError("simloop.invariants.CATALOGUE is out of step with scenario.INVARIANT_IDS")


def _resolve(invariants: Iterable[str] | None) -> tuple[str, ...]:
    if invariants is None:
        return _ALL
    if type(invariants) is tuple:  # verify checks every run with the same tuple of ids: resolved once
        resolved = _RESOLVED.get(invariants)
        if resolved is None:
            resolved = _resolve_ids(invariants)
            if len(_RESOLVED) < 256:
                _RESOLVED[invariants] = resolved
        return resolved
    return _resolve_ids(invariants)


def _resolve_ids(invariants: Iterable[str]) -> tuple[str, ...]:
    known = ", ".join(CATALOGUE)
    if isinstance(invariants, str):
        raise UsageError(f"invariants= takes a list of ids, not the string {invariants!r}; try [{invariants!r}]")
    wanted = list(invariants)
    for name in wanted:
        if name not in CATALOGUE:
            close = difflib.get_close_matches(str(name), CATALOGUE, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(
                f"unknown invariant id {name!r}{hint}; the known ids are: {known}. "
                "Pass a subset of them as invariants=, or None to check all."
            )
    return tuple(i for i in CATALOGUE if i in wanted)


_ALL = tuple(CATALOGUE)
_RESOLVED: dict[tuple[object, ...], tuple[str, ...]] = {}  # a tuple of ids -> its ids resolved (`_resolve`)


def check(transcript: Transcript, *, invariants: Iterable[str] | None = None) -> Report:
    """Check a transcript against the catalogue (all invariants, or the ids in ``invariants``).

    Returns a `Report`; raises `simloop.UsageError` for an unknown invariant id.
    A fault two invariants both see is reported once, under the one that owns it (see `_fold_overlaps`); an
    invariant left out of ``invariants`` takes the faults it owns with it.

    Example: ``check(sim.transcript, invariants=["pairing"]).raise_for_violations()``
    """
    if not isinstance(transcript, Transcript):
        raise UsageError(
            f"check() takes a simloop Transcript, got {type(transcript).__name__}; "
            "pass sim.transcript or Transcript.read(path)"
        )
    ids = _resolve(invariants)
    # the folding needs what the invariants that claim a fault saw, checked or not: leaving one out leaves out its
    # fallout in the others too (a tool's escaped exception is tool_errors', never crash's), so a known finding can
    # be set aside without it coming back under another id
    claimants = [i for i in _CLAIMANTS if i not in ids]
    # sub-agent runs (sim.subagent) are checked as runs of their own, the parent without their calls
    parent, calls, subs = split_runs(transcript) if _has_subruns(transcript) else (transcript, None, [])
    try:
        found = _found(parent, (*ids, *claimants))
        violations = [_renumber(v, calls) for v in _fold_overlaps(found) if v.invariant in ids]
    finally:
        _base._LAST_VIEW[0] = _base._LAST_SLICES[0] = None  # they hold the transcript: no longer than the caller
    for s in subs:
        label = f"in sub-agent run {s.start.run} ({s.start.task[:60]!r}, in {s.start.tool or 'no tool'})"
        for v in check(s.transcript, invariants=ids).violations:
            at = s.calls.get(v.step) if v.step is not None else None
            step = calls.get(at, at) if calls is not None and at is not None else at
            out = Violation(v.invariant, f"{label}: {v.message}", step, {**v.evidence, "subagent": s.start.run})
            violations.append(out)
    return Report(violations, ids, transcript)


#: The invariants each conversation of a run that holds several at once is held to as a run of its own (see
#: `_found`); the others read the run whole: its outcome, Stop, approvals, threads, halts and sub-runs are the run's.
_PER_CONVERSATION = frozenset({
    "pairing", "request_valid", "no_rerun", "truncation", "refusal", "limits", "tool_errors", "results_sent",
    "results_together", "results_real",
})


def _found(t: Transcript, names: tuple[str, ...]) -> list[Violation]:
    """The violations of the invariants ``names`` in ``t``.

    A run that holds several conversations at once (independent loops on threads or tasks, each its own history:
    `split_conversations`) has each held to the per-conversation rules as a run of its own, its calls numbered from
    1 (its step cap counts its own calls; "the next request" is its own), and its violations name it; the run's
    outcome is held to the run (a cut reply reported as final, an exception that escaped it).
    """
    conversations = split_conversations(t) if _PER_CONVERSATION.intersection(names) else None
    if conversations is None:
        return [v for i in names for v in CATALOGUE[i](t)]
    found = [v for i in names for v in CATALOGUE[i](t) if i not in _PER_CONVERSATION or _of_the_outcome(v)]
    for c in conversations:
        opening = c.opening if len(c.opening) <= 60 else c.opening[:57] + "..."
        label = f"in conversation {c.number} (from step {c.calls.get(1, 1)}, opening {opening!r})"
        for i in names:
            if i not in _PER_CONVERSATION:
                continue
            for v in CATALOGUE[i](c.transcript):
                step = c.calls.get(v.step, v.step) if v.step is not None else None
                found.append(Violation(v.invariant, f"{label}: {v.message}", step,
                                       {**v.evidence, "conversation": c.number}))
    return found


def _of_the_outcome(v: Violation) -> bool:
    """A per-conversation invariant's violation that reads the run's outcome: a cut reply reported as final, a
    tool's exception that escaped the loop (a conversation has no outcome of its own to read them from)."""
    return (v.invariant == "truncation" and "last_stop_reason" in v.evidence) or (
        v.invariant == "tool_errors" and v.evidence.get("kind") == "escaped")


def _has_subruns(t: Transcript) -> bool:
    # the kinds of event the run recorded (a set built in C), then their few names
    return any(kind.__name__ == "SubagentStart" for kind in set(map(type, t.events)))


def _renumber(v: Violation, calls: dict[int, int] | None) -> Violation:
    """A violation of the parent's run (its calls numbered without the sub-runs') with the run's call number."""
    if calls is None or v.step is None or v.step not in calls:
        return v
    return Violation(v.invariant, v.message, calls[v.step], v.evidence)


#: The invariants whose violations decide what `_fold_overlaps` drops from the others.
_CLAIMANTS = ("truncation", "pairing", "tool_errors", "approval")


def _fold_overlaps(violations: list[Violation]) -> list[Violation]:
    """Report one fault once when two invariants both see it, under the one that owns it.

    "final after a max_tokens reply" stays under ``truncation``; a failed tool
    whose tool_result is missing altogether stays under ``pairing``; a tool's
    exception that escaped the loop stays under ``tool_errors`` (not ``crash``);
    a result that never reached the model stays under ``pairing`` (its tool_use
    is left unanswered), ``tool_errors`` (the tool raised) or ``truncation`` (the
    tool should not have run), and is ``results_sent``'s only when none sees it.
    """
    cut_final = any(v.invariant == "truncation" and v.evidence.get("last_stop_reason") for v in violations)
    missing = {
        v.evidence.get("tool_use_id")
        for v in violations
        if v.invariant == "pairing" and v.evidence.get("kind") == "missing_result"
    }
    escaped = any(v.invariant == "tool_errors" and v.evidence.get("kind") == "escaped" for v in violations)
    seen_elsewhere = missing | {
        v.evidence.get("tool_use_id")
        for v in violations
        if (v.invariant == "tool_errors" and v.evidence.get("kind") == "unreported") or v.invariant == "truncation"
    }
    gate = {v.evidence.get("tool_use_id") for v in violations if v.invariant == "approval"} - {None}
    return [
        v for v in violations
        if not (v.invariant == "results_real" and v.evidence.get("tool_use_id") in gate)
        and not (v.invariant == "honest_outcome" and cut_final and v.evidence.get("last_stop_reason") in CUT_STOPS)
        and not (v.invariant == "tool_errors" and v.evidence.get("kind") == "unreported"
                 and v.evidence.get("tool_use_id") in missing)
        and not (v.invariant == "crash" and escaped)
        and not (v.invariant == "results_sent" and seen_elsewhere & set(v.evidence.get("dropped", ())))
    ]
