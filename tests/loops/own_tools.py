"""A loop with tools of its own (not simloop's default ``search`` and ``send_email``), written from the README.

It sends its own tool definitions (``lookup_order``, ``issue_refund``) and runs each call through
``sim.run_tool`` by name and input.  Verified without declaring those tools, every call answers
``UnknownToolError``: ``verify`` says so (issue 31 item 6).  Declared (``verify(tools=...)``, ``--tools
tests/loops/own_tools.yaml``), the calls run.  ``escapes`` is its one-bug twin: a tool's exception leaves the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic

import simloop
from tests.loops.plain_loop import run_agent

#: The tools file that declares this loop's tools (the scenario's tools: format).
TOOLS_FILE = Path(__file__).with_name("own_tools.yaml")
#: The loop's own tool definitions, as it sends them to the API.
TOOLS: list[dict[str, Any]] = [
    {"name": "lookup_order", "description": "Look up an order by id.",
     "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
    {"name": "issue_refund", "description": "Refund an order.",
     "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
]


def drive(sim: simloop.Sim) -> simloop.Outcome:
    """The README's adapter, with the loop's own tools instead of ``sim.tool_schemas``."""
    reason, text = run_agent(sim.client, TOOLS, sim.run_tool, sim.task)
    return simloop.Outcome(reason=reason, text=text)


def escapes(sim: simloop.Sim) -> simloop.Outcome:
    """The defect: the tool runner lets a tool's exception out of the loop (no ``try`` around it)."""
    history: list[Any] = [{"role": "user", "content": sim.task}]
    for _ in range(10):
        try:
            reply = sim.client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=TOOLS, messages=history)  # type: ignore[arg-type]
        except anthropic.APIError as exc:
            return simloop.Outcome(reason="error", text=str(exc))
        history.append({"role": "assistant", "content": reply.content})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if reply.stop_reason == "pause_turn":
            continue
        if not calls or reply.stop_reason != "tool_use":
            reason = {"max_tokens": "truncated", "refusal": "refusal"}.get(str(reply.stop_reason), "final")
            return simloop.Outcome(reason=reason, text="".join(b.text for b in reply.content if b.type == "text"))
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input)} for b in calls
        ]})
    return simloop.Outcome(reason="max_steps", text="")
