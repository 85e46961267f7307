"""What a run leaves behind it, watched after the loop returns: its threads, pool jobs and child processes still
running (`ThreadLeft`), and children forked during the run that called the model or ran a tool (budget ``fork``);
and the children it starts, served this world on loopback (`serve_children`)."""

from __future__ import annotations

import sys
import threading

from simloop._runtime.clock import VirtualClock
from simloop._runtime.netguard import simloops_own
from simloop._runtime.process import Run
from simloop._runtime.realtime import REAL
from simloop._runtime.watchdog import where_in
from simloop.tools import ToolBox
from simloop.transcript import Halt, ThreadLeft, Transcript
from simloop.wire.server import SimServer

__all__ = ["forks_seen", "serve_children", "threads_left"]

# Real seconds a thread the loop started may take to finish after the loop returned, before it is
# reported as left running (a thread that is done anyway finishes within microseconds).
THREAD_GRACE = 0.2


def _idle_worker(thread: threading.Thread) -> bool:
    """A thread-pool worker waiting for work (not work left running): its innermost frame is the pool's loop."""
    frame = sys._current_frames().get(thread.ident or 0)
    return frame is not None and frame.f_code.co_name == "_worker" and frame.f_code.co_filename.endswith(
        ("concurrent/futures/thread.py", "concurrent\\futures\\thread.py"))


def threads_left(proc: Run, clock: VirtualClock, transcript: Transcript, tid: int) -> None:
    """Record the threads the loop started that are still running now it returned (not idle pool workers),
    and the pool jobs, threads started by hand and child processes it left (`simloop._runtime.process`);
    ``tid`` is the drive's own thread."""
    deadline = REAL.monotonic() + THREAD_GRACE
    for name, where, pid in proc.left(THREAD_GRACE):
        transcript.append(ThreadLeft(t=clock.now(), name=name, where=where, pid=pid))
    others = clock._thread_ids - {tid}
    if not others:
        return
    for thread in threading.enumerate():
        if thread.ident not in others or _idle_worker(thread):
            continue
        thread.join(max(0.0, deadline - REAL.monotonic()))
        if thread.is_alive() and not _idle_worker(thread):
            transcript.append(ThreadLeft(t=clock.now(), name=thread.name, where=where_in(thread.ident or 0)))


def forks_seen(proc: Run | None, clock: VirtualClock, transcript: Transcript) -> None:
    """A child forked during the run made a model call or ran a tool in its own copy of the simulator: the
    run cannot be checked, so it fails (`stops`, budget ``fork``) with how to expose such tools."""
    reports = proc.fork_reports() if proc is not None else []
    if reports:
        detail = "; ".join(reports[:5]) + (f"; and {len(reports) - 5} more" if len(reports) > 5 else "")
        transcript.append(Halt(t=clock.now(), budget="fork", detail=detail))


def serve_children(proc: Run, server: SimServer, tools: ToolBox) -> None:
    """The run is about to start a child process: serve this world on loopback, and put its base URL and
    tools endpoint in the environment the child inherits (its model calls and tools reach this transcript)."""
    from simloop.wire.loopback import LoopbackServer

    with simloops_own():  # the server is simloop's, not the loop's (see simloop._runtime.netguard)
        loopback = LoopbackServer(server, tools=tools, mcp=False, fast_retries=True)
    proc.closers.append(loopback.close)
    proc.set_env({"ANTHROPIC_BASE_URL": loopback.base_url, "OPENAI_BASE_URL": loopback.openai_base_url,
                  "SIMLOOP_TOOLS_URL": loopback.base_url + "/simloop/tools"})
