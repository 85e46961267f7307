"""The OpenAI wires against what was measured on the real API (issue 42): the usage object's shape, the Chat
Completions refusal, stored prompts, data-URI images, the 400s simloop modelled none of, and the error envelope.
Each test names its evidence: a recording in ``../shared/data/openai`` (pydantic-ai's cassettes, MIT, read in
place), the measurement of issue 42 over 3,172 recorded api.openai.com calls, or a public source quoting the text.

Every client here parses with the SDK's strict validation (``_strict_response_validation=True``), as a test of the
simulator must: the SDK's lenient default reads a missing required field as ``None`` and hides it."""

from __future__ import annotations

from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")

import simloop
from simloop._runtime.process import FAKE_OPENAI_KEY

TOOLS: list[Any] = [{"type": "function", "name": "search", "description": "Search.",
                     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
CHAT_TOOLS: list[Any] = [{"type": "function", "function": {"name": "search", "parameters": TOOLS[0]["parameters"]}}]
CALLS = {"tool_use": [{"name": "search", "input": {"q": "a"}}]}


def scenario(*replies: dict[str, Any]) -> dict[str, Any]:
    return {"name": "measured", "task": "Find it.", "tools": [{"name": "search"}], "model": list(replies)}


def strict(sim: simloop.Sim) -> Any:
    """The official client on the simulated API, parsing as strictly as the SDK can."""
    return openai.OpenAI(api_key=FAKE_OPENAI_KEY, base_url="https://api.openai.com/v1",
                         http_client=sim.http_client, _strict_response_validation=True)


# -- 1. the Responses usage: ``cache_write_tokens`` ---------------------------------------------------------------


def test_a_responses_answer_parses_strictly_with_its_cache_write_tokens() -> None:
    """Every recorded Responses answer since 2026-07-10 carries ``usage.input_tokens_details.cache_write_tokens``
    (e.g. ``test_openai_responses/test_openai_responses_model_simple_response.yaml``), and openai 3.63 declares
    it required: without it the strict parse raises, and the lenient one reads ``None``."""
    with simloop.Sim(scenario(CALLS, {"end_turn": "Found."})) as sim:
        client = strict(sim)
        first = client.responses.create(model="gpt-4o", input="x", tools=TOOLS)
        assert first.usage is not None and first.usage.input_tokens_details.cache_write_tokens == 0
        events = list(client.responses.create(model="gpt-4o", input="y", stream=True))
        done = events[-1]
        assert done.type == "response.completed"
        assert done.response.usage is not None and done.response.usage.input_tokens_details.cached_tokens == 0


# -- 2. the Chat Completions refusal --------------------------------------------------------------------------------

REFUSAL = "I'm sorry, but I can't help with that."


def test_a_chat_refusal_is_finish_reason_stop_with_the_text_in_refusal() -> None:
    """The real API answers a refusal with ``finish_reason: "stop"``, ``content: null`` and the text in
    ``message.refusal`` (22 recorded answers, JSON and SSE, issue 42); ``content_filter`` is the moderation's
    cut-off.  So ``parse()`` returns the refusal (it raises ``ContentFilterFinishReasonError`` on
    ``content_filter`` only), and a stream carries the text as ``delta.refusal`` pieces."""
    with simloop.Sim(scenario({"refusal": REFUSAL}, {"refusal": REFUSAL}, {"refusal": REFUSAL})) as sim:
        client = strict(sim)
        messages: list[Any] = [{"role": "user", "content": "x"}]
        reply = client.chat.completions.create(model="gpt-4o", messages=messages)
        choice = reply.choices[0]
        assert (choice.finish_reason, choice.message.content, choice.message.refusal) == ("stop", None, REFUSAL)
        parsed = client.chat.completions.parse(model="gpt-4o", messages=messages)
        assert parsed.choices[0].message.refusal == REFUSAL and parsed.choices[0].message.parsed is None
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=messages, stream=True))
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices) == REFUSAL
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)


# -- 3. a stored prompt ---------------------------------------------------------------------------------------------


def test_a_responses_request_naming_a_stored_prompt_alone_is_accepted() -> None:
    """A request naming a stored ``prompt`` (no ``model``, no ``input``) is accepted by the API (4 recorded
    requests, issue 42): the prompt holds both.  The response echoes the prompt."""
    prompt = {"id": "pmpt_68b0c29740048196bd3a6e6ac3c4d0e20ed9a13f0d15bf5e", "version": "2"}
    with simloop.Sim(scenario({"end_turn": "Hello."})) as sim:
        response = strict(sim).responses.create(prompt=prompt)
    assert response.output_text == "Hello." and response.prompt is not None and response.prompt.id == prompt["id"]
    assert sim.check(invariants=["request_valid"]).ok


def test_a_loop_reading_the_refusal_from_finish_reason_alone_is_reported() -> None:
    """The README's Chat loop as it was (``{"length": ..., "content_filter": "refusal"}.get(finish_reason,
    "final")``): against the real API it reports a refusal as a ``final`` answer with empty text.  simloop used to
    render a refusal ``content_filter``, so the loop passed (a false pass); now ``honest_outcome`` says what to
    read."""
    from examples import openai_loop

    with simloop.Sim(scenario({"refusal": REFUSAL})) as sim:
        outcome = sim.run(openai_loop.drive_refusal_from_finish_reason)
    assert (outcome.reason, outcome.text) == ("final", "")
    report = sim.check(outcome)
    assert [v.invariant for v in report.violations] == ["honest_outcome"]
    assert "read message.refusal, not finish_reason alone" in report.violations[0].message
    with simloop.Sim(scenario({"refusal": REFUSAL})) as sim:
        outcome = sim.run(openai_loop.drive)
    assert (outcome.reason, outcome.text) == ("refusal", REFUSAL) and sim.check(outcome).ok


# -- 4. images as data URIs -----------------------------------------------------------------------------------------

#: A 1.4 MB base64 data URI, as the three requests issue 42 measured (the API billed them 1,118 input tokens; by its
#: bytes simloop refused them as 354,669 tokens).  ``test_openai/test_image_url_input_force_download.yaml`` records
#: a 60 kB JPEG data URI billed 515 prompt tokens.
PHOTO = "data:image/jpeg;base64," + "/9j/4AAQSkZJRgABAQEBLAEsAAD" * 52_000


def test_a_data_uri_image_is_counted_as_an_image_not_by_its_bytes() -> None:
    with simloop.Sim(scenario({"end_turn": "A cat."}, {"end_turn": "A cat."})) as sim:
        client = strict(sim)
        chat = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PHOTO}}]}])
        assert chat.choices[0].message.content == "A cat."
        response = client.responses.create(model="gpt-4o", input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": PHOTO}]}])
        assert response.output_text == "A cat."
    source = sim.transcript.requests[0].conversation[0]["content"][1]["source"]
    assert (source["type"], source["media_type"]) == ("base64", "image/jpeg")
    assert sim.check(invariants=["request_valid"]).ok


# -- 5. the 400s simloop served as 200s -----------------------------------------------------------------------------

USER = [{"role": "user", "content": "x"}]
STRICT_TOOL = {"type": "function", "function": {"name": "search", "strict": True, "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}
CALLED = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
    {"id": {"x": 1}, "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
BAD_NAME = {"type": "function", "function": {"name": "get weather", "parameters": {"type": "object"}}}


def _refused_chat(**body: Any) -> dict[str, Any]:
    with simloop.Sim(scenario({"end_turn": "ok"})) as sim, pytest.raises(openai.BadRequestError) as info:
        strict(sim).chat.completions.create(**body)
    assert info.value.status_code == 400 and sim.transcript.responses[-1].kind == "rejected"
    assert sim.transcript.requests[-1].attempt == 0  # x-should-retry: false, as the real 400s
    return info.value.body  # type: ignore[return-value]


@pytest.mark.parametrize(("body", "error"), [
    # hostile inputs, each a real 400 (texts: simloop/protocol/openai_rules.py names each source)
    ({"model": 123, "messages": USER},
     ("Invalid type for 'model': expected a string, but got an integer instead.", "model", "invalid_type")),
    ({"model": "gpt-4o", "messages": USER, "max_tokens": -7},
     ("Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got -7 instead.", "max_tokens",
      "integer_below_min_value")),
    ({"model": "gpt-4o", "messages": CALLED},
     ("Invalid type for 'messages[1].tool_calls[0].id': expected a string, but got an object instead.",
      "messages[1].tool_calls[0].id", "invalid_type")),
    ({"model": "gpt-4o", "messages": USER, "tools": [BAD_NAME]},
     (("Invalid 'tools[0].function.name': string does not match pattern. Expected a string that matches the pattern "
      "'^[a-zA-Z0-9_-]+$'."), "tools[0].function.name", "invalid_value")),
    ({"model": "gpt-4o", "messages": USER, "stream": "yes"},
     ("Invalid type for 'stream': expected a boolean, but got a string instead.", "stream", "invalid_type")),
    # the recorded 400s simloop did not model (issue 42)
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
     ("Missing required parameter: 'messages[0].content[0].type'.", "messages[0].content[0].type",
      "missing_required_parameter")),  # neuron-core/neuron-ai#292, langchain-ai/langgraphjs#506
    ({"model": "o4-mini", "messages": USER, "stop": ["\n"]},
     ("Unsupported parameter: 'stop' is not supported with this model.", "stop", "unsupported_parameter")),
    ({"model": "gpt-5", "messages": USER, "stop": "END"},
     ("Unsupported parameter: 'stop' is not supported with this model.", "stop", "unsupported_parameter")),
    ({"model": "o4-mini", "messages": USER, "reasoning_effort": "minimal"},
     (("Unsupported value: 'minimal' is not supported with the 'o4-mini' model. Supported values are: 'low', "
      "'medium', and 'high'."), "reasoning_effort", "unsupported_value")),
    ({"model": "gpt-4o", "messages": USER, "tools": [STRICT_TOOL]},
     (("Invalid schema for function 'search': In context=(), 'additionalProperties' is required to be supplied and "
      "to be false."), "tools[0].function.parameters", "invalid_function_parameters")),
    # hostile: a 'required' entry that is no name (a list, an object) is refused, not a crash of simloop
    ({"model": "gpt-4o", "messages": USER, "tools": [{"type": "function", "function": {
        "name": "search", "strict": True, "parameters": {**STRICT_TOOL["function"]["parameters"],  # type: ignore[index]
                                                         "additionalProperties": False, "required": ["q", ["q"]]}}}]},
     (("Invalid schema for function 'search': In context=(), 'required' is required to be supplied and to be an "
       "array including every key in properties. Extra required key '['q']' supplied."),
      "tools[0].function.parameters", "invalid_function_parameters")),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}}]}]},
     ("Invalid 'messages[0]'. Content blocks are expected to be either text or image_url type.", "messages[0]",
      "invalid_value")),  # recorded: test_multimodal_tool_return_matrix[direct-url-audio-openai_chat].yaml
])
def test_chat_completions_refuses_what_the_real_api_refuses(body: dict[str, Any], error: tuple[str, str, str]) -> None:
    got = _refused_chat(**body)
    assert (got["message"], got["param"], got["code"]) == error


def test_a_strict_schema_is_checked_down_to_its_nested_objects_and_a_correct_one_passes() -> None:
    nested = {"type": "object", "additionalProperties": False, "required": ["q", "f"], "properties": {
        "q": {"type": "string"}, "f": {"type": "object", "properties": {"lang": {"type": "string"}}}}}
    tool = {"type": "function", "function": {"name": "search", "strict": True, "parameters": nested}}
    got = _refused_chat(model="gpt-4o", messages=USER, tools=[tool])
    assert got["message"] == ("Invalid schema for function 'search': In context=('properties', 'f'), "
                              "'additionalProperties' is required to be supplied and to be false.")
    nested["properties"]["f"].update({"additionalProperties": False, "required": []})  # type: ignore[index]
    got = _refused_chat(model="gpt-4o", messages=USER, tools=[tool])
    assert got["message"].endswith("'required' is required to be supplied and to be an array including every key "
                                   "in properties. Missing 'lang'.")
    nested["properties"]["f"]["required"] = ["lang"]  # type: ignore[index]
    with simloop.Sim(scenario({"end_turn": "ok"})) as sim:
        assert strict(sim).chat.completions.create(model="gpt-4o", messages=USER, tools=[tool]).choices  # type: ignore[arg-type]


def test_the_responses_wire_refuses_a_temperature_out_of_range_and_the_o_series_minimal_effort() -> None:
    """The temperature's text is recorded: ``test_openai_responses/test_openai_responses_model_http_error.yaml``."""
    for body, error in [
        ({"model": "gpt-4o", "input": "x", "temperature": -1},
         ("Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got -1 instead.",
          "temperature", "decimal_below_min_value")),
        ({"model": "o4-mini", "input": "x", "reasoning": {"effort": "minimal"}},
         (("Unsupported value: 'minimal' is not supported with the 'o4-mini' model. Supported values are: 'low', "
          "'medium', and 'high'."), "reasoning.effort", "unsupported_value")),
        ({"model": "gpt-4o", "input": [{"role": "user", "content": [{"text": "x"}]}]},
         ("Missing required parameter: 'input[0].content[0].type'.", "input[0].content[0].type",
          "missing_required_parameter")),
    ]:
        with simloop.Sim(scenario({"end_turn": "ok"})) as sim, pytest.raises(openai.BadRequestError) as info:
            strict(sim).responses.create(**body)
        got: Any = info.value.body
        assert (got["message"], got["param"], got["code"]) == error
    with simloop.Sim(scenario({"end_turn": "ok"})) as sim:  # gpt-5 offers minimal
        assert strict(sim).responses.create(model="gpt-5", input="x", reasoning={"effort": "minimal"}).output_text


# -- 8. the Duplicate item story ------------------------------------------------------------------------------------


def test_a_loop_chaining_and_replaying_every_item_is_told_what_it_did() -> None:
    """It chains with ``previous_response_id`` and sends every item again: the API refuses "Duplicate item found
    with id fc_..." (continuedev/continue#10200).  The report used to be ``pairing``, about a call with no output;
    the call had its output: the story is the item sent twice."""
    import json

    def drive(sim: simloop.Sim) -> simloop.Outcome:
        items: list[Any] = [{"role": "user", "content": sim.task}]
        previous = None
        for _ in range(5):
            try:
                r = sim.openai_client.responses.create(model="gpt-4o", input=items, tools=TOOLS,
                                                       previous_response_id=previous)  # type: ignore[arg-type]
            except openai.APIError as exc:
                return simloop.Outcome("error", str(exc))
            items += r.output
            previous = r.id  # BUG: chained, and every item replayed as well
            calls = [i for i in r.output if i.type == "function_call"]
            if not calls:
                return simloop.Outcome("final", r.output_text)
            for c in calls:
                out = sim.run_tool(c.name, json.loads(c.arguments), tool_use_id=c.call_id)
                items.append({"type": "function_call_output", "call_id": c.call_id, "output": str(out)})
        return simloop.Outcome("max_steps", "")

    with simloop.Sim(scenario(CALLS, {"end_turn": "Found."})) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "error" and "Duplicate item found with id fc_" in outcome.text
    report = sim.check(outcome)
    assert [v.invariant for v in report.violations] == ["request_valid"]
    message = report.violations[0].message
    assert "Duplicate item found with id fc_" in message and "previous_response_id and only the new items" in message
