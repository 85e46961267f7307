"""What ``simloop verify`` shows while it searches: a count of the runs and a progress bar on stderr.

`RunCounter` wraps the drive (each run it starts is counted, and the last one kept for ``--trace``);
`ProgressBar` draws the count, from "fuzzing" to "shrinking" once a run fails.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from simloop.cli._options import console

if TYPE_CHECKING:
    from simloop.sim import Sim


class RunCounter:
    """Wraps verify's drive to count runs for the progress display and keep the last run's Sim.

    With a display, every finished run is checked until the first failure (cheap next to the run) so the
    display can switch from "fuzzing" to "shrinking".  The last Sim is the failing run Hypothesis replays at
    the end: its transcript is what ``--trace`` writes, until `InvariantViolation` carries it.
    """

    def __init__(
        self, drive: Callable[..., Any], invariants: list[str] | None, on_run: Callable[[int, bool], None] | None
    ) -> None:
        self.drive = drive
        self.invariants = invariants
        self.on_run = on_run
        self.runs = 0
        self.first_failure: int | None = None
        self.last: Sim | None = None

    def wrapped(self) -> Callable[..., Any]:
        """The drive to hand to `simloop.verify`: the same function, sync or async, counting each run it starts."""
        if inspect.iscoroutinefunction(self.drive):

            @functools.wraps(self.drive)
            async def adrive(sim: Sim) -> Any:
                self._started(sim)
                return await self.drive(sim)

            return adrive

        @functools.wraps(self.drive)
        def drive(sim: Sim) -> Any:
            self._started(sim)
            return self.drive(sim)

        return drive

    def _started(self, sim: Sim) -> None:
        self.settle()
        self.last = sim
        self.runs += 1

    def settle(self) -> None:
        """Look at the previous run (its outcome is recorded by now) and tell the display."""
        if self.last is None or self.on_run is None:
            return
        failed = False
        if self.first_failure is None:
            failed = not self.last.check(invariants=self.invariants).ok
            if failed:
                self.first_failure = self.runs
        self.on_run(self.runs, failed)


class ProgressBar:
    """A rich progress bar on stderr: runs out of --max-examples, then an open-ended count while shrinking."""

    def __init__(self, total: int, drive: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(f"fuzzing {drive}", total=total)
        self.total = total
        self.shrinking = False
        self.lock = threading.Lock()

    def update(self, runs: int, failed: bool) -> None:
        with self.lock:
            if failed:
                self.shrinking = True
                self.progress.update(self.task, description=f"shrinking the failure found at run {runs}")
                for task in self.progress.tasks:  # open-ended from here: rich's update() reads total=None as "keep"
                    if task.id == self.task:
                        task.total = None
            elif not self.shrinking and runs > self.total:  # Hypothesis may try a few more than asked
                self.total = runs
                self.progress.update(self.task, total=runs)
            self.progress.update(self.task, completed=runs)

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
