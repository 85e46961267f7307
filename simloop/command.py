"""Loops in any language: a command run against the loopback server, as a `verify` drive.

`command_drive(command)` is a drive like any other, so `simloop.verify` searches, checks and shrinks a
loop written in TypeScript, Go or bash exactly as it does a Python one.  Per run it serves the run's
world (its generated model and tool faults, its transcript) on a loopback socket
(`simloop.wire.loopback.LoopbackServer`: the Messages API, and the tools over MCP and plain JSON), runs
the command with that world in its environment, and reads how the loop says it stopped.

The command's environment (docs/design.md, Loops in any language):

==========================  ==========================================================================
``ANTHROPIC_BASE_URL``      the simulated Messages API (the official SDKs read it); ``ANTHROPIC_API_KEY``
                            is a fake key
``SIMLOOP_MCP_URL``         the tools over MCP streamable HTTP (when ``simloop[mcp]`` is installed)
``SIMLOOP_TOOLS_URL``       the tools as plain JSON: ``POST $SIMLOOP_TOOLS_URL/NAME`` with the input as
                            the body answers ``{"content": TEXT, "is_error": BOOL}``
``SIMLOOP_TOOLS``           the tool schemas, as the API's ``tools`` parameter (JSON)
``SIMLOOP_TASK``            the user's task, the first user message
``SIMLOOP_LIMITS``          the limits the loop declares (JSON: ``max_steps``, ``deadline_s``, ...)
==========================  ==========================================================================

The loop's outcome: its last line on stdout that is a JSON object with a ``reason`` (one of
`simloop.outcome.REASONS`), e.g. ``{"reason": "final", "text": "Refunded."}``.  Without one, exit code 0
reads as ``final`` and any other as a crash (the ``crash`` invariant reports it with the end of stderr).

Real time runs here: the server never sleeps (scripted latencies are reported, not waited out), retryable
errors carry ``retry-after-ms: 1`` so the SDKs retry at once, and the command is killed after
``timeout_s`` real seconds (reported by ``stops`` as a runaway), or as soon as it passes the runaway budget
of model calls.  Timing invariants see the run's virtual clock, which does not move here.

Example::

    simloop.verify(command_drive("node agent.mjs"), max_examples=20)
"""

from __future__ import annotations

import _thread
import functools
import json
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from simloop._netguard import simloops_own
from simloop._prepare import once
from simloop._watchdog import LoopHalted
from simloop.clock import RealTimeThread
from simloop.errors import UsageError
from simloop.outcome import REASONS, Outcome
from simloop.sim import API_KEY, Sim

__all__ = ["CommandFailed", "command_drive", "outcome_of"]

DEFAULT_TIMEOUT_S = 60.0


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
    if not (timeout_s > 0):
        raise UsageError(f"command_drive(timeout_s=...): a positive number of seconds, got {timeout_s!r}")
    with_mcp = _mcp_installed() if mcp is None else mcp
    shown = command if isinstance(command, str) else shlex.join(argv)

    def drive(sim: Sim) -> Outcome:
        return _run(sim, argv, timeout_s=timeout_s, env=env, cwd=cwd, mcp=with_mcp)

    drive.__name__ = drive.__qualname__ = "command"
    drive.__module__ = "simloop.command"
    drive.simloop_replay = f"simloop run {{path}} --command {shlex.quote(shown)}"  # type: ignore[attr-defined]
    # what simloop imports for this drive, before the run (not the SDK: the command brings its own)
    drive.simloop_prepare = functools.partial(once, f"command-mcp={with_mcp}", functools.partial(  # type: ignore[attr-defined]
        _prepare, mcp=with_mcp))
    return drive


def outcome_of(stdout: str, returncode: int, stderr: str = "") -> Outcome:
    """The loop's outcome from its output: the last JSON line with a ``reason``, else its exit code.

    Raises `CommandFailed` for a non-zero exit without an outcome line.
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
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    raise CommandFailed(f"the command exited with code {returncode} and printed no outcome line" + (
        f"; stderr ends: {tail}" if tail else ""
    ))


def _run(
    sim: Sim, argv: list[str], *, timeout_s: float, env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None, mcp: bool,
) -> Outcome:
    from simloop.wire.loopback import LoopbackServer

    sim.tools.sleep = _no_sleep  # real time: the tools never sleep (a slow fault's latency is not waited out)
    with simloops_own():  # the loop is the command; this server is simloop's (see simloop._netguard)
        server = LoopbackServer(sim.server, tools=sim.tools, mcp=mcp, fast_retries=True)
    box: dict[str, Any] = {}
    done = _thread.allocate_lock()  # released when the command ended: a lock's timed acquire waits in real
    done.acquire()  # time (an Event's wait in the drive's thread may be virtual, see simloop.clock)
    proc: subprocess.Popen[str] | None = None
    try:
        child_env = {
            **os.environ,
            **(env or {}),
            "ANTHROPIC_BASE_URL": server.base_url,
            "ANTHROPIC_API_KEY": API_KEY,
            "SIMLOOP_TOOLS_URL": server.base_url + "/simloop/tools",
            "SIMLOOP_TOOLS": json.dumps(sim.tool_schemas),
            "SIMLOOP_TASK": sim.task,
            "SIMLOOP_LIMITS": json.dumps(sim.limits.model_dump(exclude_none=True)),
        }
        if server.mcp_url:
            child_env["SIMLOOP_MCP_URL"] = server.mcp_url
        try:
            # in a process group of its own, so that what the command starts goes with it (see _kill)
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env,
                cwd=cwd, text=True, encoding="utf-8", errors="replace", start_new_session=os.name == "posix",
            )
        except OSError as e:
            raise UsageError(f"cannot start the command {shlex.join(argv)!r}: {e}") from None
        server.on_halt = lambda: _kill(proc)  # past the runaway budget: stop the loop now, not at the timeout

        def wait() -> None:  # on real time: subprocess's waits would otherwise run on the Sim's virtual clock
            try:
                box["out"] = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                box["out"] = proc.communicate()
                box["timed_out"] = True
            finally:
                done.release()

        RealTimeThread(target=wait, name="simloop-command", daemon=True).start()
        while not done.acquire(timeout=0.25):  # a readiness signal; meanwhile the Sim's watchdog is told the run is alive
            sim.watchdog.feed()
    finally:
        if proc is not None:
            _kill(proc)  # whatever it left running (or all of it, when the run ends early: a Ctrl-C)
        with simloops_own():
            server.close()
    stdout, stderr = box["out"]
    if server.stopped is not None:
        raise server.stopped  # Hypothesis ended the example while the model drew a reply: it is Hypothesis's to see
    if server.halted is not None:
        raise server.halted
    if box.get("timed_out"):
        raise LoopHalted("watchdog", f"the command ran for {timeout_s:g} real seconds without stopping; killed")
    return outcome_of(stdout, proc.returncode, stderr)


def _kill(proc: subprocess.Popen[str]) -> None:
    """Kill the command and every process it started (its process group, on POSIX).

    Killing only the command would leave its children running, and one that holds the command's stdout
    open would keep the run waiting for the end of that output for good.
    """
    if os.name == "posix":
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader while a member lives
        except (ProcessLookupError, PermissionError):
            pass
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


def _no_sleep(seconds: float) -> None:
    return None


def _mcp_installed() -> bool:
    try:
        import mcp.server  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True
