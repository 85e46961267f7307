"""How much the simulator adds to an SDK call: simulated API vs a bare httpx2.MockTransport.

Both sides make the same ``client.messages.create`` calls (a 10-step loop's
growing history, one call per step) with the real SDK; the bare side answers
a canned Message from `httpx2.MockTransport`, the simulated side runs the
whole simulator (validation, policy, rendering, transcript, virtual clock),
a fresh `Sim` per 10-step run.  Rounds alternate between the two so machine
noise hits both alike; the result is the ratio of calls per second.

    python bench/overhead.py [--rounds 7] [--runs 30] [--paired 300]

``--paired N`` also alternates single 10-step runs N times (bare, then sim) and
reports the ratio of the median run times: the same calls, sliced finer, so a
busy shared machine blurs it much less than whole rounds.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import anthropic
import httpx2

import simloop
from simloop.clock import REAL
from simloop.wire.render import Turn, render_json

STEPS = 10
TOOLS = [{"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
SCENARIO = simloop.Scenario.model_validate(
    {
        "task": "Find the refund policy.",
        "tools": [{"name": "search"}],
        "model": [{"tool_use": [{"name": "search", "input": {"q": "refund"}}], "repeat": STEPS - 1}, {"end_turn": "ok"}],
    }
)


def loop(client: anthropic.Anthropic) -> int:
    """A 10-step conversation: the same calls on both sides (tool ids echo what the reply gave)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the refund policy."}]
    for step in range(STEPS):
        reply = client.messages.create(model="claude-sonnet-5", max_tokens=1024, messages=messages, tools=TOOLS)
        if reply.stop_reason != "tool_use":
            return step + 1
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        messages.append(
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": "result"} for b in reply.content
                if b.type == "tool_use"
            ]}
        )
    return STEPS


def bare_client() -> anthropic.Anthropic:
    tool_turn = Turn(
        content=[{"type": "tool_use", "id": "toolu_01", "name": "search", "input": {"q": "refund"}}], stop_reason="tool_use"
    )
    final = Turn(content=[{"type": "text", "text": "ok"}], stop_reason="end_turn")
    bodies = [render_json(tool_turn, id=f"msg_{i}", model="m", input_tokens=10) for i in range(STEPS - 1)]
    bodies.append(render_json(final, id="msg_f", model="m", input_tokens=10))
    state = {"i": 0}

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = bodies[state["i"] % STEPS]
        state["i"] += 1
        return httpx2.Response(200, headers={"content-type": "application/json", "request-id": "req_1"}, content=body)

    return anthropic.Anthropic(api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


def time_bare(runs: int) -> float:
    client = bare_client()
    start = REAL.perf_counter()
    calls = sum(loop(client) for _ in range(runs))
    return calls / (REAL.perf_counter() - start)


def time_sim(runs: int) -> float:
    calls = 0
    elapsed = 0.0
    for _ in range(runs):
        start = REAL.perf_counter()
        calls += sim_run()
        elapsed += REAL.perf_counter() - start
    return calls / elapsed


def sim_run() -> int:
    """One 10-step run in a fresh Sim; returns the calls made."""
    with simloop.Sim(SCENARIO) as sim:
        out: dict[str, int] = {}

        def drive(sim: simloop.Sim) -> tuple[str, str]:
            out["calls"] = loop(sim.client)
            return ("final", "")

        sim.run(drive)
    return out["calls"]


def paired_ratio(runs: int) -> float:
    """Median bare run time over median sim run time, single runs alternating (both make the same calls)."""
    client = bare_client()
    bare: list[float] = []
    sim: list[float] = []
    for _ in range(runs):
        start = REAL.perf_counter()
        loop(client)
        bare.append(REAL.perf_counter() - start)
        start = REAL.perf_counter()
        sim_run()
        sim.append(REAL.perf_counter() - start)
    return statistics.median(bare) / statistics.median(sim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=30, help="10-step runs per round and side")
    parser.add_argument("--paired", type=int, default=0, help="also alternate this many single runs (see above)")
    args = parser.parse_args()
    time_bare(3), time_sim(3)  # warm up imports and caches
    bare, sim = [], []
    for _ in range(args.rounds):
        bare.append(time_bare(args.runs))
        sim.append(time_sim(args.runs))
    b, s = statistics.median(bare), statistics.median(sim)
    print(f"bare MockTransport : {b:8.0f} SDK calls/s  (median of {args.rounds} rounds x {args.runs * STEPS} calls)")
    print(f"simloop simulator  : {s:8.0f} SDK calls/s  (a fresh Sim per {STEPS}-step run)")
    print(f"ratio              : {s / b:8.1%} of bare throughput (target >= 85%)")
    # Each sim round against the bare round just before it: the spread shows how noisy the machine was.
    paired = sorted(x / y for x, y in zip(sim, bare, strict=True))
    print(f"per-round ratios   : {paired[0]:8.1%} min, {statistics.median(paired):.1%} median, {paired[-1]:.1%} max")
    if args.paired:
        print(f"paired single runs : {paired_ratio(args.paired):8.1%} (median run times, {args.paired} pairs)")


if __name__ == "__main__":
    main()
