"""The runner survives hostile loops (issue 21, items 2-6): every run ends, in bounded real time, in a true verdict.

Each attack is one small drive: a loop that bypasses the simulator (its own client, a raw socket), one
that deadlocks, one that swallows every halt, one blocked in C, one that waits with a timeout, one that
leaves threads behind; and scenario files whose script was not used.  Real-time budgets here are a
tenth of a second (the watchdog) and nothing sleeps; the assertions are on what was reported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import hypothesis
import pytest
from _isolated import in_fresh_process
from hypothesis import given, settings
from hypothesis import strategies as st

import simloop
from simloop import Outcome, Scenario, Sim
from simloop._runtime.clock import VirtualTimeEventLoop
from simloop._runtime.halt import LoopHalted
from simloop.cli import main
from simloop.timeline import render_timeline
from simloop.transcript import Halt, ThreadLeft

ROOT = Path(__file__).resolve().parents[1]
WATCHDOG = 0.1  # real seconds: the attacks that need the watchdog take a few of these

SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund"}}]}
TOOLS = [
    {"name": "search", "kind": "read", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"name": "send_email", "kind": "write",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}},
]


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    return Scenario.model_validate({"name": "t", "task": "Find it.", "tools": TOOLS, "model": list(model), **kw})


def ask(sim: Sim) -> anthropic.types.Message:
    return sim.client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])


def line_of(fn: Any, text: str) -> str:
    """``FILE:LINE in fn`` of the first line of ``fn`` containing ``text`` (what the reports name)."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    n = next(i for i, line in enumerate(lines) if text in line)
    return f"{__file__}:{start + n} in {fn.__name__}"


def stops_message(sim: Sim) -> str:
    [v] = [v for v in sim.check().violations if v.invariant == "stops"]
    return v.message


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback TCP socket that accepts connections (the 'local service')."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server
    finally:
        server.close()


# -- item 2: a loop that bypasses the simulator --------------------------------------------------------------------


def own_client(sim: Sim) -> Outcome:
    client = anthropic.Anthropic(api_key="sk-ant-test-not-a-key")  # the real API, not the Sim
    client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])
    return Outcome("final", "done")


def test_a_loop_with_its_own_client_is_blocked_and_named() -> None:
    with Sim(scenario({"end_turn": "hi"}, strict=False)) as sim:
        outcome = sim.run(own_client)
    where = line_of(own_client, "client.messages.create")
    [halt] = sim.transcript.of(Halt)
    assert (halt.budget, halt.target, halt.where) == ("network", "api.anthropic.com:443", where)
    assert outcome.reason == "error" and isinstance(outcome.exception, LoopHalted)
    assert stops_message(sim) == (
        f"the loop bypassed the simulator: after 0 model calls it opened a real network connection to "
        f"api.anthropic.com:443 at {where}, which simloop blocked; a loop under test reaches the model only "
        "through sim.client, sim.async_client or sim.http_client; for a loop that must reach a local service, "
        "run with network='loopback' (--network loopback)"
    )
    assert sim.transcript.requests == []  # the SDK's retries never got a second try either


def test_a_loop_that_swallows_the_block_is_still_reported() -> None:
    def drive(sim: Sim) -> Outcome:
        ask(sim)
        try:
            own_client(sim)
        except Exception:  # noqa: BLE001, S110 - the loop hides the failure: the halt is not an Exception
            pass
        return Outcome("final", "hi")

    with Sim(scenario({"end_turn": "hi"})) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "error"
    assert stops_message(sim).startswith("the loop bypassed the simulator: after 1 model call it opened")


def test_a_raw_socket_is_blocked_unless_loopback_is_allowed(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    connected: list[str] = []

    def drive(sim: Sim) -> Outcome:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            connected.append("127.0.0.1")
        return Outcome("aborted", "")

    with Sim(scenario(), network="block") as sim:
        sim.run(drive)
    assert connected == [] and sim.transcript.halt is not None
    assert sim.transcript.halt.target == f"127.0.0.1:{port}"
    for policy in ("loopback", "allow"):
        with Sim(scenario(), network=policy) as sim:  # type: ignore[arg-type]
            assert sim.run(drive) == Outcome("aborted", "")
        assert sim.transcript.halt is None and sim.check().ok
    assert connected == ["127.0.0.1", "127.0.0.1"]

    def remote(sim: Sim) -> Outcome:
        socket.create_connection(("192.0.2.1", 443), timeout=5)  # TEST-NET-1: never reached, blocked first
        return Outcome("aborted", "")

    with Sim(scenario(), network="loopback") as sim:
        sim.run(remote)
    assert sim.transcript.halt is not None and sim.transcript.halt.target == "192.0.2.1:443"


def test_under_loopback_a_localhost_name_is_loopback_without_a_query(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: *.localhost went to the system's resolver (a DNS query here, which fails), and a connect() to
    # such a name went wherever DNS pointed it
    from simloop._runtime import netguard

    port = listener.getsockname()[1]
    asked: list[Any] = []
    real = netguard._REAL_GETADDRINFO
    monkeypatch.setattr(netguard, "_REAL_GETADDRINFO", lambda host, *a: asked.append(host) or real(host, *a))
    reached: list[str] = []

    def drive(sim: Sim) -> Outcome:
        for name in ("api.localhost", "Tools.Dev.LOCALHOST.", "localhost"):
            with socket.create_connection((name, port), timeout=5) as sock:
                reached.append(sock.getpeername()[0])
        assert socket.gethostbyname("db.localhost") == "127.0.0.1"
        return Outcome("final", "ok")

    with Sim(scenario(), network="loopback") as sim:
        assert sim.run(drive) == Outcome("final", "ok")
    assert sim.transcript.halt is None and reached == ["127.0.0.1"] * 3
    assert not [host for host in asked if "localhost" in str(host).lower()]  # answered without the resolver

    def raw(sim: Sim) -> Outcome:  # a name connect() would hand to the system's resolver: loopback, no query
        with socket.socket() as sock:
            sock.connect(("evil.localhost", port))
            return Outcome("final", sock.getpeername()[0])

    with Sim(scenario(), network="loopback") as sim:
        assert sim.run(raw) == Outcome("final", "127.0.0.1")
    assert not [host for host in asked if "localhost" in str(host).lower()]


def test_under_loopback_localhost_is_allowed_only_where_it_resolves_to_loopback(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    import _socket

    from simloop._runtime import netguard

    port = listener.getsockname()[1]

    def raw(sim: Sim) -> Outcome:  # _socket's own connect: the name goes to this machine's resolver
        sock = _socket.socket()
        try:
            sock.connect(("localhost", port))
        finally:
            sock.close()
        return Outcome("final", "reached")

    with Sim(scenario(), network="loopback") as sim:
        assert sim.run(raw) == Outcome("final", "reached")  # this machine's localhost is 127.0.0.1
    elsewhere = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", port))]  # a hosts file pointing away
    monkeypatch.setattr(netguard, "_REAL_GETADDRINFO", lambda *a: elsewhere)
    with Sim(scenario(), network="loopback") as sim:
        sim.run(raw)
    assert sim.transcript.halt is not None and sim.transcript.halt.target == f"localhost:{port}"


@pytest.mark.skipif(not hasattr(socket, "AF_PACKET"), reason="AF_PACKET is Linux's")
@pytest.mark.parametrize("policy", ["block", "loopback"])
def test_a_raw_packet_socket_is_blocked_when_it_is_made(policy: str) -> None:
    # before: made (with CAP_NET_RAW), and its frames reached the network unseen
    made: list[socket.socket] = []

    def drive(sim: Sim) -> Outcome:
        try:
            made.append(socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)))
        except PermissionError:  # without CAP_NET_RAW: the kernel refuses, the loop goes on
            pass
        return Outcome("final", "sent")

    with Sim(scenario(), network=policy) as sim:  # type: ignore[arg-type]
        sim.run(drive)
    for sock in made:
        sock.close()
    assert made == [] and sim.transcript.halt is not None
    assert sim.transcript.halt.target == "the raw network (an AF_PACKET socket)"
    assert "opened a real network connection to the raw network (an AF_PACKET socket)" in str(sim.check())


def test_the_guard_acts_only_inside_a_run_and_on_the_runs_threads(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    outside: list[bool] = []

    def drive(sim: Sim) -> Outcome:
        from simloop._runtime.realtime import RealTimeThread

        def other() -> None:  # not the loop's thread (a thread that never joins the run's clock)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                outside.append(True)

        helper = RealTimeThread(target=other)
        helper.start()
        helper.join()
        return Outcome("aborted", "")

    with Sim(scenario()) as sim:
        assert sim.run(drive) == Outcome("aborted", "")
    assert outside == [True] and sim.check().ok
    with socket.create_connection(("127.0.0.1", port), timeout=5):  # after the run: no guard
        pass


def test_the_loopback_server_keeps_working_for_a_loop_allowed_to_reach_it() -> None:
    from simloop.wire.loopback import serve

    served = scenario({"end_turn": "from the loopback server"})

    def drive(sim: Sim) -> Outcome:
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=server.base_url, max_retries=0)
        reply = client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": "x"}])
        return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]

    with serve(served) as server:
        with Sim(scenario(), network="loopback") as sim:
            outcome = sim.run(drive)
        with Sim(scenario()) as blocked:
            blocked.run(drive)
    assert outcome == Outcome("final", "from the loopback server")
    assert blocked.transcript.halt is not None and blocked.transcript.halt.budget == "network"


def test_verify_and_the_cli_fail_a_bypassing_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(own_client, max_examples=2, seed=0, out_dir=tmp_path)
    assert "[stops]" in str(info.value) and "api.anthropic.com:443" in str(info.value)
    with pytest.raises(simloop.UsageError, match="network='nope' is not a network policy; use 'block'"):
        simloop.verify(own_client, network="nope")  # type: ignore[arg-type]

    path = tmp_path / "one.yaml"
    scenario({"end_turn": "hi"}, strict=False).dump(path)
    assert main(["run", str(path), "--drive", f"{__name__}:own_client"]) == 1
    out = capsys.readouterr().out
    assert "[stops] the loop bypassed the simulator" in out and "api.anthropic.com:443" in out
    assert main(["run", str(path), "--drive", f"{__name__}:own_client", "--network", "nope"]) == 2


# -- item 3: a deadlocked loop -------------------------------------------------------------------------------------


@pytest.fixture
def quick_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Virtual loops give up on waiting for another thread after 0.05 s of real time, not 2 s."""
    defaults = dict(VirtualTimeEventLoop.__init__.__kwdefaults__ or {})
    monkeypatch.setattr(VirtualTimeEventLoop.__init__, "__kwdefaults__", {**defaults, "deadlock_after": 0.05})


async def deadlocks(sim: Sim) -> Outcome:
    await sim.async_client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": "x"}])
    await asyncio.Future()  # nothing will ever set it
    return Outcome("aborted", "")


@pytest.mark.usefixtures("quick_deadlock")
def test_a_deadlock_is_a_stops_violation_with_its_own_wording() -> None:
    with Sim(scenario({"end_turn": "hi"})) as sim:
        outcome = sim.run(deadlocks)
    [halt] = sim.transcript.of(Halt)
    where = line_of(deadlocks, "asyncio.Future()")
    assert (halt.budget, halt.where) == ("deadlock", where)
    assert "Something awaits a future, event, lock or queue that nothing will ever set" in halt.detail
    assert outcome.reason == "error"
    assert [v.invariant for v in sim.check().violations] == ["stops"]
    assert stops_message(sim) == (
        f"the loop deadlocked after 1 model call: it awaits at {where} something nothing will ever complete "
        "(no task, timer, thread or socket could wake its event loop); a correct loop awaits only what something "
        "will complete, and puts a timeout on every wait"
    )


@pytest.mark.usefixtures("quick_deadlock")
def test_a_deadlock_inside_a_sync_drive_cannot_be_swallowed() -> None:
    def drive(sim: Sim) -> Outcome:
        try:
            asyncio.run(deadlocks(sim))
        except Exception:  # noqa: BLE001 - VirtualTimeDeadlock is a RuntimeError; the halt is not
            return Outcome("final", "pretend all is well")
        return Outcome("aborted", "")

    with Sim(scenario({"end_turn": "hi"})) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "error" and sim.transcript.halt is not None
    assert sim.transcript.halt.budget == "deadlock"


# -- item 4: runs that never end -----------------------------------------------------------------------------------


def parked(thread_name: str = "simloop-drive") -> list[threading.Thread]:
    """Abandoned run threads: parked in simloop._runtime.watchdog.park for good (daemons, no CPU)."""
    frames = sys._current_frames()
    out = []
    for t in threading.enumerate():
        frame = frames.get(t.ident or 0)
        while frame is not None and frame.f_code.co_name != "park":
            frame = frame.f_back
        if t.name == thread_name and frame is not None:
            out.append(t)
    return out


def eventually(condition: Any) -> bool:
    """Whether ``condition()`` holds within 60 s of real time (for what another thread does next; it returns as
    soon as it holds: the bound is for a machine so busy that the other thread waits long for a core)."""
    wait = threading.Event()
    for _ in range(6000):
        if condition():
            return True
        wait.wait(0.01)
    return False


@in_fresh_process
def test_a_loop_that_swallows_every_halt_is_abandoned_and_parked() -> None:
    before = len(parked())

    def drive(sim: Sim) -> Outcome:
        while True:
            try:
                ask(sim)
            except BaseException:  # noqa: BLE001, S110 - the attack: nothing can stop this loop from inside
                pass

    with Sim(scenario(SEARCH, then="repeat_last"), watchdog_s=WATCHDOG) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "error"
    halts = sim.transcript.of(Halt)
    assert [h.budget for h in halts] == ["model_calls", "abandoned"]
    assert "it caught simloop's halt and went on" in halts[1].detail
    message = stops_message(sim)
    assert message.startswith("the loop made 52 model calls without stopping; the model kept asking for search")
    assert "the loop did not unwind: it caught simloop's halt and went on" in message
    assert eventually(lambda: len(parked()) == before + 1)  # parked at its next model call: no CPU burnt
    assert all(t.daemon for t in parked())


@in_fresh_process
def test_a_loop_that_swallows_the_end_of_virtual_time_is_abandoned() -> None:
    def drive(sim: Sim) -> Outcome:
        while True:
            try:
                time.sleep(3600)  # virtual: the run's six hours go by at once, then each sleep is halted
            except BaseException:  # noqa: BLE001, S110 - the attack
                pass

    with Sim(scenario(), watchdog_s=WATCHDOG) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "error"
    assert [h.budget for h in sim.transcript.of(Halt)] == ["virtual_time", "abandoned"]
    assert stops_message(sim).startswith(
        "the loop ran for 21600 virtual seconds without stopping; it made no model call at all; the loop did not "
        "unwind: it caught simloop's halt and went on")


@pytest.mark.parametrize("how", ["event", "lock"])
@in_fresh_process
def test_a_loop_blocked_in_c_is_abandoned_with_a_stops_report(how: str) -> None:
    def drive(sim: Sim) -> Outcome:
        ask(sim)
        if how == "event":
            threading.Event().wait()  # no timeout, in C: the watchdog's halt is never delivered
        else:
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # held already: blocks for good
        return Outcome("aborted", "")

    with Sim(scenario({"end_turn": "hi"}), watchdog_s=WATCHDOG) as sim:
        outcome = sim.run(drive)
    where = line_of(drive, "threading.Event().wait()" if how == "event" else "blocks for good")
    assert outcome.reason == "error"
    assert [h.budget for h in sim.transcript.of(Halt)] == ["watchdog", "abandoned"]
    message = stops_message(sim)
    assert message.startswith(f"after 1 model call the loop ran on at {where} without calling the model or a tool")
    assert f"the loop did not unwind: it stayed blocked at {where}" in message
    # The abandoned thread's halt stays pending; the interpreter must not stay on its slow path for it
    # (before CPython 3.13 it did, and a later hypothesis.find never finished).
    assert hypothesis.find(simloop.strategies.latencies(), lambda s: s > 100,
                           settings=settings(database=None)) > 100


@in_fresh_process
def test_a_real_ctrl_c_while_the_loop_is_blocked_aborts_at_once() -> None:
    """The loop runs on a worker thread; the user's Ctrl-C reaches the caller, which lets the worker go."""
    import _thread

    from simloop._runtime.watchdog import _MONITOR

    def drive(sim: Sim) -> Outcome:
        _thread.interrupt_main()  # what a Ctrl-C does: KeyboardInterrupt in the main thread, the caller
        threading.Event().wait()
        return Outcome("aborted", "")

    assert threading.current_thread() is threading.main_thread()
    # Python's own Ctrl-C handler: a process started with SIGINT ignored (this child inherits the disposition of
    # the test worker that starts it, which some full runs had ignoring it) never sees the simulated Ctrl-C
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Sim(scenario(), watchdog_s=600) as sim, pytest.raises(KeyboardInterrupt):  # no waiting for the watchdog
            sim.run(drive)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sim.watchdog not in _MONITOR.watched  # the abandoned thread is not watched forever
    assert sim._guard.abandoned
    assert hypothesis.find(simloop.strategies.latencies(), lambda s: s > 100,  # and the process goes on as before
                           settings=settings(database=None)) > 100


def test_one_call_then_a_spin_is_described_as_such_and_agrees_with_the_timeline() -> None:
    def drive(sim: Sim) -> Outcome:
        ask(sim)
        while True:
            pass

    with Sim(scenario({"end_turn": "hi"}), watchdog_s=WATCHDOG) as sim:
        sim.run(drive)
    where = line_of(drive, "while True")
    message = stops_message(sim)
    assert message.startswith(f"after 1 model call the loop ran on at {where} without calling the model or a tool")
    assert "kept calling the model" not in message
    assert f"the drive was at {where}" in render_timeline(sim.transcript, sim.check().violations)


WAITS = """
import queue, threading, simloop

def drive(sim):
    assert threading.Event().wait(30) is False
    try:
        queue.Queue().get(timeout=20)
    except queue.Empty:
        pass
    condition = threading.Condition()
    with condition:
        assert condition.wait_for(lambda: False, timeout=5) is False
    return simloop.Outcome("aborted", "waited")

with simloop.Sim(simloop.Scenario(), watchdog_s=600) as sim:
    print(sim.run(drive).text, sim.clock.now(), sim.check().ok)
"""


def test_waits_with_a_timeout_are_spent_on_virtual_time() -> None:
    """In a fresh process: a thread outside simloop (a test runner's, say) would make the waits real."""
    done = subprocess.run([sys.executable, "-c", WAITS], capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.split() == ["waited", "55.0", "True"], done.stdout + done.stderr  # not 55 real seconds


def test_a_wait_that_another_thread_of_the_run_ends_is_real() -> None:
    def drive(sim: Sim) -> Outcome:
        done = threading.Event()
        worker = threading.Thread(target=done.set)
        worker.start()
        assert done.wait(30) is True  # notified: not a virtual timeout
        worker.join()
        return Outcome("aborted", "")

    with Sim(scenario()) as sim:
        sim.run(drive)
    assert sim.clock.now() < 30


@settings(max_examples=3, deadline=None, database=None)
@given(st.data())
def test_a_drive_in_a_hypothesis_test_may_draw(data: st.DataObject) -> None:
    """The drive runs on a worker thread, in the caller's Hypothesis build context (thread-local in Hypothesis)."""
    def drive(sim: Sim) -> Outcome:
        return Outcome("aborted", str(data.draw(st.integers(0, 3), label="from the drive")))

    with Sim(scenario()) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "aborted" and outcome.text in {"0", "1", "2", "3"}, outcome


def test_threads_left_running_are_reported_by_no_work_after_return() -> None:
    release = threading.Event()

    def drive(sim: Sim) -> Outcome:
        threading.Thread(target=release.wait, name="left-behind").start()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="pool")
        pools.append(pool)
        pool.submit(release.wait)  # busy when the loop returns
        pool.submit(int).result()  # done: its worker waits for work, which is no work left running
        return Outcome("aborted", "")

    pools: list[concurrent.futures.ThreadPoolExecutor] = []
    try:
        with Sim(scenario()) as sim:
            sim.run(drive)
        left = sim.transcript.of(ThreadLeft)
        assert sorted(t.name for t in left) == ["left-behind", "pool_0"]
        violations = [v for v in sim.check().violations if v.invariant == "no_work_after_return"]
        assert len(violations) == 2
        assert violations[0].message.startswith("thread 'left-behind' was still running at ")
        assert "a correct loop joins (or stops and joins) every thread it starts" in violations[0].message
    finally:
        release.set()
        for pool in pools:
            pool.shutdown()


def test_threads_left_behind_never_hold_the_simloop_process(tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text(textwrap.dedent("""
        import threading

        def drive(sim):
            reply = sim.client.messages.create(
                model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])
            threading.Thread(target=threading.Event().wait, name="never-ends").start()  # not a daemon
            return ("final", reply.content[0].text)
    """), encoding="utf-8")
    scenario({"end_turn": "hi"}).dump(tmp_path / "one.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "simloop.cli", "run", "one.yaml", "--drive", "leaky:drive"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[no_work_after_return]" in done.stdout and "thread 'never-ends' was still running" in done.stdout
    assert done.stdout.rstrip().endswith("0 passed, 1 failed")


# -- item 5: a scenario that tested nothing --------------------------------------------------------------------------


UNFIRED = {
    "name": "unfired", "task": "Find it.", "tools": TOOLS,
    "model": [SEARCH, {"end_turn": "Found it."}, {"end_turn": "never asked for"}],
    "faults": [{"tool": "send_email", "call": 1, "kind": "commit_then_raise"}],
    "expect": {"violations": []},
}
LEFTOVERS = ("model[2] (end_turn) was never served; faults[0] (commit_then_raise on send_email call 1) never "
             "fired: send_email ran 0 time(s)")


def test_simloop_run_fails_a_file_whose_script_was_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    strict = tmp_path / "strict.yaml"
    Scenario.model_validate(UNFIRED).dump(strict)
    assert main(["run", str(strict), "--drive", "examples.correct_sync:drive"]) == 1
    out = capsys.readouterr().out
    assert f"FAIL  {strict}  strict" in out
    assert f"        [strict] the run left scripted behaviour unused: {LEFTOVERS}. A scenario file" in out
    assert "add 'strict: false' to the file if leftovers are the point" in out

    lenient = tmp_path / "lenient.yaml"
    Scenario.model_validate({**UNFIRED, "strict": False}).dump(lenient)
    assert "strict: false" in lenient.read_text(encoding="utf-8")
    assert main(["run", str(lenient), "--drive", "examples.correct_sync:drive"]) == 0
    assert capsys.readouterr().out.startswith(f"ok    {lenient}  final, 2 model calls")


def test_replay_fails_a_file_whose_script_was_not_used(tmp_path: Path) -> None:
    from examples.correct_sync import drive

    path = Scenario.model_validate(UNFIRED).dump(tmp_path / "strict.yaml")
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.replay(drive, path)
    assert f"  [strict] the run left scripted behaviour unused: {LEFTOVERS}." in str(info.value)
    assert info.value.violations == []
    lenient = Scenario.model_validate({**UNFIRED, "strict": False}).dump(tmp_path / "lenient.yaml")
    assert simloop.replay(drive, lenient).ok


def test_a_pytest_scenario_item_fails_on_leftovers(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)
    folder = pytester.path / "scenarios"
    folder.mkdir()
    Scenario.model_validate(UNFIRED).dump(folder / "unfired.yaml")
    Scenario.model_validate({**UNFIRED, "name": "lenient", "strict": False}).dump(folder / "lenient.yaml")
    result = pytester.runpytest("-v", "--simloop-drive=examples.correct_sync:drive")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random([
        "scenarios/lenient.yaml::lenient PASSED*",
        "scenarios/unfired.yaml::unfired FAILED*",
        "*[[]strict[]] the run left scripted behaviour unused: model[[]2[]] (end_turn) was never served*",
    ])


pytest_plugins = ["pytester"]
