"""The validator against what the real API answers: issue 19 items 7-10.

Item 7: requests a fuzzer found the real API refuses (400) and the simulator accepted.  Each case pins
the text: the real one where known (research wire.md, quoted API bodies), else pydantic's standard
wording for the field, which is how the API words every schema error that is documented.
"""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest

from simloop import Outcome, Reply, Scenario, Sim
from simloop.models import FunctionModel, ModelRequest
from simloop.protocol.validate import ConversationValidator, validate_count_tokens_request, validate_messages_request

TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], **fields}


def with_block(block: dict[str, Any]) -> dict[str, Any]:
    return request(messages=[{"role": "user", "content": [block]}])


def tool_turn(result: dict[str, Any]) -> dict[str, Any]:
    use = {"type": "tool_use", "id": "toolu_A", "name": "search", "input": {}}
    return request(tools=TOOLS, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", **result}]},
    ])  # fmt: skip


NOT_OBJECT = "Input should be a valid dictionary or object to extract fields from"

# (what, body, the message the real API answers)
LAX_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("max_tokens 0", request(max_tokens=0), "max_tokens: Input should be greater than or equal to 1"),
    ("max_tokens negative", request(max_tokens=-5), "max_tokens: Input should be greater than or equal to 1"),
    ("system a number", request(system=3), "system: Input should be a valid list"),
    ("system a mapping", request(system={"type": "text", "text": "x"}), "system: Input should be a valid list"),
    ("system block a string", request(system=["be brief"]), f"system.0: {NOT_OBJECT}"),
    ("system block bad type", request(system=[{"type": "image", "text": "x"}]), "system.0.type: Input should be 'text'"),
    ("system block no type", request(system=[{"text": "x"}]), "system.0.type: Field required"),
    ("system block text missing", request(system=[{"type": "text"}]), "system.0.text: Field required"),
    ("tools[].type a number", request(tools=[{"type": 5, "name": "x"}]), "tools.0.type: Input should be a valid string"),
    ("tool_choice unknown type", request(tool_choice={"type": "some"}),
     ("tool_choice: Input tag 'some' found using 'type' does not match any of the expected tags: "
     "'any', 'auto', 'none', 'tool'")),
    ("tool_choice no type", request(tool_choice={"name": "search"}),
     "tool_choice: Unable to extract tag using discriminator 'type'"),
    ("tool_choice a bare string", request(tool_choice="auto"), f"tool_choice: {NOT_OBJECT}"),
    ("tool_choice names no tool", request(tools=TOOLS, tool_choice={"type": "tool", "name": "web_search"}),
     "Tool 'web_search' not found in provided tools"),
    ("tool_choice tool without name", request(tools=TOOLS, tool_choice={"type": "tool"}),
     "tool_choice.tool.name: Field required"),
    ("tool_result content a number", tool_turn({"content": 42}),
     "messages.2.content.0.tool_result.content: Input should be a valid list"),
    ("tool_result content a mapping", tool_turn({"content": {"type": "text", "text": "x"}}),
     "messages.2.content.0.tool_result.content: Input should be a valid list"),
    ("cache_control a string", with_block({"type": "text", "text": "x", "cache_control": "ephemeral"}),
     f"messages.0.content.0.text.cache_control: {NOT_OBJECT}"),
    ("cache_control bad type", with_block({"type": "text", "text": "x", "cache_control": {"type": "forever"}}),
     ("messages.0.content.0.text.cache_control: Input tag 'forever' found using 'type' does not match any of the "
     "expected tags: 'ephemeral'")),
    ("top-level cache_control a list", request(cache_control=[]), f"cache_control: {NOT_OBJECT}"),
    ("tool cache_control a string", request(tools=[{**TOOLS[0], "cache_control": "x"}]),
     f"tools.0.cache_control: {NOT_OBJECT}"),
    ("citations a bool on text", with_block({"type": "text", "text": "x", "citations": True}),
     "messages.0.content.0.text.citations: Input should be a valid list"),
    ("metadata.user_id a number", request(metadata={"user_id": 7}), "metadata.user_id: Input should be a valid string"),
    ("metadata a string", request(metadata="u1"), f"metadata: {NOT_OBJECT}"),
    ("stop_sequences a string", request(stop_sequences="END"), "stop_sequences: Input should be a valid list"),
    ("stop_sequences item a number", request(stop_sequences=["END", 3]),
     "stop_sequences.1: Input should be a valid string"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in LAX_CASES], ids=[c[0] for c in LAX_CASES])
def test_what_the_real_api_refuses_is_refused_with_its_text(body: dict[str, Any], message: str) -> None:
    rejection = validate_messages_request(body)
    assert rejection is not None, "accepted, the real API answers 400"
    assert (rejection.status, rejection.type, rejection.message) == (400, "invalid_request_error", message)


def test_the_well_formed_versions_still_pass() -> None:
    fine = request(
        system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        tools=[{**TOOLS[0], "cache_control": {"type": "ephemeral"}}, {"type": "web_search_20250305", "name": "web_search"}],
        tool_choice={"type": "tool", "name": "web_search"}, metadata={"user_id": None}, stop_sequences=["END"],
        cache_control={"type": "ephemeral"},
    )  # fmt: skip
    assert validate_messages_request(fine) is None
    assert validate_messages_request(tool_turn({"content": [{"type": "text", "text": "r"}]})) is None
    assert validate_count_tokens_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}) is None


# --------------------------------------------------------------------------- 8. merged positions


def test_a_tool_result_after_two_user_messages_is_named_where_the_api_merges_it() -> None:
    body = request(messages=[
        {"role": "user", "content": "look this up"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_X", "content": "r"}]},
    ])  # fmt: skip
    rejection = validate_messages_request(body)
    assert rejection is not None
    assert rejection.message.startswith("messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks")
    assert rejection.path == "messages[1].content[0]"  # the report still points into the request as sent


def test_an_unanswered_call_in_merged_assistant_messages_names_the_merged_message() -> None:
    use = {"type": "tool_use", "id": "toolu_A", "name": "search", "input": {}}
    body = request(tools=TOOLS, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Let me look."},
        {"role": "assistant", "content": [use]}, {"role": "user", "content": "and?"},
    ])  # fmt: skip
    rejection = validate_messages_request(body)
    assert rejection is not None and rejection.message.startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_A."
    )


# --------------------------------------------------------------------------- 9. thread continuation


def test_a_thread_continuation_whose_messages_is_not_a_list_is_refused() -> None:
    scenario = Scenario.model_validate({"name": "t", "task": "hi", "model": [{"end_turn": "one"}, {"end_turn": "two"}]})
    seen: list[str] = []

    def drive(sim: Sim) -> Outcome:
        first = sim.client.messages.create(
            model=sim.model, max_tokens=64, messages=[{"role": "user", "content": "hi"}],
            extra_body={"thread": {"type": "create"}},
        )
        with pytest.raises(anthropic.BadRequestError) as exc:
            sim.client.messages.create(
                model=sim.model, max_tokens=64, messages="and then?",  # type: ignore[arg-type]
                extra_body={"thread": {"type": "continue", "previous_message_id": first.id}},
            )
        seen.append(exc.value.message)
        return Outcome("final", "")

    with Sim(scenario) as sim:
        sim.run(drive)
    assert seen and "messages: Input should be a valid list" in seen[0]


# --------------------------------------------------------------------------- 10. edits in place


def test_the_conversation_validator_sees_an_earlier_message_edited_in_place() -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                           {"role": "user", "content": "more"}]  # fmt: skip
    validator = ConversationValidator()
    assert validator.validate(request(messages=messages)) is None
    messages[1]["content"] = ""  # the same object, now empty
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
    expected = validate_messages_request(request(messages=copy.deepcopy(messages)))
    assert expected is not None
    assert validator.validate(request(messages=messages)) == expected


def test_the_simulators_validator_keeps_the_history_it_walked_without_copying_it() -> None:
    """The simulator's parses are shared between requests and never changed: its validator keeps them as they are
    (no deep copy of each new message), and an unchanged history compares equal by identity."""
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    validator = ConversationValidator(read_only=True)
    for n in range(3):
        body = request(messages=messages)
        messages = body["messages"]
        assert validator.validate(body) is None
        kept = validator._resume[1] if validator._resume is not None else []
        assert len(kept) == len(messages) and all(a is b for a, b in zip(kept, messages)), n
        messages = [*messages, {"role": "assistant", "content": f"a{n}"}, {"role": "user", "content": f"u{n}"}]
    copying = ConversationValidator()  # the default: a caller may edit what it sent, so a copy is kept
    body = request(messages=messages)
    copying.validate(body)
    assert copying._resume is not None and copying._resume[1][0] is not body["messages"][0]
    assert copying._resume[1] == body["messages"]


def test_a_function_model_editing_the_conversation_does_not_rewrite_earlier_requests() -> None:
    scenario = Scenario.model_validate({"name": "edit", "task": "Say hi.", "model": []})

    def model(request: ModelRequest) -> Reply:
        request.conversation[0]["content"] = "EDITED"  # a careless policy
        request.body["messages"].append({"role": "user", "content": "injected"})
        return Reply(end_turn=f"call {request.call}")

    def drive(sim: Sim) -> Outcome:
        history: list[Any] = [{"role": "user", "content": sim.task}]
        for _ in range(2):
            reply = sim.client.messages.create(model=sim.model, max_tokens=64, messages=history)
            history += [{"role": "assistant", "content": reply.content[0].text},  # type: ignore[union-attr]
                        {"role": "user", "content": "again"}]  # fmt: skip
        return Outcome("final", "")

    with Sim(scenario, model=FunctionModel(model)) as sim:
        sim.run(drive)
    sent = [r.body["messages"] for r in sim.transcript.requests]
    assert [m[0]["content"] for m in sent] == ["Say hi.", "Say hi."]
    assert [len(m) for m in sent] == [1, 3]
    assert all(r.status == 200 for r in sim.transcript.responses)
