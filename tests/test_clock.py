"""The virtual clock: sync sleeps, the wall clock, asyncio/anyio on the virtual loop, thread scoping,
the anthropic SDK's retries, freezegun and Hypothesis inside a Sim, and what it costs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import copyreg
import datetime
import importlib.util
import pickle
import random
import re
import socket
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import anyio.to_thread
import freezegun
import freezegun.api
import httpx2
import pytest
from _modules import load as load_module
from hypothesis import given, settings
from hypothesis import strategies as st

from simloop._runtime import registry
from simloop._runtime.clock import VirtualClock, VirtualTimeDeadlock, VirtualTimeEventLoop
from simloop._runtime.halt import LoopHalted
from simloop._runtime.realtime import EPOCH, MONOTONIC_ORIGIN, REAL, RealTimeThread
from simloop.errors import UsageError

UTC = datetime.UTC
PATCHED = [(time, n) for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
                               "sleep")] + [(datetime, "datetime"), (datetime, "date"), (asyncio, "new_event_loop"),
                                            (asyncio.events, "new_event_loop"), (threading.Thread, "start")]
ORIGINALS = {(owner, name): getattr(owner, name) for owner, name in PATCHED}


@pytest.fixture(autouse=True)
def _nothing_left_patched() -> Iterator[None]:
    yield
    left = [f"{getattr(o, '__name__', o)}.{n}" for (o, n), v in ORIGINALS.items() if getattr(o, n) is not v]
    assert left == [], f"still patched after the test: {left}"
    assert registry.threads == {}


def in_thread(fn: Callable[[], Any], cls: type[threading.Thread] = threading.Thread) -> Any:
    out: list[Any] = []
    t = cls(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


#: Real seconds a virtual wait may take to return: it returns at once, so this only tells a wait that returned
#: from one that hung (or slept for real a span longer than this), with room for a loaded machine (the 1-2 s
#: these tests allowed are within what a busy machine's scheduling adds).  That the time passed virtually is
#: asserted apart: the virtual clock's reading, which a real sleep does not move.
HANG_S = 20.0

# -- the clock itself -------------------------------------------------------------------------------------


def test_epoch_is_2026_01_01_utc() -> None:
    assert datetime.datetime.fromtimestamp(EPOCH, UTC) == datetime.datetime(2026, 1, 1, tzinfo=UTC)


def test_a_new_clock_starts_at_zero_on_the_epoch() -> None:
    clock = VirtualClock()
    assert (clock.now(), clock.time(), clock.monotonic()) == (0.0, EPOCH, MONOTONIC_ORIGIN)
    assert VirtualClock(start=1000.0).time() == 1000.0
    assert repr(clock) == f"VirtualClock(start={EPOCH!r}, now=0.0)"


def test_advance_and_sleep_move_forward_exactly() -> None:
    clock = VirtualClock()
    for _ in range(10):
        clock.advance(0.1)
    clock.sleep(30)
    assert clock.now() == 31.0  # integer nanoseconds: no float drift
    assert clock.time() == EPOCH + 31.0


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), float("inf")])
def test_time_never_moves_backwards(bad: float) -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError, match="finite number of seconds >= 0.*time only moves forward"):
        clock.advance(bad)
    assert clock.now() == 0.0


def test_non_numbers_are_type_errors() -> None:
    with pytest.raises(TypeError, match="number of seconds, got '1'"):
        VirtualClock().sleep("1")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="start must be"):
        VirtualClock(start=float("nan"))


def test_a_clocks_lock_made_at_first_use_is_one_whichever_threads_race_for_it() -> None:
    clock = VirtualClock()
    assert "_cond" not in vars(clock)  # (made when first used: many runs never wait on their clock)
    barrier = threading.Barrier(8)
    seen: list[threading.Condition] = []

    def use() -> None:
        barrier.wait(HANG_S)
        clock.advance(1)
        seen.append(clock._cond)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert clock.now() == 8.0 and len(seen) == 8 and all(cond is seen[0] for cond in seen)
    with pytest.raises(AttributeError, match="'VirtualClock' object has no attribute 'nope'"):
        clock.nope  # type: ignore[attr-defined]  # noqa: B018


def test_end_of_virtual_time_halts_with_a_base_exception() -> None:
    clock = VirtualClock(end=60)
    clock.advance(60)
    with pytest.raises(LoopHalted) as info:
        clock.sleep(0.5)
    assert info.value.reason == "virtual_time"
    assert "end of the run at 60 s" in info.value.detail
    assert clock.now() == 60.0


# -- patched(): the sync side ------------------------------------------------------------------------------


def test_time_sleep_returns_at_once_and_advances_the_clock() -> None:
    clock = VirtualClock()
    started = REAL.perf_counter()
    with clock.patched():
        time.sleep(30)
        time.sleep(1e6)
    assert clock.now() == 1_000_030.0
    assert REAL.perf_counter() - started < HANG_S


def test_every_time_function_reads_the_virtual_clock() -> None:
    clock = VirtualClock()
    with clock.patched():
        time.sleep(2.5)
        assert time.time() == EPOCH + 2.5
        assert time.time_ns() == int(EPOCH) * 10**9 + 2_500_000_000
        assert time.monotonic() == time.perf_counter() == MONOTONIC_ORIGIN + 2.5
        assert time.monotonic_ns() == time.perf_counter_ns() == int(MONOTONIC_ORIGIN) * 10**9 + 2_500_000_000


def test_the_sdk_looks_up_the_patched_sleep() -> None:
    import anthropic._base_client as base

    clock = VirtualClock()
    sdk_time = vars(base)["time"]  # the SDK's `import time`
    with clock.patched():
        assert sdk_time.sleep is time.sleep
        sdk_time.sleep(7)
    assert clock.now() == 7.0


def test_datetime_reads_the_virtual_wall_clock() -> None:
    clock = VirtualClock()
    with clock.patched():
        time.sleep(3723.25)
        now = datetime.datetime.now(UTC)
        assert now == datetime.datetime(2026, 1, 1, 1, 2, 3, 250000, tzinfo=UTC)
        assert datetime.datetime.utcnow() == now.replace(tzinfo=None)  # noqa: DTZ003 (patched: under test)
        assert datetime.datetime.now() == datetime.datetime.fromtimestamp(time.time())
        assert datetime.datetime.today() == datetime.datetime.now()  # noqa: DTZ002 (patched: under test)
        assert datetime.date.today() == datetime.datetime.now().date()
        # objects made while patched are ordinary datetimes, and isinstance still works both ways
        made = datetime.datetime(2024, 5, 1)
        assert type(now) is ORIGINALS[(datetime, "datetime")] and type(made) is ORIGINALS[(datetime, "datetime")]
        assert isinstance(made, datetime.datetime) and isinstance(made, datetime.date)
        assert isinstance(datetime.date(2024, 5, 1), datetime.date)
        assert datetime.datetime.fromtimestamp(EPOCH, UTC) == datetime.datetime(2026, 1, 1, tzinfo=UTC)


def test_patches_are_undone_on_exit_even_on_error() -> None:
    clock = VirtualClock()
    with pytest.raises(KeyError), clock.patched():
        assert time.sleep is not ORIGINALS[(time, "sleep")]
        raise KeyError("boom")
    assert all(getattr(o, n) is v for (o, n), v in ORIGINALS.items())
    t0 = REAL.monotonic()
    assert abs(time.monotonic() - t0) < 1.0  # real again


def test_other_threads_keep_real_time() -> None:
    clock = VirtualClock()
    go, done = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def foreign() -> None:
        go.wait()
        t0 = REAL.monotonic()
        time.sleep(0.01)  # a real sleep
        loop = asyncio.new_event_loop()
        loop.close()
        seen.update(slept=REAL.monotonic() - t0, time=time.time(), mono=time.monotonic(),
                    now=datetime.datetime.now(UTC), loop=type(loop))
        done.set()

    thread = threading.Thread(target=foreign)
    thread.start()  # started before the Sim: not on its clock
    with clock.patched():
        time.sleep(10 * 86400)  # ten virtual days, so virtual and real can never be confused
        go.set()
        done.wait(5)
        assert datetime.datetime.now(UTC) == datetime.datetime(2026, 1, 11, tzinfo=UTC)
    thread.join()
    assert seen["slept"] >= 0.009
    assert abs(seen["time"] - REAL.time()) < 5 and abs(seen["mono"] - REAL.monotonic()) < 5
    assert abs(seen["now"].timestamp() - REAL.time()) < 5
    assert seen["loop"] is not VirtualTimeEventLoop
    assert clock.now() == 10 * 86400


def test_threads_started_inside_inherit_virtual_time_and_leave_it_on_exit() -> None:
    clock = VirtualClock()
    with clock.patched():
        def sleep_then_read() -> float:
            time.sleep(100)
            return time.monotonic()

        assert in_thread(sleep_then_read) == MONOTONIC_ORIGIN + 100
        assert in_thread(lambda: datetime.datetime.now(UTC)) == datetime.datetime(2026, 1, 1, 0, 1, 40, tzinfo=UTC)
        pool = concurrent.futures.ThreadPoolExecutor(1)
        assert pool.submit(time.monotonic).result() == MONOTONIC_ORIGIN + 100
    # the pool's worker was started inside the Sim; after the Sim it reads real time
    assert abs(pool.submit(time.monotonic).result() - REAL.monotonic()) < 5
    pool.shutdown()


def test_a_real_time_thread_never_inherits_virtual_time() -> None:
    clock = VirtualClock()
    with clock.patched():
        time.sleep(1000)
        mono = in_thread(time.monotonic, RealTimeThread)
    assert abs(mono - REAL.monotonic()) < 5


def test_nested_sims_in_one_thread_are_an_error_but_reentry_is_fine() -> None:
    outer, inner = VirtualClock(), VirtualClock()
    with outer.patched():
        with outer.patched():  # re-entrant on the same clock
            time.sleep(1)
        time.sleep(1)
        nested = r"this thread already runs on VirtualClock\(.*nested Sims in one thread are not supported"
        with pytest.raises(UsageError, match=nested + ".*RealTimeThread"), inner.patched():
            pass
        assert outer.now() == 2.0
        assert time.monotonic() == MONOTONIC_ORIGIN + 2  # the failed entry left everything in place
    assert inner.now() == 0.0


def test_two_sims_in_two_threads_each_keep_their_own_clock() -> None:
    barrier = threading.Barrier(2)
    clocks = [VirtualClock(), VirtualClock()]
    readings: dict[int, float] = {}

    def sim(i: int) -> None:
        with clocks[i].patched():
            barrier.wait()
            time.sleep(100 * (i + 1))
            barrier.wait()
            readings[i] = time.monotonic()

    threads = [RealTimeThread(target=sim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert readings == {0: MONOTONIC_ORIGIN + 100, 1: MONOTONIC_ORIGIN + 200}


def test_patched_modules_rebinds_aliases_bound_before_the_patch(tmp_path: Path) -> None:
    (tmp_path / "user_loop.py").write_text("from time import monotonic\nfrom datetime import datetime, UTC\n\n"
                                           "def stamp():\n    return monotonic(), datetime.now(UTC)\n")
    spec = importlib.util.spec_from_file_location("user_loop", tmp_path / "user_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    clock = VirtualClock()
    with clock.patched(modules=[module]):
        time.sleep(60)
        assert module.stamp() == (MONOTONIC_ORIGIN + 60, datetime.datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    assert module.monotonic is ORIGINALS[(time, "monotonic")]
    assert module.datetime is ORIGINALS[(datetime, "datetime")]


ALIASES = ("from time import monotonic, monotonic_ns, perf_counter, perf_counter_ns, sleep, time, time_ns\n"
           "from datetime import date, datetime\n")


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[Callable[[str, str], Any]]:
    names: list[str] = []

    def load(folder: str, name: str) -> Any:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / f"{name}.py").write_text(ALIASES)
        names.append(name)
        return load_module(name, tmp_path / folder / f"{name}.py")

    yield load
    for name in names:
        sys.modules.pop(name, None)


def test_aliases_in_the_loops_modules_follow_the_clock_unnamed(loaded: Callable[[str, str], Any]) -> None:
    import subprocess

    import _pytest.timing

    own = loaded("project", "user_loop_aliases")
    installed = loaded("venv/lib/site-packages", "installed_framework_aliases")
    clock = VirtualClock()
    with clock.patched():
        own.sleep(60)
        installed.sleep(30)
        for module in (own, installed):
            assert (module.monotonic(), module.perf_counter(), module.time()) == (
                MONOTONIC_ORIGIN + 90, MONOTONIC_ORIGIN + 90, EPOCH + 90)
            assert (module.monotonic_ns(), module.perf_counter_ns(), module.time_ns()) == (
                (MONOTONIC_ORIGIN + 90) * 10**9, (MONOTONIC_ORIGIN + 90) * 10**9, (EPOCH + 90) * 10**9)
        assert own.datetime.now(UTC) == datetime.datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC)
        assert own.date.today() == datetime.date(2026, 1, 1)
        # an installed package keeps the real classes (its isinstance checks and types), ...
        assert installed.datetime is REAL.datetime and installed.date is REAL.date
        # ... and the standard library and the test harness keep every real clock
        assert subprocess._time is REAL.monotonic  # type: ignore[attr-defined]
        assert _pytest.timing.perf_counter is REAL.perf_counter
        assert in_thread(own.monotonic, RealTimeThread) != MONOTONIC_ORIGIN + 90  # a thread off the clock: real
    for module in (own, installed):
        assert (module.monotonic, module.sleep, module.time_ns) == (REAL.monotonic, REAL.sleep, REAL.time_ns)
    assert (own.datetime, own.date) == (REAL.datetime, REAL.date)


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_the_sdks_type_definitions_which_the_alias_scan_skips_bind_no_clock_function(sdk: str) -> None:
    # The alias scan skips <sdk>.types (some 3,000 generated modules, two thirds of a process's with the SDK, and
    # most of the first scan's time): this holds while none of them imports the time module.
    spec = importlib.util.find_spec(sdk)
    if spec is None or spec.origin is None:
        pytest.skip(f"{sdk} is not installed")
    types = Path(spec.origin).parent / "types"
    binding = re.compile(r"^\s*(from\s+time\s+import|import\s+(.*[ ,])?time\b)", re.MULTILINE)
    modules = list(types.rglob("*.py"))
    found = [str(p.relative_to(types)) for p in modules if binding.search(p.read_text(encoding="utf-8"))]
    assert len(modules) > 100 and not found, f"{sdk}.types modules that import the clock: {found[:10]}"


def test_an_alias_rebound_by_someone_else_during_the_run_is_left_to_them(loaded: Callable[[str, str], Any]) -> None:
    module = loaded("project", "user_loop_rebinds")

    def theirs() -> float:
        return 1.0

    with VirtualClock().patched():
        assert module.monotonic is not REAL.monotonic
        module.monotonic = theirs
    assert module.monotonic is theirs  # (our exit restores only what still holds ours)


def test_a_module_imported_between_runs_is_found_by_the_next(loaded: Callable[[str, str], Any]) -> None:
    clock = VirtualClock()
    with clock.patched():
        pass
    module = loaded("project", "user_loop_late")
    with clock.patched():
        time.sleep(5)
        assert module.monotonic() == MONOTONIC_ORIGIN + 5


# -- the virtual-time event loop ----------------------------------------------------------------------------


def test_asyncio_and_anyio_waits_jump_on_the_virtual_loop() -> None:
    clock = VirtualClock()

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        t0, marks = loop.time(), []

        def mark() -> None:
            marks.append(round(loop.time() - t0, 9))

        await asyncio.sleep(10)
        mark()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 1)
        mark()
        done, pending = await asyncio.wait([asyncio.ensure_future(asyncio.sleep(50))], timeout=7)
        assert (len(done), len(pending)) == (0, 1)
        mark()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await asyncio.sleep(100)
        mark()
        await anyio.sleep(5)
        mark()
        with anyio.move_on_after(2):
            await anyio.sleep(100)
        mark()
        assert await asyncio.to_thread(lambda: 42) == 42
        assert await loop.run_in_executor(None, lambda: 43) == 43
        assert await anyio.to_thread.run_sync(lambda: 44) == 44
        mark()
        return marks

    started = REAL.perf_counter()
    assert clock.run(main()) == [10.0, 11.0, 18.0, 20.0, 25.0, 27.0, 27.0]
    assert REAL.perf_counter() - started < HANG_S
    assert clock.now() >= 27.0


def test_the_loop_exposes_its_clock_and_works_as_a_plain_loop_factory() -> None:
    with asyncio.Runner(loop_factory=VirtualTimeEventLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, VirtualTimeEventLoop) and isinstance(loop.simloop_clock, VirtualClock)
        runner.run(asyncio.sleep(3600))
        assert loop.simloop_clock.now() == 3600.0 and loop.time() == MONOTONIC_ORIGIN + 3600


def test_asyncio_run_inside_patched_gets_a_virtual_loop() -> None:
    clock = VirtualClock()

    async def main() -> type:
        await asyncio.sleep(3600)
        return type(asyncio.get_running_loop())

    started = REAL.perf_counter()
    with clock.patched():
        assert asyncio.run(main()) is VirtualTimeEventLoop
        loop = asyncio.new_event_loop()
        assert isinstance(loop, VirtualTimeEventLoop)
        loop.close()
    assert clock.now() == 3600.0 and REAL.perf_counter() - started < HANG_S
    loop = asyncio.new_event_loop()
    assert not isinstance(loop, VirtualTimeEventLoop)
    loop.close()


def test_a_sleep_in_an_executor_job_is_a_timer_of_the_loop() -> None:
    """``wait_for(to_thread(time.sleep, 5), 1)`` times out at +1 as in production; the job ends at +5."""
    clock = VirtualClock()

    async def main() -> float:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(time.sleep, 5), 1)
        return clock.now()

    with clock.patched():
        assert clock.run(main()) == 1.0
    assert clock.now() == 5.0  # asyncio.run waits for the executor at shutdown, as in production


def test_executor_jobs_sleeping_overlap_like_real_threads() -> None:
    clock = VirtualClock()

    async def main() -> None:
        await asyncio.gather(asyncio.to_thread(clock.sleep, 3), anyio.to_thread.run_sync(clock.sleep, 2),
                             asyncio.sleep(1))

    clock.run(main())
    assert clock.now() == 3.0


def test_jobs_queued_behind_a_pool_whose_threads_all_sleep_do_not_hold_time_still() -> None:
    """Five hour-long sleeps on a pool of two threads: the queued jobs run no code until a sleeper wakes, so the
    loop moves time on (they once held it still, and virtual time then followed the real clock)."""
    clock = VirtualClock()
    pool = concurrent.futures.ThreadPoolExecutor(2)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(pool, clock.sleep, 3600) for _ in range(5)))

    try:
        clock.run(main())
    finally:
        pool.shutdown()
    assert clock.now() == 3 * 3600.0  # three rounds of two threads, as in production


def test_an_async_loop_running_slow_tools_on_threads_is_no_runaway() -> None:
    """``asyncio.to_thread(sim.run_tool, ...)`` for more slow tools at once than the default pool has threads: a
    correct loop, once halted by the watchdog as a spin (a false `stops`)."""
    import simloop

    calls = [{"name": "search", "input": {"q": str(i)}} for i in range(12)]
    scenario = {"tools": [{"name": "search"}], "model": [{"tool_use": calls}, {"end_turn": "done"}],
                "faults": [{"tool": "search", "kind": "slow", "latency": 600}]}

    async def drive(sim: simloop.Sim) -> simloop.Outcome:
        reply = await sim.async_client.messages.create(model="m", max_tokens=64, tools=sim.tool_schemas,
                                                       messages=[{"role": "user", "content": sim.task}])
        outs = await asyncio.gather(*(asyncio.to_thread(sim.run_tool, b.name, b.input) for b in reply.content))
        messages: list[Any] = [{"role": "user", "content": sim.task}, {"role": "assistant", "content": reply.content},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": o}
                                                            for b, o in zip(reply.content, outs)]}]
        final = await sim.async_client.messages.create(model="m", max_tokens=64, tools=sim.tool_schemas,
                                                       messages=messages)
        return simloop.Outcome("final", final.content[0].text)

    with simloop.Sim(scenario) as sim:
        outcome = sim.run(drive)
    assert sim.check(outcome).violations == []
    assert sim.clock.now() >= 600.0 * 2  # more jobs than threads: the pool ran them in rounds


def test_job_sleeps_of_any_length_wake_exactly() -> None:
    clock = VirtualClock()

    async def main() -> None:
        await asyncio.gather(*(asyncio.to_thread(clock.sleep, d) for d in (0, 1 / 3, 0.1, 2 / 3, 1e-9, 1e-10)))

    started = REAL.perf_counter()
    clock.run(main())
    assert clock.now() == round(2 / 3 * 1e9) / 1e9
    assert REAL.perf_counter() - started < HANG_S


class _SlowToJoin(concurrent.futures.ThreadPoolExecutor):
    """A pool whose threads take 50 ms of real time to be joined (as many threads, or busy ones, do)."""

    def shutdown(self, wait: bool = True, **kwargs: Any) -> None:
        if wait:
            threading.Event().wait(0.05)  # real time: the thread runs on no clock
        super().shutdown(wait, **kwargs)


def test_the_end_of_a_run_that_used_threads_costs_no_virtual_time() -> None:
    """The end of ``asyncio.run`` joins the default executor's threads, since Python 3.13 under a 300 s timer of the
    loop (``THREAD_JOIN_TIMEOUT``): the joining is real work the loop waits for, not a jump to that timer (which
    once ended a run that used ``to_thread`` 300 virtual seconds late, on 3.13 only)."""
    clock = VirtualClock()

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(_SlowToJoin())
        await asyncio.to_thread(threading.Event().wait, 0.01)  # real work, then the threads are idle
        await asyncio.sleep(1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor "the executor did not finish joining its threads within 300 seconds"
        clock.run(main())
    assert clock.now() == 1.0


def test_a_job_sleeping_while_its_loop_is_blocked_does_not_deadlock() -> None:
    clock = VirtualClock()

    async def main() -> None:
        job = asyncio.get_running_loop().run_in_executor(None, clock.sleep, 5)
        threading.Event().wait(0.15)  # the loop thread blocks (bad practice) while the job sleeps
        await job

    clock.run(main())
    assert clock.now() == 5.0


def test_the_loop_waits_for_a_running_job_instead_of_jumping_to_a_timeout() -> None:
    clock = VirtualClock()

    def real_work() -> str:
        threading.Event().wait(0.05)  # 50 ms of real blocking work, not a virtual sleep
        return "done"

    async def main() -> list[str]:
        with anyio.fail_after(10):
            a = await anyio.to_thread.run_sync(real_work)
        b = await asyncio.wait_for(asyncio.to_thread(real_work), 10)
        return [a, b]

    assert clock.run(main()) == ["done", "done"]
    assert clock.now() == 0.0


def test_time_flows_in_real_time_around_a_job_stuck_past_the_grace() -> None:
    clock, release = VirtualClock(), threading.Event()

    async def main() -> None:
        await asyncio.wait_for(asyncio.to_thread(release.wait, 60.0), 0.1)

    started = REAL.perf_counter()
    with pytest.raises(TimeoutError), asyncio.Runner(
            loop_factory=lambda: VirtualTimeEventLoop(clock, thread_grace=0.05)) as runner:
        try:
            runner.run(main())
        finally:
            release.set()
    assert 0.1 <= clock.now() < 1.0
    assert REAL.perf_counter() - started < HANG_S  # not the job's 60 s


def test_settled_waits_for_all_that_is_due_at_this_instant_before_time_moves_on() -> None:
    # what sim.mcp_url's calls wait for before they start: ready callbacks many hops long and a job running real
    # code all finish first, a timer due later does not fire first, and virtual time does not move
    clock = VirtualClock()
    order: list[object] = []

    def real_work() -> None:
        threading.Event().wait(0.02)  # real blocking work, not a virtual sleep
        order.append("job")

    async def hops(n: int) -> None:
        for _ in range(n):
            await asyncio.sleep(0)
        order.append("hops")

    async def later() -> None:
        await asyncio.sleep(1)
        order.append("timer")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeEventLoop)
        work = [asyncio.create_task(hops(50)), asyncio.create_task(asyncio.to_thread(real_work)),
                asyncio.create_task(later())]
        await loop.settled()
        order.append(("settled", clock.now()))
        await asyncio.gather(*work)

    clock.run(main())
    assert sorted(map(str, order[:2])) == ["hops", "job"]
    assert order[2:] == [("settled", 0.0), "timer"]
    assert clock.now() == 1.0


def test_settled_does_not_wait_past_the_grace_for_a_stuck_job() -> None:
    clock, release = VirtualClock(), threading.Event()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeEventLoop)
        stuck = asyncio.create_task(asyncio.to_thread(release.wait, 60.0))
        await loop.settled()
        now = clock.now()
        release.set()
        await stuck
        return now

    started = REAL.perf_counter()
    with asyncio.Runner(loop_factory=lambda: VirtualTimeEventLoop(clock, thread_grace=0.05)) as runner:
        try:
            assert runner.run(main()) == 0.0  # released when time would start to flow, before it moved
        finally:
            release.set()
    assert REAL.perf_counter() - started < HANG_S


def test_a_deadlock_is_an_error_naming_the_stuck_task() -> None:
    async def wait_for_nothing() -> None:
        await asyncio.Event().wait()

    started = REAL.perf_counter()
    with pytest.raises(VirtualTimeDeadlock) as info, asyncio.Runner(
            loop_factory=lambda: VirtualTimeEventLoop(VirtualClock(), deadlock_after=0.05)) as runner:
        runner.run(wait_for_nothing())
    message = str(info.value)
    assert message.startswith("the virtual-time event loop can never wake up: no callback is ready, no timer")
    assert "wait_for_nothing (" in message and "test_clock.py" in message and "awaiting a Future" in message
    assert REAL.perf_counter() - started < HANG_S


def test_time_flows_in_real_time_while_a_real_fd_is_registered() -> None:
    """libs.md E6: a peer answering after 50 ms must not meet a jumped-past 10 s timeout."""
    ours, peer = socket.socketpair()
    clock = VirtualClock()

    def answer_later() -> None:
        threading.Event().wait(0.05)
        peer.sendall(b"hello")

    async def main() -> bytes:
        reader, writer = await asyncio.open_connection(sock=ours)
        threading.Thread(target=answer_later).start()
        try:
            return await asyncio.wait_for(reader.readexactly(5), 10)
        finally:
            writer.close()

    try:
        assert clock.run(main()) == b"hello"  # not a jump to the 10 s timeout
    finally:
        peer.close()
    # virtual time followed the real wait (how much of the 50 ms a loaded machine lets it see varies: no bound)
    assert 0 < clock.now() < 5


def test_run_cancels_leftover_tasks_and_closes_its_loop() -> None:
    clock, cleaned = VirtualClock(), []
    loops: list[asyncio.AbstractEventLoop] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(1e9)
        finally:
            cleaned.append(True)

    async def main() -> str:
        loops.append(asyncio.get_running_loop())
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(1)
        return "ok"

    assert clock.run(main()) == "ok"
    assert cleaned == [True] and loops[0].is_closed() and clock.now() == 1.0


# -- the anthropic SDK's retries ----------------------------------------------------------------------------

MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-5",
           "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
           "usage": {"input_tokens": 1, "output_tokens": 1}}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def overloaded_once() -> tuple[Callable[[httpx2.Request], httpx2.Response], list[str]]:
    attempts: list[str] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        attempts.append(request.headers["x-stainless-retry-count"])
        return httpx2.Response(529, json=OVERLOADED) if len(attempts) == 1 else httpx2.Response(200, json=MESSAGE)

    return handle, attempts


def test_async_client_retries_a_529_instantly_on_the_virtual_loop() -> None:
    handle, attempts = overloaded_once()

    async def ahandle(request: httpx2.Request) -> httpx2.Response:
        return handle(request)

    async def main() -> str:
        client = anthropic.AsyncAnthropic(api_key="k", http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(ahandle)))
        message = await client.messages.create(model="claude-sonnet-5", max_tokens=8,
                                               messages=[{"role": "user", "content": "x"}])
        return message.content[0].text  # type: ignore[union-attr]

    clock, started = VirtualClock(), REAL.perf_counter()
    random.seed(0)
    assert clock.run(main()) == "hi"
    assert attempts == ["0", "1"]
    assert 0.375 <= clock.now() <= 0.5  # the SDK's first backoff, 0.5 s * (1 - 0.25 * random())
    assert REAL.perf_counter() - started < HANG_S


def test_sync_client_retries_a_529_instantly_inside_patched() -> None:
    handle, attempts = overloaded_once()
    clock, started = VirtualClock(), REAL.perf_counter()
    random.seed(0)
    with clock.patched():
        client = anthropic.Anthropic(api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(handle)))
        message = client.messages.create(model="claude-sonnet-5", max_tokens=8,
                                         messages=[{"role": "user", "content": "x"}])
    assert message.content[0].text == "hi"  # type: ignore[union-attr]
    assert attempts == ["0", "1"]
    assert 0.375 <= clock.now() <= 0.5
    assert REAL.perf_counter() - started < HANG_S


# -- freezegun, the user's choice, inside a Sim -------------------------------------------------------------

FROZEN = datetime.datetime(2024, 5, 1, 12, 0, 0)


def test_freeze_time_around_a_sim_is_driven_by_the_virtual_clock() -> None:
    with freezegun.freeze_time(FROZEN):
        clock = VirtualClock()
        with clock.patched():
            time.sleep(90)
            assert datetime.datetime.now() == FROZEN + datetime.timedelta(seconds=90)
            clock.run(asyncio.sleep(30))  # would hang under freezegun alone (libs.md E1)
            assert datetime.datetime.now() == FROZEN + datetime.timedelta(seconds=120)
            assert time.monotonic() == MONOTONIC_ORIGIN + 120  # the core clock is ours, not frozen
        assert datetime.datetime.now() == FROZEN + datetime.timedelta(seconds=120)  # freezegun still rules
    assert abs(time.time() - REAL.time()) < 5


def test_freeze_time_inside_a_sim_and_our_patches_survive_its_exit() -> None:
    clock = VirtualClock()
    with clock.patched():
        time.sleep(5)
        with freezegun.freeze_time(FROZEN):
            time.sleep(10)
            clock.run(asyncio.sleep(30))
            assert datetime.datetime.now() == FROZEN + datetime.timedelta(seconds=40)
        assert time.monotonic() == MONOTONIC_ORIGIN + 45  # freezegun's exit restored our functions
        assert datetime.datetime.now(UTC) == datetime.datetime(2026, 1, 1, 0, 0, 45, tzinfo=UTC)
        with freezegun.freeze_time(FROZEN, tick=True):  # a ticking freeze follows virtual time, once
            time.sleep(10)
            assert FROZEN + datetime.timedelta(seconds=10) <= datetime.datetime.now() < FROZEN + datetime.timedelta(
                seconds=11)
        with freezegun.freeze_time(FROZEN, real_asyncio=True):
            clock.run(asyncio.sleep(30))
            assert datetime.datetime.now() == FROZEN + datetime.timedelta(seconds=30)
    assert freezegun.api.real_time is ORIGINALS[(time, "time")]
    assert freezegun.api.real_datetime is ORIGINALS[(datetime, "datetime")]


def test_a_run_after_one_under_freeze_time_rebinds_the_wall_aliases_again(loaded: Callable[[str, str], Any]) -> None:
    # A run under a freeze_time leaves the wall clock to freezegun; the next run without one takes it back, aliases
    # included (whatever the install keeps from run to run must not outlive the freeze).
    module = loaded("project", "user_loop_after_freeze")
    clock = VirtualClock()
    with clock.patched():  # (the alias scan looks at a module once, here: while it holds the real functions)
        assert module.time() == EPOCH
    with freezegun.freeze_time(FROZEN), clock.patched():
        time.sleep(5)  # (freezegun rewrote the module's aliases to its own functions: out of our reach)
        assert datetime.datetime.now() == FROZEN + datetime.timedelta(seconds=5)  # freezegun's, ticked by ours
    assert module.time is REAL.time and module.datetime is REAL.datetime
    with clock.patched():
        time.sleep(5)
        assert (module.time(), module.monotonic()) == (EPOCH + 10, MONOTONIC_ORIGIN + 10)
        assert module.datetime.now(UTC) == datetime.datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)
    assert (module.time, module.monotonic, module.datetime) == (REAL.time, REAL.monotonic, REAL.datetime)


def test_a_thread_outside_any_run_reads_real_time_between_and_after_runs() -> None:
    clock = VirtualClock()
    for _ in range(3):
        with clock.patched():
            time.sleep(3600)
            assert abs(in_thread(time.time, RealTimeThread) - REAL.time()) < HANG_S  # during: real
        assert abs(in_thread(time.time) - REAL.time()) < HANG_S  # after: real, and the originals are back
        assert all(getattr(o, n) is v for (o, n), v in ORIGINALS.items())
    assert clock.now() == 3 * 3600


def test_dates_and_datetimes_pickle_while_patched_in_every_thread_and_unpickle_as_real_ones() -> None:
    # While patched, the name datetime.datetime is ours; pickle finds a class by its name, so without a reducer
    # no real datetime pickled at all, in any thread ("not the same object as datetime.datetime").
    kinds = [datetime.datetime(2020, 2, 3, 4, 5, 6, 7), datetime.datetime(2021, 11, 7, 1, 30, fold=1),
             datetime.datetime(2022, 1, 1, tzinfo=UTC), datetime.date(2023, 4, 5)]
    before = dict(copyreg.dispatch_table)
    clock = VirtualClock()
    with clock.patched():
        time.sleep(60)
        values = [*kinds, datetime.datetime.now(), datetime.datetime.now(UTC), datetime.date.today()]
        dumped = [pickle.dumps(v, protocol) for v in values for protocol in (2, pickle.HIGHEST_PROTOCOL)]
        inside = [pickle.loads(d) for d in dumped]
        elsewhere = in_thread(lambda: [pickle.loads(pickle.dumps(v)) for v in kinds], RealTimeThread)  # real time
        assert copy.deepcopy(values) == values
    after = [pickle.loads(d) for d in dumped]
    expected = [v for v in values for _ in (2, pickle.HIGHEST_PROTOCOL)]
    for loaded in (inside, after):
        assert loaded == expected
        assert [type(v) for v in loaded] == [type(v) for v in expected]  # the real classes, never ours
        assert [getattr(v, "fold", 0) for v in loaded] == [getattr(v, "fold", 0) for v in expected]
    assert elsewhere == kinds
    assert values[4] == datetime.datetime(2026, 1, 1, 0, 1)  # (pickled at virtual time)
    assert dict(copyreg.dispatch_table) == before  # the reducers go with the patches


def test_a_reducer_of_the_users_own_for_datetime_stays_theirs() -> None:
    def theirs(value: datetime.datetime) -> tuple[Any, ...]:
        return str, ("their own",)

    copyreg.pickle(datetime.datetime, theirs)
    try:
        with VirtualClock().patched():
            assert pickle.loads(pickle.dumps(datetime.datetime(2020, 1, 1))) == "their own"
        assert copyreg.dispatch_table[datetime.datetime] is theirs
    finally:
        del copyreg.dispatch_table[datetime.datetime]


# -- Hypothesis inside a Sim --------------------------------------------------------------------------------

_examples: list[tuple[VirtualClock, asyncio.AbstractEventLoop]] = []


@settings(deadline=200, max_examples=25, database=None)
@given(st.integers(min_value=0, max_value=10))
def test_hypothesis_deadline_is_real_time_while_the_body_sleeps_an_hour(n: int) -> None:
    clock = VirtualClock()  # a fresh clock per example
    with clock.patched():
        assert clock.now() == 0.0
        time.sleep(3600)

        async def main() -> asyncio.AbstractEventLoop:
            await asyncio.sleep(3600 + n)
            return asyncio.get_running_loop()

        loop = asyncio.run(main())  # a fresh loop per example
    assert clock.now() == 7200 + n
    assert all(loop is not seen for _, seen in _examples)
    _examples.append((clock, loop))


def test_each_hypothesis_example_got_its_own_clock_and_loop() -> None:
    if not _examples:  # run alone (or on another worker): run the Hypothesis test here first
        test_hypothesis_deadline_is_real_time_while_the_body_sleeps_an_hour()
    assert len({id(c) for c, _ in _examples}) == len(_examples) >= 2


# -- cost ------------------------------------------------------------------------------------------------


def test_patched_enter_and_exit_cost_microseconds() -> None:
    clock, costs = VirtualClock(), []
    for _ in range(500):  # this thread's CPU time: the wall clock of a loaded machine counts its waits for a core
        started = time.thread_time()
        with clock.patched():
            pass
        costs.append(time.thread_time() - started)
    median_us = statistics.median(costs) * 1e6
    print(f"\npatched() enter+exit: median {median_us:.1f} µs over 500, {len(sys.modules)} modules loaded")
    assert median_us < 1000  # freezegun: 20,000-30,000 µs with this many modules (libs.md E3)


def test_a_virtual_asyncio_sleep_costs_tens_of_microseconds() -> None:
    clock = VirtualClock()

    async def sleeps(n: int) -> None:
        for _ in range(n):
            await asyncio.sleep(1)

    started = time.thread_time()  # (the virtual loop runs on this thread: its CPU time, whatever the load)
    clock.run(sleeps(2000))
    per_sleep_us = (time.thread_time() - started) / 2000 * 1e6
    print(f"\nvirtual asyncio.sleep: {per_sleep_us:.1f} µs each")
    assert clock.now() == 2000.0
    assert per_sleep_us < 1000
