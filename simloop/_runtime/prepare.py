"""simloop's own imports and first-time set-up, done once per process before any run is timed.

A run charges the loop for the real time it spends (the watchdog, `simloop._runtime.watchdog`) and puts its
thread on the virtual clock.  What simloop itself does for the loop must not count: importing the SDK
took 8.7 s on a loaded CI machine, and the 10 s watchdog then reported a correct loop as spinning
"at typing_extensions.py".  So `before_run` does, in the caller's thread, before the watchdog is armed
and before the clock is patched, what the run would otherwise do on the loop's time the first time:

* for a drive on the SDK (any drive, unless it says otherwise): import ``anthropic``, ``httpx2`` and the
  transports, build the SDK client prototypes, and make a sync call, a tool round trip and a stream
  through a throwaway Sim (`simloop.sim.warm_up_sdk`), and for an ``async def`` drive an async call on a
  virtual-time event loop, so that the SDK's lazily built pydantic schemas (0.4 s quiet) are built now, in
  real time, outside any run (anyio's asyncio backend, some 10 ms, is imported by no run that does not use
  anyio: the clock patches it once anyio has loaded it, `simloop._runtime.jobs.AnyioJobs`; a loop that uses it
  imports it in its first such run, an import the watchdog does not count);
* for a drive that names its own preparation (``drive.simloop_prepare``, a callable), that instead:
  `command_drive` imports the loopback server and the MCP app (the command brings its own SDK), the
  LangGraph adapter's drives the SDK's and LangGraph's prebuilt agent.

Each is done once per process (a forked worker inherits it).  A preparation that fails is not retried
and never fails the run: the run then does the same work itself, as before.
"""

from __future__ import annotations

import inspect
import random
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["before_run", "once"]

_DONE: set[str] = set()
_LOCK = threading.Lock()


def once(name: str, work: Callable[[], None]) -> None:
    """Run ``work`` the first time ``name`` is asked for in this process (an exception is swallowed)."""
    if name in _DONE:
        return
    with _LOCK:
        if name in _DONE:
            return
        _DONE.add(name)
        state = random.getstate()  # the run seeds and restores the global PRNG; leave it as we found it
        try:
            work()
        except Exception:  # noqa: BLE001, S110 - an optimisation: the run does the same work if this failed
            pass
        finally:
            random.setstate(state)


def before_run(drive: Any, sdk: Callable[[bool], None]) -> None:
    """What a run of ``drive`` would set up on the loop's time, done now (once per process).

    ``drive.simloop_prepare`` when the drive names its own preparation, else ``sdk``: the SDK's import and
    first calls (`simloop.sim.warm_up_sdk`, passed in: this package runs below the Sim and never imports it),
    told whether the drive is ``async def`` (as `Sim.run` tells, to run it on a virtual-time loop).
    """
    prepare = getattr(drive, "simloop_prepare", None)
    if callable(prepare):
        prepare()
    else:
        sdk(inspect.iscoroutinefunction(drive))
