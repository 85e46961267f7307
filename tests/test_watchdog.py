"""The real-time watchdog: it unwinds a spinning drive with LoopHalted, which ``except Exception`` cannot
swallow, leaves a fed drive alone, never reads virtual time, and leaves no thread behind.

This is the one test file that waits in real time (a budget of 0.1-0.2 s; the file takes under a second).
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from simloop import Outcome, Sim
from simloop._runtime import registry
from simloop._runtime.clock import VirtualClock
from simloop._runtime.halt import LoopHalted
from simloop._runtime.realtime import REAL, RealTimeThread
from simloop._runtime.watchdog import _MONITOR, Watchdog
from simloop.errors import UsageError

BUDGET = 0.1


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "simloop-watchdog"]


def watched() -> list[Watchdog]:
    """The watchdogs the shared monitor thread still watches (none once every `watching()` has exited)."""
    from simloop._runtime.watchdog import _MONITOR

    return list(_MONITOR.watched)


def test_a_bare_spin_is_unwound() -> None:
    watchdog = Watchdog(seconds=BUDGET)
    started = REAL.monotonic()
    with pytest.raises(LoopHalted) as info, watchdog.watching():
        while True:
            pass
    assert REAL.monotonic() - started >= BUDGET
    assert info.value.reason == "watchdog"
    assert info.value.detail.startswith(f"no model call or tool call for {BUDGET:g} s of real time; "
                                        f"the drive was at {__file__}:")
    assert "in test_a_bare_spin_is_unwound" in info.value.detail
    assert watchdog.halts == 1 and watched() == []
    copy = pickle.loads(pickle.dumps(info.value))  # the halt raised asynchronously pickles as a LoopHalted
    assert type(copy) is LoopHalted and copy.detail == info.value.detail


def test_a_spin_that_swallows_every_exception_is_unwound() -> None:
    watchdog, swallowed = Watchdog(seconds=BUDGET), []
    with pytest.raises(LoopHalted), watchdog.watching():
        while True:
            try:
                raise ConnectionError("retry")
            except Exception as e:  # noqa: BLE001 (what a naive retry loop does)
                swallowed.append(type(e))
    assert swallowed and set(swallowed) == {ConnectionError}
    assert watched() == []


def test_a_loop_that_keeps_feeding_is_not_stopped() -> None:
    watchdog, steps = Watchdog(seconds=0.2), 0
    with watchdog.watching():
        started = REAL.monotonic()
        while REAL.monotonic() - started < 0.35:  # well past the budget, fed all along
            watchdog.feed()
            steps += 1
    assert steps > 0 and watchdog.halts == 0
    assert watched() == []


def test_the_watchdog_keeps_real_time_inside_a_sim() -> None:
    """The drive spins on virtual sleeps (virtual time races ahead); the watchdog still fires on real time."""
    clock, watchdog = VirtualClock(), Watchdog(seconds=BUDGET)
    started = REAL.monotonic()
    with pytest.raises(LoopHalted), clock.patched(), watchdog.watching():
        from simloop._runtime.watchdog import _MONITOR

        assert isinstance(_MONITOR.thread, RealTimeThread)
        assert _MONITOR.thread.ident not in registry.threads
        while True:
            time.sleep(60)
    # fired on real time: not before its budget (virtual time raced minutes ahead meanwhile); the upper bound only
    # tells a watchdog that fired from one that never does, with room for a loaded machine's scheduling
    assert BUDGET <= REAL.monotonic() - started < 30.0
    assert clock.now() > 60 * 100  # many virtual minutes passed in that tenth of a second
    assert watched() == []


AFTER_A_HALT = """
from hypothesis import find, settings
from simloop import strategies
from simloop._runtime.halt import LoopHalted
from simloop._runtime.watchdog import Watchdog

try:
    with Watchdog(seconds=0.1).watching():
        while True:
            pass
except LoopHalted:
    pass
print(find(strategies.latencies(), lambda s: s > 100, settings=settings(database=None)) > 100)
"""


def test_a_halt_leaves_the_interpreter_as_it_was() -> None:
    # Dropping a halt with PyThreadState_SetAsyncExc(id, NULL) left CPython's "async exception pending"
    # flag set for good (before 3.13): every later call took the slow path, and a hypothesis.find later in
    # the same process never finished.  In a child process, so that a regression fails instead of hanging.
    child = subprocess.run([sys.executable, "-c", AFTER_A_HALT], check=False, capture_output=True, text=True,
                           timeout=120)
    assert (child.returncode, child.stdout.strip()) == (0, "True"), child.stderr


def test_a_normal_exit_leaves_no_thread_and_nothing_pending() -> None:
    watchdog = Watchdog(seconds=BUDGET)
    with watchdog.watching():
        assert len(watchdog_threads()) == 1 and watched() == [watchdog]  # one shared monitor thread
    assert watched() == [] and watchdog.halts == 0
    with watchdog.watching():  # reusable after exit
        pass
    assert watched() == []


def test_misuse_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="positive number of real seconds, got 0"):
        Watchdog(seconds=0)
    watchdog = Watchdog(seconds=BUDGET)
    with (watchdog.watching(), pytest.raises(UsageError, match="already watching"),
          watchdog.watching()):
        pass
    assert repr(watchdog) == "Watchdog(seconds=0.1)"


def test_loop_halted_is_not_an_exception_and_round_trips() -> None:
    halted = LoopHalted("model_calls", "50 model calls without stopping")
    assert isinstance(halted, BaseException) and not isinstance(halted, Exception)
    assert str(halted) == "model_calls: 50 model calls without stopping"
    copy = pickle.loads(pickle.dumps(halted))
    assert type(copy) is LoopHalted and (copy.reason, copy.detail) == (halted.reason, halted.detail)


# -- what is never a spin: an import, and simloop's own work ------------------------------------------------

WAITS_FOR_THE_WATCHDOG = """
from simloop._runtime.watchdog import _MONITOR

[dog] = list(_MONITOR.watched)
while dog.deferred == 0:  # a slow first import: spins until the watchdog's budget ran out meanwhile
    pass
"""


def test_an_import_is_never_taken_for_a_spin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "slow_first_import.py").write_text(WAITS_FOR_THE_WATCHDOG)
    monkeypatch.syspath_prepend(str(tmp_path))
    watchdog = Watchdog(seconds=BUDGET)
    try:
        with watchdog.watching():
            import slow_first_import  # noqa: F401
    finally:
        sys.modules.pop("slow_first_import", None)
    assert watchdog.halts == 0 and watchdog.deferred >= 1
    assert watched() == []


def test_a_spin_inside_an_import_is_halted_after_the_import_grace(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "spinning_import.py").write_text("while True:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    watchdog = Watchdog(seconds=BUDGET, import_grace=3 * BUDGET)
    started = REAL.monotonic()
    with pytest.raises(LoopHalted) as info, watchdog.watching():
        import spinning_import  # noqa: F401
    assert REAL.monotonic() - started >= 3 * BUDGET
    assert watchdog.halts == 1 and watchdog.deferred >= 2
    assert re.search(r"the drive was at .*spinning_import\.py:\d+ in <module>, importing a module for \d+\.\d s "
                     r"\(an import may take 0\.3 s; one that takes longer spins at import time\)$", info.value.detail)
    assert "spinning_import" not in sys.modules


def test_simloops_own_work_in_the_watched_thread_is_not_charged() -> None:
    watchdog = Watchdog(seconds=BUDGET)
    with watchdog.watching():
        with watchdog.paused():
            while watchdog.deferred == 0:  # simloop's own set-up, slower than the whole budget
                pass
        assert watchdog._due() > REAL.monotonic()  # the loop's budget starts afresh after it
    assert watchdog.halts == 0 and watched() == []


def test_a_slow_import_or_client_set_up_in_a_run_is_not_a_runaway(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import simloop._sim.clients

    (tmp_path / "slow_import_in_a_drive.py").write_text(WAITS_FOR_THE_WATCHDOG)
    monkeypatch.syspath_prepend(str(tmp_path))
    build = simloop._sim.clients._sdk_client
    waits: list[int] = []

    def slow_build(cls: Any, http_client: Any) -> Any:  # simloop's client set-up, made slower than the budget
        [dog] = list(_MONITOR.watched)
        deferred = dog.deferred
        while dog.deferred == deferred:
            pass
        waits.append(dog.deferred - deferred)
        return build(cls, http_client)

    monkeypatch.setattr(simloop._sim.clients, "_sdk_client", slow_build)

    def drive(sim: Sim) -> Outcome:
        import slow_import_in_a_drive  # noqa: F401

        client = sim.client
        sim.watchdog.seconds = 10.0  # what is left of the drive is not under test: the default budget
        reply = client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": "x"}])
        return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]

    try:
        with Sim({"model": [{"end_turn": "hi"}]}, watchdog_s=BUDGET) as sim:
            outcome = sim.run(drive)
    finally:
        sys.modules.pop("slow_import_in_a_drive", None)
    assert (outcome.reason, outcome.text) == ("final", "hi"), outcome
    assert sim.watchdog.halts == 0 and sim.watchdog.deferred >= 2 and waits == [1]
    assert sim.check(outcome).ok


def test_a_slow_import_in_an_executor_job_of_an_async_drive_is_not_a_runaway(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import importlib

    (tmp_path / "slow_import_in_a_job.py").write_text(WAITS_FOR_THE_WATCHDOG)
    monkeypatch.syspath_prepend(str(tmp_path))

    async def drive(sim: Sim) -> Outcome:
        await asyncio.to_thread(importlib.import_module, "slow_import_in_a_job")  # the loop's thread waits
        sim.watchdog.seconds = 10.0  # what is left of the drive is not under test: the default budget
        reply = await sim.async_client.messages.create(model=sim.model, max_tokens=10,
                                                       messages=[{"role": "user", "content": "x"}])
        return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]

    try:
        with Sim({"model": [{"end_turn": "hi"}]}, watchdog_s=BUDGET) as sim:
            outcome = sim.run(drive)
    finally:
        sys.modules.pop("slow_import_in_a_job", None)
    assert (outcome.reason, outcome.text) == ("final", "hi"), outcome
    assert sim.watchdog.halts == 0 and sim.watchdog.deferred >= 1


def _looked_again() -> bool:
    """Wake the monitor thread and wait (on its lock, no polling) until it has looked once more; False if it never
    does (a dead thread): the 20 s are a hang guard, it looks within microseconds."""
    with _MONITOR.cond:
        rounds = _MONITOR.rounds
        _MONITOR.cond.notify()
        return _MONITOR.cond.wait_for(lambda: _MONITOR.rounds > rounds, timeout=20)


def test_a_run_that_starts_while_the_monitor_idles_does_not_wake_it(monkeypatch: pytest.MonkeyPatch) -> None:
    dog = Watchdog(seconds=5)
    with dog.watching():
        pass
    assert _looked_again()  # the monitor looks again, and finds nothing to watch
    assert not _MONITOR.watched
    notified: list[int] = []
    monkeypatch.setattr(_MONITOR.cond, "notify", lambda n=1: notified.append(n))
    for _ in range(20):  # short runs, one after another: none wakes the monitor thread (a switch each)
        with Watchdog(seconds=5).watching():
            pass
    assert notified == []
    monkeypatch.undo()
    short = Watchdog(seconds=BUDGET)  # a shorter budget than the monitor waits for: it is woken, and fires
    with pytest.raises(LoopHalted), short.watching():
        while True:
            pass


def test_a_budget_past_the_longest_wait_keeps_the_monitor_alive() -> None:
    """A budget of 10**12 s (a user turning the watchdog off in effect) once ended the monitor thread with an
    OverflowError from its wait, and with it every other run's watchdog until the next run restarted it."""
    with Watchdog(seconds=1e12).watching():
        assert _looked_again()  # the monitor looks, and waits for the far-away budget (where the overflow was)
        assert _looked_again()  # so it is there to look once more: the thread lives
    short = Watchdog(seconds=BUDGET)  # and it still fires for a run beside it
    with pytest.raises(LoopHalted), short.watching():
        while True:
            pass
