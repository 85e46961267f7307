"""What a request lets the model answer with: the replies the real API can send for it.

The real API answers a request within what the request declares: it calls only the custom tools the request
defines (none when it defines none, or when ``tool_choice`` is ``none``; one call at most with
``disable_parallel_tool_use``; a call for sure, and no text before it, with ``tool_choice`` ``any`` or
``tool``), writes server tool blocks (``server_tool_use`` and its result) only for the server tools it
declares and so pauses (``pause_turn``) only then, and stops on a stop sequence only when the request sets
``stop_sequences`` (the ``stop_sequence`` field one of them, the text ending where it stopped the model).
`offer_of` reads that from a request once (cached on the request's own fields), and `with_server_tools`
applies `verify(server_tools=...)` to it (on, off, or as the request declares); the generated model
(`simloop.generated.GeneratedModel`) shapes every reply to it.  Thinking blocks follow the request's
``thinking`` where replies are rendered (`simloop.models.turn_from_reply`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_core import to_json

from simloop.scenario import PauseTurnBody, Reply, ServerToolCall, ServerToolName
from simloop.strategies import tool_key

__all__ = [
    "NOTHING", "SERVER_TOOLS", "Offer", "ServerTools", "fit_pause", "offer_of", "server_block", "stopped_at",
    "with_server_tools",
]

ToolKey = tuple[tuple[str, str], ...]
#: `verify(server_tools=...)`: whether the generated model writes server tool blocks (and so pauses): as the
#: request declares (``request``), whatever it declares (``on``: its declared kind, else ``web_search``), or never
#: (``off``).
ServerTools = Literal["request", "on", "off"]
SERVER_TOOLS: tuple[ServerTools, ...] = ("request", "on", "off")
#: The server tool ``on`` runs when the request declares none: the one most loops meet.
_FORCED: tuple[ServerToolName, ...] = ("web_search",)

#: A server tool's ``type`` (by prefix) -> the name of the ``server_tool_use`` blocks the model writes for it.
#: ``code_execution_20250522`` runs ``code_execution``; the later versions run ``bash_code_execution`` (and
#: ``text_editor_code_execution``).  Other Anthropic-defined types (``bash_*``, ``text_editor_*``, ``memory_*``,
#: ``computer_*``) are client tools the generated model never calls; the tool-search tools' blocks it cannot write.
SERVER_BLOCKS: tuple[tuple[str, ServerToolName], ...] = (
    ("web_search_", "web_search"),
    ("web_fetch_", "web_fetch"),
    ("code_execution_20250522", "code_execution"),
    ("code_execution_", "bash_code_execution"),
)
#: Each server tool's two calls in a paused turn: the one that ran, then the one still running.
_SERVER_INPUTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "web_search": ({"query": "refund policy"}, {"query": "refund policy 2026 changes"}),
    "web_fetch": ({"url": "https://help.example.com/refunds"}, {"url": "https://help.example.com/refunds/2026"}),
    "code_execution": ({"code": "print(40 * 1)"}, {"code": "print(sum([40, 12]))"}),
    "bash_code_execution": ({"command": "ls"}, {"command": "cat refunds.csv"}),
}


@dataclass(frozen=True, slots=True)
class Offer:
    """What one request lets the model send.

    ``tools``: the custom tools it may call, as `simloop.strategies.tool_key` pairs (empty: no tool_use at all;
    with ``tool_choice: {type: tool}`` only that tool).  ``server``: the server tool blocks it may write (empty:
    none, and no ``pause_turn``).  ``stop_sequences``: those a reply may stop on (empty: no ``stop_sequence``
    stop).  ``forced``: ``tool_choice`` ``any``/``tool`` on a custom tool (every reply that is not cut off or
    refused calls a tool).  ``one_call``: ``disable_parallel_tool_use`` (at most one call a reply).
    """

    tools: ToolKey = ()
    server: tuple[ServerToolName, ...] = ()
    stop_sequences: tuple[str, ...] = ()
    forced: bool = False
    one_call: bool = False

    @property
    def names(self) -> frozenset[str]:
        """The custom tools' names."""
        return frozenset(name for name, _ in self.tools)


NOTHING = Offer()


def offer_of(body: dict[str, Any]) -> Offer:
    """What the request ``body`` lets the model send (see `Offer`)."""
    tools, choice, stops = body.get("tools"), body.get("tool_choice"), body.get("stop_sequences")
    if not tools and not stops:
        return NOTHING
    return _offer(to_json(tools) if tools else b"", to_json(choice) if choice else b"", to_json(stops) if stops else b"")


@functools.lru_cache(maxsize=256)
def _offer(raw_tools: bytes, raw_choice: bytes, raw_stops: bytes) -> Offer:
    tools = json.loads(raw_tools) if raw_tools else []
    choice = json.loads(raw_choice) if raw_choice else {}
    stops = json.loads(raw_stops) if raw_stops else []
    custom: list[dict[str, Any]] = []
    server: list[ServerToolName] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        kind = tool.get("type")
        if kind is None or kind == "custom":
            custom.append(tool)
        elif isinstance(kind, str):
            block = next((name for prefix, name in SERVER_BLOCKS if kind.startswith(prefix)), None)
            if block is not None and block not in server:
                server.append(block)
    ctype = choice.get("type") if isinstance(choice, dict) else None
    if ctype == "none":
        custom = []
    elif ctype == "tool":
        custom = [t for t in custom if t["name"] == choice.get("name")]  # (a forced server tool: no custom call)
    forced = ctype in ("any", "tool") and bool(custom)
    return Offer(
        tools=tool_key(custom) if custom else (),
        server=tuple(server),
        stop_sequences=tuple(s for s in stops if isinstance(s, str) and s) if isinstance(stops, list) else (),
        forced=forced,
        one_call=isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True,
    )


def with_server_tools(offer: Offer, choice: ServerTools) -> Offer:
    """``offer`` with the server tools ``choice`` lets the model write: none (``off``), the request's or else
    ``web_search`` (``on``), or the request's own (``request``)."""
    if choice == "off" and offer.server:
        return dataclasses.replace(offer, server=())
    if choice == "on" and not offer.server:
        return dataclasses.replace(offer, server=_FORCED)
    return offer


def stopped_at(text: str, sequences: Sequence[str], chosen: str) -> tuple[str, str]:
    """The text and the stop sequence of a model that writes ``text`` then ``chosen``, stopped by the API at the
    first of ``sequences`` it completes (the sequence itself is not part of the text): ``(text, sequence)``.

    An earlier sequence inside ``text`` (or straddling its end) stops it there instead, as the real API would.
    """
    written = text + chosen
    best_end, best_start = len(written), len(text)
    sequence = chosen
    for s in sequences:
        at = written.find(s) if s else -1
        if at >= 0 and (at + len(s), at) < (best_end, best_start):
            best_end, best_start, sequence = at + len(s), at, s
    return written[:best_start], sequence


def server_block(offer: Offer) -> ServerToolName | None:
    """The server tool a paused turn of this request runs (the first it declares), or None."""
    return offer.server[0] if offer.server else None


def fit_pause(reply: Reply, name: ServerToolName) -> Reply:
    """A ``pause_turn`` reply paused mid server call, its calls made of the declared server tool ``name``."""
    body = reply.pause_turn
    if not isinstance(body, PauseTurnBody) or body.server_tool_use.name == name:
        return reply
    ran, running = _SERVER_INPUTS[name]
    return reply.model_copy(update={
        "server_tools": [ServerToolCall(name=name, input=ran)] if reply.server_tools else None,
        "pause_turn": PauseTurnBody(text=body.text, server_tool_use=ServerToolCall(name=name, input=running)),
    })
