"""The request rules of the simulated Messages API, each pinned to the real API's exact 400 text.

Texts and their evidence: ``shared/research/wire.md`` section 2.  Every rule has a test that
asserts the message and the report path; a parametrised table covers a dozen more broken bodies;
the acceptance side (merged same-role turns, final assistant prefill, system messages, unknown
top-level fields) is tested as carefully, since a false rejection breaks a correct loop.
The end of the file covers `load_cassette`'s error reports.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simloop.cassettes import CassetteError, load_cassette
from simloop.protocol.validate import (
    Rejection,
    check_signatures,
    thinking_signature,
    validate_count_tokens_request,
    validate_messages_request,
)

TOOLS: list[dict[str, Any]] = [
    {"name": "search", "description": "Search the web", "input_schema": {"type": "object"}},
    {"name": "send_email", "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}},
]
PAIRING_TAIL = "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
STRAY_TAIL = "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
THINKING_FIRST = (
    "When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding "
    "the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
    "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def assistant(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def use(tool_id: str, name: str = "search") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"q": "x"}}


def result(tool_id: str, content: Any = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def thought(value: str = "Let me look.", signature: str | None = "EqQBCkgIARAB") -> dict[str, Any]:
    block: dict[str, Any] = {"type": "thinking", "thinking": value}
    if signature is not None:
        block["signature"] = signature
    return block


def request(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-sonnet-4-6", "max_tokens": 4096, "messages": list(messages)}
    body.update(fields)
    return body


def rejected(body: Any, **kw: Any) -> Rejection:
    rejection = validate_messages_request(body, **kw)
    assert rejection is not None, "expected a rejection, the request was accepted"
    assert (rejection.status, rejection.type) == (400, "invalid_request_error")
    return rejection


def accepted(body: Any, **kw: Any) -> None:
    assert validate_messages_request(body, **kw) is None


TOOL_LOOP = request(
    user(text("Find the weather in Paris.")),
    assistant(text("Searching."), use("toolu_A")),
    user(result("toolu_A", "sunny")),
    tools=TOOLS,
)


# ---------------------------------------------------------------- accepted shapes


def test_a_plain_conversation_and_a_tool_loop_are_accepted() -> None:
    accepted(request({"role": "user", "content": "hi"}))
    accepted(TOOL_LOOP)
    assert validate_count_tokens_request({"model": "claude-sonnet-4-6", "messages": TOOL_LOOP["messages"],
                                          "tools": TOOLS}) is None  # fmt: skip


def test_unknown_top_level_fields_that_real_clients_send_are_accepted() -> None:
    accepted(
        request(
            user(text("hi")),
            thread={"type": "create"},
            container="cntr_1",
            context_management={"edits": []},
            mcp_servers=[{"type": "url", "url": "https://mcp.example.com", "name": "x"}],
            output_config={"effort": "xhigh"},
            metadata={"user_id": "u"},
            service_tier="auto",
            tool_choice={"type": "auto"},
            stop_sequences=["END"],
            system=[{"type": "text", "text": "Be brief."}],
            temperature=0.2,
            stream=True,
            some_future_field={"anything": 1},
        )
    )


def test_any_model_string_is_accepted() -> None:
    accepted(request(user(text("hi")), model="claude-does-not-exist"))


def test_consecutive_same_role_messages_are_merged_before_the_pairing_check() -> None:
    # Two assistant messages holding the tool calls, two user messages answering them: the
    # API merges each run into one turn, so this is a valid parallel tool call.
    accepted(
        request(
            user(text("Do both.")),
            user(text("Quickly.")),
            assistant(text("On it."), use("toolu_A")),
            assistant(use("toolu_B")),
            user(result("toolu_A")),
            user(result("toolu_B"), text("Both done?")),
            tools=TOOLS,
        )
    )


def test_a_final_assistant_message_prefill_is_accepted() -> None:
    accepted(request(user(text("Answer in JSON.")), assistant(text("{"))))
    accepted(request(user(text("Answer in JSON.")), {"role": "assistant", "content": "{"}))


def test_a_final_assistant_message_may_be_empty() -> None:
    accepted(request(user(text("hi")), assistant()))
    accepted(request(user(text("hi")), {"role": "assistant", "content": ""}))


def test_a_pause_turn_continuation_with_unanswered_server_tool_use_is_accepted() -> None:
    server_use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}
    accepted(
        request(
            user(text("Research this.")),
            assistant(thought(), text("Searching."), server_use),
            thinking={"type": "enabled", "budget_tokens": 1024},
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        )
    )


def test_a_conversation_may_start_with_an_assistant_message() -> None:
    accepted(request(assistant(text("Hello, how can I help?")), user(text("hi"))))


def test_system_messages_neither_merge_nor_break_the_tool_pairing() -> None:
    accepted(
        request(
            user(text("hi")),
            assistant(use("toolu_A")),
            user(result("toolu_A")),
            {"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "x"}}]},
            assistant(use("toolu_B")),
            user(result("toolu_B")),
            {"role": "system", "content": "Be brief from now on."},
            tools=TOOLS,
        )
    )


def test_a_blank_text_block_beside_other_content_is_accepted() -> None:
    # Recorded (llm-anthropic test_tools.yaml): assistant [text " ", tool_use, tool_use] answered 200.
    accepted(request(user(text("hi")), assistant(text(" "), use("toolu_A")), user(result("toolu_A")), tools=TOOLS))


def test_server_tools_and_unknown_server_block_types_pass() -> None:
    accepted(
        request(
            user(text("hi")),
            assistant({"type": "future_thing_tool_result", "tool_use_id": "srvtoolu_1", "content": []}, text("ok")),
            user(text("thanks")),
            tools=[{"type": "code_execution_20260521", "name": "code_execution"}, {"type": "memory_20250818"}],
        )
    )


# ---------------------------------------------------------------- request-level schema


def test_the_body_must_be_a_json_object() -> None:
    rejection = rejected([{"role": "user", "content": "hi"}])
    assert rejection.message == "Input should be a valid dictionary or object to extract fields from"
    assert rejection.path is None


@pytest.mark.parametrize("field", ["max_tokens", "messages", "model"])
def test_required_fields(field: str) -> None:
    body = request(user(text("hi")))
    del body[field]
    rejection = rejected(body)
    assert (rejection.message, rejection.path) == (f"{field}: Field required", field)


def test_count_tokens_does_not_require_max_tokens_but_requires_the_rest() -> None:
    assert validate_count_tokens_request({"model": "m", "messages": [user(text("hi"))]}) is None
    rejection = validate_count_tokens_request({"messages": [user(text("hi"))]})
    assert rejection is not None and rejection.message == "model: Field required"


def test_at_least_one_message_is_required() -> None:
    rejection = rejected(request())
    assert (rejection.message, rejection.path) == ("messages: at least one message is required", "messages")


def test_roles_are_user_assistant_or_system() -> None:
    rejection = rejected(request({"role": "tool", "content": "x"}))
    assert rejection.message == "messages.0.role: Input should be 'user', 'assistant' or 'system'"
    assert rejection.path == "messages[0].role"


def test_unknown_content_block_types_are_rejected_by_tag() -> None:
    rejection = rejected(request(user(text("hi")), assistant({"type": "fallback", "from": {}}), user(text("?"))))
    assert rejection.message.startswith(
        "messages.1.content.0: Input tag 'fallback' found using 'type' does not match any of the expected tags: "
    )
    assert "'text'" in rejection.message and "'tool_use'" in rejection.message
    assert rejection.path == "messages[1].content[0]"


# ---------------------------------------------------------------- block rules


def test_empty_text_blocks_are_rejected() -> None:
    rejection = rejected(request(user(text("hi"), text(""))))
    assert (rejection.message, rejection.path) == (
        "messages: text content blocks must be non-empty",
        "messages[0].content[1]",
    )


def test_whitespace_only_text_is_rejected() -> None:
    rejection = rejected(request(user(text("hi")), assistant(text("  \n")), user(text("go on"))))
    assert rejection.message == "messages: text content blocks must contain non-whitespace text"
    assert rejection.path == "messages[1].content[0]"


def test_cache_control_on_an_empty_text_block() -> None:
    rejection = rejected(request(user(text("hi"), text("", cache_control={"type": "ephemeral"}))))
    assert rejection.message == "messages.0.content.1.text: cache_control cannot be set for empty text blocks"
    assert rejection.path == "messages[0].content[1]"


@pytest.mark.parametrize("empty", ["", []])
def test_empty_content_is_rejected_except_for_the_final_assistant_message(empty: Any) -> None:
    rejection = rejected(request(user(text("hi")), {"role": "assistant", "content": empty}, user(text("?"))))
    assert rejection.message == (
        "messages.1: all messages must have non-empty content except for the optional final assistant message"
    )
    assert rejection.path == "messages[1]"


def test_tool_use_ids_must_match_the_pattern() -> None:
    body = request(user(text("hi")), assistant(use("call:1")), user(result("call:1")), tools=TOOLS)
    rejection = rejected(body)
    assert rejection.message == "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    assert rejection.path == "messages[1].content[0].id"
    # No toolu_ prefix is required: other providers' ids pass.
    accepted(request(user(text("hi")), assistant(use("call_1-x")), user(result("call_1-x")), tools=TOOLS))


def test_tool_result_ids_must_match_the_pattern() -> None:
    rejection = rejected(request(user(text("hi")), assistant(use("toolu_A")), user(result("")), tools=TOOLS))
    assert rejection.message == (
        "messages.2.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    )
    assert rejection.path == "messages[2].content[0].tool_use_id"


def test_tool_use_ids_must_be_unique() -> None:
    body = request(
        user(text("hi")),
        assistant(use("toolu_A")),
        user(result("toolu_A")),
        assistant(text("again"), use("toolu_A")),
        user(result("toolu_A")),
        tools=TOOLS,
    )
    rejection = rejected(body)
    assert (rejection.message, rejection.path) == (
        "messages.3.content.1: `tool_use` ids must be unique",
        "messages[3].content[1]",
    )


def test_tool_blocks_no_longer_require_tools_and_reach_the_pairing_checks() -> None:
    # The 2024 rule "... must define tools." is gone: a 2026 recording of such a request answered 200.
    body = copy.deepcopy(TOOL_LOOP)
    del body["tools"]
    assert validate_messages_request(body) is None
    body["tools"] = []
    assert validate_messages_request(body) is None
    body["messages"][-1]["content"][0]["tool_use_id"] = "toolu_other"
    assert rejected(body).message.startswith("messages.2.content.0: unexpected `tool_use_id` found in `tool_result`")


def test_tool_use_input_must_be_an_object() -> None:
    block = {"type": "tool_use", "id": "toolu_A", "name": "search", "input": "q=x"}
    rejection = rejected(request(user(text("hi")), assistant(block), user(result("toolu_A")), tools=TOOLS))
    assert rejection.message == "messages.1.content.0.tool_use.input: Input should be a valid dictionary"


# ---------------------------------------------------------------- pairing


def test_tool_use_without_tool_result_in_the_next_message() -> None:
    body = request(user(text("hi")), assistant(use("toolu_A")), user(text("what happened?")), tools=TOOLS)
    rejection = rejected(body)
    assert rejection.message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A. " + PAIRING_TAIL
    )
    assert rejection.path == "messages[1].content[0]"


def test_every_missing_id_is_listed() -> None:
    body = request(
        user(text("hi")),
        assistant(use("toolu_A"), use("toolu_B"), use("toolu_C")),
        user(result("toolu_B")),
        tools=TOOLS,
    )
    assert rejected(body).message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A, toolu_C. "
        + PAIRING_TAIL
    )


def test_tool_results_must_come_first_in_the_next_message() -> None:
    body = request(
        user(text("hi")), assistant(use("toolu_A")), user(text("Here you go:"), result("toolu_A")), tools=TOOLS
    )
    assert rejected(body).message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A. " + PAIRING_TAIL
    )


def test_tool_result_without_tool_use_in_the_previous_message() -> None:
    body = request(user(text("hi")), assistant(use("toolu_A")), user(result("toolu_A"), result("toolu_X")), tools=TOOLS)
    rejection = rejected(body)
    assert rejection.message == (
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_X. " + STRAY_TAIL
    )
    assert rejection.path == "messages[2].content[1]"


def test_tool_result_in_the_first_message() -> None:
    rejection = rejected(request(user(result("toolu_X")), tools=TOOLS))
    assert rejection.message == (
        "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_X. " + STRAY_TAIL
    )


def test_tool_result_answering_an_older_assistant_message() -> None:
    body = request(
        user(text("hi")),
        assistant(use("toolu_A")),
        user(result("toolu_A")),
        assistant(text("Done.")),
        user(result("toolu_A")),
        tools=TOOLS,
    )
    assert rejected(body).path == "messages[4].content[0]"


# ---------------------------------------------------------------- tool definitions


def test_tool_name_pattern() -> None:
    rejection = rejected(request(user(text("hi")), tools=[{"name": "web search", "input_schema": {"type": "object"}}]))
    assert rejection.message == "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"
    assert rejection.path == "tools[0].name"


def test_tool_names_must_be_unique() -> None:
    rejection = rejected(request(user(text("hi")), tools=[*TOOLS, TOOLS[0]]))
    assert (rejection.message, rejection.path) == ("tools: Tool names must be unique.", "tools")


def test_custom_tools_need_an_object_input_schema() -> None:
    rejection = rejected(request(user(text("hi")), tools=[{"name": "search"}]))
    assert rejection.message == "tools.0.custom.input_schema: Field required"
    rejection = rejected(request(user(text("hi")), tools=[TOOLS[0], {"name": "s2", "input_schema": {"type": "array"}}]))
    assert rejection.message == "tools.1.custom.input_schema.type: Input should be 'object'"
    assert rejection.path == "tools[1].input_schema.type"


# ---------------------------------------------------------------- thinking


def test_thinking_budget_minimum() -> None:
    rejection = rejected(request(user(text("hi")), thinking={"type": "enabled", "budget_tokens": 1000}))
    assert rejection.message == "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    assert rejection.path == "thinking.budget_tokens"


def test_thinking_budget_below_max_tokens() -> None:
    body = request(user(text("hi")), max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048})
    assert rejected(body).message == "`max_tokens` must be greater than `thinking.budget_tokens`."
    # count_tokens has no max_tokens, so nothing to compare with.
    del body["max_tokens"]
    assert validate_count_tokens_request(body) is None


def test_thinking_enabled_requires_the_tool_turn_to_start_with_thinking() -> None:
    body = copy.deepcopy(TOOL_LOOP)
    body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    rejection = rejected(body)
    assert rejection.message == (
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. " + THINKING_FIRST
    )
    assert rejection.path == "messages[1].content[0]"
    body["messages"][1]["content"] = [use("toolu_A")]
    body["thinking"] = {"type": "adaptive"}
    assert rejected(body).message.startswith("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, "
                                             "but found `tool_use`. When `thinking` is enabled")  # fmt: skip
    body["messages"][1]["content"] = [{"type": "redacted_thinking", "data": "EmwKAhgB"}, use("toolu_A")]
    accepted(body)


def test_thinking_requirement_only_concerns_the_current_tool_turn() -> None:
    # An older tool turn without thinking is fine once a new user turn has started.
    accepted(
        request(
            user(text("hi")),
            assistant(use("toolu_A")),
            user(result("toolu_A")),
            assistant(text("Done.")),
            user(text("Thanks! Now something else.")),
            tools=TOOLS,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    )
    # Within the current turn, the first assistant message is the one that needs thinking.
    accepted(
        request(
            user(text("hi")),
            assistant(thought(), use("toolu_A")),
            user(result("toolu_A")),
            assistant(use("toolu_B")),
            user(result("toolu_B")),
            tools=TOOLS,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    )


def test_thinking_blocks_need_a_signature() -> None:
    body = request(user(text("hi")), assistant(thought(signature=None), text("Hello")), user(text("?")))
    rejection = rejected(body)
    assert rejection.message == "messages.1.content.0.thinking.signature: Field required"
    assert rejection.path == "messages[1].content[0].signature"


def test_final_assistant_thinking_while_thinking_is_disabled() -> None:
    message = (
        "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot "
        "contain `thinking`. To use thinking blocks, enable `thinking` in your request."
    )
    body = request(user(text("hi")), assistant(thought(), text("Hello")))
    assert rejected(body).message == message
    body["thinking"] = {"type": "disabled"}
    assert rejected(body).message == message
    # Earlier thinking blocks in history are fine with thinking off.
    accepted(request(user(text("hi")), assistant(thought(), text("Hello")), user(text("?"))))


def test_temperature_must_be_one_with_thinking() -> None:
    body = request(user(text("hi")), temperature=0.5, thinking={"type": "enabled", "budget_tokens": 1024})
    assert rejected(body).message == "`temperature` may only be set to 1 when thinking is enabled."
    body["temperature"] = 1.0
    accepted(body)


def test_signatures_checked_only_when_the_simulator_signed_the_turns() -> None:
    good = thought("I should search.", thinking_signature("I should search."))
    tampered = thought("I should not search.", thinking_signature("I should search."))
    body = request(user(text("hi")), assistant(good, text("ok")), user(text("?")), assistant(tampered, text("ok")),
                   user(text("!")))  # fmt: skip
    accepted(body)  # off by default: recorded signatures are Anthropic's
    rejection = rejected(body, signed_by_sim=True)
    assert (rejection.message, rejection.path) == (
        "messages.3.content.0: Invalid `signature` in `thinking` block",
        "messages[3].content[0]",
    )
    assert check_signatures(body) == rejection
    body["messages"][3]["content"][0] = thought("I should not search.", thinking_signature("I should not search."))
    accepted(body, signed_by_sim=True)


def test_thinking_signature_is_deterministic_and_looks_like_base64() -> None:
    signature = thinking_signature("Let me check.")
    assert signature == thinking_signature("Let me check.")
    assert signature != thinking_signature("Let me check!")
    assert len(base64.b64decode(signature, validate=True)) >= 64


# ---------------------------------------------------------------- a dozen more broken bodies

BROKEN: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("max_tokens not an int", request(user(text("hi")), max_tokens="1024"),
     "max_tokens: Input should be a valid integer", "max_tokens"),
    ("messages not a list", request(max_tokens=10) | {"messages": {"role": "user"}},
     "messages: Input should be a valid list", "messages"),
    ("model not a string", request(user(text("hi")), model=5), "model: Input should be a valid string", "model"),
    ("message not an object", request("hi"),  # type: ignore[arg-type]
     "messages.0: Input should be a valid dictionary or object to extract fields from", "messages[0]"),
    ("role missing", request({"content": "hi"}), "messages.0.role: Field required", "messages[0].role"),
    ("content missing", request({"role": "user"}), "messages.0.content: Field required", "messages[0].content"),
    ("block without type", request(user({"text": "hi"})),
     "messages.0.content.0: Unable to extract tag using discriminator 'type'", "messages[0].content[0]"),
    ("text not a string", request(user({"type": "text", "text": 5})),
     "messages.0.content.0.text.text: Input should be a valid string", "messages[0].content[0].text"),
    ("tool_use without name", request(user(text("hi")), assistant({"type": "tool_use", "id": "t", "input": {}}),
                                      tools=TOOLS),
     "messages.1.content.0.tool_use.name: Field required", "messages[1].content[0].name"),
    ("tool_result without id", request(user({"type": "tool_result", "content": "x"}), tools=TOOLS),
     "messages.0.content.0.tool_result.tool_use_id: Field required", "messages[0].content[0].tool_use_id"),
    ("redacted_thinking without data", request(user(text("hi")), assistant({"type": "redacted_thinking"}, text("x"))),
     "messages.1.content.0.redacted_thinking.data: Field required", "messages[1].content[0].data"),
    ("thinking without text", request(user(text("hi")), assistant({"type": "thinking", "signature": "s"}, text("x"))),
     "messages.1.content.0.thinking.thinking: Field required", "messages[1].content[0].thinking"),
    ("unknown thinking type", request(user(text("hi")), thinking={"type": "on"}),
     ("thinking: Input tag 'on' found using 'type' does not match any of the expected tags: "
      "'adaptive', 'between_tools', 'disabled', 'enabled'"), "thinking"),
    ("budget missing", request(user(text("hi")), thinking={"type": "enabled"}),
     "thinking.enabled.budget_tokens: Field required", "thinking.budget_tokens"),
    ("tool name missing", request(user(text("hi")), tools=[{"input_schema": {"type": "object"}}]),
     "tools.0.custom.name: Field required", "tools[0].name"),
    ("tools not a list", request(user(text("hi")), tools={"name": "x"}), "tools: Input should be a valid list", "tools"),
    ("bad tool_result content", request(user(text("hi")), assistant(use("t1")),
                                        user(result("t1", [{"type": "image_url", "url": "u"}])), tools=TOOLS),
     ("messages.2.content.0.tool_result.content.0: Input tag 'image_url' found using 'type' does not match any of "
      "the expected tags: 'browser_state', 'document', 'image', 'search_result', 'text', 'tool_reference'"),
     "messages[2].content[0].content[0]"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message", "path"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_bodies(body: dict[str, Any], message: str, path: str | None) -> None:
    rejection = rejected(body)
    assert (rejection.message, rejection.path) == (message, path)


def test_schema_errors_win_over_later_rules() -> None:
    # An empty text block early and a malformed tool_use later: the schema error is reported.
    body = request(user(text("")), assistant({"type": "tool_use", "id": "t", "input": {}}), tools=TOOLS)
    assert rejected(body).message == "messages.1.content.0.tool_use.name: Field required"


def test_validation_does_not_modify_the_body() -> None:
    body = copy.deepcopy(TOOL_LOOP)
    body["messages"].append(assistant(text("x")))
    before = copy.deepcopy(body)
    validate_messages_request(body, signed_by_sim=True)
    assert body == before


# ---------------------------------------------------------------- cassette loading errors


def test_a_file_that_is_not_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("interactions:\n- request: {method: POST\n  uri: [\n")
    with pytest.raises(CassetteError) as info:
        load_cassette(path)
    assert str(path) in str(info.value) and "not valid YAML" in str(info.value)
    assert f"{path}:" in str(info.value)  # with a line number


def test_a_yaml_file_without_interactions(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("name: not a cassette\n")
    with pytest.raises(CassetteError, match="not a cassette simloop reads") as info:
        load_cassette(path)
    assert str(path) in str(info.value) and "'interactions'" in str(info.value)


def test_an_interaction_without_a_response(tmp_path: Path) -> None:
    path = tmp_path / "half.yaml"
    path.write_text(
        "interactions:\n"
        "- request: {method: GET, uri: 'https://example.com/', body: null, headers: {}}\n"
        "  response: {status: {code: 200, message: OK}, headers: {}, body: {string: ''}}\n"
        "- request: {method: GET, uri: 'https://example.com/', body: null, headers: {}}\n"
    )
    with pytest.raises(CassetteError) as info:
        load_cassette(path)
    assert f"{path}: interaction 1: missing the 'response' mapping" in str(info.value)


def test_a_body_that_says_gzip_but_is_not(tmp_path: Path) -> None:
    path = tmp_path / "gz.yaml"
    garbage = base64.b64encode(b"\x1f\x8bnot really gzip").decode()
    path.write_text(
        "interactions:\n"
        "- request: {method: POST, uri: 'https://api.anthropic.com/v1/messages', body: '{}', headers: {}}\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        "    headers: {Content-Encoding: [gzip]}\n"
        f"    body: {{string: !!binary '{garbage}'}}\n"
    )
    with pytest.raises(CassetteError) as info:
        load_cassette(path)
    assert f"{path}: interaction 0: response" in str(info.value) and "gzip" in str(info.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match="cannot read the cassette file") as info:
        load_cassette(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value)


def test_both_cassette_dialects_are_normalised(tmp_path: Path) -> None:
    stream = "event: message_start\ndata: {}\n\n"
    packed = base64.b64encode(gzip.compress(b'{"type":"message"}')).decode()
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "interactions:\n"
        "- request:\n"
        "    method: POST\n"
        "    uri: https://api.anthropic.com/v1/messages?beta=true\n"
        "    headers: {Content-Type: [application/json], content-length: ['999']}\n"
        "    parsed_body: {model: m, max_tokens: 5, messages: [{role: user, content: hi}]}\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        "    headers: {content-type: [text/event-stream; charset=utf-8]}\n"
        f"    body: {{string: {json.dumps(stream)}}}\n"
        "- request: {method: POST, uri: 'https://api.anthropic.com/v1/messages/count_tokens', body: '{\"a\":1}'}\n"
        "  response:\n"
        "    status: {code: 200, message: OK}\n"
        "    headers: {Content-Encoding: [gzip], Content-Length: ['40'], Content-Type: [application/json]}\n"
        f"    body: {{string: !!binary '{packed}'}}\n"
        "- request: {method: GET, uri: 'https://example.com/v1/messages', body: null, headers: {}}\n"
        "  response: {status: {code: 404, message: Not Found}, headers: {}, parsed_body: {error: nope}}\n"
    )
    first, second, third = load_cassette(path)
    assert first.request.path == "/v1/messages" and first.is_anthropic_messages
    assert first.request.json() == {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert first.request.body.startswith(b'{"model":"m"')  # compact JSON
    assert first.request.headers == {"content-type": ["application/json"]}  # stale length dropped
    assert first.response.is_sse and first.response.json() is None and first.response.body == stream.encode()
    assert second.is_anthropic_messages and second.index == 1
    assert second.response.body == b'{"type":"message"}' and not second.response.is_sse
    assert second.response.headers == {"content-type": ["application/json"]}
    assert not third.is_anthropic_messages and third.response.status == 404
    assert third.request.body == b"" and third.request.json() is None
    assert third.response.json() == {"error": "nope"}


# -- any JSON gets an answer, never an exception ----------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.sampled_from(
        ["", " ", "x", "user", "assistant", "system", "text", "tool_use", "tool_result", "thinking", "image",
         "toolu_01", "search", "enabled", "auto", "any", "tool", "none"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "text", "id", "name", "input", "tool_use_id", "content", "is_error", "thinking", "signature",
         "data", "source", "cache_control", "role"]), inner, max_size=4),
    max_leaves=12,
)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` in four draws of five, else any JSON: deep rules are reached, shallow ones still broken."""
    return st.integers(0, 4).flatmap(lambda i: _JSON if i == 0 else valid)


_TAG = _mostly(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image", "document"]))
_BLOCK = _mostly(st.fixed_dictionaries(
    {"type": _TAG},
    optional={**{k: _JSON for k in ("text", "id", "name", "input", "tool_use_id", "thinking", "signature")},
              "content": st.lists(_mostly(st.fixed_dictionaries({"type": _TAG, "text": _JSON})), max_size=2)},
))
_MESSAGE = _mostly(st.fixed_dictionaries(
    {"role": _mostly(st.sampled_from(["user", "assistant", "system"])), "content": _mostly(st.lists(_BLOCK, max_size=3))},
))
_BODY = st.fixed_dictionaries(
    {"model": _mostly(st.just("m")), "max_tokens": _mostly(st.just(64)), "messages": _mostly(st.lists(_MESSAGE, max_size=4))},
    optional={"tools": st.lists(st.fixed_dictionaries({"name": _JSON, "input_schema": _JSON}) | _JSON, max_size=2),
              "tool_choice": _JSON, "thinking": _JSON, "system": _JSON, "stream": _JSON},
)


@given(_BODY)
def test_any_json_body_gets_an_answer_not_an_exception(body: dict[str, Any]) -> None:
    """Whatever a loop sends, the simulator answers it (a 400 or a pass), as the real API does."""
    for answer in (validate_messages_request(body), validate_count_tokens_request(body)):
        assert answer is None or (isinstance(answer, Rejection) and answer.status in (400, 413))


@pytest.mark.parametrize("tag", [{"a": 1}, ["text"], 3, True])
@pytest.mark.parametrize("where", ["block", "tool_result content"])
def test_a_block_type_that_is_not_a_string_is_a_400(tag: Any, where: str) -> None:
    block = {"type": tag, "text": "x"}
    body: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": [block]}]}
    if where == "tool_result content":
        body["messages"] = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [block]}]},
        ]
        body["tools"] = TOOLS
    rejection = validate_messages_request(body)
    assert rejection is not None and rejection.status == 400


# --------------------------------------------------------------------------- the context window


def test_each_models_context_window() -> None:
    from simloop.protocol.validate import CONTEXT_1M_BETA, context_window

    assert context_window("claude-sonnet-4-5") == 200_000
    assert context_window("claude-sonnet-4-5", f"interleaved-thinking-2025-05-14, {CONTEXT_1M_BETA}") == 1_000_000
    assert context_window("claude-sonnet-4-20250514", CONTEXT_1M_BETA) == 1_000_000
    assert context_window("claude-opus-4-1", CONTEXT_1M_BETA) == 200_000  # the beta opens no window it lacks
    assert context_window("claude-opus-4-6") == context_window("claude-sonnet-4-6") == 1_000_000
    assert context_window("claude-haiku-4-5") == context_window("my-fine-tune") == context_window(None) == 200_000


def _huge_history_request(sim: Any, content: list[Any]) -> str:
    import anthropic

    try:
        sim.client.messages.create(model="claude-haiku-4-5", max_tokens=64,
                                   messages=[{"role": "user", "content": content}])
    except anthropic.BadRequestError as e:
        return str(e.body["error"]["message"])
    return "served"


def test_a_prompt_over_the_window_gets_the_real_400_and_an_image_is_not_counted_by_its_bytes() -> None:
    import simloop

    scenario = simloop.Scenario(task="t", model=[simloop.Reply(end_turn="ok")], strict=False)
    text = [{"type": "text", "text": "word " * 170_000}]  # 850k bytes: about 212k tokens
    photo = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 900_000}},
             {"type": "text", "text": "What is in this photo?"}]
    with simloop.Sim(scenario) as sim:
        said = sim.run(lambda s: simloop.Outcome("final", _huge_history_request(s, text))).text
    assert said.startswith("prompt is too long: ") and said.endswith(" tokens > 200000 maximum")
    with simloop.Sim(scenario) as sim:
        assert sim.run(lambda s: simloop.Outcome("final", _huge_history_request(s, photo))).text == "served"


def test_the_1m_context_beta_reaches_the_server_through_the_sdk() -> None:
    """``betas=[CONTEXT_1M_BETA]`` is an ``anthropic-beta`` header: the transport hands it to the server, so a
    request over 200k tokens on a model the beta opens is served (it once was refused, the header unread)."""
    import simloop
    from simloop.protocol.validate import CONTEXT_1M_BETA

    scenario = simloop.Scenario(task="t", model=[simloop.Reply(end_turn="ok")], strict=False)
    text = [{"type": "text", "text": "word " * 170_000}]  # about 212k tokens

    def drive(sim: simloop.Sim, betas: list[str]) -> simloop.Outcome:
        import anthropic

        try:
            sim.client.beta.messages.create(model="claude-sonnet-4-5", max_tokens=64, betas=betas,
                                            messages=[{"role": "user", "content": text}])
        except anthropic.BadRequestError as e:
            return simloop.Outcome("error", str(e.body["error"]["message"]))
        return simloop.Outcome("final", "served")

    with simloop.Sim(scenario) as sim:
        assert sim.run(lambda s: drive(s, [CONTEXT_1M_BETA])).text == "served"
    with simloop.Sim(scenario) as sim:
        assert sim.run(lambda s: drive(s, [])).text.startswith("prompt is too long: ")
