"""The real-time watchdog: it unwinds a spinning drive with LoopHalted, which ``except Exception`` cannot
swallow, leaves a fed drive alone, never reads virtual time, and leaves no thread behind.

This is the one test file that waits in real time (a budget of 0.1-0.2 s; the file takes under a second).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time

import pytest

import simloop.clock as clock_module
from simloop._watchdog import LoopHalted, Watchdog
from simloop.clock import REAL, RealTimeThread, VirtualClock
from simloop.errors import UsageError

BUDGET = 0.1


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "simloop-watchdog"]


def watched() -> list[Watchdog]:
    """The watchdogs the shared monitor thread still watches (none once every `watching()` has exited)."""
    from simloop._watchdog import _MONITOR

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
        from simloop._watchdog import _MONITOR

        assert isinstance(_MONITOR.thread, RealTimeThread)
        assert _MONITOR.thread.ident not in clock_module._threads
        while True:
            time.sleep(60)
    assert BUDGET <= REAL.monotonic() - started < 1.0
    assert clock.now() > 60 * 100  # many virtual minutes passed in that tenth of a second
    assert watched() == []


AFTER_A_HALT = """
from hypothesis import find, settings
from simloop import strategies
from simloop._watchdog import LoopHalted, Watchdog

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
