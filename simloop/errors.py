"""The exceptions simloop raises at its users.

One misuse exception (`UsageError`) for every mistake a user can make, so that
``except simloop.UsageError`` catches them all; `ScenarioError` narrows it to a
bad scenario file and always names the file and line.  `InvariantViolation`
is the assertion a failing check raises: it carries the evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "InvariantViolation", "ScenarioError", "ScriptExhaustedError", "SimloopInternalError", "SimulatedCrash", "UsageError",
    "WorkerDied",
]


class UsageError(ValueError):
    """simloop was called in a way it does not support; the message says how to fix it."""


class ScenarioError(UsageError):
    """A scenario file (or dict) is malformed.

    ``path`` and ``line`` (1-based) say where; ``message`` says what was expected.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.message = message
        where = self.path or "<scenario>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class ScriptExhaustedError(UsageError):
    """The loop asked for more model replies than the scenario scripts (``then: fail``)."""


class SimloopInternalError(RuntimeError):
    """A bug in simloop itself, reported as such (never disguised as an API or tool failure)."""


class InvariantViolation(AssertionError):
    """The loop under test broke one or more invariants.

    Attributes: ``violations`` (list of `simloop.Violation`; typed ``Any`` here because
    this module sits below ``simloop.invariants`` and must not import it), ``scenario`` (the
    minimal scenario, when known), ``scenario_path`` (where it was written),
    ``timeline`` (the rendered run), ``replay`` (the command that replays it),
    ``transcript`` (the failing run's `simloop.Transcript`, for reports),
    ``examples`` (how many runs `simloop.verify` tried, shrinking included; None for a replay) and
    ``examples_before_failure`` (how many examples `simloop.verify` ran and
    passed before the first failing one; None outside a search).
    """

    def __init__(
        self,
        message: str,
        *,
        violations: list[Any],
        scenario: Any = None,
        scenario_path: str | None = None,
        timeline: str | None = None,
        replay: str | None = None,
        transcript: Any = None,
        examples: int | None = None,
        examples_before_failure: int | None = None,
    ) -> None:
        super().__init__(message)
        self.examples_before_failure = examples_before_failure
        self.transcript = transcript
        self.examples = examples
        self.violations = violations
        self.scenario = scenario
        self.scenario_path = scenario_path
        self.timeline = timeline
        self.replay = replay


class SimulatedCrash(BaseException):
    """The simulated process died (a ``crash`` fault): a `BaseException`, so ``except Exception`` cannot swallow
    it.  simloop keeps ``sim.store`` and the world (the tools' ledger, the clock, the model) and runs the drive
    again: the restart."""


class WorkerDied(RuntimeError):
    """A campaign's worker process died without a result: killed by a signal, or exited on its own.

    ``worker`` (0-based) of ``workers``; ``signal`` (its name, e.g. ``"SIGKILL"``) or ``exitcode``; ``run``, the
    worker's run it died in (1-based; None before its first); ``seed``, the worker's seed when the campaign had
    one; ``examples``, the runs the other workers finished.
    """

    def __init__(self, message: str, *, worker: int, workers: int, signal: str | None, exitcode: int | None,
                 run: int | None, seed: int | None, examples: int) -> None:
        super().__init__(message)
        self.worker, self.workers, self.signal, self.exitcode = worker, workers, signal, exitcode
        self.run, self.seed, self.examples = run, seed, examples
