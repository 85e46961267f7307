"""Loops in any language: a command run against the loopback server, as a `verify` drive.

`command_drive(command)` is a drive like any other, so `simloop.verify` searches, checks and shrinks a
loop written in TypeScript, Go or bash exactly as it does a Python one.  Per run it serves the run's
world (its generated model and tool faults, its transcript) on a loopback socket
(`simloop.wire.loopback.LoopbackServer`: the Messages API and the OpenAI Chat Completions wire, one world,
and the tools over MCP and plain JSON), runs
the command with that world in its environment, and reads how the loop says it stopped.

The command's environment (docs/design.md, Loops in any language):

==========================  ==========================================================================
``ANTHROPIC_BASE_URL``      the simulated Messages API (the official SDKs read it); ``ANTHROPIC_API_KEY``
                            is a fake key
``OPENAI_BASE_URL``         the same world on the Chat Completions wire, ``BASE/v1`` (the ``openai`` SDKs,
                            Python and TypeScript, read it); ``OPENAI_API_KEY`` is a fake key
``SIMLOOP_MCP_URL``         the tools over MCP streamable HTTP (when ``simloop[mcp]`` is installed)
``SIMLOOP_TOOLS_URL``       the tools as plain JSON: ``POST $SIMLOOP_TOOLS_URL/NAME`` with the input as
                            the body answers ``{"content": TEXT, "is_error": BOOL}``
``SIMLOOP_TOOLS``           the tool schemas, as the API's ``tools`` parameter (JSON)
``SIMLOOP_TASK``            the user's task, the first user message
``SIMLOOP_LIMITS``          the limits the loop declares (JSON: ``max_steps``, ``deadline_s``, ...)
``SIMLOOP_RUN_ID``          marks the run's processes (see below)
==========================  ==========================================================================

No other credential the SDKs read reaches the command: ``ANTHROPIC_AUTH_TOKEN``, ``OPENAI_ORG_ID``,
``OPENAI_PROJECT_ID``... (`simloop._runtime.process.CREDENTIALS`) are removed from what it inherits.

The loop's outcome: its last line on stdout that is a JSON object with a ``reason`` (one of
`simloop.outcome.REASONS`), e.g. ``{"reason": "final", "text": "Refunded."}``.  Without one, exit code 0
reads as ``final`` and any other as a crash (the ``crash`` invariant reports it with the end of stderr).

Real time runs here: the server never sleeps (scripted latencies are reported, not waited out), retryable
errors carry ``retry-after-ms: 1`` so the SDKs retry at once, and the command is killed after
``timeout_s`` real seconds (reported by ``stops`` as a runaway), or as soon as it passes the runaway budget
of model calls.  Timing invariants see the run's virtual clock, which does not move here.

Nothing the command starts outlives its run: when the run ends, every process of the command is killed,
daemons that left its session included (`simloop._runtime.proctree`).  Once the command exited, what it left
holding its output gets ``DRAIN_S`` seconds, then is ended too: the verdict is the command's own, at
once.  Of its stdout and stderr ``OUTPUT_LIMIT`` bytes each are kept, the head and the tail.

Example::

    simloop.verify(command_drive("node agent.mjs"), max_examples=20)
"""

from __future__ import annotations

import _thread
import functools
import json
import math
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from simloop._runtime.halt import LoopHalted
from simloop._runtime.netguard import simloops_own
from simloop._runtime.prepare import once
from simloop._runtime.process import CREDENTIALS
from simloop._runtime.proctree import Tree
from simloop._runtime.realtime import RealTimeThread
from simloop.errors import UsageError
from simloop.outcome import REASONS, Outcome
from simloop.sim import API_KEY, OPENAI_API_KEY, Sim

__all__ = ["CommandFailed", "command_drive", "outcome_of"]

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 604_800.0  # a week: a bound a thread's timed wait can take
OUTPUT_LIMIT = 1 << 20  # bytes of each of stdout and stderr kept (head and tail); the rest is counted
DRAIN_S = 1.0  # real seconds the command's output may go on after it exited, before what holds it is ended


class CommandFailed(RuntimeError):
    """The command exited with a non-zero code and printed no outcome line: the loop crashed."""


def command_drive(
    command: str | Sequence[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    mcp: bool | None = None,
) -> Callable[[Sim], Outcome]:
    """A drive that runs ``command`` (a shell-style string or an argv list) against the run's world.

    Args:
        command: the loop to run, e.g. ``"node agent.mjs"``.
        timeout_s: real seconds the command may run before it is killed (a runaway, for ``stops``).
        env: more environment variables for the command (the current environment is inherited).
        cwd: the command's working directory.
        mcp: serve the tools over MCP too (default: when the ``mcp`` SDK is installed).
    """
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise UsageError("command_drive(command): give the command to run, e.g. 'node agent.mjs'")
    if not _seconds_ok(timeout_s):
        raise UsageError(
            f"command_drive(timeout_s=...): a finite number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, "
            f"got {timeout_s!r}"
        )
    with_mcp = _mcp_installed() if mcp is None else mcp
    shown = command if isinstance(command, str) else shlex.join(argv)

    def drive(sim: Sim) -> Outcome:
        return _run(sim, argv, timeout_s=timeout_s, env=env, cwd=cwd, mcp=with_mcp)

    drive.__name__ = drive.__qualname__ = "command"
    drive.__module__ = "simloop.command"
    drive.simloop_replay = "simloop run {path} --command " + shlex.quote(shown)  # type: ignore[attr-defined]
    drive.simloop_search = "simloop verify --command " + shlex.quote(shown)  # type: ignore[attr-defined]
    # what simloop imports for this drive, before the run (not the SDK: the command brings its own)
    drive.simloop_prepare = functools.partial(once, f"command-mcp={with_mcp}", functools.partial(  # type: ignore[attr-defined]
        _prepare, mcp=with_mcp))
    return drive


def outcome_of(stdout: str, returncode: int, stderr: str = "") -> Outcome:
    """The loop's outcome from its output: the last JSON line with a ``reason``, else its exit code.

    Raises `CommandFailed` for a non-zero exit without an outcome line; its message gives the command's own
    error line (the first line of stderr that reads like an error) and the end of stderr.
    """
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("reason") in REASONS:
            return Outcome(str(data["reason"]), str(data.get("text", "")))
    if returncode == 0:
        last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
        return Outcome("final", last)
    raise CommandFailed(f"the command exited with code {returncode} and printed no outcome line{_stderr_said(stderr)}")


#: lines that say what failed, strongest first: "TypeError: ...", "error: ...", "panic: ...", then a bare mention
_ERROR_LINES = (
    re.compile(r"^\s*(?:Uncaught\s+)?[\w.$]*(?:Error|Exception|Panic)\b.*:"),
    re.compile(r"^\s*(?:error|fatal|panic|FATAL|ERROR)(?:\[\w+\])?:", re.IGNORECASE),
    re.compile(r"\b(?:Traceback|Error|Exception|error:|panic:|fatal:)"),
)


def _stderr_said(stderr: str) -> str:
    """"; its error: LINE; stderr ends: A | B | C" (each part when there is one)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return ""
    tail = lines[-3:]
    error = next((line for pattern in _ERROR_LINES for line in lines if pattern.search(line)), None)
    said = f"; its error: {_clip(error)}" if error is not None and error not in tail else ""
    return said + f"; stderr ends: {' | '.join(_clip(line) for line in tail)}"


def _clip(line: str, most: int = 300) -> str:
    return line if len(line) <= most else line[:most] + f"... ({len(line) - most} more characters)"


class _Capped:
    """A command's output as it is read: at most ``limit`` bytes kept, its head and its tail; the rest counted."""

    def __init__(self, limit: int = OUTPUT_LIMIT) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if len(chunk) >= self.half:
            self.dropped += len(self.tail) + len(chunk) - self.half
            self.tail = bytearray(chunk[-self.half:])
            return
        self.tail += chunk
        over = len(self.tail) - self.half
        if over > 0:
            self.dropped += over
            del self.tail[:over]

    def text(self) -> str:
        """What was kept, with a line saying what was not."""
        gap = (f"\n[simloop kept the first and last {self.half:,} bytes of this output; {self.dropped:,} bytes "
               "between them were not kept]\n") if self.dropped else ""
        return self.head.decode("utf-8", "replace") + gap + self.tail.decode("utf-8", "replace")


def _environment(sim: Sim, server: Any, env: Mapping[str, str] | None, tree: Tree) -> dict[str, str]:
    """The command's environment; a value an environment cannot carry (a NUL) is a usage error, named."""
    given = {**os.environ, **(env or {})}
    child_env = {
        **{name: value for name, value in given.items() if name not in CREDENTIALS},  # none of the real ones
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "OPENAI_BASE_URL": server.openai_base_url,
        "OPENAI_API_KEY": OPENAI_API_KEY,
        "SIMLOOP_TOOLS_URL": server.base_url + "/simloop/tools",
        "SIMLOOP_TOOLS": json.dumps(sim.tool_schemas),
        "SIMLOOP_TASK": sim.task,
        "SIMLOOP_LIMITS": json.dumps(sim.limits.model_dump(exclude_none=True)),
        **tree.env,
    }
    if server.mcp_url:
        child_env["SIMLOOP_MCP_URL"] = server.mcp_url
    for name, value in child_env.items():
        if "\0" in name or "\0" in value:
            what = "the task" if name == "SIMLOOP_TASK" else f"the environment variable {name!r}"
            raise UsageError(
                f"{what} holds a NUL character (at offset {value.find(chr(0))}), which no process's environment "
                "can carry, so a command cannot be given it: remove the NUL (or run this loop through a Python "
                "drive, which takes any text)"
            )
    return child_env


def _run(
    sim: Sim, argv: list[str], *, timeout_s: float, env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None, mcp: bool,
) -> Outcome:
    """One run of the command against a loopback server on ``sim``: its outcome, from its last JSON line."""
    from simloop.wire.loopback import LoopbackServer

    sim.tools.sleep = _no_sleep  # real time: the tools never sleep (a slow fault's latency is not waited out)
    with simloops_own():  # the loop is the command; this server is simloop's (see simloop._runtime.netguard)
        server = LoopbackServer(sim.server, tools=sim.tools, mcp=mcp, fast_retries=True)
    tree = Tree()
    box: dict[str, Any] = {}
    done = _real_lock()  # released when the command ended and its output was read
    proc: subprocess.Popen[bytes] | None = None
    try:
        child_env = _environment(sim, server, env, tree)
        tree.prepare()
        proc = _started(argv, child_env, cwd, tree)
        tree.start(proc.pid)
        server.on_halt = lambda: _end(proc, tree)  # past the runaway budget: stop the loop now, not at the timeout
        outputs = (_Capped(), _Capped())
        readers = [_reader(pipe, out) for pipe, out in zip((proc.stdout, proc.stderr), outputs)]
        RealTimeThread(target=_wait, args=(proc, tree, readers, timeout_s, box, done), name="simloop-command",
                       daemon=True).start()
        while not done.acquire(timeout=0.25):  # a readiness signal; meanwhile the Sim's watchdog is told the run is alive
            sim.watchdog.feed()
    finally:
        if proc is not None:
            _end(proc, tree)  # whatever it left running (or all of it, when the run ends early: a Ctrl-C)
        else:
            tree.end()
        with simloops_own():
            server.close()
    stdout, stderr = (out.text() for out in outputs)
    if server.stopped is not None:
        raise server.stopped  # Hypothesis ended the example while the model drew a reply: it is Hypothesis's to see
    if server.halted is not None:
        raise server.halted
    if box.get("timed_out"):
        raise LoopHalted("watchdog", f"the command ran for {timeout_s:g} real seconds without stopping; killed")
    assert proc.returncode is not None
    return outcome_of(stdout, proc.returncode, stderr)


def _started(
    argv: list[str], child_env: dict[str, str], cwd: str | os.PathLike[str] | None, tree: Tree
) -> subprocess.Popen[bytes]:
    """The command started in ``child_env``; one that cannot start is a usage error naming it."""
    try:
        # a session of its own (POSIX): its process group, and what it starts, are found by its pid (see Tree)
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env,
            cwd=cwd, start_new_session=os.name == "posix",
        )
    except (OSError, ValueError) as e:
        tree.not_started()
        raise UsageError(f"cannot start the command {shlex.join(argv)!r}: {e}") from None
    except BaseException:
        tree.not_started()
        raise


def _wait(
    proc: subprocess.Popen[bytes], tree: Tree, readers: list[Any], timeout_s: float, box: dict[str, Any], done: Any
) -> None:
    """Wait for the command to exit and its output to end (past ``timeout_s``: kill it, and say so in ``box``),
    then release ``done``.  On a `RealTimeThread`: subprocess's waits would otherwise run on the Sim's virtual
    clock."""
    try:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            box["timed_out"] = True
            _end(proc, tree)
            proc.wait()
        # The command exited.  Its output ends when every process holding its pipes lets go: what it left
        # running is given a moment, then ended (a daemon holding stdout would otherwise hold the run).
        if not _all_released(readers, DRAIN_S):
            _end(proc, tree)
            _all_released(readers, DRAIN_S)
    finally:
        done.release()


def _real_lock() -> Any:
    """A held lock: its timed acquire waits in real time (an Event's wait in the drive's thread may be virtual)."""
    lock = _thread.allocate_lock()
    lock.acquire()
    return lock


def _reader(pipe: IO[bytes] | None, out: _Capped) -> Any:
    """Read ``pipe`` into ``out`` on a thread of its own; returns a lock released at the end of the output."""
    released = _real_lock()

    def read() -> None:
        try:
            if pipe is not None:
                fd = pipe.fileno()
                while chunk := os.read(fd, 65536):
                    out.add(chunk)
        except (OSError, ValueError):
            pass
        finally:
            if pipe is not None:
                pipe.close()  # (this thread is its only reader)
            released.release()

    RealTimeThread(target=read, name="simloop-command-output", daemon=True).start()
    return released


def _all_released(locks: Sequence[Any], within_s: float) -> bool:
    """Whether every lock is released within ``within_s`` real seconds (each is left released)."""
    deadline = time.monotonic() + within_s  # (called on a RealTimeThread: the real clock)
    for lock in locks:
        if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False
        lock.release()
    return True


def _end(proc: subprocess.Popen[bytes], tree: Tree) -> None:
    """Kill the command and every process it started (see `simloop._runtime.proctree.Tree`)."""
    if os.name == "posix":
        tree.end()
    elif proc.poll() is None:
        proc.kill()


def _prepare(*, mcp: bool) -> None:
    """Import the loopback server and, with ``mcp``, build one MCP app (starlette and the MCP SDK's own)."""
    import simloop.wire.loopback  # noqa: F401

    if mcp:
        from simloop.mcp import tool_server

        tool_server([], _no_call).streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")


async def _no_call(name: str, arguments: dict[str, Any]) -> str:
    return ""
def _seconds_ok(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value <= MAX_TIMEOUT_S)


def _no_sleep(seconds: float) -> None:
    return None


def _mcp_installed() -> bool:
    try:
        import mcp.server  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True
