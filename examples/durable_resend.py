"""Defect: a durable loop persists its history after each step, and re-sends the email after a crash.

The loop keeps its message history in a durable store (``sim.store``: a
database, a checkpointer) and saves it after each round of tools, so that a restarted worker resumes where it stopped.  But the
process can die between a write's commit and the save: the email went out, the
history does not say so.  After the restart the loop resumes from the saved
history, the model (which never saw the result) asks for the email again, and
the loop sends it a second time.  A correct durable loop records an
idempotency key in its store before each write and checks it after a restart
(the reference loops do: ``examples._common.durable_run_tool``).

Caught by: ``no_rerun`` on ``scenarios/crash-after-email.yaml``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import anthropic
from anthropic.types import MessageParam, ToolParam

from simloop import Outcome

from ._common import DEFAULT_MODEL, MAX_TOKENS, RunTool, budgets, text_of, tool_calls, tool_result

if TYPE_CHECKING:
    from simloop import Sim
    from simloop.scenario import Limits

__all__ = ["drive", "run_agent"]


def run_agent(
    client: anthropic.Anthropic,
    tools: list[ToolParam],
    run_tool: RunTool,
    task: str,
    store: dict[str, Any],
    limits: Limits | None = None,
    *,
    model: str = DEFAULT_MODEL,
) -> Outcome:
    """Resume from ``store["messages"]`` (or start the task) and run to an honest stop, saving after each round."""
    max_steps, _, _ = budgets(limits)
    messages: list[MessageParam] = copy.deepcopy(store.setdefault("messages", [{"role": "user", "content": task}]))
    for _ in range(max_steps):
        try:
            reply = client.messages.create(model=model, max_tokens=MAX_TOKENS, tools=tools, messages=messages)
        except anthropic.APIError as exc:
            return Outcome(reason="error", text=str(exc))
        dumped: list[Any] = [b.model_dump() for b in reply.content]  # plain data: the store outlives the process
        messages.append({"role": "assistant", "content": dumped})
        if reply.stop_reason in ("end_turn", "stop_sequence"):
            return Outcome(reason="final", text=text_of(reply.content))
        if reply.stop_reason == "refusal":
            return Outcome(reason="refusal", text=text_of(reply.content))
        if reply.stop_reason != "tool_use":
            return Outcome(reason="error", text=f"unexpected stop_reason {reply.stop_reason!r}")
        results = []
        for call in tool_calls(reply):
            try:
                output: str | Exception = _write(run_tool, call.name, call.input, call.id, store)
            except Exception as exc:  # noqa: BLE001 - a tool failure is an observation
                output = exc
            results.append(tool_result(call, output))
        messages.append({"role": "user", "content": results})
        store["messages"] = copy.deepcopy(messages)  # saved after the tools: a crash before this loses their results
    return Outcome(reason="max_steps", text=f"no final answer after {max_steps} model calls")


def _write(run_tool: RunTool, name: str, input: Any, tool_use_id: str, store: dict[str, Any]) -> str:
    return run_tool(name, input, tool_use_id=tool_use_id)  # BUG: no record that it ran: a restart runs it again


def drive(sim: Sim) -> Outcome:
    """simloop adapter: the durable loop on ``sim.store`` (run again after a crash: it resumes from the store)."""
    return run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.store, sim.limits, model=sim.model)  # type: ignore[arg-type]
