"""What pieces of a simulated run cost in situ: thread CPU around single functions, no profiler.

A profiler inflates many small calls, and a tight loop replaying one piece runs on warm caches (a
simloop call costs some 50 µs replayed, 87 µs between the SDK's own work).  This times the pieces of
the real `bench/overhead.py` run (a fresh `Sim` per 10-call run, alternating with the bare loop) with
``time.thread_time_ns`` wrappers (each costs ~0.5 µs, and a wrapped piece inside another inflates the
outer one: time a few at a time), and prints each piece's CPU per run and per call.

    python bench/insitu.py [--runs 300] [--pieces transport,server,validator,response,headers]
    python bench/insitu.py --pieces sim_init,client,close,run,drive    # the run's fixed costs
    python bench/insitu.py --pieces patched,running,watching,guarding,prng,threads_left   # the run machinery
    python bench/insitu.py --throughput 4 --pieces check,invariants,view   # verify's examples: what check costs

With ``--throughput N`` the pieces are timed in `bench/detect.py`'s throughput line instead (N chunks of 25 full
`verify` examples of `examples.correct_sync`, each followed by its bare run), per example; ``invariants`` times
each invariant of the catalogue (``inv.ID``: the first to read the shared view builds it).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import random

import overhead

import simloop._campaign.world
import simloop._sim.clients
import simloop._sim.guard
import simloop._sim.runner
import simloop.generated
import simloop.invariants
import simloop.models
import simloop.sim
import simloop.tools
from simloop._runtime.clock import VirtualClock
from simloop._runtime.watchdog import Watchdog
from simloop.protocol import validate
from simloop.wire import answer, bodies, fastlane, server, transport

CPU: dict[str, int] = defaultdict(int)
CALLS: dict[str, int] = defaultdict(int)

#: name -> (owner, attribute): the pieces that can be timed
PIECES: dict[str, tuple[Any, str]] = {
    "transport": (transport.SimTransport, "handle_request"),  # the whole simulated call
    "atransport": (transport.AsyncSimTransport, "handle_async_request"),  # the same, async (--async-stream)
    "render_sse": (answer, "render_sse"),  # a streamed reply's events
    "event_loop": (VirtualClock, "new_event_loop"),
    "server": (server.SimServer, "handle"),
    "validator": (validate.ConversationValidator, "validate"),
    "parser": (bodies._BodyParser, "parse"),
    "response": (transport, "_response"),
    "headers": (transport, "_headers"),
    "render": (answer, "render_message"),  # the streamed and OpenAI replies'
    "render_json": (answer, "render_message_json"),  # a JSON reply's message and body
    "turn": (answer, "_turn"),
    "deliver": (server.SimServer, "deliver"),
    # the fast lane (simloop.wire.fastlane) and the steps of an accepted request's reply
    "fast": (server.SimServer, "_fast"),
    "admit": (fastlane.Lane, "admit"),
    "offer": (server, "offer"),
    "reply": (server.SimServer, "_reply"),
    "policy": (simloop.models.Script, "reply"),
    "on_request": (simloop._sim.guard.Guard, "on_request"),
    "numbers": (bodies.CallNumbers, "number"),
    "compose": (server, "compose"),
    "planned": (server, "planned"),
    "make_turn": (server, "make_turn"),
    "sim_init": (simloop.sim.Sim, "__init__"),
    "client": (simloop._sim.clients, "_sdk_client"),
    "http_client": (simloop._sim.clients, "_http_client"),
    "close": (simloop.sim.Sim, "close"),
    "run": (simloop.sim.Sim, "run"),  # the caller's thread only (the worker's CPU is not in it)
    "worker_run": (simloop._sim.runner.Runner, "run"),  # the worker's share, the drive included
    "drive": (simloop._sim.runner.Runner, "_drive"),
    "threads_left": (simloop._sim.runner, "threads_left"),
    "record": (simloop._sim.runner.Runner, "returned"),
    # a verify example's own pieces (--throughput)
    "check": (simloop.sim.Sim, "check"),
    "view": (simloop.invariants._base, "_build_view"),
    "tools": (simloop.tools.ToolBox, "run"),
    "ledger": (simloop.tools.ToolBox, "_begin"),
    "generated": (simloop.generated.GeneratedModel, "reply"),
    "world": (simloop._campaign.world.World, "draw"),
}

#: name -> (owner, attribute): context managers of the run machinery, timed on entry and exit (name.enter, name.exit)
BLOCKS: dict[str, tuple[Any, str]] = {
    "patched": (VirtualClock, "patched"),  # the clock's patches on and off
    "running": (simloop._sim.runner, "running"),  # the process tracking (and the fake key in the environment)
    "watching": (Watchdog, "watching"),
    "guarding": (simloop._sim.runner, "guarding"),  # the network guard
}


class _Catalogue:
    """The invariants' catalogue as an owner of attributes, for `_wrap`."""

    def __getattr__(self, name: str) -> Any:
        return simloop.invariants.CATALOGUE[name]

    def __setattr__(self, name: str, value: Any) -> None:
        simloop.invariants.CATALOGUE[name] = value


class _TimedBlock:
    def __init__(self, name: str, block: Any) -> None:
        self.name, self.block = name, block

    def __enter__(self) -> Any:
        start = time.thread_time_ns()
        try:
            return self.block.__enter__()
        finally:
            CPU[self.name + ".enter"] += time.thread_time_ns() - start
            CALLS[self.name + ".enter"] += 1

    def __exit__(self, *exc: object) -> Any:
        start = time.thread_time_ns()
        try:
            return self.block.__exit__(*exc)
        finally:
            CPU[self.name + ".exit"] += time.thread_time_ns() - start
            CALLS[self.name + ".exit"] += 1


def _wrap(name: str) -> None:
    if name == "invariants":  # each invariant of the catalogue, as `check` calls it
        for invariant in list(simloop.invariants.CATALOGUE):
            PIECES[f"inv.{invariant}"] = (_Catalogue(), invariant)
            _wrap(f"inv.{invariant}")
        return
    if name == "prng":  # the global PRNG saved, seeded and restored around each run
        for attr in ("getstate", "seed", "setstate"):
            PIECES[f"prng.{attr}"] = (random, attr)  # (the module Sim.run calls)
            _wrap(f"prng.{attr}")
        return
    if name in BLOCKS:
        owner, attr = BLOCKS[name]
        block: Callable[..., Any] = getattr(owner, attr)
        setattr(owner, attr, lambda *args, **kwargs: _TimedBlock(name, block(*args, **kwargs)))
        return
    owner, attr = PIECES[name]
    real: Callable[..., Any] = getattr(owner, attr)
    if inspect.iscoroutinefunction(real):  # (timed around its one step: a reply with no latency never waits)

        async def atimed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time_ns()
            try:
                return await real(*args, **kwargs)
            finally:
                CPU[name] += time.thread_time_ns() - start
                CALLS[name] += 1

        setattr(owner, attr, atimed)
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return real(*args, **kwargs)
        finally:
            CPU[name] += time.thread_time_ns() - start
            CALLS[name] += 1

    setattr(owner, attr, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="alternating bare and simulated 10-call runs")
    parser.add_argument("--pieces", default="transport,server,validator,response,headers",
                        help=f"comma-separated, of: {', '.join([*PIECES, *BLOCKS, 'prng'])}")
    parser.add_argument("--throughput", type=int, default=0, metavar="CHUNKS",
                        help="time the pieces in detect.py's throughput line instead, per example")
    parser.add_argument("--async-stream", action="store_true",
                        help="the async streaming run of overhead.py --async-stream instead (pieces: atransport, ...)")
    parser.add_argument("--pydantic-ai", action="store_true",
                        help="the pydantic-ai run of overhead.py --pydantic-ai instead")
    args = parser.parse_args()
    for name in args.pieces.split(","):
        _wrap(name)
    if args.throughput:
        _throughput(args.throughput)
        return
    bare_run: Callable[[], int]
    sim_run: Callable[[], int]
    if args.pydantic_ai:
        import overhead_pai

        bare_run, sim_run = overhead_pai.sides()
    elif args.async_stream:
        aclient = overhead.bare_async_stream_client()
        bare_run, sim_run = (lambda: overhead.bare_async_stream_run(aclient)), overhead.sim_async_stream_run
    else:
        client = overhead.bare_client()
        bare_run, sim_run = (lambda: overhead.loop(client)), overhead.sim_run
    for _ in range(20):
        bare_run(), sim_run()
    CPU.clear()
    CALLS.clear()
    bare: list[float] = []
    simulated: list[float] = []
    for _ in range(args.runs):
        start = time.process_time()
        bare_run()
        bare.append(time.process_time() - start)
        start = time.process_time()
        sim_run()
        simulated.append(time.process_time() - start)
    b, s = statistics.median(bare) * 1e6, statistics.median(simulated) * 1e6
    print(f"process CPU per 10-call run (median): bare {b:.0f} us, simulated {s:.0f} us (wrappers included), "
          f"ratio {b / s:.1%}")
    for name, ns in sorted(CPU.items(), key=lambda item: -item[1]):
        per_run = ns / args.runs / 1000
        print(f"  {name:12s} {per_run:8.1f} us a run  {per_run / overhead.STEPS:7.1f} us a call  "
              f"{ns / CALLS[name] / 1000:7.1f} us each ({CALLS[name] / args.runs:.1f} a run)")


def _throughput(chunks: int) -> None:
    """The pieces' CPU per full `verify` example of `detect.throughput` (the warm-up chunk included)."""
    import detect

    runs = [0]
    init = simloop.sim.Sim.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        runs[0] += 1
        init(self, *args, **kwargs)

    simloop.sim.Sim.__init__ = counted  # type: ignore[method-assign]
    result = detect.throughput(chunks=chunks)
    n = max(runs[0], 1)
    print(f"{n} examples; verify at {result.cpu_ratio:.1%} of bare by CPU time (wrappers included)")
    for name, ns in sorted(CPU.items(), key=lambda item: -item[1]):
        print(f"  {name:24s} {ns / n / 1000:8.1f} us an example  ({CALLS[name] / n:.1f} calls)")


if __name__ == "__main__":
    main()
