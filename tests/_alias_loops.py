"""Loops that read the clock through names bound at import, as users write them (``from time import ...``).

Imported before any Sim runs, so the names hold the real functions, not simloop's: the run has to find
and rebind them (docs/design.md, Virtual time).
"""

from __future__ import annotations

from datetime import datetime
from time import monotonic, perf_counter, sleep
from typing import Any

from simloop import Outcome, Sim

BACKOFF_S = 60.0


def polite_drive(sim: Sim) -> Outcome:
    """Waits ``BACKOFF_S`` through ``sleep`` after every tool round (a rate limit), stamping the clock."""
    stamps: list[tuple[float, float, datetime]] = []
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(10):
        stamps.append((monotonic(), perf_counter(), datetime.now()))
        reply = sim.client.messages.create(model=sim.model, max_tokens=256, messages=messages, tools=sim.tool_schemas)
        if reply.stop_reason != "tool_use":
            sim.store["stamps"] = stamps
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input, tool_use_id=b.id)}
            for b in reply.content if b.type == "tool_use"
        ]})
        sleep(BACKOFF_S)
    return Outcome("max_steps", "no answer after 10 calls")


def checks_after_the_call_drive(sim: Sim) -> Outcome:
    """Defect: reads the deadline through ``monotonic`` but only after each model call, so a call starts late."""
    deadline_s = sim.limits.deadline_s or 300.0
    started = monotonic()
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(sim.limits.max_steps or 10):
        reply = sim.client.messages.create(model=sim.model, max_tokens=256, messages=messages, tools=sim.tool_schemas)
        if monotonic() - started >= deadline_s:  # BUG: the call above may already have started past the deadline
            return Outcome("deadline", f"deadline of {deadline_s:g}s reached")
        if reply.stop_reason != "tool_use":
            return Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input, tool_use_id=b.id)}
            for b in reply.content if b.type == "tool_use"
        ]})
    return Outcome("max_steps", "step cap reached")
