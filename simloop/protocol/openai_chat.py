"""The OpenAI wire, Chat Completions: one world, a second wire (docs/design.md, The OpenAI wire).

The simulated API keeps one model of the world, in the Messages shape the simulator, the
generated model and the invariants read.  This module is the edge between that world and
``POST /v1/chat/completions``, in both directions:

* `validate_chat` answers what the real Chat Completions API refuses with its own 400 texts
  (a ``tool_calls`` turn answered in part, a ``tool`` message answering nothing, ...);
* `to_internal` translates the request: system and developer messages become ``system``, an
  assistant's ``tool_calls`` become ``tool_use`` blocks with the same ids, each ``tool`` message
  a user message holding one ``tool_result`` (consecutive ones are one turn, as the Messages API
  merges consecutive user messages), ``tools`` and ``tool_choice`` their Messages forms;
* `render_completion` and `render_chunks` turn a reply back into a ``chat.completion`` object or
  its ``chat.completion.chunk`` stream (``data:`` lines, then ``data: [DONE]``);
* `chat_error` re-renders an error in the OpenAI envelope ``{"error": {"message", "type",
  "param", "code"}}`` with the headers the ``openai`` SDK reads to retry.

Nothing here imports the ``openai`` SDK: the wire is JSON, and the SDK stays the loop's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import to_json

from simloop.protocol import openai_rules as rules
from simloop.protocol.render import Turn
from simloop.protocol.validate import Rejection

__all__ = [
    "CHAT_COMPLETIONS",
    "chat_error",
    "chat_error_body",
    "chat_error_headers",
    "completion_id",
    "finish_reason",
    "render_chunks",
    "render_completion",
    "set_tools",
    "to_internal",
    "tool_choice",
    "validate_chat",
]

CHAT_COMPLETIONS = "/v1/chat/completions"
#: The fake key simloop gives the ``openai`` SDKs, which will not start without one (the simulated API takes any).
#: ``created`` of a completion: this epoch (2026-01-01T00:00:00Z) plus the run's virtual seconds, so a run's
#: responses are the same bytes on every run.
CREATED_EPOCH = 1_767_225_600
#: ``max_tokens`` of the internal request when the loop sets neither ``max_completion_tokens`` nor ``max_tokens``
#: (the Chat Completions API needs none).
DEFAULT_MAX_TOKENS = 4096
#: The text of a refusal whose reply carries none (the API always sends one in ``message.refusal``).
DEFAULT_REFUSAL = "I'm sorry, but I can't help with that request."
_FINGERPRINT = "fp_51m100p0e1"
_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_INVALID = "invalid_request_error"

# -- the real API's 400s (texts as recorded in public issue threads, see docs/design.md) -------------------------

#: A ``tool_calls`` turn not answered by the tool messages right after it.
MISSING_RESPONSES = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
    "The following tool_call_ids did not have response messages: {ids}"
)
#: A ``tool`` message with no ``tool_calls`` turn right before it (the API's own spelling of "preceding").
ORPHAN_TOOL = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
#: A ``tool`` message right after a ``tool_calls`` turn, answering an id that turn did not ask for.
UNKNOWN_CALL = "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."


_Refuse = rules.Refuse
_missing = rules.missing
_bad_type = rules.bad_type
#: A user message's part the model does not read (recorded: pydantic-ai ``test_multimodal_tool_returns/
#: test_multimodal_tool_return_matrix[direct-url-audio-openai_chat].yaml``, an ``input_audio`` part sent to gpt-4o).
NOT_TEXT_OR_IMAGE = "Invalid '{where}'. Content blocks are expected to be either text or image_url type."


def validate_chat(body: Any) -> Rejection | None:
    """The real API's 400 for a Chat Completions request it refuses, or None for one it accepts.

    Checked: the body's shape (``model``, ``messages`` and each message's ``role``, the tool messages'
    ``tool_call_id``, the assistant's ``tool_calls``), ``tools`` and ``tool_choice``, and the pairing of
    ``tool_calls`` with ``tool`` messages.  Unknown fields pass, as the real API lets many through.  The rules are
    `RULES`, walked in order: the first that refuses gives the 400.
    """
    try:
        for rule in RULES:
            rule(body)
    except _Refuse as refused:
        return refused.rejection
    return None


#: The body is not a JSON object.
NOT_JSON = ("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
            "library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
#: No ``model``.
NO_MODEL = "you must provide a model parameter"
#: ``messages`` is an empty list.
NO_MESSAGES = ("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array "
               "instead.")
#: A message's role is none of the API's.
BAD_ROLE = ("Invalid value: {role}. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and "
            "'developer'.")


def _body_is_an_object(body: Any) -> None:
    """`NOT_JSON`."""
    if not isinstance(body, dict):
        raise _Refuse(NOT_JSON, None)


def _model_field(body: dict[str, Any]) -> None:
    """`NO_MODEL`; "Invalid type for 'model': expected a string, but got an integer instead." (null: an object)."""
    if "model" not in body:
        raise _Refuse(NO_MODEL, None)
    if not isinstance(body["model"], str):  # null too: the API calls it an object
        raise _bad_type("model", "a string", body["model"] if body["model"] is not None else {})


def _messages_field(body: dict[str, Any]) -> None:
    """"Missing required parameter: 'messages'.", "Invalid type for 'messages': expected an array of objects, ...",
    `NO_MESSAGES`."""
    messages = body.get("messages")
    if "messages" not in body:
        raise _missing("messages")
    if not isinstance(messages, list):
        raise _bad_type("messages", "an array of objects", messages)
    if not messages:
        raise _Refuse(NO_MESSAGES, "messages", "empty_array")


def _each_message(body: dict[str, Any]) -> None:
    """Every message's shape, in order (`_check_message`)."""
    model = str(body["model"])
    for i, m in enumerate(body["messages"]):
        _check_message(m, i, model)


def _check_message(m: Any, i: int, model: str) -> None:
    """An object with a known ``role`` (`BAD_ROLE`), a tool message's ``tool_call_id``, ``content`` where the role
    needs it ("Missing required parameter: 'messages[1].content'."), its parts, an assistant's ``tool_calls``."""
    if not isinstance(m, dict):
        raise _bad_type(f"messages[{i}]", "an object", m)
    if "role" not in m:
        raise _missing(f"messages[{i}].role")
    role = m["role"]
    if role not in _ROLES:
        raise _Refuse(BAD_ROLE.format(role=json.dumps(role)), f"messages[{i}].role", "invalid_value")
    if role == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise _missing(f"messages[{i}].tool_call_id")
    if role in ("user", "system", "developer", "tool") and "content" not in m:
        raise _missing(f"messages[{i}].content")
    _check_parts(m, i, model)
    calls = m.get("tool_calls") if role == "assistant" else None
    if calls is not None:
        _check_tool_calls(calls, i)


def _check_tool_calls(calls: Any, i: int) -> None:
    """An array of calls, each with a string ``id`` and a ``function`` with a valid ``name`` and string
    ``arguments`` ("Missing required parameter: 'messages[1].tool_calls[0].function.arguments'.")."""
    if not isinstance(calls, list):
        raise _bad_type(f"messages[{i}].tool_calls", "an array of objects", calls)
    for k, c in enumerate(calls):
        where = f"messages[{i}].tool_calls[{k}]"
        if not isinstance(c, dict):
            raise _bad_type(where, "an object", c)
        for name in ("id", "function"):
            if name not in c:
                raise _missing(f"{where}.{name}")
        if not isinstance(c["id"], str):
            raise _bad_type(f"{where}.id", "a string", c["id"])
        fn = c["function"]
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _missing(f"{where}.function.name")
        rules.check_name(fn["name"], f"{where}.function.name")
        if not isinstance(fn.get("arguments"), str):
            raise _missing(f"{where}.function.arguments")


def _check_parts(message: dict[str, Any], i: int, model: str) -> None:
    """A message's content parts: each names its ``type``; a user's ``input_audio`` needs an audio model."""
    content = message.get("content")
    if not isinstance(content, list):
        return
    for k, part in enumerate(content):
        if isinstance(part, dict) and "type" not in part:
            raise _missing(f"messages[{i}].content[{k}].type")
        if isinstance(part, dict) and part.get("type") == "input_audio" and "audio" not in model:
            raise _Refuse(NOT_TEXT_OR_IMAGE.format(where=f"messages[{i}]"), f"messages[{i}]", "invalid_value")


def _check_settings(body: dict[str, Any]) -> None:
    """The settings' types and ranges, and what the model does not take (`simloop.protocol.openai_rules`)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad_type("stream", "a boolean", stream)
    for name in ("max_tokens", "max_completion_tokens"):
        rules.check_token_cap(body, name)
    rules.check_temperature(body)
    rules.check_stop(body)
    rules.check_effort(body["model"], body.get("reasoning_effort"), "reasoning_effort")


def _check_tools(body: dict[str, Any]) -> None:
    """Function tools with a valid ``name`` and, when strict, a strict schema (`simloop.protocol.openai_rules`);
    "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad_type("tools", "an array of objects", tools)
        for k, t in enumerate(tools):
            if not isinstance(t, dict):
                raise _bad_type(f"tools[{k}]", "an object", t)
            if t.get("type", "function") == "function":
                fn = t.get("function")
                if not isinstance(fn, dict):
                    raise _missing(f"tools[{k}].function")
                if not isinstance(fn.get("name"), str):
                    raise _missing(f"tools[{k}].function.name")
                rules.check_name(fn["name"], f"tools[{k}].function.name")
                if fn.get("strict") is True:
                    rules.check_strict_schema(fn["name"], fn.get("parameters"), f"tools[{k}].function.parameters")
    for name in ("tool_choice", "parallel_tool_calls"):
        if body.get(name) is not None and not tools:
            raise _Refuse(f"Invalid value for '{name}': '{name}' is only allowed when 'tools' are specified.",
                          name, None)


def _check_pairing(body: dict[str, Any]) -> None:
    """Each ``tool_calls`` turn is followed by one tool message per call (`MISSING_RESPONSES`, `UNKNOWN_CALL`); a
    tool message follows such a turn (`ORPHAN_TOOL`)."""
    messages: list[dict[str, Any]] = body["messages"]
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        calls = m.get("tool_calls") if m["role"] == "assistant" else None
        if calls:
            ids = [str(c["id"]) for c in calls]
            answered: set[str] = set()
            j = i + 1
            while j < n and messages[j]["role"] == "tool":
                tid = str(messages[j]["tool_call_id"])
                if tid not in ids:
                    raise _Refuse(UNKNOWN_CALL.format(id=tid), None)
                answered.add(tid)
                j += 1
            missing = [x for x in ids if x not in answered]
            if missing:
                raise _Refuse(MISSING_RESPONSES.format(ids=", ".join(missing)), f"messages.[{i}].role")
            i = j
            continue
        if m["role"] == "tool":
            raise _Refuse(ORPHAN_TOOL, f"messages.[{i}].role")
        i += 1


#: The rules in the order the real API reports them: each raises the 400 it finds (`openai_rules.Refuse`).
RULES: tuple[Callable[[Any], None], ...] = (
    _body_is_an_object,
    _model_field,
    _messages_field,
    _each_message,
    _check_settings,
    _check_tools,
    _check_pairing,
)


# -- the request, in the Messages shape ---------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """A message's text: its string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return ""


_DATA_URI = re.compile(r"data:([\w.+/-]+);base64,", re.ASCII)


def image_block(url: Any) -> dict[str, Any]:
    """An image part's Messages form: a ``data:...;base64,`` URI as a base64 source (so the context window counts
    it as the API does, by its pixels, `simloop.protocol.validate.IMAGE_TOKENS` at most, not by its bytes: issue 42 measured 1.4 MB data
    URIs billed 1,118 input tokens), any other URL as a URL source."""
    text = str(url)
    found = _DATA_URI.match(text)
    if found is not None:
        return {"type": "image", "source": {"type": "base64", "media_type": found.group(1),
                                            "data": text[found.end():]}}
    return {"type": "image", "source": {"type": "url", "url": text}}


def _user_blocks(content: Any) -> str | list[dict[str, Any]]:
    if not isinstance(content, list):
        return content if isinstance(content, str) else ""
    blocks: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            blocks.append(image_block(url))
        else:
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
    return blocks


def _arguments(text: str) -> Any:
    """A tool call's input: its ``arguments`` parsed, or the string as sent when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def to_internal(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages-shaped request ``body`` (a valid Chat Completions request) stands for.

    Message order is kept, less the system and developer messages (joined, in order, as ``system``):
    ``messages[k]`` of the result is the k-th message that is not a system message.  Settings with a
    Messages counterpart are carried (``max_completion_tokens`` or ``max_tokens``, ``stop``, ``stream``,
    ``model``); the others do not reach the model.
    """
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for m in body["messages"]:
        role = m["role"]
        content = m.get("content")
        if role in ("system", "developer"):
            system.append(_text_of(content))
        elif role == "user" or role == "function":
            messages.append({"role": "user", "content": _user_blocks(content)})
        elif role == "tool":
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": _text_of(content)}]})
        else:  # assistant
            blocks: list[dict[str, Any]] = []
            text = _text_of(content) or (m.get("refusal") if isinstance(m.get("refusal"), str) else "")
            if text:
                blocks.append({"type": "text", "text": text})
            for c in m.get("tool_calls") or []:
                fn = c["function"]
                blocks.append({"type": "tool_use", "id": c["id"], "name": fn["name"],
                               "input": _arguments(fn["arguments"])})
            messages.append({"role": "assistant", "content": blocks})
    internal: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    internal["max_tokens"] = cap if isinstance(cap, int) and not isinstance(cap, bool) else DEFAULT_MAX_TOKENS
    if system:
        internal["system"] = "\n\n".join(system)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        choice = body.get("tool_choice")
        named = choice.get("function") if isinstance(choice, dict) else None
        set_tools(internal, [t["function"] for t in tools if isinstance(t, dict) and t.get("type", "function") == "function"],
                  tool_choice(choice, named.get("name") if isinstance(named, dict) else None),
                  body.get("parallel_tool_calls"))
    stop = body.get("stop")
    if isinstance(stop, str) and stop:
        internal["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        internal["stop_sequences"] = [s for s in stop if isinstance(s, str)]
    if body.get("stream"):
        internal["stream"] = True
    return internal


def set_tools(internal: dict[str, Any], functions: list[dict[str, Any]], choice: dict[str, Any] | None,
              parallel: Any) -> None:
    """Put an OpenAI request's function tools (each a ``name``, ``description`` and ``parameters``), its tool choice
    (`tool_choice`'s) and its ``parallel_tool_calls`` into ``internal``, the Messages request it stands for (both
    wires: Chat Completions nests each function under ``function``, Responses does not)."""
    internal["tools"] = [_function_tool(fn) for fn in functions]
    if parallel is False:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        internal["tool_choice"] = choice


def _function_tool(fn: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": fn["name"]}
    if isinstance(fn.get("description"), str):
        out["description"] = fn["description"]
    params = fn.get("parameters")
    out["input_schema"] = params if isinstance(params, dict) else {"type": "object", "properties": {}}
    return out


def tool_choice(choice: Any, name: Any) -> dict[str, Any] | None:
    """The Messages API's ``tool_choice`` for an OpenAI one (``name``: the function a ``{"type": "function"}``
    choice names, where its wire puts it)."""
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(name, str):
        return {"type": "tool", "name": name}
    return None


# -- the reply, as a chat.completion --------------------------------------------------------------------------------

# A refusal is ``finish_reason: "stop"`` with the text in ``message.refusal`` and ``content`` null, as the real API
# answers one (22 recorded answers, JSON and SSE, measured in issue 42; the openai SDK's ``parse()`` returns such a
# refusal and raises ``ContentFilterFinishReasonError`` only on ``content_filter``); ``content_filter`` is the
# moderation cutting output off, which the simulator does not model.
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
           "model_context_window_exceeded": "length",
           "tool_use": "tool_calls", "refusal": "stop"}


def finish_reason(stop_reason: str | None) -> str | None:
    """The ``finish_reason`` for a Messages ``stop_reason`` (a refusal is ``stop``: its text is in ``refusal``)."""
    return _FINISH.get(stop_reason, "stop") if stop_reason is not None else None


def completion_id(message_id: str) -> str:
    """``chatcmpl-...`` from the reply's id (deterministic: the same run, the same ids)."""
    return "chatcmpl-" + message_id.removeprefix("msg_01")


def _parts(turn: Turn) -> tuple[str, list[dict[str, Any]]]:
    """The reply's text and its tool calls (``arguments`` as the JSON text; a call cut at ``max_tokens`` keeps the
    cut-off text).  Thinking and server tool blocks have no Chat Completions form and are left out."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in turn.content:
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            args = block["partial_json"] if "partial_json" in block else to_json(block.get("input", {})).decode()
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": args}})
    return "".join(texts), calls


def cache_tokens(usage: Mapping[str, Any]) -> tuple[int, int, int]:
    """The prompt's tokens as an OpenAI wire counts them, from the reply's Messages usage: (all input tokens,
    cache writes, cache reads).  The Messages API counts cache tokens apart; OpenAI's input count holds them."""
    written = int(usage.get("cache_creation_input_tokens") or 0)
    read = int(usage.get("cache_read_input_tokens") or 0)
    return int(usage.get("input_tokens") or 0) + written + read, written, read


def _usage(message: Mapping[str, Any]) -> dict[str, Any]:
    usage = message.get("usage") or {}
    prompt, written, read = cache_tokens(usage)
    completion = int(usage.get("output_tokens") or 0)
    details: dict[str, Any] = {"cached_tokens": read, "audio_tokens": 0}
    if written:
        details["cache_write_tokens"] = written
    return {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def render_completion(turn: Turn, message: Mapping[str, Any], *, model: str, created: int) -> dict[str, Any]:
    """The ``chat.completion`` object for ``turn`` (``message`` is its Messages form: id and usage)."""
    text, calls = _parts(turn)
    reason = finish_reason(turn.stop_reason)
    out: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None, "annotations": []}
    if turn.stop_reason == "refusal":
        out["content"], out["refusal"] = None, text or DEFAULT_REFUSAL
    if calls:
        out["tool_calls"] = calls
    return {
        "id": completion_id(str(message["id"])), "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": out, "logprobs": None, "finish_reason": reason}],
        "usage": _usage(message), "service_tier": "default", "system_fingerprint": _FINGERPRINT,
    }


def _chunk_piece(text: str) -> list[str]:
    """Text in the small pieces a stream sends (a few characters each, as tokens arrive)."""
    return [text[k : k + 12] for k in range(0, len(text), 12)] or [""]


def render_chunks(
    turn: Turn, message: Mapping[str, Any], *, model: str, created: int, include_usage: bool = False,
) -> list[bytes]:
    """The SSE stream of ``turn``: ``data: {chat.completion.chunk}`` lines, the usage chunk when the request asked
    for it (``stream_options.include_usage``), then ``data: [DONE]``.  A turn cut before its end (``stop_reason``
    None) ends after its content with no finish_reason and no ``[DONE]``."""
    head = {"id": completion_id(str(message["id"])), "object": "chat.completion.chunk", "created": created,
            "model": model, "service_tier": "default", "system_fingerprint": _FINGERPRINT}
    usage_field = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
        payload = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
                   **usage_field}
        return b"data: " + to_json(payload) + b"\n\n"

    text, calls = _parts(turn)
    reason = finish_reason(turn.stop_reason)
    refused = turn.stop_reason == "refusal"
    # the first delta: the role, and "" for the content a text reply streams (null for calls or a refusal only)
    events = [chunk({"role": "assistant", "content": "" if text and not refused else None, "refusal": None})]
    if refused:
        events += [chunk({"refusal": piece}) for piece in _chunk_piece(text or DEFAULT_REFUSAL)]
    elif text:
        events += [chunk({"content": piece}) for piece in _chunk_piece(text)]
    for k, call in enumerate(calls):
        fn = call["function"]
        events.append(chunk({"tool_calls": [{"index": k, "id": call["id"], "type": "function",
                                             "function": {"name": fn["name"], "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
                   for piece in _chunk_piece(fn["arguments"]) if piece]
    if reason is None:
        return events
    events.append(chunk({}, reason))
    if include_usage:
        events.append(b"data: " + to_json({**head, "choices": [], "usage": _usage(message)}) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def stream_error_event(message: str = "The server had an error while processing your request. Sorry about that!") -> bytes:
    """An error in the middle of a stream: a ``data:`` line holding an error envelope (the SDK raises ``APIError``)."""
    return b"data: " + to_json({"error": {"message": message, "type": "server_error", "param": None, "code": None}}) + b"\n\n"


# -- errors ---------------------------------------------------------------------------------------------------------

#: status -> (error.type, error.code, message) of the real API for the statuses a scenario can script.
STATUS_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: (_INVALID, None, "Invalid request."),
    401: (_INVALID, "invalid_api_key", ("Incorrect API key provided. You can find your API key at "
                                        "https://platform.openai.com/account/api-keys.")),
    403: (_INVALID, "unsupported_country_region_territory", "Country, region, or territory not supported"),
    404: (_INVALID, "model_not_found", "The model does not exist or you do not have access to it."),
    408: ("timeout", None, "Request timed out."),
    409: (_INVALID, None, "Conflict."),
    413: (_INVALID, "request_too_large", "Request too large."),
    429: ("tokens", "rate_limit_exceeded", (
        "Rate limit reached for {model} in organization org-simloop on tokens per min (TPM): Limit 30000, Used 29112, "
        "Requested 1543. Please try again in {wait}. Visit https://platform.openai.com/account/rate-limits to learn more."
    )),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
    504: ("server_error", None, "Gateway timeout."),
}
#: Statuses the Messages API has and Chat Completions does not: served as their nearest equivalent.
STATUS_MAP = {529: 503}


def chat_error_body(
    status: int, *, message: str | None = None, type: str | None = None, param: str | None = None,
    code: str | None = None, model: str = "gpt-4o", retry_after: float | None = None,
) -> bytes:
    """The JSON error envelope ``{"error": {"message", "type", "param", "code"}}``."""
    default_type, default_code, default_message = STATUS_ERRORS.get(status, ("server_error", None,
                                                                              STATUS_ERRORS[500][2]))
    if message is None:
        wait = f"{retry_after:g}s" if retry_after is not None else "1s"
        message = default_message.format(model=model, wait=wait)
        code = code if code is not None else default_code
    error = {"message": message, "type": type or default_type, "param": param, "code": code}
    return to_json({"error": error})


def chat_error_headers(status: int, *, request_id: str, retry_after: float | None = None) -> list[tuple[str, str]]:
    """An error's headers: ``x-request-id``; on a 429 or 503 the ``retry-after-ms`` and ``retry-after`` the SDK
    reads to time its retry; ``x-should-retry: false`` on the 4xx it must not retry."""
    headers = [("content-type", "application/json"), ("x-request-id", request_id)]
    if status in (429, 503):
        wait = retry_after if retry_after is not None else 1.0
        headers += [("retry-after-ms", str(int(wait * 1000))), ("retry-after", str(max(1, round(wait))))]
    elif 400 <= status < 500 and status not in (408, 409):
        headers.append(("x-should-retry", "false"))
    return headers


def chat_error(
    status: int, *, request_id: str, model: str, rejection: Rejection | None = None, retry_after: float | None = None,
) -> tuple[int, bytes, list[tuple[str, str]]]:
    """An error the simulator decided (a fault, a 400), as the Chat Completions API sends it: status, body, headers.

    A rejection carries its text, and its ``param`` and ``code`` in ``details``; without one, the status's own
    error (`STATUS_ERRORS`; a Messages-only status such as 529 is served as `STATUS_MAP` says).
    """
    status = STATUS_MAP.get(status, status)
    if rejection is not None:
        details = rejection.details or {}
        body = chat_error_body(status, message=rejection.message, type=_INVALID, param=details.get("param"),
                               code=details.get("code"))
    elif status == 404:
        body = chat_error_body(404, message=f"The model `{model}` does not exist or you do not have access to it.",
                               code="model_not_found")
    else:
        body = chat_error_body(status, model=model, retry_after=retry_after)
    return status, body, chat_error_headers(status, request_id=request_id, retry_after=retry_after)
