"""The OpenAI wire, Responses API: one world, a third edge (docs/design.md, The OpenAI wire, Responses API).

As `simloop.protocol.openai_chat` does for Chat Completions, this module translates ``POST /v1/responses`` at the
edge, both ways, so the simulator, the generated model and the invariants keep reading one Messages-shaped world:

* `expand` prepends the stored chain of a ``previous_response_id`` (each stored response's input and output
  items, oldest first) to the request's ``input``: the conversation the request stands for;
* `validate_responses` answers what the real Responses API refuses with its own 400 texts (a ``function_call``
  with no ``function_call_output``, an output answering no call, an unknown ``previous_response_id``, ...);
* `to_internal` translates the conversation: ``instructions`` and system/developer messages become ``system``,
  assistant messages and ``function_call`` items an assistant turn with ``tool_use`` blocks (the ``call_id`` as
  the id), each ``function_call_output`` a user message holding one ``tool_result``;
* `render_response` and `render_events` turn a reply back into a ``response`` object or its event stream
  (``event:``/``data:`` pairs with ``sequence_number``, ending ``response.completed`` or ``response.incomplete``).

Errors use the Chat Completions envelope (`simloop.protocol.openai_chat.chat_error`): the two wires share it.
Nothing here imports the ``openai`` SDK.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import to_json

from simloop.protocol import openai_rules as rules
from simloop.protocol.openai_chat import (
    CREATED_EPOCH,
    DEFAULT_MAX_TOKENS,
    DEFAULT_REFUSAL,
    NOT_JSON,
    _arguments,
    _bad_type,
    _missing,
    _Refuse,
    _text_of,
    cache_tokens,
    image_block,
    set_tools,
    tool_choice,
)
from simloop.protocol.render import CUT_STOPS, Turn
from simloop.protocol.validate import Rejection

__all__ = [
    "MAX_STORED_BYTES",
    "MAX_STORED_RESPONSES",
    "RESPONSES",
    "ResponseStore",
    "expand",
    "render_events",
    "render_response",
    "response_id",
    "stream_error_event",
    "to_internal",
    "validate_responses",
]

RESPONSES = "/v1/responses"
#: The model of a request that names none, only a stored ``prompt`` (whose model the dashboard holds and the
#: simulator cannot see): the model the reply and the world say.
PROMPT_MODEL = "gpt-4o"
_ROLES = ("user", "assistant", "system", "developer")

# -- the real API's 400s: texts, ``param`` and ``code`` as users reported them ------------------------------------
# "No tool output found for function call call_uK3eDRSXx9p45csFRjvXDNPq." with "param": "input", "code": null
# (router-for-me/CLIProxyAPI#2368; openai/codex#620); "No tool call found for function call output with call_id
# call_uelfkqtHfJDC4Btqeoozq82e." with "param": "input", "code": null (continuedev/continue#10092,
# microsoft/vscode#320060, vercel/ai#8216); "Previous response with id 'resp_...' not found." with code
# "previous_response_not_found" and param "previous_response_id" (maximhq/bifrost#2441, Soju06/codex-lb#1817).

#: A ``function_call`` in the input with no ``function_call_output`` for its ``call_id``.
NO_OUTPUT = "No tool output found for function call {id}."
#: A ``function_call_output`` whose ``call_id`` matches no ``function_call`` before it.
NO_CALL = "No tool call found for function call output with call_id {id}."
#: An item id (``msg_...``, ``fc_...``) twice in the conversation: the output of a response both chained with
#: ``previous_response_id`` and sent again in ``input`` ("param": "input", "code": null; continuedev/continue#10200,
#: earendil-works/pi#5149).
DUPLICATE_ITEM = "Duplicate item found with id {id}. Remove duplicate items from your input and try again."
#: A ``previous_response_id`` the server does not hold (never made, or made with ``store: false``).
NO_PREVIOUS = "Previous response with id '{id}' not found."
#: The context window, as the Responses API words it (``code: context_length_exceeded``, ``param: input``).
CONTEXT_EXCEEDED = "Your input exceeds the context window of this model. Please adjust your input and try again."


def items_of(value: Any) -> list[Any]:
    """``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def _kind(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    kind = item.get("type")
    return "message" if kind is None and "role" in item else str(kind)


#: The most responses a server keeps for ``previous_response_id`` chains (docs/security.md, `simloop serve`).
MAX_STORED_RESPONSES = 256
#: The most bytes of input and output (as JSON) the kept responses add up to; the newest is always kept.
MAX_STORED_BYTES = 32 * 1024 * 1024


class ResponseStore(dict[str, list[Any]]):
    """The responses a server keeps for chaining: id -> the input and output items the response chains.

    Bounded: past `MAX_STORED_RESPONSES` responses or `MAX_STORED_BYTES` of conversation (each response's
    whole chain: the one it continues, then its own input and output, measured as JSON when kept; shared
    history is counted in each, so the bound holds whatever a chain still refers to), the oldest are
    dropped; a chain to one of them gets the real API's 400 for an id it does not hold
    (``previous_response_not_found``).
    """

    def __init__(self) -> None:
        super().__init__()
        self._sizes: dict[str, int] = {}  # id -> its bytes, in the order kept
        self.bytes = 0

    def keep(self, response_id: str, items: list[Any], size: int, previous: Any = None) -> None:
        """Keep ``items`` (``size`` bytes of its own, after the chain of ``previous``) under ``response_id``,
        dropping the oldest past the caps."""
        size += self._sizes.get(previous, 0) if isinstance(previous, str) else 0
        self.bytes -= self._sizes.pop(response_id, 0)
        self[response_id] = items
        self._sizes[response_id] = size
        self.bytes += size
        while len(self._sizes) > 1 and (len(self._sizes) > MAX_STORED_RESPONSES or self.bytes > MAX_STORED_BYTES):
            oldest = next(iter(self._sizes))
            self.bytes -= self._sizes.pop(oldest)
            self.pop(oldest, None)


def expand(body: Any, stored: Mapping[str, list[Any]]) -> tuple[list[Any], Rejection | None]:
    """The conversation a request stands for: the chain of its ``previous_response_id`` (input and output items
    as `stored` holds them by response id), then its own ``input``; or the 400 for an id the server does not hold."""
    if not isinstance(body, dict):
        return [], None
    own = items_of(body.get("input"))
    previous = body.get("previous_response_id")
    if previous is None:
        return own, None
    chain = stored.get(str(previous))
    if chain is None:
        return own, _Refuse(NO_PREVIOUS.format(id=previous), "previous_response_id",
                            "previous_response_not_found").rejection
    return [*chain, *own], None


def validate_responses(body: Any, items: list[Any]) -> Rejection | None:
    """The real API's 400 for a Responses request it refuses (``items``: its conversation, `expand`), or None.

    Checked: the body's shape (``model``, ``input``, each item's ``role`` or ``type``, a call's ``call_id``, ``name``
    and ``arguments``, an output's ``call_id`` and ``output``), function ``tools``, and the pairing of calls with
    outputs over the whole conversation.  Unknown fields and item types pass, as the real API lets many through.
    The rules are `RULES`, walked in order: the first that refuses gives the 400.
    """
    try:
        for rule in RULES:
            rule(body, items)
    except _Refuse as refused:
        return refused.rejection
    return None


#: ``input`` of a type the API does not take.
BAD_INPUT = "Invalid type for 'input': expected one of a string or array of input items, but got {kind} instead."
#: A message's role is none of the API's.
BAD_ROLE = "Invalid value: {role}. Supported values are: 'assistant', 'system', 'developer', and 'user'."


def _body_is_an_object(body: Any, items: list[Any]) -> None:
    """`simloop.protocol.openai_chat.NOT_JSON`."""
    if not isinstance(body, dict):
        raise _Refuse(NOT_JSON, None)


def _required_fields(body: dict[str, Any], items: list[Any]) -> None:
    """"Missing required parameter: 'model'." (unless a stored ``prompt`` names it), the same for ``input`` (unless a
    ``previous_response_id`` or a stored prompt holds it); "Invalid type for 'model': expected a string, ..."."""
    stored_prompt = isinstance(body.get("prompt"), dict)  # a stored prompt names its model and may hold the input
    if "model" not in body and not stored_prompt:
        raise _missing("model")
    if "input" not in body and body.get("previous_response_id") is None and not stored_prompt:
        raise _missing("input")
    if "model" in body and not isinstance(body["model"], str):
        raise _bad_type("model", "a string", body["model"] if body["model"] is not None else {})


def _settings(body: dict[str, Any], items: list[Any]) -> None:
    """The settings' types and ranges, and the reasoning effort the model offers (`simloop.protocol.openai_rules`)."""
    _check_settings(body)


def _input_type(body: dict[str, Any], items: list[Any]) -> None:
    """`BAD_INPUT`: ``input`` is a string or a list of items."""
    value = body.get("input")
    if value is not None and not isinstance(value, (str, list)):
        raise _Refuse(BAD_INPUT.format(kind=type(value).__name__), "input", "invalid_type")


def _each_item(body: dict[str, Any], items: list[Any]) -> None:
    """Every item of the conversation, in order: an object ("Invalid type for 'input[0]': expected an object."), its
    id not seen before (`DUPLICATE_ITEM`), then the rule for its kind (`ITEM_RULES`); an output answering no call
    before it is `NO_CALL`."""
    calls: set[str] = set()
    ids: set[str] = set()
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _Refuse(f"Invalid type for '{where}': expected an object.", where, "invalid_type")
        if isinstance(item.get("id"), str):
            if item["id"] in ids:
                raise _Refuse(DUPLICATE_ITEM.format(id=item["id"]), "input")
            ids.add(item["id"])
        kind = _kind(item)
        rule = ITEM_RULES.get(kind)
        if rule is not None:
            rule(item, where, calls)
        elif kind.endswith("_call") and isinstance(item.get("call_id"), str):
            # a client-run call of another kind (``tool_search_call`` with ``execution: client``, a custom tool's
            # call) is answered by a function_call_output too (recorded: pydantic-ai
            # ``test_tool_availability_portability_matrix[R5-T3-native-search].yaml``, accepted)
            calls.add(item["call_id"])


def _message_item(item: dict[str, Any], where: str, calls: set[str]) -> None:
    """`BAD_ROLE`; "Missing required parameter: 'input[0].content'."; each content part names its ``type``."""
    role = item.get("role")
    if role not in _ROLES:
        raise _Refuse(BAD_ROLE.format(role=json.dumps(role)), f"{where}.role", "invalid_value")
    if "content" not in item:
        raise _missing(f"{where}.content")
    parts = item["content"] if isinstance(item["content"], list) else []
    for k, part in enumerate(parts):
        if isinstance(part, dict) and "type" not in part:
            raise _missing(f"{where}.content[{k}].type")


def _function_call_item(item: dict[str, Any], where: str, calls: set[str]) -> None:
    """A string ``call_id``, ``name`` and ``arguments`` ("Missing required parameter: 'input[1].arguments'.")."""
    for name in ("call_id", "name", "arguments"):
        if not isinstance(item.get(name), str):
            raise _missing(f"{where}.{name}")
    calls.add(item["call_id"])


def _function_call_output_item(item: dict[str, Any], where: str, calls: set[str]) -> None:
    """A string ``call_id`` and an ``output``; `NO_CALL` for an id no call before it has."""
    if not isinstance(item.get("call_id"), str):
        raise _missing(f"{where}.call_id")
    if "output" not in item:
        raise _missing(f"{where}.output")
    if item["call_id"] not in calls:
        raise _Refuse(NO_CALL.format(id=item["call_id"]), "input")


#: The item kinds with rules of their own (the kind: a ``type``, or ``message`` for a typeless item with a role).
ITEM_RULES: dict[str, Callable[[dict[str, Any], str, set[str]], None]] = {
    "message": _message_item,
    "function_call": _function_call_item,
    "function_call_output": _function_call_output_item,
}


def _calls_answered(body: dict[str, Any], items: list[Any]) -> None:
    """`NO_OUTPUT`: every ``function_call`` has its ``function_call_output``."""
    answered = {item["call_id"] for item in items if _kind(item) == "function_call_output"}
    unanswered = [x for x in _call_ids(items) if x not in answered]
    if unanswered:
        raise _Refuse(NO_OUTPUT.format(id=unanswered[0]), "input")


def _function_tools(body: dict[str, Any], items: list[Any]) -> None:
    """"Invalid type for 'tools': expected an array of objects."; a function tool's ``name``; a strict function's
    schema (`simloop.protocol.openai_rules.check_strict_schema`)."""
    tools = body.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _Refuse("Invalid type for 'tools': expected an array of objects.", "tools", "invalid_type")
    for k, t in enumerate(tools):
        if isinstance(t, dict) and t.get("type") == "function" and not isinstance(t.get("name"), str):
            raise _missing(f"tools[{k}].name")
        if isinstance(t, dict) and t.get("type") == "function" and t.get("strict") is True:
            rules.check_strict_schema(t["name"], t.get("parameters"), f"tools[{k}].parameters")


#: The rules in the order the real API reports them: each raises the 400 it finds (`openai_rules.Refuse`).
RULES: tuple[Callable[[Any, list[Any]], None], ...] = (
    _body_is_an_object,
    _required_fields,
    _settings,
    _input_type,
    _each_item,
    _calls_answered,
    _function_tools,
)


def _check_settings(body: dict[str, Any]) -> None:
    """The settings' types and ranges, and the reasoning effort the model offers (`simloop.protocol.openai_rules`)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad_type("stream", "a boolean", stream)
    rules.check_temperature(body)
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict):
        rules.check_effort(body.get("model"), reasoning.get("effort"), "reasoning.effort")


def _call_ids(items: list[Any]) -> list[str]:
    return [str(it["call_id"]) for it in items if _kind(it) == "function_call"]


# -- the request, in the Messages shape ---------------------------------------------------------------------------


def _user_blocks(content: Any) -> str | list[dict[str, Any]]:
    if not isinstance(content, list):
        return content if isinstance(content, str) else ""
    blocks: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "input_image":
            blocks.append(image_block(part.get("image_url", "")))
        else:
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
    return blocks


def _assistant_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", p.get("refusal", ""))) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def to_internal(body: dict[str, Any], items: list[Any]) -> dict[str, Any]:
    """The Messages-shaped request a (valid) Responses request stands for, ``items`` its conversation (`expand`).

    ``messages[k]`` of the result is the k-th item that becomes a message (system and developer messages join
    ``system``; a ``function_call`` joins the assistant turn before it; reasoning and other items are left out).
    """
    system: list[str] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        system.append(body["instructions"])
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = _kind(item)
        if kind == "message":
            role = item.get("role")
            if role in ("system", "developer"):
                system.append(_text_of(item.get("content")))
            elif role == "assistant":
                text = _assistant_text(item.get("content"))
                messages.append({"role": "assistant", "content": [{"type": "text", "text": text}] if text else []})
            else:
                messages.append({"role": "user", "content": _user_blocks(item.get("content"))})
        elif kind == "function_call":
            block = {"type": "tool_use", "id": item["call_id"], "name": item["name"],
                     "input": _arguments(item["arguments"])}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "assistant", "content": [block]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output)
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": item["call_id"], "content": text}]})
    internal: dict[str, Any] = {"model": model_of(body), "messages": messages}
    cap = body.get("max_output_tokens")
    internal["max_tokens"] = cap if isinstance(cap, int) and not isinstance(cap, bool) else DEFAULT_MAX_TOKENS
    if system:
        internal["system"] = "\n\n".join(system)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        choice = body.get("tool_choice")
        set_tools(internal, [t for t in tools if isinstance(t, dict) and t.get("type") == "function"],
                  tool_choice(choice, choice.get("name") if isinstance(choice, dict) else None),
                  body.get("parallel_tool_calls"))
    if body.get("stream"):
        internal["stream"] = True
    return internal


def model_of(body: Mapping[str, Any]) -> str:
    """The request's ``model``; `PROMPT_MODEL` for one naming only a stored ``prompt``."""
    model = body.get("model")
    return str(model) if model is not None else PROMPT_MODEL


# -- the reply, as a response object -------------------------------------------------------------------------------


def response_id(message_id: str) -> str:
    """``resp_`` and 50 hex digits, from the reply's id (deterministic: the same run, the same ids)."""
    return "resp_" + hashlib.blake2b(message_id.encode(), digest_size=25).hexdigest()


def _item_id(prefix: str, rid: str, k: int) -> str:
    """An output item's id: ``msg_``/``fc_`` and hex sharing the response's tail, as the real ids do."""
    return prefix + hashlib.blake2b(f"{rid}/{k}".encode(), digest_size=17).hexdigest()[:32] + rid[-18:]


def _status(stop_reason: str | None) -> tuple[str, dict[str, str] | None]:
    """A cut reply is ``incomplete`` (``max_output_tokens``); a refusal is a completed response whose message
    holds a ``refusal`` part (the API's refusal shape; ``content_filter`` is its filter cutting output, not the
    model declining)."""
    if stop_reason in CUT_STOPS:
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def output_items(turn: Turn, rid: str) -> list[dict[str, Any]]:
    """The ``output`` of a reply: one ``message`` (its text, or a ``refusal`` part) and a ``function_call`` per
    call (``arguments`` the JSON text; a call cut at ``max_tokens`` keeps the cut-off text).  Thinking and server
    tool blocks have no form here and are left out."""
    status, _ = _status(turn.stop_reason)
    texts = [str(b.get("text", "")) for b in turn.content if b.get("type") == "text"]
    items: list[dict[str, Any]] = []
    if turn.stop_reason == "refusal":
        part: dict[str, Any] = {"type": "refusal", "refusal": "".join(texts) or DEFAULT_REFUSAL}
        items.append({"id": _item_id("msg_", rid, 0), "type": "message", "status": status, "content": [part],
                      "role": "assistant"})
    elif texts:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": "".join(texts)}
        items.append({"id": _item_id("msg_", rid, 0), "type": "message", "status": "completed", "content": [part],
                      "role": "assistant"})
    for block in turn.content:
        if block.get("type") != "tool_use":
            continue
        args = block["partial_json"] if "partial_json" in block else to_json(block.get("input", {})).decode()
        items.append({"id": _item_id("fc_", rid, len(items)), "type": "function_call", "status": "completed",
                      "arguments": args, "call_id": block["id"], "name": block["name"]})
    if status == "incomplete" and items:
        items[-1]["status"] = "incomplete"
    return items


def _usage(message: Mapping[str, Any]) -> dict[str, Any]:
    usage = message.get("usage") or {}
    prompt, written, read = cache_tokens(usage)
    completion = int(usage.get("output_tokens") or 0)
    # ``cache_write_tokens``: every recorded response since 2026-07-10 carries it, and openai 3.63 declares it
    # required (a strict parse fails without it)
    return {"input_tokens": prompt, "input_tokens_details": {"cache_write_tokens": written, "cached_tokens": read},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def _frame(body: dict[str, Any], *, rid: str, created: int, model: str) -> dict[str, Any]:
    """The fields of a ``response`` object that echo its request and its settings."""
    sent = body.get("tools")
    tools: list[Any] = sent if isinstance(sent, list) else []
    return {
        "id": rid, "object": "response", "created_at": created, "status": "in_progress", "background": False,
        "billing": {"payer": "developer"}, "completed_at": None, "error": None, "frequency_penalty": 0.0,
        "incomplete_details": None, "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"), "max_tool_calls": body.get("max_tool_calls"),
        "metadata": body.get("metadata") or {}, "model": model, "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True), "presence_penalty": 0.0,
        "previous_response_id": body.get("previous_response_id"), "prompt_cache_key": None,
        "prompt_cache_retention": None, "reasoning": {"effort": None, "summary": None}, "safety_identifier": None,
        "service_tier": "default", "store": body.get("store", True), "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": [{"type": "function", "description": None, "parameters": None, "strict": True, **t}
                  if isinstance(t, dict) and t.get("type") == "function" else t for t in tools],
        "top_logprobs": 0, "top_p": 1.0,
        "truncation": "auto" if body.get("truncation") == "auto" else "disabled", "usage": None, "user": None,
        **({"prompt": body["prompt"]} if isinstance(body.get("prompt"), dict) else {}),
    }


def render_response(
    turn: Turn, message: Mapping[str, Any], body: dict[str, Any], *, model: str, created: int,
) -> dict[str, Any]:
    """The ``response`` object for ``turn`` (``message``: its Messages form, for the id and usage; ``body``: the
    request, whose settings a response echoes)."""
    rid = response_id(str(message["id"]))
    status, details = _status(turn.stop_reason)
    return {**_frame(body, rid=rid, created=created, model=model), "status": status,
            "completed_at": created if status == "completed" else None, "incomplete_details": details,
            "output": output_items(turn, rid), "usage": _usage(message)}


def _pieces(text: str) -> list[str]:
    return [text[k : k + 12] for k in range(0, len(text), 12)]


def render_events(
    turn: Turn, message: Mapping[str, Any], body: dict[str, Any], *, model: str, created: int,
) -> list[bytes]:
    """The SSE stream of ``turn``: ``response.created``, ``response.in_progress``, each output item's added,
    delta, done events, then ``response.completed`` (or ``response.incomplete``).  A turn cut before its end
    (``stop_reason`` None) stops after its deltas."""
    rid = response_id(str(message["id"]))
    final = render_response(turn, message, body, model=model, created=created)
    frame = _frame(body, rid=rid, created=created, model=model)
    events: list[bytes] = []

    def emit(kind: str, payload: dict[str, Any]) -> None:
        data = {"type": kind, "sequence_number": len(events), **payload}
        if kind.endswith(".delta"):  # the padding the live API adds to deltas (``stream_options.include_obfuscation``)
            data["obfuscation"] = hashlib.blake2b(f"{rid}/{len(events)}".encode(), digest_size=8).hexdigest()[
                : 16 - min(len(payload["delta"]), 12)]
        events.append(b"event: " + kind.encode() + b"\ndata: " + to_json(data) + b"\n\n")

    emit("response.created", {"response": frame})
    emit("response.in_progress", {"response": frame})
    cut = turn.stop_reason is None
    for k, item in enumerate(final["output"]):
        where = {"item_id": item["id"], "output_index": k}
        if item["type"] == "message":
            emit("response.output_item.added", {"output_index": k, "item": {**item, "status": "in_progress",
                                                                             "content": []}})
            part = item["content"][0]
            refusal = part["type"] == "refusal"
            text = part["refusal"] if refusal else part["text"]
            emit("response.content_part.added", {**where, "content_index": 0,
                                                 "part": {**part, ("refusal" if refusal else "text"): ""}})
            for piece in _pieces(text):
                if refusal:
                    emit("response.refusal.delta", {**where, "content_index": 0, "delta": piece})
                else:
                    emit("response.output_text.delta", {**where, "content_index": 0, "delta": piece, "logprobs": []})
            if cut:
                return events
            if refusal:
                emit("response.refusal.done", {**where, "content_index": 0, "refusal": text})
            else:
                emit("response.output_text.done", {**where, "content_index": 0, "text": text, "logprobs": []})
            emit("response.content_part.done", {**where, "content_index": 0, "part": part})
        else:
            emit("response.output_item.added", {"output_index": k, "item": {**item, "status": "in_progress",
                                                                             "arguments": ""}})
            for piece in _pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", {**where, "delta": piece})
            if cut:
                return events
            emit("response.function_call_arguments.done", {**where, "name": item["name"],
                                                           "arguments": item["arguments"]})
        emit("response.output_item.done", {"output_index": k, "item": item})
    if cut:
        return events
    emit("response.incomplete" if final["status"] == "incomplete" else "response.completed", {"response": final})
    return events


def stream_error_event(sequence_number: int) -> bytes:
    """An error in the middle of a stream, as the live API sends it: an ``error`` event whose fields are nested
    under ``error`` (so the ``openai`` SDK raises ``APIError``), not flat as the API reference documents them
    (openai/openai-dotnet#881, zendev-sh/goai#88, stdapi-ai/stdapi.ai#294)."""
    error = {"type": "server_error", "code": "server_error", "param": None,
             "message": "The server had an error while processing your request. Sorry about that!"}
    data = {"type": "error", "sequence_number": sequence_number, "error": error}
    return b"event: error\ndata: " + to_json(data) + b"\n\n"


def created_at(now: float) -> int:
    """``created_at``: 2026-01-01 plus the run's virtual seconds (the same epoch as Chat Completions)."""
    return CREATED_EPOCH + int(now)
