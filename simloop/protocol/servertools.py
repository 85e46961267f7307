"""Server tool blocks as the real API writes them: ``server_tool_use`` and its result block.

A reply that runs a server tool (web search, web fetch, code execution) carries, for each call, a
``server_tool_use`` block and then the call's result block, whose type is the tool's name plus
``_tool_result`` (``web_search_tool_result``, ``bash_code_execution_tool_result``, ...).  A
``pause_turn`` reply may end with a ``server_tool_use`` still running (no result yet); the loop sends
it back as the final assistant message and the continuation opens with that call's result
(recorded: pydantic-ai ``test_pause_turn_web_search_vcr.yaml``; the in-flight case of a server call
beside client calls answered by the final user turn: ``test_in_flight_native_tool_call_history_is_accepted``).

Shapes and key order follow the recordings under ``shared/data/cassettes`` (llm-anthropic raw SSE
for web search; pydantic-ai for web fetch and code execution) and parse under the SDK's strict
response validation.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

__all__ = ["pending_server_uses", "result_block", "result_content", "use_block"]


def use_block(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    """The ``server_tool_use`` block (key order as on the wire: type, id, name, input)."""
    return {"type": "server_tool_use", "id": id, "name": name, "input": dict(input)}


def result_block(
    tool_use_id: str, name: str, input: dict[str, Any], *, result: Any = None, error: str | None = None
) -> dict[str, Any]:
    """The result block answering the server call ``tool_use_id`` of tool ``name``.

    ``result`` is the block's ``content`` as given; ``error`` an error code (the tool's error
    object); neither: `result_content`'s canned result for the call's input.
    """
    if error is not None:
        content: Any = {"type": f"{name}_tool_result_error", "error_code": error}
    elif result is not None:
        content = result
    else:
        content = result_content(name, input)
    return {"type": f"{name}_tool_result", "tool_use_id": tool_use_id, "content": content}


def _opaque(seed: str) -> str:
    """A deterministic stand-in for the API's ``encrypted_content`` (base64, like the real one)."""
    return base64.b64encode(b"\x12\x40" + hashlib.sha256(seed.encode("utf-8")).digest() * 2).decode("ascii")


def _words(input: dict[str, Any], key: str, default: str) -> str:
    value = input.get(key)
    return value if isinstance(value, str) and value else default


def result_content(name: str, input: dict[str, Any]) -> Any:
    """A small, realistic result for a server call (what a canned search, fetch or run returns)."""
    if name == "web_search":
        query = _words(input, "query", "search")
        slug = "-".join(query.lower().split())[:60] or "search"
        return [
            {
                "type": "web_search_result",
                "title": f"{query.title()} | Help Center",
                "url": f"https://help.example.com/{slug}",
                "encrypted_content": _opaque(f"web_search/{query}/{n}"),
                "page_age": f"{n + 2} days ago",
            }
            for n in range(2)
        ]
    if name == "web_fetch":
        url = _words(input, "url", "https://help.example.com/")
        return {
            "type": "web_fetch_result",
            "url": url,
            "content": {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": f"The page at {url}."},
                "title": "Help Center",
            },
            "retrieved_at": "2026-11-30T12:00:00.000000+00:00",
        }
    if name == "text_editor_code_execution":
        return {"type": "text_editor_code_execution_create_result", "is_file_update": False}
    # code_execution, bash_code_execution
    return {"type": f"{name}_result", "stdout": "ok\n", "stderr": "", "return_code": 0, "content": []}


def pending_server_uses(conversation: list[Any]) -> list[dict[str, Any]]:
    """The ``server_tool_use`` blocks a request leaves running, which its reply must answer first.

    Those of the final assistant turn (a ``pause_turn`` continuation) or, when the request ends with
    a user turn, of the assistant turn just before it (a server call beside client calls, in flight
    while the loop ran the client ones), without a result block after them in the request.
    Only the tail of the conversation is read.
    """
    i = len(conversation) - 1
    tail: list[dict[str, Any]] = []  # the last assistant turn's messages, last first
    # (roles read inline, as `_role` reads them: this runs on every model call)
    while i >= 0:  # the final user turn, if any
        message = conversation[i]
        if isinstance(message, dict) and message.get("role") == "assistant":
            break
        i -= 1
    while i >= 0:
        message = conversation[i]
        role = message.get("role") if isinstance(message, dict) else None
        if role == "assistant":
            tail.append(message)
        elif role != "system":
            break
        i -= 1
    if not tail:
        return []
    for message in tail:  # the common case first: no server call in the turn, nothing to answer
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if (block.get("type") if isinstance(block, dict) else getattr(block, "type", None)) == "server_tool_use":
                    break
            else:
                continue
            break
    else:
        return []
    uses: dict[str, dict[str, Any]] = {}
    for message in reversed(tail):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
            if kind == "server_tool_use":
                block_id = _field(block, "id")
                if isinstance(block_id, str):
                    uses[block_id] = {"id": block_id, "name": _field(block, "name"), "input": _field(block, "input")}
            elif isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result":
                uses.pop(str(_field(block, "tool_use_id")), None)
    return list(uses.values())


def _field(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, dict) else getattr(block, name, None)
