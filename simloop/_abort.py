"""`AbortSignal`: the user's Stop button as a loop sees it (``sim.abort``), and what presses it.

A loop wires its own stop mechanism to the signal in one line: a sync loop checks
``sim.abort.is_set()`` (pass ``sim.abort.is_set`` where it takes a "should I stop?"
callable); an async loop also registers ``sim.abort.add_callback(task.cancel)`` so
that the in-flight call is cancelled.  The scenario's ``abort:`` (or the point
`verify(abort=True)` draws) says when it fires; `_AbortTrigger` watches the run's
responses, tool executions and clock for that moment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from simloop._arrivals import Arrivals
from simloop.scenario import Abort
from simloop.transcript import AbortEvent, Response, ToolStart, Transcript

__all__ = ["AbortSignal"]

#: Makes a signal's Event at its first `wait`, and orders `set` and `clear` with that.
_MAKING = threading.Lock()


class AbortSignal:
    """An event-like Stop signal: ``is_set()``, ``wait()``, ``add_callback(fn)`` (like JavaScript's AbortSignal).

    Set by the simulator at the scenario's abort point (the user pressed Stop) and cleared when the next
    user turn begins; its callbacks hold for the run (until a simulated crash).  ``set()`` presses it by hand (a test, or a loop's own UI).

    Example (a sync loop)::

        for step in range(max_steps):
            if sim.abort.is_set():
                return Outcome("aborted")
    """

    def __init__(self, on_fire: Callable[[str], None] | None = None) -> None:
        self._set = False  # Stop is pressed (and `_event`, once made, is set)
        # made by the first `wait`: most loops only ask `is_set`, and a Sim is made for every run
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[], object]] = []
        self._on_fire = on_fire

    def is_set(self) -> bool:
        """Whether Stop was pressed in this turn."""
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Block until Stop is pressed (or ``timeout`` real seconds pass); returns `is_set`."""
        event = self._event
        if event is None:
            with _MAKING:
                if self._event is None:
                    self._event = threading.Event()
                    if self._set:
                        self._event.set()
                event = self._event
        return event.wait(timeout)

    def add_callback(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` when Stop is pressed, e.g. ``sim.abort.add_callback(asyncio.current_task().cancel)``;
        at once if it already was.  It holds for the run, whichever turn it was added in (before the first
        one included): each Stop calls it once, and adding the same callback again changes nothing."""
        if fn not in self._callbacks:
            self._callbacks.append(fn)
        if self.is_set():
            fn()

    def remove_callback(self, fn: Callable[[], object]) -> None:
        """Forget ``fn`` (a loop done with its turn); nothing if it is not registered."""
        if fn in self._callbacks:
            self._callbacks.remove(fn)

    def set(self, trigger: str = "set by hand") -> None:
        """Press Stop: recorded in the transcript (an ``abort`` event), then the callbacks run (each once)."""
        if self._set:
            return
        with _MAKING:
            self._set = True
            if self._event is not None:
                self._event.set()
        if self._on_fire is not None:
            self._on_fire(trigger)
        for fn in list(self._callbacks):
            fn()

    def clear(self, *, forget_callbacks: bool = False) -> None:
        """Release Stop (the next user turn begins: the callbacks hold on for its Stop); ``forget_callbacks``
        when the process died (a restart: what the old life registered died with it)."""
        with _MAKING:
            self._set = False
            if self._event is not None:
                self._event.clear()
        if forget_callbacks:
            self._callbacks = []

    def __bool__(self) -> bool:
        return self.is_set()

    def __repr__(self) -> str:
        return f"AbortSignal(set={self.is_set()})"


class _AbortTrigger:
    """Fires ``signal`` once, at the scenario's abort point (hooks on the server, the tools and the clock)."""

    __slots__ = ("fired", "now", "plan", "signal")

    def __init__(self, plan: Abort, signal: AbortSignal, now: Callable[[], float]) -> None:
        self.plan = plan
        self.signal = signal
        self.now = now
        self.fired = False

    def _fire(self) -> None:
        if not self.fired:
            self.fired = True
            self.signal.set(self.plan.describe())

    def on_deliver(self, response: Response) -> None:
        if self.plan.after_call is not None and response.call == self.plan.after_call and response.status == 200:
            self._fire()
        self.on_time()

    def on_tool_end(self, start: ToolStart) -> None:
        if self.plan.tool_call is not None and start.exec == self.plan.tool_call:
            self._fire()
        self.on_time()

    def on_time(self) -> None:
        if self.plan.at is not None and not self.fired and self.now() >= self.plan.at:
            self._fire()


def recorder(transcript: Transcript, now: Callable[[], float], arrivals: Arrivals | None = None) -> Callable[[str], None]:
    """The ``on_fire`` of a Sim's signal: an `AbortEvent` in the transcript (with ``arrivals``, the run's MCP
    requests already sent are stamped as arrived before it: `simloop._arrivals`)."""

    def record(trigger: str) -> None:
        if arrivals is None:
            transcript.append(AbortEvent(t=now(), trigger=trigger))
            return
        with arrivals.stop():
            transcript.append(AbortEvent(t=now(), trigger=trigger, at=len(transcript.events)))

    return record
