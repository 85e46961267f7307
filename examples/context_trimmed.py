"""A correct loop that manages its context: it keeps every request inside the model's context window.

`examples.correct_sync` sends its whole history every time, so a long task whose tools answer at length
outgrows the window (the API's 400 "prompt is too long"); that loop then stops honestly with ``error``.  This
one claims more (``simloop.verify(drive, context=True)``, ``requires: [context]``) and keeps the claim:

* each tool output is clipped to `MAX_OUTPUT_CHARS` before it joins the history (a tail note says how much
  was cut), so no single round can fill the window;
* before each model call, while the history's estimated size is over `HISTORY_BUDGET` tokens, it drops the
  oldest complete tool round (an assistant message of tool calls and the user message of exactly their
  results), never the latest one: the pairing stays valid and the task stays first.

A production loop would also summarize what it drops, or let the API compact the history (the compaction
beta); trimming is the simplest honest policy.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._common import converse, durable_run_tool, with_web_search, writes_of
from .correct_sync import run_agent as _run_agent

if TYPE_CHECKING:
    from anthropic.types import MessageParam

    from simloop import Outcome, Sim

    from ._common import RunTool

__all__ = ["HISTORY_BUDGET", "MAX_OUTPUT_CHARS", "drive", "fit", "run_agent"]

#: The model's window is 200,000 tokens; the history is kept to half of it, leaving room for the tool
#: definitions, the system prompt, the thinking and the reply, and for an estimate that is only an estimate.
HISTORY_BUDGET = 100_000
#: A tool output longer than this (about 25,000 tokens) is cut before it joins the history.
MAX_OUTPUT_CHARS = 100_000

run_agent = _run_agent  # the loop itself: `examples.correct_sync`'s, given `fit` and a clipping run_tool


def _plain(block: Any) -> Any:
    dump = getattr(block, "model_dump", None)
    return dump(mode="json", exclude_none=True) if dump is not None else str(block)


def estimate(messages: list[MessageParam]) -> int:
    """The history's size in tokens, about four characters of its JSON a token."""
    return len(json.dumps(messages, default=_plain)) // 4


def _uses(message: MessageParam) -> set[str]:
    content = message["content"]
    return set() if isinstance(content, str) else {
        str(_get(b, "id")) for b in content if _get(b, "type") == "tool_use"
    }


def _get(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, dict) else getattr(block, name, None)


def _oldest_round(messages: list[MessageParam]) -> int | None:
    """The index of the oldest assistant message whose tool calls the next message answers, and nothing else,
    with an assistant message after that pair (so the history still alternates once the pair is gone)."""
    for i in range(1, len(messages) - 2):
        call, answer, after = messages[i], messages[i + 1], messages[i + 2]
        if call["role"] != "assistant" or answer["role"] != "user" or after["role"] != "assistant":
            continue
        content = answer["content"]
        if isinstance(content, str) or not content or any(_get(b, "type") != "tool_result" for b in content):
            continue
        uses = _uses(call)
        if uses and uses == {str(_get(b, "tool_use_id")) for b in content}:
            return i
    return None


def fit(messages: list[MessageParam]) -> None:
    """Drop the oldest complete tool rounds, in place, until the history is within `HISTORY_BUDGET` tokens
    (or only the latest round is left)."""
    while estimate(messages) > HISTORY_BUDGET:
        i = _oldest_round(messages)
        if i is None:
            return
        del messages[i : i + 2]


def clipped(run_tool: RunTool) -> RunTool:
    """``run_tool`` whose long outputs are cut to `MAX_OUTPUT_CHARS`, with a note saying how much was cut."""

    def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        output = run_tool(name, input, tool_use_id=tool_use_id)
        if len(output) <= MAX_OUTPUT_CHARS:
            return output
        return output[:MAX_OUTPUT_CHARS] + f"\n[{len(output) - MAX_OUTPUT_CHARS} more characters cut]"

    return run


def drive(sim: Sim) -> list[Outcome]:
    """simloop adapter: `examples.correct_sync`'s drive, its history kept inside the window."""
    run_tool = clipped(durable_run_tool(sim))
    return converse(sim.user_turns, lambda text, history: run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model, system=sim.system,
        writes=writes_of(sim), history=history, stop=sim.abort.is_set, fit=fit,
    ))
