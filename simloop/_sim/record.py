"""The run's outcome, recorded (`Recorder`): what the drive returned (one `Outcome`, or one per user turn) or what
escaped it, as `OutcomeEvent`s in the transcript."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simloop._runtime.frames import loop_frame
from simloop._runtime.halt import LoopHalted
from simloop.errors import UsageError
from simloop.outcome import Outcome
from simloop.transcript import OutcomeEvent, Transcript

if TYPE_CHECKING:
    from simloop._runtime.clock import VirtualClock
    from simloop._sim.guard import Guard
    from simloop._sim.turns import UserTurns

__all__ = ["Recorder"]


class Recorder:
    """Records the outcome once: a halt or an abandoned run already recorded stays the run's outcome."""

    __slots__ = ("_clock", "_guard", "_transcript", "_turns")

    def __init__(self, transcript: Transcript, clock: VirtualClock, guard: Guard, turns: UserTurns) -> None:
        self._transcript, self._clock, self._guard, self._turns = transcript, clock, guard, turns

    def returned(self, returned: Any) -> list[Outcome]:
        """What the drive returned, recorded: the outcomes, one per user turn taken (or the one); the last is the run's."""
        if isinstance(returned, list):
            return self._turns_returned(returned)
        outcome = Outcome.coerce(returned)
        if self._transcript.outcome is None and not self._guard.abandoned:
            self._transcript.append(OutcomeEvent(t=self._clock.now(), reason=outcome.reason, text=outcome.text,
                                                 own=self._clock.own_now()))
        return [outcome]

    def _turns_returned(self, returned: list[Any]) -> list[Outcome]:
        """One outcome per user turn, recorded with its turn number."""
        started = max(self._turns.started, 1)
        if len(returned) != started:
            raise UsageError(
                f"the drive ran {started} user turn(s) (taken from sim.user_turns) but returned {len(returned)} "
                "outcome(s); return one Outcome per turn taken, in order, or only the last turn's Outcome"
            )
        outcomes = [Outcome.coerce(r) for r in returned]
        if self._transcript.outcome is None:
            now, own = self._clock.now(), self._clock.own_now()
            for n, outcome in enumerate(outcomes):
                self._transcript.append(OutcomeEvent(t=now, reason=outcome.reason, text=outcome.text, turn=n, own=own))
        return outcomes

    def error(self, error: BaseException) -> Outcome:
        """What escaped the drive (or the halt that ended it), recorded as an ``error`` outcome."""
        text = f"{type(error).__name__}: {error}"
        if self._transcript.outcome is None and (not self._guard.abandoned or isinstance(error, LoopHalted)):
            where = None if isinstance(error, LoopHalted) else loop_frame(error)
            self._transcript.append(
                OutcomeEvent(t=self._clock.now(), reason="error", text=text, exception=text, where=where)
            )
        return Outcome(reason="error", text=text, exception=error)
