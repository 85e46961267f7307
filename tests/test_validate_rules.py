"""The validators as tables of rules (issue 43 item 2): each rule is one function, with one example here.

`simloop.protocol.validate.RULES` (the Messages API), `openai_chat.RULES` and `openai_responses.RULES` list each
wire's rules in the order the real API reports them; one loop walks a table and the first rule that refuses gives
the 400.  Here every rule of every table has an example request that it, and no rule before it, refuses, with the
exact text (a new rule is one function in its table and one row here: the coverage test says which row is
missing).  A property holds the loop to the table: over bodies mutated from the examples, the answer is the first
answer of the rules called one by one, and a `ConversationValidator` that saw another request first agrees.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simloop.protocol import openai_chat, openai_responses, validate
from simloop.protocol.openai_rules import Refuse
from simloop.protocol.validate import ConversationValidator, Rejection, thinking_signature, validate_messages_request

_SEARCH = {"name": "search", "input_schema": {"type": "object"}}
_USE = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}
_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
_PAIRING = (
    "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each `tool_use` "
    "block must have a corresponding `tool_result` block in the next message."
)
_THINKING_FIRST = (
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is "
    "enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of "
    "`tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid "
    "this requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


def _body(*messages: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 4096, "messages": list(messages), **fields}


def _user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def _assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


_THOUGHT = {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCkgIARAB"}

#: Messages API: rule -> (body, signed_by_sim, the exact 400 text).
MESSAGES: dict[str, tuple[Any, bool, str]] = {
    "_body_is_an_object": ([], False, "Input should be a valid dictionary or object to extract fields from"),
    "_required_fields": ({"model": "m", "messages": [_user("hi")]}, False, "max_tokens: Field required"),
    "_field_types": (_body(_user("hi"), max_tokens="64"), False, "max_tokens: Input should be a valid integer"),
    "_max_tokens_at_least_one": (
        _body(_user("hi"), max_tokens=0), False, "max_tokens: Input should be greater than or equal to 1"
    ),
    "_optional_fields": (_body(_user("hi"), system=3), False, "system: Input should be a valid list"),
    "_messages_shape": (
        _body({"role": "bot", "content": "hi"}), False, "messages.0.role: Input should be 'user', 'assistant' or 'system'"
    ),
    "_thinking_setting": (
        _body(_user("hi"), thinking={"type": "enabled", "budget_tokens": 100}),
        False,
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
    ),
    "_tool_definitions": (
        _body(_user("hi"), tools=[{"name": "a b", "input_schema": {"type": "object"}}]),
        False,
        "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
    ),
    "_at_least_one_message": (_body(), False, "messages: at least one message is required"),
    "_temperature_with_thinking": (
        _body(_user("hi"), thinking={"type": "adaptive"}, temperature=0.5),
        False,
        "`temperature` may only be set to 1 when thinking is enabled.",
    ),
    "_unique_tool_names": (_body(_user("hi"), tools=[_SEARCH, _SEARCH]), False, "tools: Tool names must be unique."),
    "_content_and_ids": (
        _body(_user("")),
        False,
        "messages.0: all messages must have non-empty content except for the optional final assistant message",
    ),
    "_tool_pairing": (_body(_user("hi"), _assistant([_USE]), _user("and?")), False, _PAIRING),
    "_server_tool_results": (
        _body(
            _user("hi"),
            _assistant([{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}]),
            _user("Continue."),
        ),
        False,
        ("messages.1: `web_search` tool use with id srvtoolu_1 was found without a corresponding "
         "`web_search_tool_result` block"),
    ),
    "_cache_breakpoints": (
        _body(_user([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}] * 5)),
        False,
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    "_thinking_opens_the_tool_turn": (
        _body(_user("hi"), _assistant([_USE]), _user([_RESULT]), thinking={"type": "enabled", "budget_tokens": 2048}),
        False,
        _THINKING_FIRST,
    ),
    "_no_thinking_in_final_message": (
        _body(_user("hi"), _assistant([_THOUGHT, {"type": "text", "text": "So"}])),
        False,
        ("messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot "
         "contain `thinking`. To use thinking blocks, enable `thinking` in your request."),
    ),
    "_thinking_signatures": (
        _body(_user("hi"), _assistant([_THOUGHT, {"type": "text", "text": "Done."}]), _user("Thanks.")),
        True,
        "messages.1.content.0: Invalid `signature` in `thinking` block",
    ),
}

#: Chat Completions: rule -> (body, the exact 400 text).
CHAT: dict[str, tuple[Any, str]] = {
    "_body_is_an_object": ([], openai_chat.NOT_JSON),
    "_model_field": ({"messages": [{"role": "user", "content": "hi"}]}, openai_chat.NO_MODEL),
    "_messages_field": ({"model": "gpt-4o", "messages": []}, openai_chat.NO_MESSAGES),
    "_each_message": (
        {"model": "gpt-4o", "messages": [{"role": "bot", "content": "hi"}]},
        ("Invalid value: \"bot\". Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and "
         "'developer'."),
    ),
    "_check_settings": (
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"},
        "Invalid type for 'stream': expected a boolean, but got a string instead.",
    ),
    "_check_tools": (
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"},
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
    ),
    "_check_pairing": (
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"},
                                         {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]},
        openai_chat.ORPHAN_TOOL,
    ),
}

_CALL = {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": "{}"}
#: Responses: rule -> (body, the exact 400 text); the conversation is the body's own input.
RESPONSES: dict[str, tuple[Any, str]] = {
    "_body_is_an_object": ([], openai_chat.NOT_JSON),
    "_required_fields": ({"input": "hi"}, "Missing required parameter: 'model'."),
    "_settings": (
        {"model": "gpt-4o", "input": "hi", "temperature": -1},
        "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got -1 instead.",
    ),
    "_input_type": (
        {"model": "gpt-4o", "input": 3},
        "Invalid type for 'input': expected one of a string or array of input items, but got int instead.",
    ),
    "_each_item": ({"model": "gpt-4o", "input": ["hi"]}, "Invalid type for 'input[0]': expected an object."),
    "_calls_answered": (
        {"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}, _CALL]},
        "No tool output found for function call call_1.",
    ),
    "_function_tools": (
        {"model": "gpt-4o", "input": "hi", "tools": 3}, "Invalid type for 'tools': expected an array of objects."
    ),
}


def _first_messages_rule(body: Any, signed: bool) -> tuple[str, Rejection] | None:
    """The Messages rules called one by one, directly: the first that answers, and its answer."""
    request = validate._Request(body, True, signed, None)
    for rule in validate.RULES:
        try:
            rejection = rule(request)
        except validate._Reject as exc:  # a schema error raised from inside a walk
            rejection = exc.rejection
        if rejection is not None:
            return rule.__name__, rejection
    return None


def _first_openai_rule(rules: tuple[Callable[..., None], ...], *args: Any) -> tuple[str, Rejection] | None:
    for rule in rules:
        try:
            rule(*args)
        except Refuse as refused:
            return rule.__name__, refused.rejection
    return None


def _items(body: Any) -> list[Any]:
    return openai_responses.items_of(body.get("input")) if isinstance(body, dict) else []


@pytest.mark.parametrize(("table", "examples"), [
    (validate.RULES, MESSAGES), (openai_chat.RULES, CHAT), (openai_responses.RULES, RESPONSES),
], ids=["messages", "chat", "responses"])
def test_every_rule_has_one_example_and_the_tables_keep_their_order(table: Any, examples: dict[str, Any]) -> None:
    names = [rule.__name__ for rule in table]
    assert names == list(examples), "a rule added, dropped or moved: give it its example row, in the table's order"


@pytest.mark.parametrize("name", list(MESSAGES))
def test_each_messages_rule_refuses_its_example_first_with_its_text(name: str) -> None:
    body, signed, text = MESSAGES[name]
    assert _first_messages_rule(body, signed) == (name, validate_messages_request(body, signed_by_sim=signed))
    rejection = validate_messages_request(body, signed_by_sim=signed)
    assert rejection is not None and (rejection.status, rejection.type, rejection.message) == (
        400, "invalid_request_error", text,
    )
    assert ConversationValidator(signed_by_sim=signed).validate(body) == rejection


@pytest.mark.parametrize("name", list(CHAT))
def test_each_chat_rule_refuses_its_example_first_with_its_text(name: str) -> None:
    body, text = CHAT[name]
    found = _first_openai_rule(openai_chat.RULES, body)
    assert found is not None and found[0] == name and found[1].message == text
    assert openai_chat.validate_chat(body) == found[1]


@pytest.mark.parametrize("name", list(RESPONSES))
def test_each_responses_rule_refuses_its_example_first_with_its_text(name: str) -> None:
    body, text = RESPONSES[name]
    found = _first_openai_rule(openai_responses.RULES, body, _items(body))
    assert found is not None and found[0] == name and found[1].message == text
    assert openai_responses.validate_responses(body, _items(body)) == found[1]


def test_a_fixed_example_passes_every_table() -> None:
    """What each example breaks is the only thing wrong with it: the same request, mended, passes."""
    assert validate_messages_request(_body(_user("hi"), _assistant([_USE]), _user([_RESULT]), tools=[_SEARCH])) is None
    signed = {**_THOUGHT, "signature": thinking_signature(_THOUGHT["thinking"])}
    assert validate_messages_request(
        _body(_user("hi"), _assistant([signed, {"type": "text", "text": "Done."}]), _user("Thanks.")),
        signed_by_sim=True,
    ) is None
    assert openai_chat.validate_chat({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}) is None
    answered = {"model": "gpt-4o", "input": ["x", _CALL, {"type": "function_call_output", "call_id": "call_1",
                                                          "output": "ok"}][1:]}
    assert openai_responses.validate_responses(answered, _items(answered)) is None


# -- the loop is the table: bodies mutated from the examples ------------------------------------------------------

_VALUES = st.sampled_from([None, 0, 1, -1, 2.5, True, "", " ", "x", "toolu_1", "user", "assistant", "tool", "system",
                           "text", "tool_use", "tool_result", "thinking", [], {}, {"type": "ephemeral"},
                           {"type": "text", "text": ""}, dict(_USE), dict(_RESULT), dict(_THOUGHT), dict(_CALL),
                           {"role": "user", "content": "hi"}, {"role": "assistant", "content": [dict(_USE)]}])


@st.composite
def _mutated(draw: st.DrawFn, bodies: list[Any]) -> Any:
    """One example body, then up to four edits anywhere in it: a key dropped or set, an item dropped or copied."""
    body = copy.deepcopy(draw(st.sampled_from(bodies)))
    for _ in range(draw(st.integers(0, 4))):
        spots: list[Any] = []
        stack = [body]
        while stack:
            node = stack.pop()
            if isinstance(node, (dict, list)):
                spots.append(node)
                stack.extend(node.values() if isinstance(node, dict) else node)
        if not spots:
            break
        spot = draw(st.sampled_from(spots))
        if isinstance(spot, dict):
            key = draw(st.sampled_from([*spot, "role", "type", "content", "id", "tool_use_id", "cache_control",
                                        "thinking", "temperature", "call_id", "tool_calls"]))
            if draw(st.booleans()):
                spot.pop(key, None)
            else:
                spot[key] = copy.deepcopy(draw(_VALUES))
        elif spot:
            k = draw(st.integers(0, len(spot) - 1))
            if draw(st.booleans()):
                del spot[k]
            else:
                spot.insert(k, copy.deepcopy(spot[k]))  # a duplicate: ids, roles, calls
    return body


_MESSAGE_BODIES = [body for body, _, _ in MESSAGES.values()]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(_MESSAGE_BODIES), st.booleans(), st.sampled_from(_MESSAGE_BODIES))
def test_the_messages_table_walk_is_the_first_rule_that_answers(body: Any, signed: bool, before: Any) -> None:
    found = _first_messages_rule(body, signed)
    answer = validate_messages_request(body, signed_by_sim=signed)
    assert answer == (found[1] if found is not None else None)
    validator = ConversationValidator(signed_by_sim=signed)
    validator.validate(before)
    assert validator.validate(body) == answer  # a walk resumed or started afresh answers the same


@settings(max_examples=100, deadline=None)
@given(_mutated([body for body, _ in CHAT.values()]), _mutated([body for body, _ in RESPONSES.values()]))
def test_the_openai_table_walks_are_the_first_rule_that_answers(chat: Any, responses: Any) -> None:
    found = _first_openai_rule(openai_chat.RULES, chat)
    assert openai_chat.validate_chat(chat) == (found[1] if found is not None else None)
    found = _first_openai_rule(openai_responses.RULES, responses, _items(responses))
    assert openai_responses.validate_responses(responses, _items(responses)) == (found[1] if found is not None else None)


@pytest.mark.parametrize("answered", [{"id": "srvtoolu_1"}, ["srvtoolu_1"]])
def test_a_server_tool_result_whose_id_is_not_a_string_gets_an_answer_not_a_crash(answered: Any) -> None:
    """Found by the differential check of this table against the validator before it: a ``*_tool_result`` block
    whose ``tool_use_id`` is an object or a list raised TypeError (unhashable) out of the server-tool rule."""
    body = _body(
        _user("hi"),
        _assistant([{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                    {"type": "web_search_tool_result", "tool_use_id": answered, "content": []}]),
        _user("Continue."),
    )
    rejection = validate_messages_request(body)
    assert rejection is not None and rejection.message == MESSAGES["_server_tool_results"][2]
