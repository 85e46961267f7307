"""How much the simulator adds to an SDK call: simulated API vs a bare httpx2.MockTransport.

Both sides make the same ``client.messages.create`` calls (a 10-step loop's
growing history, one call per step) with the real SDK; the bare side answers
a canned Message from `httpx2.MockTransport`, the simulated side runs the
whole simulator (validation, policy, rendering, transcript, virtual clock,
watchdog), a fresh `Sim` per 10-step run.

Single runs alternate, bare then simulated, so whatever else the machine is
doing hits both alike; the ratio is of the median run times, by the wall
clock and by this process's CPU time (which other processes on a busy machine
disturb much less; the process's, since a Sim runs the loop on a worker
thread).  Both sides make the same calls, so the ratio of run times is the
ratio of calls per second.

``--async-stream`` measures the async streaming path instead: the same 10-step loop on
``AsyncAnthropic`` with ``messages.stream``, an ``async def`` drive on ``sim.async_client`` (the Sim runs it on
its virtual-time event loop) against the bare SDK on an async `httpx2.MockTransport` serving the pre-rendered
SSE bytes under ``asyncio.run``.  ``--pydantic-ai`` runs the loop as a pydantic-ai ``Agent`` with
``AnthropicModel`` on the async client, on both sides (`bench/overhead_pai.py`).

    python bench/overhead.py [--pairs 400] [--async-stream | --pydantic-ai]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
from anthropic.types import MessageParam, ToolParam

import simloop
from simloop._runtime.realtime import REAL
from simloop.protocol.render import Turn, render_json, render_sse

STEPS = 10
MODEL = "claude-sonnet-5"  # what the loop asks for, and what both sides answer with (the real API echoes it)
TOOLS: list[ToolParam] = [{"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
SCENARIO = simloop.Scenario.model_validate(
    {
        "task": "Find the refund policy.",
        "tools": [{"name": "search"}],
        "model": [{"tool_use": [{"name": "search", "input": {"q": "refund"}}], "repeat": STEPS - 1}, {"end_turn": "ok"}],
    }
)


def loop(client: anthropic.Anthropic) -> int:
    """A 10-step conversation: the same calls on both sides (tool ids echo what the reply gave)."""
    messages: list[MessageParam] = [{"role": "user", "content": "Find the refund policy."}]
    for step in range(STEPS):
        reply = client.messages.create(model=MODEL, max_tokens=1024, messages=messages, tools=TOOLS)
        if reply.stop_reason != "tool_use":
            return step + 1
        dumped: list[Any] = [b.model_dump(exclude_none=True) for b in reply.content]  # as a bare loop might keep it
        messages.append({"role": "assistant", "content": dumped})
        messages.append(
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "result"} for b in reply.content
                if b.type == "tool_use"
            ]}
        )
    return STEPS


def turns_of_the_loop() -> list[tuple[str, Turn]]:
    """The 10-step loop's replies (message id, turn): nine tool calls, each with its own id, then an answer.

    The ids differ, as the real API's (and simloop's) do: a history holding one id twice is refused.
    """
    turns = [(f"msg_{i}", Turn(
        content=[{"type": "tool_use", "id": f"toolu_{i:02d}", "name": "search", "input": {"q": "refund"}}],
        stop_reason="tool_use",
    )) for i in range(1, STEPS)]
    return [*turns, ("msg_f", Turn(content=[{"type": "text", "text": "ok"}], stop_reason="end_turn"))]


def bodies_of_the_loop() -> list[bytes]:
    """The 10-step loop's replies as the API sends them (JSON)."""
    return [render_json(turn, id=id, model=MODEL, input_tokens=10) for id, turn in turns_of_the_loop()]


def streams_of_the_loop() -> list[bytes]:
    """The 10-step loop's replies as the API streams them (the SSE events of each, joined)."""
    return [b"".join(render_sse(turn, id=id, model=MODEL, input_tokens=10)) for id, turn in turns_of_the_loop()]


def bare_handler(bodies: list[bytes] | None = None) -> Callable[[httpx2.Request], httpx2.Response]:
    """A `httpx2.MockTransport` handler answering ``bodies`` in turn (default: the 10-step loop's), round and round."""
    served = bodies_of_the_loop() if bodies is None else bodies
    state = {"i": 0}

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = served[state["i"] % len(served)]
        state["i"] += 1
        return httpx2.Response(200, headers={"content-type": "application/json", "request-id": "req_1"}, content=body)

    return handler


def bare_client(bodies: list[bytes] | None = None) -> anthropic.Anthropic:
    """An SDK client on `httpx2.MockTransport` answering ``bodies`` in turn (default: the 10-step loop's)."""
    transport = httpx2.MockTransport(bare_handler(bodies))
    return anthropic.Anthropic(api_key="k", http_client=httpx2.Client(transport=transport))


async def stream_loop(client: anthropic.AsyncAnthropic) -> int:
    """`loop` on the async client, each call streamed (``messages.stream``, the final message accumulated)."""
    messages: list[MessageParam] = [{"role": "user", "content": "Find the refund policy."}]
    for step in range(STEPS):
        async with client.messages.stream(model=MODEL, max_tokens=1024, messages=messages,
                                          tools=TOOLS) as stream:
            reply = await stream.get_final_message()
        if reply.stop_reason != "tool_use":
            return step + 1
        dumped: list[Any] = [b.model_dump(exclude_none=True) for b in reply.content]
        messages.append({"role": "assistant", "content": dumped})
        messages.append(
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "result"} for b in reply.content
                if b.type == "tool_use"
            ]}
        )
    return STEPS


def bare_async_stream_client() -> anthropic.AsyncAnthropic:
    """An async SDK client on `httpx2.MockTransport` streaming the 10-step loop's replies in turn."""
    served = streams_of_the_loop()
    state = {"i": 0}

    async def handler(request: httpx2.Request) -> httpx2.Response:
        body = served[state["i"] % len(served)]
        state["i"] += 1
        return httpx2.Response(200, headers={"content-type": "text/event-stream", "request-id": "req_1"}, content=body)

    return anthropic.AsyncAnthropic(api_key="k", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))


def bare_async_stream_run(client: anthropic.AsyncAnthropic) -> int:
    """One streamed 10-step run on the bare async client, on a fresh event loop (as a Sim's run has)."""
    return asyncio.run(stream_loop(client))


def sim_async_stream_run() -> int:
    """One streamed 10-step run in a fresh Sim, an ``async def`` drive on ``sim.async_client``."""
    with simloop.Sim(SCENARIO) as sim:
        out: dict[str, int] = {}

        async def drive(sim: simloop.Sim) -> tuple[str, str]:
            out["calls"] = await stream_loop(sim.async_client)
            return ("final", "")

        sim.run(drive)
    return out["calls"]


def sim_run() -> int:
    """One 10-step run in a fresh Sim; returns the calls made."""
    with simloop.Sim(SCENARIO) as sim:
        out: dict[str, int] = {}

        def drive(sim: simloop.Sim) -> tuple[str, str]:
            out["calls"] = loop(sim.client)
            return ("final", "")

        sim.run(drive)
    return out["calls"]


@dataclass
class Paired:
    """Median times of one 10-step run, bare and simulated, by the wall clock and by CPU time."""

    bare_wall: float
    sim_wall: float
    bare_cpu: float
    sim_cpu: float
    pairs: int

    @property
    def ratio(self) -> float:
        """Simulated calls per second over bare calls per second (wall clock)."""
        return self.bare_wall / self.sim_wall

    @property
    def cpu_ratio(self) -> float:
        return self.bare_cpu / self.sim_cpu


def paired(pairs: int, *, drive: str = "sync") -> Paired:
    """Alternate single 10-step runs, bare then simulated, ``pairs`` times (after a warm-up)."""
    sides: tuple[tuple[str, Callable[[], int]], ...]
    if drive == "async-stream":
        aclient = bare_async_stream_client()
        sides = (("bare", lambda: bare_async_stream_run(aclient)), ("sim", sim_async_stream_run))
    elif drive == "pydantic-ai":
        import overhead_pai

        bare, simulated = overhead_pai.sides()
        sides = (("bare", bare), ("sim", simulated))
    else:
        client = bare_client()
        sides = (("bare", lambda: loop(client)), ("sim", sim_run))
    for _ in range(10):
        for _side, run in sides:
            assert run() == STEPS
    times: dict[str, list[float]] = {"bare_wall": [], "sim_wall": [], "bare_cpu": [], "sim_cpu": []}
    for _ in range(pairs):
        for side, run in sides:
            wall, cpu = REAL.perf_counter(), time.process_time()
            run()
            times[side + "_cpu"].append(time.process_time() - cpu)
            times[side + "_wall"].append(REAL.perf_counter() - wall)
    return Paired(**{k: statistics.median(v) for k, v in times.items()}, pairs=pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400, help="alternating bare and simulated 10-step runs")
    parser.add_argument("--async-stream", action="store_true",
                        help="the async streaming path: AsyncAnthropic messages.stream, an async def drive")
    parser.add_argument("--pydantic-ai", action="store_true",
                        help="the loop as a pydantic-ai Agent with AnthropicModel (bench/overhead_pai.py)")
    args = parser.parse_args()
    drive = "async-stream" if args.async_stream else "pydantic-ai" if args.pydantic_ai else "sync"
    r = paired(args.pairs, drive=drive)
    per_call = 1e6 / STEPS
    target = 0.90 if drive == "sync" else 0.95
    if drive != "sync":
        print({"async-stream": "async streaming path: AsyncAnthropic messages.stream, an async def drive",
               "pydantic-ai": "a pydantic-ai Agent with AnthropicModel on the async client"}[drive])
    print(f"bare MockTransport : {r.bare_wall * per_call:6.0f} us a call ({r.bare_cpu * per_call:.0f} us CPU)")
    print(f"simloop simulator  : {r.sim_wall * per_call:6.0f} us a call ({r.sim_cpu * per_call:.0f} us CPU), "
          f"a fresh Sim per {STEPS}-step run")
    print(f"ratio              : {r.ratio:6.1%} of bare throughput by the wall clock, {r.cpu_ratio:.1%} by CPU time "
          f"(median of {r.pairs} alternating runs a side; target >= {target:.0%})")


if __name__ == "__main__":
    main()
