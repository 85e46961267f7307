"""OpenAI recordings (Chat Completions and Responses) read as the one world's model calls.

The simulator keeps one Messages-shaped world and translates each OpenAI wire at its edge
(`simloop.protocol.openai_chat`, `simloop.protocol.openai_responses`).  A recording of either wire is read the
same way: each recorded request becomes the Messages request it stands for (what `simloop.models.ModelRequest`
holds when a loop sends it again, so a replay compares like with like), and each recorded answer a `Turn`
(text, tool calls with their recorded ids, the stop reason, usage), which the simulator renders back on
whichever wire the loop calls.  A Responses request chained with ``previous_response_id`` stands for the
responses recorded before it in the same cassette, as the real server kept them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from simloop.cassettes._read import _FIX, CassetteError, Interaction, RecordedResponse, _describe
from simloop.protocol import openai_chat, openai_responses
from simloop.protocol.openai_chat import _arguments
from simloop.protocol.render import Turn, _sse_events
from simloop.scenario import Reply

CHAT = "chat"
RESPONSES = "responses"
_CHAT_STOPS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
               "content_filter": "refusal"}
#: Responses output items with no form on the simulated wires (reasoning is kept out of the conversation too).
_QUIET_ITEMS = frozenset({"reasoning"})


def openai_wire(item: Interaction) -> str | None:
    """``chat`` for a ``POST …/chat/completions``, ``responses`` for a ``POST …/responses`` (any host: an
    OpenAI-compatible server, ``simloop serve``), else None; a redacted URI is told by the answer's object."""
    if item.request.method.upper() != "POST":
        return None
    if not item.uri_hidden:
        path = item.request.path.rstrip("/")
        return CHAT if path.endswith("/chat/completions") else RESPONSES if path.endswith("/responses") else None
    answer, body = item.response.json(), item.response.body
    kind = answer.get("object") if isinstance(answer, dict) else None
    if kind == "chat.completion" or (item.response.is_sse and b'"chat.completion.chunk"' in body):
        return CHAT
    if kind == "response" or (item.response.is_sse and b'"response.created"' in body):
        return RESPONSES
    return None


class OpenAIReader:
    """Reads a cassette's OpenAI calls in order: ``stored`` holds each recorded response's conversation by id
    (its input and output items), what a later ``previous_response_id`` names."""

    def __init__(self) -> None:
        self.stored: dict[str, list[Any]] = {}
        self._items: list[Any] = []  # the conversation of the Responses request read last

    def request(self, where: str, wire: str, body: Any, notes: list[str]) -> dict[str, Any]:
        """The Messages request a recorded OpenAI request stands for (``{}`` for one that is not an object)."""
        if not isinstance(body, dict):
            return {}
        try:
            if wire == CHAT:
                return openai_chat.to_internal(body)
            items, missing = openai_responses.expand(body, self.stored)
            if missing is not None:
                notes.append(
                    f"{where}: previous_response_id {body.get('previous_response_id')!r} names a response not "
                    "recorded in this cassette; its conversation starts at this request's input"
                )
            if body.get("conversation") is not None:
                notes.append(f"{where}: a server-side 'conversation' is not simulated; its history is not in "
                             "the request")
            self._items = items
            return openai_responses.to_internal(body, items)
        except (KeyError, TypeError, AttributeError) as exc:
            notes.append(f"{where}: the request is not a well-formed {wire} request ({exc!r}); not compared")
            self._items = []
            return {}

    def answer(self, where: str, wire: str, response: RecordedResponse, request: Any, notes: list[str]) -> Turn | Reply:
        """A recorded 200's answer: the `Turn` it carries, or ``stream_error`` for a stream that failed."""
        at = where.rpartition(": ")[2]  # "interaction N", as the notes name it
        try:
            if wire == CHAT:
                return _chat_sse(response.body) if response.is_sse else _chat_json(response.json(), where, notes, at)
            if response.is_sse:
                found = _responses_sse(response.body)
                if isinstance(found, (Reply, Turn)):
                    return found
                obj = found
            else:
                obj = response.json()
            turn = _response_turn(obj, where, notes, at)
        except CassetteError:
            raise
        except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
            raise CassetteError(f"{where}: the recorded answer is not a {wire} answer ({exc!r}).{_FIX}") from exc
        keep = not (isinstance(request, dict) and request.get("store") is False)
        if keep and isinstance(obj.get("id"), str):
            self.stored[obj["id"]] = [*self._items, *(obj.get("output") or [])]
        return turn


# --------------------------------------------------------------------------- Chat Completions


def _tool_use(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A recorded call as a tool_use block: its input parsed, or kept as the text it was (cut, or not JSON)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    value = _arguments(text) if text else {}
    block: dict[str, Any] = {"type": "tool_use", "id": str(call_id), "name": str(name)}
    if isinstance(value, dict):
        block["input"] = value
    else:
        block["partial_json"] = text
    return block


def _chat_turn(text: str, refusal: str, calls: list[dict[str, Any]], finish: Any, usage: Any, model: Any) -> Turn:
    content: list[dict[str, Any]] = []
    if refusal or text:
        content.append({"type": "text", "text": refusal or text})
    content += calls
    stop = _CHAT_STOPS.get(str(finish), "end_turn") if finish is not None else None
    if refusal and stop == "end_turn":
        stop = "refusal"  # the API's refusal: finish_reason "stop", the text in message.refusal
    if calls and stop == "end_turn":
        stop = "tool_use"  # a forced tool_choice answers "stop" with its calls: the loop runs them
    return Turn(content=content, stop_reason=stop, usage=_chat_usage(usage), model=model if isinstance(model, str) else None)


def _chat_usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    return {"input_tokens": int(usage.get("prompt_tokens") or 0), "output_tokens": int(usage.get("completion_tokens") or 0)}


def _chat_json(obj: Any, where: str, notes: list[str], at: str) -> Turn:
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list) or not obj["choices"]:
        raise CassetteError(
            f"{where}: a 200 answer to POST /v1/chat/completions must be a chat.completion with choices, found "
            f"{_describe(obj)}.{_FIX}"
        )
    choice = obj["choices"][0]
    message = choice.get("message") or {}
    raw = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    calls = [_tool_use(c.get("id"), c["function"].get("name"), c["function"].get("arguments"))
             for c in raw if isinstance(c.get("function"), dict)]
    if len(obj["choices"]) > 1:
        notes.append(f"{at}: {len(obj['choices'])} choices recorded (n > 1); the scenario takes the first")
    if len(calls) < len(raw):
        notes.append(f"{at}: {len(raw) - len(calls)} tool call(s) that are not function calls left out (custom tools "
                     "are not simulated)")
    return _chat_turn(str(message.get("content") or ""), str(message.get("refusal") or ""), calls,
                      choice.get("finish_reason"), obj.get("usage"), obj.get("model"))


def _chat_sse(body: bytes) -> Turn | Reply:
    """A chat.completion.chunk stream put back together (choice 0); an error line is a failed stream."""
    text: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: Any = None
    usage: Any = None
    model: Any = None
    for _, data in _sse_events(body.decode("utf-8", "replace")):
        if data.strip() == "[DONE]":
            continue
        chunk = json.loads(data)
        if isinstance(chunk, dict) and "error" in chunk:
            return Reply(error="stream_error")
        model = chunk.get("model", model)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            refusal.append(delta.get("refusal") or "")
            for part in delta.get("tool_calls") or []:
                call = calls.setdefault(int(part.get("index", len(calls))), {"id": "", "name": "", "arguments": ""})
                fn = part.get("function") or {}
                call["id"] = part.get("id") or call["id"]
                call["name"] = call["name"] or fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    blocks = [_tool_use(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return _chat_turn("".join(text), "".join(refusal), blocks, finish, usage, model)


# --------------------------------------------------------------------------- Responses


def _responses_sse(body: bytes) -> dict[str, Any] | Turn | Reply:
    """The final ``response`` object of a Responses event stream; a cut stream's items as a cut `Turn`; an
    ``error`` event as a failed stream."""
    done: list[dict[str, Any]] = []
    for name, data in _sse_events(body.decode("utf-8", "replace")):
        event = json.loads(data)
        kind = event.get("type", name) if isinstance(event, dict) else name
        if kind == "error" or kind == "response.failed":
            return Reply(error="stream_error")
        if kind in ("response.completed", "response.incomplete") and isinstance(event.get("response"), dict):
            return dict(event["response"])
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            done.append(event["item"])
    turn = _response_turn({"status": "in_progress", "output": done}, "", None)
    return Turn(content=turn.content, stop_reason=None, usage=turn.usage, model=turn.model)


def _response_turn(obj: Any, where: str, notes: list[str] | None, at: str = "") -> Turn:
    if not isinstance(obj, dict) or not isinstance(obj.get("output"), list):
        raise CassetteError(
            f"{where}: a 200 answer to POST /v1/responses must be a response object with an output list, found "
            f"{_describe(obj)}.{_FIX}"
        )
    if obj.get("status") in ("queued", "in_progress") and not obj["output"]:
        raise CassetteError(
            f"{where}: the recorded response is still {obj['status']!r} (background mode: its answer was fetched "
            "later with GET /v1/responses/ID, which simloop does not simulate); record the run without "
            "background=True"
        )
    content: list[dict[str, Any]] = []
    refused = False
    dropped: list[str] = []
    for item in obj["output"]:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "refusal":
                    refused = True
                    content.append({"type": "text", "text": str(part.get("refusal") or "")})
                elif isinstance(part.get("text"), str):
                    content.append({"type": "text", "text": part["text"]})
        elif kind == "function_call":
            content.append(_tool_use(item.get("call_id"), item.get("name"), item.get("arguments")))
        elif kind not in _QUIET_ITEMS:
            dropped.append(str(kind))
    if dropped and notes is not None:
        notes.append(f"{at}: {', '.join(sorted(set(dropped)))} output item(s) left out (built-in tools are not "
                     "simulated on the Responses wire)")
    reason = (obj.get("incomplete_details") or {}).get("reason") if obj.get("status") == "incomplete" else None
    stop = "max_tokens" if reason == "max_output_tokens" else "refusal" if refused or reason == "content_filter" else (
        "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn")
    usage = obj.get("usage")
    kept = ({"input_tokens": int(usage.get("input_tokens") or 0), "output_tokens": int(usage.get("output_tokens") or 0)}
            if isinstance(usage, Mapping) else None)
    model = obj.get("model")
    return Turn(content=content, stop_reason=stop, usage=kept, model=model if isinstance(model, str) else None)
