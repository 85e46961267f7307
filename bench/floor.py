"""What the speed bars leave for simloop: each ratio with simloop's own work taken out, beside the real one.

Issue 44's bars are ratios against the bare SDK.  This measures how far each could rise if a part of
simloop cost nothing, so that what the bar allows the rest is a number, not a guess:

``overhead`` (the bars: 90% of the bare 10-call run, a fresh `Sim` per run; 95% for the async drives) runs the
bare loop on `httpx2.MockTransport` before each of: the full simulated run; the same fresh-`Sim` run whose
simulator is replaced by a transport serving the plans the simulator made for that run (captured beforehand, and
handed over by the transport's own code): every part of a run but the per-call simulator (the `Sim`, its client,
the worker thread, the clock, the watchdog, the guards, the tools, `close`); and, for the sync drive, the same
run on a minimal simulator (`_minimal`: the whole body parsed and checked for roles, pairing and unique ids, the
reply rendered; nothing recorded).  Each simulated run follows a bare one, as in `bench/overhead.py`: a run
right after one of its own kind costs some 0.3-0.5 ms less (caches), which a rotation of the contenders would
give some of them.  What the bar leaves each simulated call follows.  ``--drive`` picks the sync drive, the
async streaming one (``overhead.py --async-stream``) or pydantic-ai (``--pydantic-ai``).

``verify`` (the bar: 75% of the bare limit per example) alternates chunks of the bare loop of
`bench/detect.py`'s throughput plan, of `verify` itself, and of `verify` whose example draws the world and
one reply tape as a verify example does and then runs the bare loop instead of a `Sim`: Hypothesis's
engine and verify's own per-example work, nothing of the simulator, the tools' ledger or the invariants.
What 75% leaves those follows.

The verify chunks run blocked (25 examples of a kind in a row), where `bench/detect.py --throughput` runs each
bare run right after its example: a run right after one of another kind costs 0.3-0.5 ms more, on both sides,
so detect's ratio reads higher than the one printed here.  The budget lines (differences) move much less.

    python bench/floor.py [overhead|verify|both] [--drive sync|async-stream|pydantic-ai] [--pairs 200] [--chunks 6]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2
import overhead
from pydantic_core import from_json, to_json

import simloop
from simloop.wire import transport
from simloop.wire.planned import Planned
from simloop.wire.server import SimServer

CPU = time.process_time  # the process's: a Sim runs the loop on a worker thread


def median_cpu(runs: dict[str, Callable[[], object]], rounds: int, *,
               after: Callable[[], object] | None = None) -> dict[str, float]:
    """Median CPU seconds of each run, the runs alternating ``rounds`` times (after a warm-up), each first in turn;
    with ``after``, each run right after one of it, timed as ``"bare"`` (as `bench/overhead.py` alternates them).

    A run costs some 0.3-0.5 ms less right after a run of its own kind (caches; the loop on another thread):
    rotating the order gives each run each predecessor equally often.  Fair among runs of different kinds (the
    peers); runs of one kind (variants of a `Sim` run) find each other's caches warm: measure them ``after`` a bare one.
    """
    for _ in range(10):
        for run in runs.values():
            if after is not None:
                after()
            run()
    times: dict[str, list[float]] = {name: [] for name in ([] if after is None else ["bare"]) + list(runs)}
    order = list(runs)
    for n in range(rounds):  # in turn each run first: each follows each other one as often (what ran before matters)
        for name in order[n % len(order):] + order[: n % len(order)]:
            if after is not None:
                start = CPU()
                after()
                times["bare"].append(CPU() - start)
            start = CPU()
            runs[name]()
            times[name].append(CPU() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _minimal(self: transport.SimTransport, request: httpx2.Request) -> httpx2.Response:
    """A minimal simulator, the calibration of what the wire work costs in situ: the whole body parsed, roles
    alternating, each tool_result answering a tool_use of the message before, tool_use ids unique, the next reply
    (`overhead.py`'s: nine calls, then an answer) rendered with ids drawn and the usage counted; no transcript,
    budgets, clock, policy or lane."""
    doc = from_json(request.read())
    seen: set[str] = set()
    role: str | None = None
    calls: list[str] = []
    for message in doc["messages"]:
        if message["role"] == role:
            return httpx2.Response(400, request=request)
        role, content = message["role"], message["content"]
        if type(content) is list:
            answered = {b["tool_use_id"] for b in content if b["type"] == "tool_result"}
            if role == "user" and answered != set(calls):
                return httpx2.Response(400, request=request)
            calls = [b["id"] for b in content if b["type"] == "tool_use"]
            if seen.intersection(calls):
                return httpx2.Response(400, request=request)
            seen.update(calls)
    step = (len(doc["messages"]) + 1) // 2
    draw = _RNG.getrandbits
    if step < overhead.STEPS:
        reply: list[Any] = [{"type": "tool_use", "id": f"toolu_01{draw(88):022x}", "name": "search",
                             "input": {"q": "refund"}}]
    else:
        reply = [{"type": "text", "text": "ok"}]
    body = to_json({"id": f"msg_01{draw(88):022x}", "type": "message", "role": "assistant", "model": doc["model"],
                    "content": reply, "stop_reason": "tool_use" if step < overhead.STEPS else "end_turn",
                    "stop_sequence": None, "usage": {"input_tokens": len(request.content) // 4, "output_tokens": 19}})
    response = httpx2.Response(200, headers=[("content-type", "application/json"), ("request-id", "req_1")],
                               stream=httpx2.ByteStream(body), request=request)
    response._content = body  # as the simulator hands its bytes over (transport._response)
    return response


_RNG = random.Random(0)


def _plans(run: Callable[[], object]) -> list[Planned]:
    """The plans the simulator makes in one run of ``run`` (after a run that warms the SDK up through it)."""
    real = SimServer.handle
    plans: list[Planned] = []

    def handle(self: SimServer, *args: Any, **kwargs: Any) -> Planned:
        planned = real(self, *args, **kwargs)
        plans.append(dataclasses.replace(planned, record=None))
        return planned

    run()
    SimServer.handle = handle  # type: ignore[method-assign]
    try:
        run()
    finally:
        SimServer.handle = real  # type: ignore[method-assign]
    return plans


def _served(plans: list[Planned]) -> tuple[Callable[..., httpx2.Response], Callable[..., Any]]:
    """Sync and async transport handlers that hand the client ``plans`` in turn, as the simulator's transports do."""
    at = itertools.cycle(plans)

    def handle(self: transport.SimTransport, request: httpx2.Request) -> httpx2.Response:
        request.read()
        planned = next(at)
        return transport._response(request, planned, transport._content(request, planned, transport._iter_events))

    async def ahandle(self: transport.AsyncSimTransport, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        planned = next(at)
        return transport._response(request, planned, transport._content(request, planned, transport._aiter_events))

    return handle, ahandle


def served_by(run: Callable[[], object], handle: Callable[..., httpx2.Response],
              ahandle: Callable[..., Any] | None = None) -> Callable[[], object]:
    """``run`` (a fresh-`Sim` run) with its simulator replaced by ``handle`` (and ``ahandle`` for async clients)."""
    sync, asynchronous = transport.SimTransport.handle_request, transport.AsyncSimTransport.handle_async_request

    def replaced() -> object:
        transport.SimTransport.handle_request = handle  # type: ignore[method-assign]
        if ahandle is not None:
            transport.AsyncSimTransport.handle_async_request = ahandle  # type: ignore[method-assign]
        try:
            return run()
        finally:
            transport.SimTransport.handle_request = sync  # type: ignore[method-assign]
            transport.AsyncSimTransport.handle_async_request = asynchronous  # type: ignore[method-assign]

    return replaced


def overhead_floor(pairs: int, drive: str = "sync") -> None:
    bare: Callable[[], object]
    simulated: Callable[[], object]
    if drive == "pydantic-ai":
        import overhead_pai

        bare, simulated = overhead_pai.sides()
    elif drive == "async-stream":
        aclient = overhead.bare_async_stream_client()
        bare, simulated = (lambda: overhead.bare_async_stream_run(aclient)), overhead.sim_async_stream_run
    else:
        client = overhead.bare_client()
        bare, simulated = (lambda: overhead.loop(client)), overhead.sim_run
    runs = {"sim": simulated, "floor": served_by(simulated, *_served(_plans(simulated)))}
    if drive == "sync":
        runs["minimal"] = served_by(simulated, _minimal)
    t = median_cpu(runs, pairs, after=bare)
    steps, bar = overhead.STEPS, 0.90 if drive == "sync" else 0.95
    allowed = t["bare"] / bar
    print(f"overhead ({drive}), CPU per {steps}-call run (median of {pairs} rounds, each run after a bare one):")
    print(f"  bare SDK                          {t['bare'] * 1e6:7.0f} us")
    print(f"  fresh Sim, simulator taken out    {t['floor'] * 1e6:7.0f} us  ({t['bare'] / t['floor']:.1%} of bare)")
    if "minimal" in t:
        print(f"  fresh Sim, a minimal simulator    {t['minimal'] * 1e6:7.0f} us  ({t['bare'] / t['minimal']:.1%} of bare)")
    print(f"  fresh Sim, simulated              {t['sim'] * 1e6:7.0f} us  ({t['bare'] / t['sim']:.1%} of bare)")
    print(f"  {bar:.0%} allows {allowed * 1e6:.0f} us a run: {(allowed - t['floor']) * 1e6 / steps:.0f} us a simulated "
          f"call; the simulator takes {(t['sim'] - t['floor']) * 1e6 / steps:.0f} us a call")


def verify_floor(chunks: int, examples: int = 25) -> None:
    import detect

    from simloop._campaign import engine

    loop = importlib.import_module("examples.correct_sync")
    plan = detect.throughput_plan()
    real_run_draw, real_play, real_run = engine._run_draw, engine.Campaign._play, engine.Campaign._run
    in_run: list[Any] = []  # the strategies one example draws while its run plays (the replies' tape, the faults)
    playing = [False]
    seen: list[Any] = []

    def logging_draw(data: Any) -> Any:
        draw = real_run_draw(data)

        def logged(strategy: Any) -> Any:
            if playing[0]:
                in_run.append(strategy)
            return draw(strategy)
        return logged

    def play(self: Any, run: Any) -> Any:
        playing[0] = True
        try:
            return real_play(self, run)
        finally:
            playing[0] = False

    engine._run_draw, engine.Campaign._play = logging_draw, play  # type: ignore[method-assign]
    try:
        with detect._Counter(after=seen.append):
            simloop.verify(loop.drive, limits=detect.LIMITS, plan=plan, max_examples=1, seed=0)
    finally:
        engine._run_draw, engine.Campaign._play = real_run_draw, real_play  # type: ignore[method-assign]
    bare = detect.bare_loop(seen[0])  # the example's very requests, made bare

    def floor_run(self: Any, data: Any, strategy: Any) -> None:
        """A verify example without its Sim: the world and the run's draws, then the bare loop."""
        draw = real_run_draw(data)
        self.world.draw(draw, strategy)
        for strategy_in_run in in_run:
            draw(strategy_in_run)
        bare()
        tally = self.tally
        tally.examples += 1
        tally.reached = tally.asked = tally.ran = tally.known = tally.examples  # (the runs are the bare loop's)

    def verify_chunk() -> None:
        simloop.verify(loop.drive, limits=detect.LIMITS, plan=plan, max_examples=examples, seed=seed[0])

    def floor_chunk() -> None:
        engine.Campaign._run = floor_run  # type: ignore[method-assign]
        try:
            verify_chunk()
        finally:
            engine.Campaign._run = real_run  # type: ignore[method-assign]

    def bare_chunk() -> None:
        for _ in range(examples):
            bare()

    seed = [0]
    times: dict[str, list[float]] = {"bare": [], "verify": [], "floor": []}
    runs = {"bare": bare_chunk, "verify": verify_chunk, "floor": floor_chunk}
    for chunk in range(chunks + 1):  # chunk 0 warms up
        seed[0] = chunk
        for name, run in runs.items():
            start = CPU()
            run()
            if chunk:
                times[name].append((CPU() - start) / examples)
    t = {name: statistics.median(v) for name, v in times.items()}
    allowed = t["bare"] / 0.75
    print(f"verify, CPU per 10-call example (median of {chunks} alternating chunks of {examples}):")
    print(f"  bare SDK loop                     {t['bare'] * 1e6:7.0f} us")
    print(f"  verify, Sim taken out             {t['floor'] * 1e6:7.0f} us  ({t['bare'] / t['floor']:.1%} of bare): "
          "Hypothesis's engine, the world's draws, verify's own work")
    print(f"  verify                            {t['verify'] * 1e6:7.0f} us  ({t['bare'] / t['verify']:.1%} of bare)")
    print(f"  75% allows {allowed * 1e6:.0f} us an example: {(allowed - t['floor']) * 1e6:.0f} us for the Sim, "
          f"the simulator, the tools and the invariants; they take {(t['verify'] - t['floor']) * 1e6:.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", default="both", choices=("overhead", "verify", "both"))
    parser.add_argument("--drive", default="sync", choices=("sync", "async-stream", "pydantic-ai"),
                        help="the overhead drive: overhead.py's sync run, --async-stream or --pydantic-ai")
    parser.add_argument("--pairs", type=int, default=200, help="alternating rounds of the overhead runs")
    parser.add_argument("--chunks", type=int, default=6, help="alternating chunks of 25 verify examples")
    args = parser.parse_args()
    if args.which in ("overhead", "both"):
        overhead_floor(args.pairs, args.drive)
    if args.which in ("verify", "both"):
        verify_floor(args.chunks)


if __name__ == "__main__":
    main()
