"""Small helpers the example loops share: limit defaults, reply text, token counting.

None of this is where a loop goes right or wrong; the decisions (what a stop
reason means, how tool results are sent back) stay in each loop's own module
so a reader sees them there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from anthropic.types import ContentBlock, Message, ThinkingConfigParam, ToolResultBlockParam, ToolUseBlock

if TYPE_CHECKING:
    from simloop.scenario import Limits

__all__ = [
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MODEL",
    "DEFAULT_TOKEN_BUDGET",
    "MAX_TOKENS",
    "THINKING",
    "RunTool",
    "budgets",
    "error_text",
    "text_of",
    "tokens_used",
    "tool_calls",
    "tool_result",
]

#: Per-request output limit; generous, so a ``max_tokens`` stop is a real event.
MAX_TOKENS = 4096
#: Extended thinking, on as current models run it.  Thinking tokens count against
#: MAX_TOKENS, and a tool-use turn's signed thinking blocks must go back unchanged:
#: appending ``reply.content`` as received does that.
THINKING: ThinkingConfigParam = {"type": "enabled", "budget_tokens": 2048}
DEFAULT_MODEL = "claude-sonnet-4-5"
# The loops' own limits when the caller declares none (a cap is a safety net, not a budget).
DEFAULT_MAX_STEPS = 10
DEFAULT_DEADLINE_S = 300.0
DEFAULT_TOKEN_BUDGET = 200_000


class RunTool(Protocol):
    """How the loops run a tool: ``run_tool(name, input, tool_use_id=...) -> str`` (may raise)."""

    def __call__(self, name: str, input: object, *, tool_use_id: str | None = None) -> str: ...


def budgets(limits: Limits | None) -> tuple[int, float, int]:
    """``(max_steps, deadline_s, max_total_tokens)``, each filled with the loop's default when not declared."""
    if limits is None:
        return DEFAULT_MAX_STEPS, DEFAULT_DEADLINE_S, DEFAULT_TOKEN_BUDGET
    return (
        limits.max_steps or DEFAULT_MAX_STEPS,
        limits.deadline_s or DEFAULT_DEADLINE_S,
        limits.max_total_tokens or DEFAULT_TOKEN_BUDGET,
    )


def text_of(content: Iterable[ContentBlock]) -> str:
    """The visible text of a reply (thinking and tool calls left out)."""
    return "".join(block.text for block in content if block.type == "text")


def tokens_used(message: Message) -> int:
    """Tokens one reply cost: everything read (cached or not) plus everything written."""
    u = message.usage
    return u.input_tokens + u.output_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)


def tool_calls(message: Message) -> list[ToolUseBlock]:
    """The tool_use blocks of a reply, in the order the model wrote them."""
    return [block for block in message.content if block.type == "tool_use"]


def error_text(exc: BaseException) -> str:
    """An exception as the model should read it (never empty: the API rejects empty text)."""
    detail = str(exc)
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def tool_result(call: ToolUseBlock, output: str | Exception) -> ToolResultBlockParam:
    """The tool_result block answering ``call``: the output, or the error with ``is_error``."""
    if isinstance(output, Exception):
        return {"type": "tool_result", "tool_use_id": call.id, "content": error_text(output), "is_error": True}
    return {"type": "tool_result", "tool_use_id": call.id, "content": output}
