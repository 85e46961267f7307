"""Server tools end to end: scenario format, rendering, the validator's rules, generation.

* Scenario files: ``server_tools:`` (calls with their results) and ``pause_turn: {text, server_tool_use}``
  (a turn paused mid server call), with precise errors for misuse.
* Rendering: the blocks parse through the SDK with strict validation, JSON and SSE alike, and have the
  recorded shapes (checked against the real cassettes where they are present).
* The validator: a ``server_tool_use`` without its result is accepted only as a paused final turn or in
  flight before an all-tool_result final user turn, else the real 400; more than four ``cache_control``
  breakpoints, counted across system, tools and messages, get the real 400; an empty non-final
  assistant message too.  The incremental validator agrees with the one-shot one.
* A run: the continuation of a paused server call opens with its result; the correct loops pass, the
  defect loops are caught with the right id; generation draws the paused-server ending.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from hypothesis import find, given, settings

from simloop import Sim
from simloop.errors import ScenarioError
from simloop.models import Ids, ModelRequest, turn_from_reply
from simloop.protocol import servertools
from simloop.protocol.render import Turn, render_json, render_message, render_sse
from simloop.protocol.validate import ConversationValidator, Rejection, validate_messages_request
from simloop.scenario import PauseTurnBody, Reply, Scenario, load_scenario
from simloop.strategies import _ENDING_REPLIES, endings
from tests.corpus import messages_interactions, requires_corpus

ROOT = Path(__file__).resolve().parents[1]
CREATE: dict[str, Any] = {"model": "claude-sonnet-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
WEB_SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search"}
TOOLS: list[dict[str, Any]] = [
    {"name": "add", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}},
    WEB_SEARCH_TOOL,
]


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def assistant(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def server_use(use_id: str = "srvtoolu_01A", name: str = "web_search") -> dict[str, Any]:
    return servertools.use_block(use_id, name, {"query": "treasury duration"})


def server_result(use_id: str = "srvtoolu_01A", name: str = "web_search") -> dict[str, Any]:
    return servertools.result_block(use_id, name, {"query": "treasury duration"})


def use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "add", "input": {"a": 2}}


def result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "4"}


def request(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-5", "max_tokens": 1024, "messages": list(messages), "tools": TOOLS, **fields}


def rejected(body: dict[str, Any]) -> Rejection:
    rejection = validate_messages_request(body)
    assert rejection is not None, "expected the real API's 400"
    assert (rejection.status, rejection.type) == (400, "invalid_request_error")
    # the incremental validator gives the same answer
    assert ConversationValidator().validate(body) == rejection
    return rejection


def accepted(body: dict[str, Any]) -> None:
    assert validate_messages_request(body) is None
    assert ConversationValidator().validate(body) is None


def unanswered(i: int, use_id: str = "srvtoolu_01A", name: str = "web_search") -> str:
    return (
        f"messages.{i}: `{name}` tool use with id {use_id} was found without a corresponding `{name}_tool_result` block"
    )


# ---------------------------------------------------------------- the validator: unanswered server calls


def test_a_paused_server_call_sent_back_as_the_final_message_is_accepted() -> None:
    accepted(request(user(text("Research this.")), assistant(text("Searching."), server_use())))
    # the continuation's result lands in the next assistant message: the call is answered across the turn
    accepted(
        request(
            user(text("Research this.")),
            assistant(text("Searching."), server_use()),
            assistant(server_result(), text("Found it.")),
            user(text("Thanks, and the next one?")),
        )
    )


def test_a_paused_server_call_followed_by_a_user_turn_is_rejected() -> None:
    body = request(user(text("Research this.")), assistant(text("Searching."), server_use()), user(text("Continue.")))
    rejection = rejected(body)
    assert rejection.message == unanswered(1)
    assert rejection.path == "messages[1].content[1]"


def test_the_message_names_the_tool_of_the_unanswered_call() -> None:
    body = request(
        user(text("Run it.")),
        assistant(server_use("srvtoolu_01B", "code_execution")),
        user(text("Continue.")),
        tools=[{"type": "code_execution_20250825", "name": "code_execution"}],
    )
    assert rejected(body).message == unanswered(1, "srvtoolu_01B", "code_execution")


def test_a_server_call_in_flight_beside_client_calls_is_accepted_only_right_before_their_results() -> None:
    # Recorded as accepted (pydantic-ai test_in_flight_native_tool_call_history_is_accepted): the same shape.
    in_flight = [user(text("Look it up, then add 2 and 2.")), assistant(server_use(), use("toolu_01A"))]
    accepted(request(*in_flight, user(result("toolu_01A"))))
    # one more turn after it: the call is stranded (measured by pydantic-ai: rejected)
    later = request(*in_flight, user(result("toolu_01A")), assistant(text("It is 4.")), user(text("And the duration?")))
    assert rejected(later).message == unanswered(1)
    # the final user turn must hold nothing but the client results
    mixed = request(*in_flight, user(result("toolu_01A"), text("Also, hurry.")))
    assert rejected(mixed).message == unanswered(1)


def test_an_answered_server_call_passes_anywhere_in_the_history() -> None:
    accepted(
        request(
            user(text("Research this.")),
            assistant(server_use(), server_result(), text("It is 8.1 years.")),
            user(text("Thanks.")),
            assistant(text("You're welcome.")),
            user(text("One more thing.")),
        )
    )


def test_the_first_stranded_call_is_reported() -> None:
    body = request(
        user(text("a")),
        assistant(server_use("srvtoolu_01A")),
        user(text("b")),
        assistant(server_use("srvtoolu_01B")),
        user(text("c")),
    )
    assert rejected(body).message == unanswered(1, "srvtoolu_01A")


def test_client_pairing_errors_come_first() -> None:
    body = request(user(text("a")), assistant(server_use(), use("toolu_01A")), user(text("b")))
    assert rejected(body).message.startswith("messages.1: `tool_use` ids were found without `tool_result` blocks")


# ---------------------------------------------------------------- the validator: cache_control breakpoints

EPHEMERAL = {"type": "ephemeral"}


def _cached_request(breakpoints: int) -> dict[str, Any]:
    """A request with ``breakpoints`` cache_control blocks spread over system, tools and messages."""
    marks = iter([True] * breakpoints + [False] * (6 - breakpoints))

    def mark(block: dict[str, Any]) -> dict[str, Any]:
        return {**block, "cache_control": EPHEMERAL} if next(marks) else block

    tools = [mark({"name": "add", "input_schema": {"type": "object"}})]
    system = [mark(text("You are terse."))]
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "system": system,
        "tools": tools,
        "messages": [
            user(mark(text("Add 2 and 2, twice."))),
            assistant(use("toolu_01A"), use("toolu_01B")),
            user(
                mark({"type": "tool_result", "tool_use_id": "toolu_01A", "content": [mark(text("4"))]}),
                mark(result("toolu_01B")),
            ),
        ],
    }


def test_four_cache_breakpoints_are_accepted() -> None:
    accepted(_cached_request(4))


def test_five_cache_breakpoints_are_rejected() -> None:
    # a loop that puts cache_control on every block it sends back (examples/cache_control_every_block.py)
    rejection = rejected(_cached_request(5))
    assert rejection.message == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert rejection.path == "cache_control"
    assert rejected(_cached_request(6)).message.endswith("Found 6.")


def test_the_top_level_automatic_breakpoint_takes_a_slot() -> None:
    body = _cached_request(4)
    body["cache_control"] = EPHEMERAL
    assert rejected(body).message.endswith("Found 5.")
    assert validate_messages_request({**_cached_request(3), "cache_control": EPHEMERAL}) is None


def test_a_null_cache_control_is_no_breakpoint() -> None:
    body = _cached_request(4)
    body["messages"][0]["content"].append(text("more", cache_control=None))
    accepted(body)


# ---------------------------------------------------------------- the validator: empty non-final assistant message


@pytest.mark.parametrize("empty", ["", []])
def test_an_empty_assistant_message_is_accepted_only_last(empty: Any) -> None:
    middle = request(user(text("hi")), {"role": "assistant", "content": empty}, user(text("again?")))
    assert rejected(middle).message == (
        "messages.1: all messages must have non-empty content except for the optional final assistant message"
    )
    accepted(request(user(text("hi")), {"role": "assistant", "content": empty}))
    # merged into the assistant message after it, it is still not the final message
    merged = request(user(text("hi")), {"role": "assistant", "content": empty}, assistant(text("Hello.")))
    assert rejected(merged).path == "messages[1]"


# ---------------------------------------------------------------- the incremental validator agrees


@pytest.mark.parametrize("read_only", [False, True])
def test_the_incremental_validator_agrees_along_a_conversation(read_only: bool) -> None:
    """``read_only``: the simulator's own parses, shared between requests (kept as they are, not copied)."""
    history = [user(text("Research this."))]
    steps = [
        assistant(text("Searching."), server_use("srvtoolu_01A")),
        assistant(server_result("srvtoolu_01A"), use("toolu_01A")),
        user(result("toolu_01A")),
        assistant(server_use("srvtoolu_01B")),
        user(text("Continue.")),  # strands srvtoolu_01B
    ]
    validator = ConversationValidator(read_only=read_only)
    answers = []
    for step in steps:
        history = [*history, step]
        body = request(*history)
        answer = validator.validate(body)
        assert answer == validate_messages_request(copy.deepcopy(body))
        answers.append(answer)
    assert answers[:4] == [None] * 4
    assert answers[4] is not None and answers[4].message == unanswered(4, "srvtoolu_01B")
    # a shorter conversation after a longer one (a new run) is walked afresh
    assert validator.validate(request(user(text("hi")), assistant(server_use()), user(text("?")))) is not None
    assert validator.validate(request(user(text("hi")))) is None


# ---------------------------------------------------------------- scenario format


PAUSED = """
version: 1
tools: [{name: save_note, kind: write}]
model:
  - server_tools:
      - {name: web_search, input: {query: battery rules}}
      - {name: web_fetch, input: {url: "https://example.com/a"}, error: url_not_accessible}
    pause_turn:
      text: Checking one more source.
      server_tool_use: {name: web_search, input: {query: battery passport}}
  - end_turn: Done.
"""


def test_a_server_tool_pause_reads_from_a_file_and_round_trips() -> None:
    scenario = Scenario.from_yaml(PAUSED)
    reply = scenario.model[0]
    assert reply.kind == "pause_turn"
    assert [c.name for c in reply.server_tools or []] == ["web_search", "web_fetch"]
    assert Scenario.from_yaml(scenario.to_yaml()) == scenario


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            "{refusal: no, server_tools: [{name: web_search}]}",
            "'server_tools' goes with end_turn, tool_use or pause_turn",
        ),
        ("{end_turn: x, server_tools: [{name: web_serch}]}", "model[0].server_tools[0].name: input should be"),
        ("{end_turn: x, server_tools: [{name: web_search, error: boom}]}", "error for web_search is one of"),
        ("{end_turn: x, server_tools: [{name: web_search, error: unavailable, result: []}]}", "not both"),
        ("{pause_turn: {server_tool_use: {name: web_search, result: []}}}", "has no result yet"),
    ],
)
def test_server_tool_mistakes_are_reported_with_their_place(reply: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_yaml(f"model:\n  - {reply}\n", path="s.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("s.yaml:2: model[0]")


# ---------------------------------------------------------------- rendering


def _turn(reply: Reply, conversation: list[Any] | None = None, **body: Any) -> Turn:
    import random

    conv = conversation or [user(text("hi"))]
    req = ModelRequest(call=1, attempt=0, body={"messages": conv, **body}, conversation=conv, stream=False)
    return turn_from_reply(reply, req, Ids(random.Random(0)))


def _client(body: bytes, content_type: str) -> anthropic.Anthropic:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type, "request-id": "req_x"}, content=body)

    return anthropic.Anthropic(
        api_key="k",
        base_url="http://sim.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        _strict_response_validation=True,
        max_retries=0,
    )


def test_server_tool_turns_parse_strictly_and_the_stream_equals_the_json() -> None:
    scenario = Scenario.from_yaml(PAUSED)
    turn = _turn(scenario.model[0], thinking={"type": "enabled", "budget_tokens": 1024})
    kinds = [b["type"] for b in turn.content]
    assert kinds == ["thinking", "server_tool_use", "web_search_tool_result", "server_tool_use",
                     "web_fetch_tool_result", "text", "server_tool_use"]  # fmt: skip
    kw: dict[str, Any] = {"id": "msg_01Sim", "model": "claude-sonnet-5", "input_tokens": 10}
    message = _client(render_json(turn, **kw), "application/json").messages.create(**CREATE)
    with _client(b"".join(render_sse(turn, **kw)), "text/event-stream; charset=utf-8").messages.stream(**CREATE) as s:
        streamed = s.get_final_message()
    assert message.model_dump() == streamed.model_dump()
    assert message.stop_reason == "pause_turn"
    assert message.usage.server_tool_use is not None
    assert (message.usage.server_tool_use.web_search_requests, message.usage.server_tool_use.web_fetch_requests) == (
        1,
        1,
    )
    fetch = message.content[4]
    assert fetch.type == "web_fetch_tool_result" and fetch.content.type == "web_fetch_tool_result_error"
    last = message.content[-1]
    assert last.type == "server_tool_use" and last.input == {"query": "battery passport"}
    assert last.id.startswith("srvtoolu_01")


@pytest.mark.parametrize("name", ["web_search", "web_fetch", "code_execution", "bash_code_execution",
                                  "text_editor_code_execution"])  # fmt: skip
def test_every_server_tool_result_parses_strictly(name: str) -> None:
    reply = Reply.model_validate({"end_turn": "Done.", "server_tools": [{"name": name, "input": {"query": "q"}}]})
    turn = _turn(reply)
    message = _client(render_json(turn, id="msg_1", model="m", input_tokens=1), "application/json").messages.create(
        **CREATE
    )
    assert [b.type for b in message.content] == ["server_tool_use", f"{name}_tool_result", "text"]


def test_the_continuation_opens_with_the_paused_calls_result_without_new_thinking() -> None:
    paused = assistant({"type": "thinking", "thinking": "t", "signature": "s"}, text("Searching."), server_use())
    conv = [user(text("Research this.")), paused]
    turn = _turn(Reply(end_turn="Found it."), conv, thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b["type"] for b in turn.content] == ["web_search_tool_result", "text"]
    assert turn.content[0]["tool_use_id"] == "srvtoolu_01A"
    # in flight beside a client call: answered first too
    conv = [user(text("a")), assistant(server_use(), use("toolu_01A")), user(result("toolu_01A"))]
    assert [b["type"] for b in _turn(Reply(end_turn="4."), conv).content] == ["web_search_tool_result", "text"]
    # an answered call is not answered again
    conv = [user(text("a")), assistant(server_use(), server_result()), user(text("b"))]
    assert [b["type"] for b in _turn(Reply(end_turn="ok"), conv).content] == ["text"]


def test_a_reply_without_server_tools_reports_no_server_usage() -> None:
    message = render_message(Turn([text("hi")], "end_turn"), id="m", model="m", input_tokens=1)
    assert "server_tool_use" not in message["usage"]


@requires_corpus
def test_rendered_server_blocks_have_the_recorded_shapes() -> None:
    recorded: dict[str, set[tuple[str, ...]]] = {}
    items: set[tuple[str, ...]] = set()
    for _, interaction in messages_interactions():
        body = interaction.response.json() if not interaction.response.is_sse else None
        for block in (body or {}).get("content") or []:
            recorded.setdefault(block["type"], set()).add(tuple(sorted(block)))
            if block["type"] == "web_search_tool_result" and isinstance(block["content"], list):
                items.update(tuple(sorted(item)) for item in block["content"])
    for name in ("web_search", "web_fetch", "bash_code_execution"):
        use_block = server_use(name=name)
        res = servertools.result_block("srvtoolu_01A", name, {})
        assert tuple(sorted(use_block)) in recorded["server_tool_use"]
        assert tuple(sorted(res)) in recorded[f"{name}_tool_result"]
    search = servertools.result_content("web_search", {"query": "x"})
    assert {tuple(sorted(item)) for item in search} <= items


# ---------------------------------------------------------------- a run: loops and generation


@pytest.mark.parametrize(
    ("loop", "expected"),
    [
        ("correct_sync", []),
        ("correct_async", []),
        ("correct_stream", []),
        ("server_pause_final", ["honest_outcome"]),
        ("pause_resumed_with_user_turn", ["request_valid"]),
    ],
)
def test_loops_on_the_server_tool_pause(loop: str, expected: list[str]) -> None:
    import importlib

    module = importlib.import_module(f"examples.{loop}")
    with Sim(load_scenario(ROOT / "scenarios" / "pause-turn-server-tool.yaml"), seed=0) as sim:
        outcome = sim.run(module.drive)
        violations = sim.check(outcome).violations
    assert sorted({v.invariant for v in violations}) == expected
    if loop == "pause_resumed_with_user_turn":
        assert "`web_search` tool use with id srvtoolu_01" in violations[0].message
    if not expected:
        assert outcome.reason == "final"


def test_endings_draw_the_paused_server_call() -> None:
    found = find(endings(), lambda r: isinstance(r.pause_turn, PauseTurnBody), settings=settings(max_examples=200))
    assert found == _ENDING_REPLIES["pause_turn_server"]


@settings(max_examples=5, deadline=None)
@given(endings(kinds=["pause_turn_server"]))
def test_the_paused_server_ending_holds_a_call_without_its_result(reply: Reply) -> None:
    assert reply == _ENDING_REPLIES["pause_turn_server"]
    turn = _turn(reply)
    assert turn.stop_reason == "pause_turn"
    assert turn.content[-1]["type"] == "server_tool_use"
    answered = {b.get("tool_use_id") for b in turn.content if b["type"].endswith("_tool_result")}
    assert turn.content[-1]["id"] not in answered


def test_a_recorded_server_pause_becomes_a_scenario_reply() -> None:
    from simloop.cassettes import reply_of_turn

    paused = Turn(
        [text("Searching."), server_use("srvtoolu_01A"), server_result("srvtoolu_01A"), server_use("srvtoolu_01B")],
        "pause_turn",
    )
    notes: list[str] = []
    reply = reply_of_turn(paused, notes=notes)
    assert isinstance(reply.pause_turn, PauseTurnBody)
    assert reply.pause_turn.text == "Searching."
    assert reply.pause_turn.server_tool_use.input == {"query": "treasury duration"}
    assert [(c.name, c.result) for c in reply.server_tools or []] == [
        ("web_search", server_result("srvtoolu_01A")["content"])
    ]
    # the continuation's result for the paused call is the replay's to make (the simulator answers it first)
    continued = reply_of_turn(Turn([server_result("srvtoolu_01B"), text("It is 8.1.")], "end_turn"), notes=notes)
    assert continued == Reply(end_turn="It is 8.1.")
    assert notes == []
