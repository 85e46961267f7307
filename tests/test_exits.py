"""What a loop does to simloop's process: exits, forks, children, threads however started, pool jobs (issue 26).

Each test is a loop as a user would write it that escaped simloop before (a silent pass, a command that never
ended, a verdict of 0 with no output) and is reported now.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from _isolated import in_fresh_process
from _sdk import STREAM_CUT_ERROR, STREAM_CUT_WRAPPED

from simloop import Outcome, Sim
from simloop._runtime.halt import LoopHalted
from simloop.transcript import Halt, OutcomeEvent, ThreadLeft, ToolStart, Transcript

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [{"name": "search", "kind": "read", "input_schema": {"type": "object"}, "results": ["found"]}]
WORLD = {"name": "exits", "task": "Hi.", "tools": TOOLS, "then": "end_turn",
         "model": [{"tool_use": [{"name": "search", "input": {"q": "a"}}]}, {"end_turn": "done"}]}
Step = Callable[[Sim, Any], str]


def _loop(step: Step) -> Callable[[Sim], Outcome]:
    """The reference shape of a loop: ask, run the one tool_use by ``step`` (which returns its result), ask again."""

    def drive(sim: Sim) -> Outcome:
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        reply = sim.client.messages.create(model=sim.model, max_tokens=64, tools=sim.tool_schemas, messages=messages)
        [call] = [b for b in reply.content if b.type == "tool_use"]
        messages += [{"role": "assistant", "content": reply.content},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                   "content": step(sim, call)}]}]
        sim.client.messages.create(model=sim.model, max_tokens=64, tools=sim.tool_schemas, messages=messages)
        return Outcome("final", "done")

    return drive


def _run(step: Step) -> Sim:
    with Sim(WORLD) as sim:
        sim.run(_loop(step))
    return sim


def _messages(sim: Sim, invariant: str) -> list[str]:
    return [v.message for v in sim.check().violations if v.invariant == invariant]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# -- every exit is a verdict --------------------------------------------------------------------------------------


_EXITS: dict[str, Callable[[], object]] = {
    "os._exit(0)": lambda: os._exit(0),
    "os.abort()": lambda: os.abort(),
    "os.kill(PID, SIGKILL)": lambda: os.kill(os.getpid(), signal.SIGKILL),
    "signal.raise_signal(SIGTERM)": lambda: signal.raise_signal(signal.SIGTERM),
}


@pytest.mark.parametrize("how", list(_EXITS))
def test_a_loop_that_ends_its_process_is_a_crash_and_simloop_goes_on(how: str) -> None:
    def step(sim: Sim, call: Any) -> str:
        _EXITS[how]()
        return "unreachable"

    sim = _run(step)
    [message] = _messages(sim, "crash")
    shown = how.replace("PID", str(os.getpid()))
    assert message.startswith(f"the loop ended its process at step 1: the loop called {shown} at "), message
    assert "test_exits.py" in message and "a correct loop never ends the process it runs in" in message


def test_an_exit_the_loop_swallows_is_still_its_outcome() -> None:
    def step(sim: Sim, call: Any) -> str:
        with contextlib.suppress(BaseException):  # a loop that catches everything
            os._exit(3)
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    with Sim(WORLD) as sim:
        outcome = sim.run(_loop(step))
    assert outcome.reason == "error" and "the loop called os._exit(3) at " in _messages(sim, "crash")[0]


def _project(tmp_path: Path, body: str) -> Path:
    """A user's project with ``agent.py`` (its ``drive``) and the reference loops importable."""
    (tmp_path / "agent.py").write_text(textwrap.dedent(f"""\
        import atexit, os, sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from examples.correct_sync import drive as reference
        """) + textwrap.dedent(body), encoding="utf-8")
    return tmp_path


def _simloop(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simloop.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_simloop_verify_reports_a_loop_that_calls_os_exit(tmp_path: Path) -> None:
    # before: exit status 0 and no output at all
    project = _project(tmp_path, """
        def drive(sim):
            sim.client.messages.create(model=sim.model, max_tokens=10, messages=[{"role": "user", "content": "x"}])
            os._exit(0)
        """)
    done = _simloop(project, "verify", "agent:drive", "--max-examples", "5", "--seed", "0", "--no-progress")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[crash] step 1: the loop ended its process at step 1: the loop called os._exit(0) at " in done.stdout
    assert "agent.py:7 in drive, which would have ended the process at once" in done.stdout


def test_the_command_exits_after_its_report_whatever_the_exit_hooks_do(tmp_path: Path) -> None:
    # before: the hook that never returns held `simloop` after its verdict for good
    project = _project(tmp_path, """
        atexit.register(threading.Event().wait)  # never returns
        atexit.register(os._exit, 0)  # runs first: would turn the verdict into 0
        def drive(sim):
            os._exit(0) if sim.transcript.events and False else None
            return reference(sim)
        def bad(sim):
            reference(sim)
            os._exit(0)
        """)
    done = _simloop(project, "verify", "agent:drive", "--max-examples", "3", "--seed", "0", "--no-progress")
    assert done.returncode == 0 and "ok: 3 runs of agent:drive" in done.stdout, done.stdout + done.stderr
    done = _simloop(project, "verify", "agent:bad", "--max-examples", "3", "--seed", "0", "--no-progress")
    assert done.returncode == 1 and "[crash]" in done.stdout, done.stdout + done.stderr


# -- anything after return is seen ----------------------------------------------------------------------------------


POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="made-before-the-run")


@pytest.fixture
def returned(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a run records its outcome: the loop has returned."""
    event = threading.Event()
    append = Transcript.append

    def watched(self: Transcript, e: Any) -> None:
        append(self, e)
        if isinstance(e, OutcomeEvent):
            event.set()

    monkeypatch.setattr(Transcript, "append", watched)
    return event


@pytest.mark.parametrize("how", ["a pool made before the run", "_thread.start_new_thread"])
def test_a_tool_queued_elsewhere_that_runs_after_the_loop_returned_is_seen(how: str, returned: threading.Event) -> None:
    POOL.submit(int).result()  # the pool's thread exists before the run, as a module-level pool's does

    def queued(sim: Sim, call: Any) -> str:
        def write() -> None:
            returned.wait(5)  # the write runs only once the loop has said it is done
            sim.run_tool(call.name, call.input, tool_use_id=call.id)

        if how == "_thread.start_new_thread":
            _thread.start_new_thread(write, ())
        else:
            POOL.submit(write)
        return "queued"

    sim = _run(queued)
    assert _messages(sim, "no_work_after_return") == [(
        "search (exec 1) started after the loop returned; a correct loop waits for (or cancels and awaits) every tool "
        "and model call it started before it returns")]


@pytest.mark.parametrize("how", ["a pool made before the run", "_thread.start_new_thread"])
def test_work_queued_elsewhere_and_still_running_when_the_loop_returned_is_reported(how: str) -> None:
    # before: not seen at all (the pool's thread and a _thread thread are not threads the run knew it started)
    POOL.submit(int).result()
    release = threading.Event()

    def write_later(sim: Sim, call: Any) -> str:
        if how == "_thread.start_new_thread":
            _thread.start_new_thread(release.wait, ())
        else:
            POOL.submit(release.wait)
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    try:
        sim = _run(write_later)
    finally:
        release.set()
    [left] = sim.transcript.of(ThreadLeft)
    [message] = _messages(sim, "no_work_after_return")
    if how == "_thread.start_new_thread":
        assert left.name == "_thread Event.wait" and message.startswith("thread '_thread Event.wait' was still running")
    else:
        assert message.startswith("thread 'a thread-pool job (Event.wait)' was still running at (queued or running "
                                  "in a pool made outside the run) when the loop returned"), message


@pytest.mark.parametrize("how", ["subprocess", "multiprocessing"])
def test_a_child_process_left_running_is_reported_and_killed(how: str) -> None:
    started: list[int] = []

    def step(sim: Sim, call: Any) -> str:
        if how == "subprocess":
            started.append(subprocess.Popen(["sleep", "600"]).pid)
        else:
            child = multiprocessing.get_context("fork").Process(target=threading.Event().wait, daemon=False)
            child.start()
            started.append(child.pid or 0)
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    sim = _run(step)
    [pid] = started
    [message] = _messages(sim, "no_work_after_return")
    assert message.startswith(f"process {pid} (") and message.endswith(
        "was still running when the loop returned (simloop killed it); a correct loop waits for (or terminates "
        "and waits for) every process it starts: Popen.wait(), Process.join()"), message
    if how == "subprocess":
        assert f"process {pid} (sleep 600)" in message
    os.waitpid(pid, 0)  # it was killed: reaped at once
    assert not _alive(pid)


def test_a_child_the_loop_waited_for_is_no_violation() -> None:
    sim = _run(lambda sim, call: (subprocess.run(["true"], check=True), sim.run_tool(call.name, call.input))[1])
    assert sim.check().ok, [v.message for v in sim.check().violations]


# -- out-of-process tools -------------------------------------------------------------------------------------------


def test_a_tool_run_in_a_forked_child_fails_the_run_with_how_to_expose_it() -> None:
    # before: the child ran the tool on its copy of the ledger and the run passed, whatever the child did
    def in_child(sim: Sim, call: Any) -> str:
        child = multiprocessing.get_context("fork").Process(
            target=sim.run_tool, args=(call.name, call.input), kwargs={"tool_use_id": call.id})
        child.start()
        child.join()
        return "found"

    sim = _run(in_child)
    [halt] = sim.transcript.of(Halt)
    assert halt.budget == "fork" and halt.detail.startswith("a tool execution in child process ")
    [message] = _messages(sim, "stops")
    assert message.startswith("after 2 model calls the loop made calls in a child process forked during the run, "
                              "which simloop refused there")
    assert message.endswith(
        "a child process of a run finds the run's tools at $SIMLOOP_TOOLS_URL (POST $SIMLOOP_TOOLS_URL/NAME, the input "
        "as the JSON body) and its simulated API at $ANTHROPIC_BASE_URL in its environment: call those from the "
        "child, not the copy of the Sim it inherited (or call sim.run_tool in the loop's own process and hand the "
        "child only the work; a loop in another language runs as simloop verify --command CMD, with the same "
        "variables and MCP at $SIMLOOP_MCP_URL)"), message


def _post_tool(name: str, input: Any) -> None:
    import json
    import urllib.request

    request = urllib.request.Request(f"{os.environ['SIMLOOP_TOOLS_URL']}/{name}", data=json.dumps(input).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:  # the run's loopback tools endpoint
        assert json.load(answer)["content"] == "found"


def test_a_forked_child_that_runs_its_tool_through_the_tools_endpoint_is_in_the_run() -> None:
    def in_child(sim: Sim, call: Any) -> str:
        child = multiprocessing.get_context("fork").Process(target=_post_tool, args=(call.name, call.input))
        child.start()
        child.join()
        assert child.exitcode == 0
        return "found"

    sim = _run(in_child)
    assert [s.tool for s in sim.transcript.of(ToolStart)] == ["search"] and sim.check().ok, sim.check().violations


def test_a_fork_that_runs_no_tool_is_fine() -> None:
    def work(sim: Sim, call: Any) -> str:
        child = multiprocessing.get_context("fork").Process(target=sum, args=([1, 2],))
        child.start()
        child.join()
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    assert _run(work).check().ok


# -- the guard covers every thread and child of the run ------------------------------------------------------------


def test_a_child_process_inherits_a_fake_key_and_the_environment_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-the-users-real-key")
    seen: list[str] = []

    def step(sim: Sim, call: Any) -> str:
        seen.append(subprocess.run(["sh", "-c", "echo $ANTHROPIC_API_KEY"], capture_output=True, text=True,
                                   check=True).stdout.strip())
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    assert _run(step).check().ok
    assert seen[0].startswith("sk-ant-simloop-") and os.environ["ANTHROPIC_API_KEY"] == "sk-ant-the-users-real-key"


def _blocked(sim: Sim) -> Halt:
    [halt] = sim.transcript.of(Halt)
    assert halt.budget == "network", halt
    return halt


def test_reverse_dns_is_blocked() -> None:
    sim = _run(lambda sim, call: str(socket.getnameinfo(("192.0.2.1", 443), 0)))
    assert _blocked(sim).target == "192.0.2.1:443"


def test_a_thread_started_with_the_thread_module_is_guarded() -> None:
    done = _thread.allocate_lock()
    done.acquire()
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            socket.create_connection(("192.0.2.1", 443), timeout=1)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.release()

    def step(sim: Sim, call: Any) -> str:
        _thread.start_new_thread(connect, ())
        done.acquire()
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    sim = _run(step)
    assert isinstance(errors[0], LoopHalted) and _blocked(sim).target == "192.0.2.1:443"


def test_a_pool_thread_made_before_the_run_is_guarded_while_it_works_for_the_run() -> None:
    POOL.submit(int).result()

    def sub_agent(sim: Sim, call: Any) -> str:  # a sub-agent with its own client, on a module-level pool
        client = anthropic.Anthropic(api_key="sk-ant-test-not-a-key", max_retries=0)
        POOL.submit(client.messages.create, model=sim.model, max_tokens=8,
                    messages=[{"role": "user", "content": "x"}]).exception()
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    assert _blocked(_run(sub_agent)).target == "api.anthropic.com:443"
    assert POOL.submit(lambda: 1).result() == 1  # outside a run the pool's thread is its own again


# -- a last-resort bound in real time ------------------------------------------------------------------------------


def test_a_run_that_holds_the_gil_is_stopped_by_the_process_and_says_where(tmp_path: Path) -> None:
    # before: the regex ran for days; no watchdog can run while one C call holds the GIL
    (tmp_path / "agent.py").write_text(textwrap.dedent("""\
        import re

        def drive(sim):
            re.match(r"(a+)+$", "a" * 40 + "b")  # catastrophic backtracking, in C, holding the GIL
        """), encoding="utf-8")
    scenario = ROOT / "scenarios" / "happy-path.yaml"
    done = _simloop(tmp_path, "run", str(scenario), "--drive", "agent:drive", "--hard-timeout", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("Timeout (0:00:01)!\n"), done.stderr
    assert 'agent.py", line 4 in drive' in done.stderr


def test_the_hard_timeout_takes_a_finite_number_of_seconds(tmp_path: Path) -> None:
    from simloop.cli import main

    assert main(["run", str(ROOT / "scenarios"), "--drive", "examples.correct_sync:drive",
                 "--hard-timeout", "inf"]) == 2


CHILD_AGENT = """\
import anthropic, os
reply = anthropic.Anthropic().messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
print(os.environ["ANTHROPIC_API_KEY"][:15], os.environ["ANTHROPIC_BASE_URL"][:17], reply.content[0].text)
"""


def test_a_child_process_reaches_the_simulator_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: the child inherited the user's real key and the real API's address
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-the-users-real-key")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    printed: list[str] = []

    def sub_agent(sim: Sim, call: Any) -> str:  # a sub-agent run as a process of its own
        printed.append(subprocess.run([sys.executable, "-c", CHILD_AGENT], capture_output=True, text=True,
                                      check=True, timeout=60).stdout.strip())
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    world = {**WORLD, "model": [*WORLD["model"][:1], {"end_turn": "from the child"}, {"end_turn": "done"}]}
    # the child imports the SDK first (seconds on a loaded machine), while the loop waits in real time
    with Sim(world, watchdog_s=120) as sim:
        sim.run(_loop(sub_agent))
    assert printed == ["sk-ant-simloop- http://127.0.0.1: from the child"]
    assert len(sim.transcript.requests) == 3  # the child's model call is in the run's transcript
    assert "ANTHROPIC_BASE_URL" not in os.environ and os.environ["ANTHROPIC_API_KEY"] == "sk-ant-the-users-real-key"


#: What a user's shell may hold: each credential the SDKs read, and each wire's base URL, all real-looking.
REAL_CREDENTIALS = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-the-users-real-key-0001", "ANTHROPIC_AUTH_TOKEN": "the-users-bearer-token-0002",
    "OPENAI_API_KEY": "sk-proj-the-users-real-openai-key-0003", "OPENAI_ORG_ID": "org-the-users-org-0004",
    "OPENAI_PROJECT_ID": "proj_the-users-project-0005", "OPENAI_BASE_URL": "https://gateway.example.com/v1",
    "ANTHROPIC_BASE_URL": "https://gateway.example.com",
}
OPENAI_CHILD = """\
import json, os, openai
reply = openai.OpenAI().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
print(json.dumps({"env": dict(os.environ), "text": reply.choices[0].message.content}))
"""


def test_a_child_on_the_openai_sdk_gets_no_real_credential_and_reaches_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # before: the child inherited the user's OPENAI_API_KEY, ANTHROPIC_AUTH_TOKEN and OPENAI_BASE_URL, and its
    # call went to the real API (billed, unseen)
    for name, value in REAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    printed: list[Any] = []

    def sub_agent(sim: Sim, call: Any) -> str:  # a sub-agent on the openai SDK, as a process of its own
        out = subprocess.run([sys.executable, "-c", OPENAI_CHILD], capture_output=True, text=True,
                             timeout=60, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        printed.append(json.loads(out.stdout))
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    world = {**WORLD, "model": [*WORLD["model"][:1], {"end_turn": "from the child"}, {"end_turn": "done"}]}
    with Sim(world, watchdog_s=120) as sim:
        sim.run(_loop(sub_agent))
    [child] = printed
    assert child["text"] == "from the child" and len(sim.transcript.requests) == 3  # its call is in the transcript
    env = child["env"]
    leaked = [name for name, value in REAL_CREDENTIALS.items() if value in json.dumps(env)]
    assert leaked == []
    assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:") and env["OPENAI_API_KEY"].startswith("sk-simloop-")
    assert {"ANTHROPIC_AUTH_TOKEN", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"}.isdisjoint(env)
    assert {name: os.environ.get(name) for name in REAL_CREDENTIALS} == REAL_CREDENTIALS  # given back after the run


def test_a_forked_child_that_reaches_the_network_is_blocked_and_reported() -> None:
    def in_child(sim: Sim, call: Any) -> str:
        child = multiprocessing.get_context("fork").Process(target=socket.getaddrinfo, args=("example.com", 443))
        child.start()
        child.join()
        return sim.run_tool(call.name, call.input, tool_use_id=call.id)

    [halt] = _run(in_child).transcript.of(Halt)
    assert halt.budget == "fork" and halt.detail.startswith("a real network connection to example.com:443 in child ")


@in_fresh_process
def test_an_abandoned_run_gives_the_environment_back() -> None:
    os.environ["ANTHROPIC_API_KEY"] = "sk-ant-the-users-real-key"

    def blocked(sim: Sim) -> Outcome:
        threading.Event().wait()  # blocked in C for good: the run is abandoned
        return Outcome("final")

    with Sim(WORLD, watchdog_s=0.2) as sim:
        sim.run(blocked)
    assert sim.transcript.of(Halt)[-1].budget == "abandoned"
    assert os.environ["ANTHROPIC_API_KEY"] == "sk-ant-the-users-real-key"


def test_simloop_reports_a_process_left_running_and_ends(tmp_path: Path) -> None:
    # before: reported ok, and then `simloop` never exited (multiprocessing joins its children at exit)
    project = _project(tmp_path, """
        import multiprocessing
        def drive(sim):
            multiprocessing.get_context("fork").Process(target=threading.Event().wait).start()
            return reference(sim)
        """)
    done = _simloop(project, "verify", "agent:drive", "--max-examples", "3", "--seed", "0", "--no-progress")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[no_work_after_return]" in done.stdout and "was still running when the loop returned (simloop killed it)" in (
        done.stdout)


def test_a_stream_cut_reaches_a_loop_catching_only_api_errors_as_this_sdk_raises_it() -> None:
    """A stream that breaks mid-read: anthropic 2.17 and later raise ``APIConnectionError``, which a loop catching
    ``anthropic.APIError`` handles (no violation); older SDKs let the HTTP library's own error escape (research:
    libs.md, mid-stream faults), the loop crashes, and the report says what it missed."""
    world = {**WORLD, "model": [{"error": "stream_cut"}, {"end_turn": "done"}]}

    def drive(sim: Sim) -> Outcome:
        try:
            with sim.client.messages.stream(model="m", max_tokens=64,
                                            messages=[{"role": "user", "content": sim.task}]) as stream:
                reply = stream.get_final_message()
        except anthropic.APIError as e:
            return Outcome("error", str(e))
        return Outcome("final", reply.content[0].text)  # type: ignore[union-attr]

    with Sim(world) as sim:
        outcome = sim.run(drive)
    violations = sim.check(outcome).violations
    if STREAM_CUT_WRAPPED:
        assert violations == [] and outcome.reason == "error"
        return
    [violation] = violations
    assert violation.invariant == "crash" and "RemoteProtocolError" in violation.message
    assert "catch httpx.TransportError (httpx2.TransportError) too" in violation.message


def test_a_stream_cut_that_escapes_a_loop_catching_nothing_is_a_crash_on_every_sdk() -> None:
    world = {**WORLD, "model": [{"error": "stream_cut"}, {"end_turn": "done"}]}

    def drive(sim: Sim) -> Outcome:
        with sim.client.messages.stream(model="m", max_tokens=64,
                                        messages=[{"role": "user", "content": sim.task}]) as stream:
            return Outcome("final", stream.get_final_text())

    with Sim(world) as sim:
        outcome = sim.run(drive)
    [violation] = sim.check(outcome).violations
    assert violation.invariant == "crash" and STREAM_CUT_ERROR.__name__ in violation.message


# -- work after the return, behind a sleep (#40 item 4) ----------------------------------------------------------


@pytest.mark.parametrize("wire", ["messages", "openai"])
def test_model_calls_a_thread_makes_after_the_return_behind_a_sleep_are_reported_every_time(wire: str) -> None:
    """A thread left behind sleeps 0.5 s (virtual: over at once) and then makes three model calls, while the drive
    formats its answer: the calls were recorded before the return, at the slept time.  The return is an event of
    the drive's own thread: it returned at 0 s of its own time, so they came after it, on every run."""
    pytest.importorskip("openai", reason="the Chat Completions wire is driven through the openai SDK: pip install 'simloop[openai]'")
    import json

    from tests.loops import gate_defects

    loop = gate_defects.titles_after_return if wire == "messages" else gate_defects.titles_after_return_openai

    def drive(sim: Sim) -> Outcome:
        outcome = loop(sim)
        json.dumps([{"line": i} for i in range(100_000)])  # formats a report before returning
        return outcome

    for _ in range(4):
        with Sim({**WORLD, "model": [{"end_turn": "done"}]}) as sim:
            outcome = sim.run(drive)
        messages = [v.message for v in sim.check(outcome).violations if v.invariant == "no_work_after_return"]
        assert messages, sim.transcript.to_jsonl()
        assert any("started after the loop returned" in m for m in messages), messages


def test_a_loop_that_waits_for_its_threads_calls_is_not_reported() -> None:
    """The same calls from a thread the drive joins, or a pool it shuts down, before it returns: nothing after it."""
    import time

    def drive(sim: Sim) -> Outcome:
        def titles() -> None:
            time.sleep(0.5)
            for _ in range(3):
                sim.client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "title"}])

        thread = threading.Thread(target=titles)
        thread.start()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pool.submit(titles)
        thread.join()
        return Outcome("final", "done")

    with Sim({**WORLD, "model": [{"end_turn": "done"}]}) as sim:
        outcome = sim.run(drive)
    assert sim.check(outcome).ok, sim.check(outcome)
    assert len(sim.transcript.requests) == 6
