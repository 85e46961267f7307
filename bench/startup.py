"""What the first `Sim` run of a process costs simloop: fresh processes, CPU time, the SDK's own warm-up taken out.

Each process (a fresh interpreter: nothing imported, nothing cached) imports the SDK and simloop, makes on a
bare `httpx2.MockTransport` the SDK's first calls that `sim.run`'s once-per-process warm-up makes (a create,
a tool round trip, a stream, an async create: the SDK's lazily built schemas), runs `bench/overhead.py`'s
10-call loop bare a few times, then in a fresh `Sim` once (the process's first run: the warm-up,
`simloop._runtime.prepare`, and the first alias scan, `simloop._runtime.aliases`) and a few times more.
simloop's own part of the first run is the first `Sim` run's CPU less a warm one's: what a process pays once
for simloop, beyond the SDK's own first-time work.  ``--drive async`` does the same with the loop on the
async client (an ``async def`` drive; the bare side under ``asyncio.run``).  The process's CPU time (a `Sim`
runs the loop on a worker thread); the parts are timed where they run (the alias scan on the worker, with
its thread's CPU).

    python bench/startup.py [--processes 5] [--drive sync|async|both]    # the bar: simloop's part < 30 ms

The imports are reported apart: the SDK's (1-2 s of CPU) and simloop's own (some 0.3 s) are paid by any
process that imports them, whether it runs a `Sim` or not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CPU = time.process_time
WARM_RUNS = 5
BAR_MS = 30.0
FIELDS = {  # field -> what it is (the report's lines, in order)
    "sdk_import": "import anthropic, httpx2",
    "simloop_import": "import simloop (and the bench's loop)",
    "sdk_warm_up": "the SDK's first calls, bare (create, round trip, stream, async)",
    "bare_first": "bare loop, its first run",
    "bare_warm": "bare loop, warm (median)",
    "sim_first": "Sim run, the process's first",
    "sim_warm": "Sim run, warm (median)",
    "prepare": "  of the first: sim.run's warm-up (prepare.before_run)",
    "alias_scan": "  of the first: the alias scan (worker thread)",
    "own": "simloop's own part of the first run (first - warm)",
}


def _timed(owner: Any, attr: str, into: dict[str, float], key: str, clock: Callable[[], float]) -> None:
    """Wrap ``owner.attr`` so that its CPU (by ``clock``) adds up in ``into[key]``."""
    real = getattr(owner, attr)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return real(*args, **kwargs)
        finally:
            into[key] = into.get(key, 0.0) + clock() - start

    setattr(owner, attr, timed)


def _sdk_warm_up(overhead: Any) -> None:
    """The SDK's first calls on a bare transport: those `simloop.sim.warm_up_sdk` makes through a throwaway Sim."""
    import asyncio

    import anthropic
    import httpx2

    from simloop.protocol.render import Turn, render_sse

    handler = overhead.bare_handler()
    client = anthropic.Anthropic(api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    messages: list[Any] = [{"role": "user", "content": "Warm up."}]
    reply = client.messages.create(model="m", max_tokens=64, messages=messages, tools=overhead.TOOLS)
    messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b.id, "content": "x"} for b in reply.content if b.type == "tool_use"]}]
    client.messages.create(model="m", max_tokens=64, messages=messages, tools=overhead.TOOLS)
    events = b"".join(render_sse(Turn(content=[{"type": "text", "text": "ok"}], stop_reason="end_turn"),
                                 id="msg_s", model="m", input_tokens=10))

    def stream(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=events)

    client = anthropic.Anthropic(api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(stream)))
    with client.messages.stream(model="m", max_tokens=64, messages=messages, tools=overhead.TOOLS) as s:
        s.get_final_message()

    async def serve(request: httpx2.Request) -> httpx2.Response:
        return handler(request)  # type: ignore[no-any-return]

    async def call() -> None:
        aclient = anthropic.AsyncAnthropic(api_key="k", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(serve)))
        await aclient.messages.create(model="m", max_tokens=64, messages=messages[:1])

    asyncio.run(call())


def _async_runs(overhead: Any) -> tuple[Callable[[], object], Callable[[], object]]:
    """The bare and the simulated run of the 10-call loop on the async client (the same calls as the sync loop)."""
    import asyncio

    import anthropic
    import httpx2

    import simloop

    async def loop(client: anthropic.AsyncAnthropic) -> int:
        messages: list[Any] = [{"role": "user", "content": "Find the refund policy."}]
        for step in range(overhead.STEPS):
            reply = await client.messages.create(
                model="claude-sonnet-5", max_tokens=1024, messages=messages, tools=overhead.TOOLS)
            if reply.stop_reason != "tool_use":
                return step + 1
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "result"}
                for b in reply.content if b.type == "tool_use"]})
        return int(overhead.STEPS)

    handler = overhead.bare_handler()

    async def serve(request: httpx2.Request) -> httpx2.Response:
        return handler(request)  # type: ignore[no-any-return]

    def bare() -> int:
        client = anthropic.AsyncAnthropic(api_key="k", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(serve)))
        return asyncio.run(loop(client))

    def simulated() -> None:
        with simloop.Sim(overhead.SCENARIO) as sim:
            async def drive(sim: simloop.Sim) -> tuple[str, str]:
                await loop(sim.async_client)
                return ("final", "")

            sim.run(drive)

    return bare, simulated


def child(drive: str) -> dict[str, float]:
    """One fresh process's measures, in ms of CPU."""
    out: dict[str, float] = {}
    start = CPU()
    import anthropic  # noqa: F401
    import httpx2  # noqa: F401

    out["sdk_import"] = CPU() - start
    start = CPU()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import overhead

    import simloop._runtime.patches
    import simloop._sim.runner
    import simloop.sim

    out["simloop_import"] = CPU() - start
    bare: Callable[[], object]
    simulated: Callable[[], object]
    if drive == "async":
        bare, simulated = _async_runs(overhead)
    else:
        client = overhead.bare_client()
        bare, simulated = (lambda: overhead.loop(client)), overhead.sim_run
    start = CPU()
    _sdk_warm_up(overhead)
    out["sdk_warm_up"] = CPU() - start
    _timed(simloop._sim.runner, "before_run", out, "prepare", CPU)  # (sim.run calls it in the caller's thread)
    _timed(simloop._runtime.patches, "find_aliases", out, "alias_scan", time.thread_time)
    for name, run in (("bare", bare), ("sim", simulated)):
        start = CPU()
        run()
        out[name + "_first"] = CPU() - start
        warm = []
        for _ in range(WARM_RUNS):
            start = CPU()
            run()
            warm.append(CPU() - start)
        out[name + "_warm"] = statistics.median(warm)
    out["own"] = out["sim_first"] - out["sim_warm"]
    return {k: v * 1e3 for k, v in out.items()}


def measure(drive: str, processes: int) -> dict[str, list[float]]:
    """``processes`` fresh processes, one after the other; each field's values."""
    runs: dict[str, list[float]] = {k: [] for k in FIELDS}
    for _ in range(processes):
        done = subprocess.run([sys.executable, __file__, "--child", drive], capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"the measuring process failed:\n{done.stderr}")
        for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items():
            runs[k].append(v)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh processes a drive (medians printed)")
    parser.add_argument("--drive", choices=("sync", "async", "both"), default="both")
    parser.add_argument("--child", choices=("sync", "async"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    for drive in ("sync", "async") if args.drive == "both" else (args.drive,):
        runs = measure(drive, args.processes)
        print(f"{drive} drive, {args.processes} fresh processes, ms of CPU (median; min-max):")
        for k, label in FIELDS.items():
            values = runs[k]
            print(f"  {label:<66} {statistics.median(values):8.1f}  ({min(values):.1f}-{max(values):.1f})")
        own = statistics.median(runs["own"])
        print(f"  bar: simloop's own part of the first run < {BAR_MS:.0f} ms: {'met' if own < BAR_MS else 'not met'}")


if __name__ == "__main__":
    main()
