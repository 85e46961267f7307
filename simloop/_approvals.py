"""The person at the permission gate: `Gate` answers ``sim.approve`` as the scenario's ``approvals:`` say.

A loop asks before it runs a tool call that needs a person's yes (docs/design.md, Approvals).  The person
answers each request as the first matching `simloop.scenario.Approval` entry says (approve, deny, or away),
``after`` virtual seconds; a request nothing matches is approved at once.  The loop waits in virtual time: up
to its ``timeout`` when it gives one, else up to its own deadline (``sim.limits.deadline_s``, counted from the
start of the user turn), else until the answer.  No answer by then is ``False`` (recorded as ``none``); a
person who never answers a loop that sets no bound holds it until the runaway budget unwinds it (``stops``).

Every request is recorded as an `ApprovalEvent` when its wait ends, bound to the tool_use it asks about; the
``approval`` invariant reads them.  Without the approval policy (`Scenario.approval_policy`) the gate says yes
at once and records nothing: a loop wired to ask runs as it did.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

from simloop._runtime.halt import LoopHalted
from simloop._runtime.order import acting
from simloop.errors import UsageError
from simloop.scenario import Approval, Scenario
from simloop.transcript import ApprovalEvent, Response, Transcript

__all__ = ["Gate"]

_ANSWERS = {"approve": "approved", "deny": "denied"}


class Gate:
    """Answers the loop's requests for approval and keeps the log (``sim.approvals``)."""

    def __init__(
        self, scenario: Scenario, transcript: Transcript, *, now: Callable[[], float], sleep: Callable[[float], None],
        turn_start: Callable[[], float], forever: Callable[[], float],
    ) -> None:
        self.on = scenario.approval_policy
        self.answers: list[Approval] = list(scenario.approvals or ())
        self.deadline_s = scenario.limits.deadline_s
        self.transcript = transcript
        self.now, self.sleep, self.turn_start, self.forever = now, sleep, turn_start, forever
        self.log: list[ApprovalEvent] = []
        self.mark: Callable[[], int] | None = None  # the answer delivered to the asking thread (`VirtualClock.mark`)
        self._asked: dict[str, int] = {}  # tool -> requests so far

    def approve(self, tool: str, input: Any, *, tool_use_id: str | None = None, timeout: float | None = None) -> bool:
        """Ask the person; block in virtual time until the answer or the end of the wait (see the module)."""
        if not self.on:
            return True
        with acting():  # one turn among the run's threads, the wait included (simloop._runtime.order)
            asked, answer, wait = self._ask(tool, input, timeout)
            try:
                self.sleep(wait if math.isfinite(wait) else self.forever() + 1.0)
            except LoopHalted:  # the runaway bound unwound the wait: it is in the log, unanswered, all the same
                self._record(tool, input, tool_use_id, asked, "none")
                raise
            return self._record(tool, input, tool_use_id, asked, answer)

    async def aapprove(
        self, tool: str, input: Any, *, tool_use_id: str | None = None, timeout: float | None = None
    ) -> bool:
        """Async twin of `approve`: the wait is a timer on the (virtual-time) event loop."""
        if not self.on:
            return True
        asked, answer, wait = self._ask(tool, input, timeout)
        try:
            await asyncio.sleep(wait if math.isfinite(wait) else self.forever() + 1.0)
        except LoopHalted:  # (see `approve`)
            self._record(tool, input, tool_use_id, asked, "none")
            raise
        return self._record(tool, input, tool_use_id, asked, answer)

    def _ask(self, tool: str, input: Any, timeout: float | None) -> tuple[float, str, float]:
        """The request's time, the answer it will get (``none``: none in time) and how long the loop waits."""
        if not isinstance(tool, str):
            raise UsageError(f"sim.approve(tool, input): tool is the tool's name as a string, got {tool!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise UsageError(f"sim.approve(..., timeout=...) is a number of seconds >= 0 or None, got {timeout!r}")
        asked = self.now()
        nth = self._asked[tool] = self._asked.get(tool, 0) + 1
        entry = next(
            (a for a in self.answers if a.matches(tool, nth, sum(self._asked.values()))), Approval(answer="approve")
        )
        bound = math.inf if timeout is None else float(timeout)
        if timeout is None and self.deadline_s is not None:
            bound = max(self.turn_start() + self.deadline_s - asked, 0.0)
        if entry.answer == "away" or entry.after > bound:
            return asked, "none", bound
        return asked, _ANSWERS[entry.answer], entry.after

    def _record(self, tool: str, input: Any, tool_use_id: str | None, asked: float, answer: str) -> bool:
        event = ApprovalEvent(
            t=self.now(), tool=tool, input=_plain(input), asked=asked, answer=answer, tool_use_id=tool_use_id,
            matched=self._bind(tool, input, tool_use_id), seq=self.mark() if self.mark is not None else None,
        )
        self.transcript.append(event)
        self.log.append(event)
        return event.approved

    def _bind(self, tool: str, input: Any, tool_use_id: str | None) -> str | None:
        """The tool_use the request asks about: the id given (when the model issued it), else by name and input,
        the latest reply's first call not asked about yet, else the latest such call (asked again)."""
        issued: list[dict[str, Any]] = []
        for event in self.transcript.events:
            if isinstance(event, Response):
                issued.extend(b for b in event.tool_uses if b.get("name") == tool)
        if tool_use_id is not None:
            return tool_use_id if any(b.get("id") == tool_use_id for b in issued) else None
        want = _canon(input)
        same = [str(b.get("id")) for b in issued if _canon(b.get("input")) == want]
        asked = {e.matched for e in self.log}
        fresh = [i for i in same if i not in asked]
        if fresh:
            return fresh[-1] if len({*fresh}) == 1 else _latest_first(fresh, self.transcript)
        return same[-1] if same else None


def _latest_first(ids: list[str], transcript: Transcript) -> str:
    """Of several calls, the first of the latest reply that holds one."""
    for event in reversed(transcript.events):
        if isinstance(event, Response):
            mine = [str(b.get("id")) for b in event.tool_uses if str(b.get("id")) in ids]
            if mine:
                return mine[0]
    return ids[-1]


def _canon(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    except (TypeError, ValueError):
        return repr(value)


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)
