"""One run of the drive on its worker thread (`Runner`): the clock, the network guard and the process patched
around it, the watchdog on it, its lives, its outcome recorded, and what it left behind; or, when its thread will
not end, the run abandoned and reported (``stops``)."""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
from collections.abc import Callable
from typing import Any

from simloop._runtime import process as _process
from simloop._runtime.clock import VirtualClock
from simloop._runtime.halt import LoopHalted
from simloop._runtime.netguard import guarding
from simloop._runtime.prepare import before_run
from simloop._runtime.process import ProcessExit, running
from simloop._runtime.realtime import REAL
from simloop._runtime.stack import on_held_stack
from simloop._runtime.watchdog import Watchdog, where_in
from simloop._runtime.worker import Abandoned, run_on_worker
from simloop._sim.guard import Guard
from simloop._sim.leftbehind import forks_seen, serve_children, threads_left
from simloop._sim.lives import Lives
from simloop._sim.mcptools import McpTools
from simloop._sim.record import Recorder
from simloop.errors import ScriptExhaustedError, SimloopInternalError, UsageError
from simloop.models import ScriptExhausted
from simloop.outcome import Outcome
from simloop.transcript import Halt, Transcript
from simloop.wire.server import InternalFailure

Drive = Callable[[Any], Any]  # (`simloop.sim.Drive`: this module does not import the Sim)

__all__ = ["MAX_HALTS", "Runner"]

#: Halts a run may take before simloop gives up on the loop's thread: a loop that catches even
#: BaseException and goes on is halted again at its next model or tool call, and abandoned after this many.
MAX_HALTS = 5


class Runner:
    """The run of one Sim, made when it runs (it holds the Sim: it is let go with the run's worker thread)."""

    __slots__ = ("_halted_at", "_proc", "_record", "clock", "guard", "lives", "mcp", "sim", "transcript", "watchdog")

    def __init__(self, sim: Any) -> None:  # a `simloop.sim.Sim` (this module does not import it)
        self.sim = sim  # what the drive is given, and where the outcomes go
        self.clock: VirtualClock = sim.clock
        self.watchdog: Watchdog = sim.watchdog
        self.guard: Guard = sim._guard
        self.transcript: Transcript = sim.transcript
        self.lives: Lives = sim._lives
        self.mcp: McpTools = sim._mcp
        self._record = Recorder(sim.transcript, sim.clock, sim._guard, sim._turns)
        self._halted_at: float | None = None  # REAL.monotonic() when the run was first seen halted
        self._proc: _process.Run | None = None  # the run's share of the process, while it runs

    def start(self, drive: Drive, warm_up: Callable[[bool], None]) -> Outcome:
        """`Sim.run`: the drive on a worker thread (also the way out of a running event loop, for an async drive
        called from an async test), where a run that cannot end is abandoned (see `give_up`); ``warm_up`` makes
        simloop's own imports and first SDK calls, once per process, on nobody's time."""
        before_run(drive, warm_up)
        state = random.getstate()
        random.seed(self.sim.seed)  # the SDK's retry jitter reads the global PRNG
        try:
            with _process.bounded():  # the command's last resort: a run holding the GIL past it ends the process
                return run_on_worker(lambda: self.run(drive), give_up=self.give_up, on_abandon=self.let_go)
        except Abandoned as e:
            return self.abandoned(e.thread_id)
        except KeyboardInterrupt:  # a real Ctrl-C reached the caller: the loop's thread is left as it is
            self.interrupted()
            raise
        finally:
            random.setstate(state)

    def run(self, drive: Drive) -> Outcome:
        """The drive, on this (the worker) thread, in the run's world; then what it left behind."""
        sim = self.sim
        tid = sim.server.callers.drive = threading.get_ident()  # (its model calls are the drive's: `Request.thread`)
        with self.clock.patched(), guarding(self.clock, sim.network, self.guard.blocked), running(self.clock) as proc:
            self._proc = proc
            self.mcp.run_began(proc)
            proc.on_spawn = lambda: serve_children(proc, sim.server, sim.tools)
            try:
                with self.watchdog.watching():
                    result = self._drive(drive)
            except LoopHalted:  # a halt delivered while the run was being recorded: the run is over anyway
                result = self._record.error(LoopHalted("watchdog", "halted while the run was being recorded"))
            # simloop's own teardown, on no budget of the loop's: the threads and processes it left running
            if self.transcript.halt is None:
                threads_left(proc, self.clock, self.transcript, tid)
            forks_seen(proc, self.clock, self.transcript)
        self.mcp.run_ended()
        return result

    def _drive(self, drive: Drive) -> Outcome:
        """The drive, its lives, and what it returned or raised, as the run's outcome."""
        if inspect.iscoroutinefunction(drive):
            return self._outcome(drive)
        # a sync drive: the threads and pool jobs it starts act on the simulator in start/submit order, up to the
        # outcome's record (simloop._runtime.order)
        with self.clock.ordered().drive():
            return self._outcome(drive)

    def _outcome(self, drive: Drive) -> Outcome:
        sim = self.sim
        try:
            if inspect.iscoroutinefunction(drive):
                plan = sim.scenario.abort
                return on_held_stack(self.clock.run, self.lives.arun(
                    drive, sim, self.returned, stop_at=plan.at if plan is not None else None,
                    on_time=self.guard.on_time))
            return self.returned(on_held_stack(self.lives.sync, drive, sim))
        except LoopHalted as halted:
            if self.transcript.halt is None:
                self.transcript.append(Halt(t=self.clock.now(), budget=halted.reason, detail=halted.detail,
                                           where=halted.where, target=halted.target))
            return self._record.error(halted)
        except ScriptExhausted as e:
            self._record.error(e)
            raise ScriptExhaustedError(e.message) from None
        except InternalFailure as e:
            raise SimloopInternalError(f"simloop failed while simulating the API: {e.error!r}") from e.error
        except UsageError:
            raise
        except (Exception, SystemExit, KeyboardInterrupt, asyncio.CancelledError, ProcessExit) as e:  # noqa: BLE001
            # the loop raised (even SystemExit, a KeyboardInterrupt of its own or a CancelledError its Stop wiring
            # caused): an outcome the `crash` invariant reports, not simloop's exit (a real Ctrl-C reaches the
            # caller's thread: see Sim.run)
            return self._record.error(e)

    def returned(self, returned: Any) -> Outcome:
        """Record what the drive returned; the run's outcome (the last turn's)."""
        if self._proc is not None and self._proc.exited is not None:  # it ended the process, then swallowed that
            return self._record.error(self._proc.exited)
        outcomes = self._record.returned(returned)
        self.sim.outcomes = outcomes
        return outcomes[-1]

    # -- a run that will not end -------------------------------------------------------------------------------

    def _halts(self) -> int:
        """How many times this run was halted: by its budgets, its clock and the watchdog."""
        return self.guard.halts + self.clock.halts + self.watchdog.halts

    def give_up(self, thread_id: int) -> bool:
        """Whether the run has to be abandoned: halted, and neither unwound within the grace nor done halting."""
        halts = self._halts()
        if not halts:
            return False
        now = REAL.monotonic()
        if self._halted_at is None:
            self._halted_at = now
        return halts >= MAX_HALTS or now - self._halted_at >= self.watchdog.seconds

    def let_go(self, thread_id: int) -> None:
        """The run's thread is abandoned (the run would not end, or a real Ctrl-C): park it, stop watching it."""
        self.guard.abandoned = True  # its next model or tool call parks it
        self.watchdog.abandon(thread_id)  # and so does its next line of Python

    def interrupted(self) -> None:
        """A real Ctrl-C reached the caller: the loop's thread is left as it is, parked at its next call."""
        self.guard.abandoned = True
        if self.watchdog._thread_id is not None:
            self.watchdog.abandon(self.watchdog._thread_id, interrupt=False)
        self.clock.release()  # the rest of the process runs in real time
        _process.release(self.clock)

    def abandoned(self, thread_id: int) -> Outcome:
        """Report a run whose thread would not end (blocked in C, or swallowing every halt)."""
        transcript = self.transcript
        self.clock.release()  # its patched() block never exits: the rest of the process runs in real time
        _process.release(self.clock)  # nor does its share of the process: the environment is restored
        where = where_in(thread_id)
        halts = self._halts()
        now = self.clock.now()
        first = self.clock.first_halt
        if transcript.halt is None and isinstance(first, LoopHalted):  # the clock's halt, swallowed
            transcript.append(Halt(t=now, budget=first.reason, detail=first.detail, where=first.where))
        if transcript.halt is None:  # the halt never reached the loop: it is blocked in C
            transcript.append(Halt(
                t=now, budget="watchdog", where=where,
                detail=f"no model call or tool call for {self.watchdog.seconds:g} s of real time; the drive was "
                       f"blocked at {where} and did not come back to Python",
            ))
            how = f"it stayed blocked at {where} (in a call that does not return, such as a wait with no timeout)"
        else:
            how = f"it caught simloop's halt and went on ({halts} halts), last seen at {where}"
        transcript.append(Halt(t=now, budget="abandoned", where=where, detail=(
            f"the loop did not unwind: {how}; simloop abandoned its thread (parked, a daemon: it never holds "
            "the process)")))
        halted = LoopHalted("abandoned", transcript.of(Halt)[-1].detail, where)
        return self._record.error(halted)
