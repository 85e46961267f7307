"""OpenAI cassettes are tests (issue 42, items 6 and 7): recordings of Chat Completions and Responses convert to
scenarios that replay, replay as the model (`Recorded`), fuzz (`verify(recorded=...)`); the older VCR.py httpx
layout and multidict's pure-Python header names are read.

The cassettes here are recorded through simloop itself (`simloop.cassettes.record` around the ``openai`` SDK on
a loopback server), by a small session written as users write one: parallel tool calls, a follow-up user turn,
streamed or not, a Responses conversation kept with ``previous_response_id`` or sent whole.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from loops.openai_plain import loop

import simloop
from simloop import Reply, Scenario, Sim, ToolCall, ToolSpec
from simloop.cassettes import (
    CassetteError,
    Recorded,
    convert,
    load_cassette,
    load_recording,
    record,
    to_scenario,
)
from simloop.wire import loopback

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TASK = "What is the weather in Paris and Rome?"
FOLLOWUP = "And in Oslo?"
SCENARIO = Scenario(
    task=TASK,
    tools=[ToolSpec(name="get_weather", kind="read", description="Weather in a city.", input_schema=WEATHER)],
    model=[
        Reply(tool_use=[ToolCall(name="get_weather", input={"city": "Paris"}),
                        ToolCall(name="get_weather", input={"city": "Rome"})]),
        Reply(end_turn="Sunny in Paris, rainy in Rome."),
        Reply(tool_use=[ToolCall(name="get_weather", input={"city": "Oslo"})]),
        Reply(end_turn="Snow in Oslo."),
    ],
    then="end_turn",
)  # fmt: skip
FORECAST = {"Paris": "sunny", "Rome": "rainy", "Oslo": "snow"}


def _client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=server.base_url + "/v1", max_retries=0)


def _chat_session(client: openai.OpenAI, task: str, *, stream: bool) -> list[str]:
    """Two user turns on Chat Completions, every call of a reply answered (the recorded session)."""
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                         "parameters": WEATHER}}]
    messages: list[Any] = []
    finals = []
    for text in (task, FOLLOWUP):
        messages.append({"role": "user", "content": text})
        while True:
            if stream:
                with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=tools) as events:
                    reply: Any = events.get_final_completion()
            else:
                reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            if reply.choices[0].finish_reason != "tool_calls":
                finals.append(message.content)
                break
            messages += [{"role": "tool", "tool_call_id": c.id,
                          "content": FORECAST[json.loads(c.function.arguments)["city"]]} for c in message.tool_calls]
    return finals


def _responses_session(client: openai.OpenAI, task: str, *, stream: bool, chained: bool) -> list[str]:
    """The same two turns on Responses: the whole list of items each time, or chained by previous_response_id."""
    tools: Any = [{"type": "function", "name": "get_weather", "description": "Weather in a city.",
                          "parameters": WEATHER, "strict": False}]
    items: list[Any] = []
    previous = None
    finals = []
    for text in (task, FOLLOWUP):
        new: list[Any] = [{"role": "user", "content": text}]
        while True:
            items += new
            args: dict[str, Any] = {"model": "gpt-4o", "tools": tools, "input": new if chained else items}
            if chained and previous:
                args["previous_response_id"] = previous
            if stream:
                with client.responses.stream(**args) as events:
                    response: Any = events.get_final_response()
            else:
                response = client.responses.create(**args)
            previous = response.id
            items += [item.model_dump(exclude_none=True) for item in response.output]
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                finals.append(response.output_text)
                break
            new = [{"type": "function_call_output", "call_id": c.call_id,
                    "output": FORECAST[json.loads(c.arguments)["city"]]} for c in calls]
    return finals


def _record(path: Path, api: str, *, stream: bool = False, chained: bool = False, tasks: tuple[str, ...] = (TASK,)) -> Path:
    with record(path):
        for task in tasks:
            with loopback.serve(SCENARIO.model_copy(update={"task": task})) as server:
                client = _client(server)
                if api == "chat":
                    finals = _chat_session(client, task, stream=stream)
                else:
                    finals = _responses_session(client, task, stream=stream, chained=chained)
                assert finals == ["Sunny in Paris, rainy in Rome.", "Snow in Oslo."]
    return path


CASES = [("chat", False, False), ("chat", True, False), ("responses", False, False), ("responses", True, False),
         ("responses", False, True), ("responses", True, True)]


@pytest.mark.parametrize(("api", "stream", "chained"), CASES)
def test_an_openai_recording_converts_to_a_scenario_that_replays_on_the_loop_that_made_it(
    tmp_path: Path, api: str, stream: bool, chained: bool
) -> None:
    """Before: the cassette converted to a scenario with no reply and exit 0.  Now: its task, follow-up, tool
    (with the recorded outputs) and four replies, parallel calls included; the file replays on a plain loop."""
    from simloop.cli import main

    path = _record(tmp_path / "session.yaml", api, stream=stream, chained=chained)
    assert main(["convert", str(path), "-o", str(tmp_path / "scenario.yaml")]) == 0
    scenario = simloop.load_scenario(tmp_path / "scenario.yaml")
    assert scenario.task == TASK and scenario.followups == [FOLLOWUP]
    assert [r.kind for r in scenario.model] == ["tool_use", "end_turn", "tool_use", "end_turn"]
    assert [c.input for c in scenario.model[0].calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert scenario.model[3].end_turn == "Snow in Oslo." and scenario.then == "fail"
    [tool] = scenario.tools
    assert tool.name == "get_weather" and tool.input_schema == WEATHER and tool.results == ["sunny", "rainy", "snow"]
    report = simloop.replay(loop(api, stream=stream, chained=chained), tmp_path / "scenario.yaml")
    assert report.ok


@pytest.mark.parametrize(("api", "stream", "chained"), CASES)
def test_an_openai_recording_replays_as_the_model_and_a_changed_request_is_named(
    tmp_path: Path, api: str, stream: bool, chained: bool
) -> None:
    path = _record(tmp_path / "session.yaml", api, stream=stream, chained=chained)
    drive = loop(api, stream=stream, chained=chained)
    model = Recorded(path)
    with Sim(to_scenario(path), model=model) as sim:
        outcome = sim.run(drive)
    assert (outcome.reason, outcome.text) == ("final", "Snow in Oslo.") and outcome.exception is None
    assert model.served == 4 and sim.leftovers() == []
    sim.check(outcome).raise_for_violations()
    scenario = to_scenario(path)  # the loop's tool now answers another output for Rome
    tool = scenario.tools[0].model_copy(update={"results": ["sunny", "stormy", "snow"]})
    changed = scenario.model_copy(update={"tools": [tool]})
    with Sim(changed, model=Recorded(path)) as sim, pytest.raises(simloop.UsageError) as caught:
        sim.run(drive)
    assert "request for model call 2 differs from the recording" in str(caught.value)
    assert re.search(r"tool_result call_\w+\): recorded 'rainy', sent 'stormy'", str(caught.value)), caught.value


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_verify_fuzzes_an_openai_recording(tmp_path: Path, api: str) -> None:
    path = _record(tmp_path / "session.yaml", api)
    report = simloop.verify(loop(api), recorded=path, max_examples=8, seed=1, out_dir=tmp_path)
    assert report.ok, report
    assert report.examples == 8


def test_several_conversations_in_one_openai_cassette_convert_one_at_a_time(tmp_path: Path) -> None:
    other = "Is it warm in Lisbon?"
    path = _record(tmp_path / "two.yaml", "responses", chained=True, tasks=(TASK, other))
    recording = load_recording(path)
    assert recording.conversations == 2 and len(recording.calls) == 8
    assert any("2 independent conversations" in note for note in recording.notes)
    second = to_scenario(path, conversation=1)
    assert second.task == other and second.followups == [FOLLOWUP] and len(second.model) == 4
    assert simloop.replay(loop("responses", chained=True), convert(path, tmp_path / "2.yaml", conversation=1)).ok


def test_a_cassette_with_no_model_call_is_refused_with_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: exit 0 and a scenario with no reply.  Now: exit 2, naming what the cassette holds instead."""
    from simloop.cli import main

    path = tmp_path / "count.yaml"
    path.write_text(json.dumps({"interactions": [{
        "request": {"method": "POST", "uri": "https://api.openai.com/v1/responses/input_tokens",
                    "body": json.dumps({"model": "gpt-4o", "input": "hi"}), "headers": {}},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {},
                     "body": {"string": json.dumps({"object": "response.input_tokens", "input_tokens": 7})}},
    }]}), encoding="utf-8")  # fmt: skip
    assert main(["convert", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
    assert capsys.readouterr().err == (
        f"simloop: error: {path}: cannot convert: no model call (POST /v1/messages, /v1/chat/completions or "
        "/v1/responses) in the cassette, so the scenario has no reply: it holds 1 POST "
        "api.openai.com/v1/responses/input_tokens call(s) (not a model call)\n"
    )
    assert not (tmp_path / "out.yaml").exists()
    with pytest.raises(CassetteError, match="cannot convert: no model call"):
        convert(path, tmp_path / "out.yaml")
    assert not (tmp_path / "out.yaml").exists() and to_scenario(path).model == []  # Recorded(path) still runs in it


# --------------------------------------------------------------------------- item 7: the layouts


def _old_httpx(session: Path, out: Path) -> Path:
    """``session`` rewritten in VCR.py's older httpx layout: each response as ``status_code``, ``http_version``,
    ``headers`` and ``content`` (the decoded text, its ``content-encoding`` header kept as httpx saw it)."""
    interactions = []
    for item in load_cassette(session):
        headers = {**item.response.headers, "content-encoding": ["gzip"]}
        interactions.append({
            "request": {"method": "POST", "uri": item.request.uri, "body": item.request.body.decode(), "headers": {}},
            "response": {"status_code": item.response.status, "http_version": "HTTP/1.1", "headers": headers,
                         "content": item.response.body.decode()},
        })  # fmt: skip
    out.write_text(json.dumps({"version": 1, "interactions": interactions}), encoding="utf-8")
    return out


def test_vcrpys_older_httpx_layout_is_read(tmp_path: Path) -> None:
    """Before: "missing the 'status' ... probably edited by hand".  vcrpy 9.4.2 itself still reads this layout."""
    old = _old_httpx(_record(tmp_path / "session.yaml", "chat", stream=True), tmp_path / "old.yaml")
    [first, *_] = load_cassette(old)
    assert first.response.status == 200 and first.response.is_sse and "content-encoding" not in first.response.headers
    scenario = to_scenario(old)
    assert [r.kind for r in scenario.model] == ["tool_use", "end_turn", "tool_use", "end_turn"]
    assert simloop.replay(loop("chat", stream=True), convert(old, tmp_path / "s.yaml")).ok


def test_vcrpy_itself_reads_the_older_httpx_layout_the_same(tmp_path: Path) -> None:
    """The layout is what vcrpy reads: its own serializer and stub give the same status and body."""
    from vcr.serializers import yamlserializer  # type: ignore[import-untyped, unused-ignore]
    from vcr.stubs import httpx_stubs  # type: ignore[import-untyped, unused-ignore]

    old = _old_httpx(_record(tmp_path / "session.yaml", "chat"), tmp_path / "old.yaml")
    raw = yamlserializer.deserialize(old.read_text(encoding="utf-8"))
    import httpx2 as httpx

    theirs = httpx_stubs._deserialize_response({**raw["interactions"][0]["response"],
                                                "headers": {"content-type": ["application/json"]}}, httpx)
    mine = load_cassette(old)[0].response
    assert theirs.status_code == mine.status and theirs.read() == mine.body


PURE_ISTR = """\
interactions:
- request:
    body: '{request}'
    headers: {{}}
    method: POST
    uri: https://api.openai.com/v1/chat/completions
  response:
    body:
      string: '{response}'
    headers:
      ? !!python/object/new:multidict._multidict_py.istr
      - Content-Type
      : - application/json
      ? !!python/object/new:multidict._multidict_py.istr
        args: [X-Request-Id]
        state: {{}}
      : - req_pure
      ? !!python/object/apply:multidict.istr [Openai-Processing-Ms]
      : - !!python/unicode '250'
    status:
      code: 200
      message: OK
version: 1
"""


def test_aiohttp_header_names_from_multidicts_pure_python_build_are_read(tmp_path: Path) -> None:
    """VCR.py through aiohttp with multidict's pure-Python ``istr``: PyYAML writes ``!!python/object/new:...istr``
    (before: refused as a Python object); also ``multidict.istr`` itself, and Python 2's ``!!python/unicode``.
    Read as the strings they are; any other object is still refused."""
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": TASK}]}
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sunny."}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}}  # fmt: skip
    path = tmp_path / "aiohttp.yaml"
    path.write_text(PURE_ISTR.format(request=json.dumps(request), response=json.dumps(answer)), encoding="utf-8")
    [interaction] = load_cassette(path)
    assert interaction.response.headers == {"content-type": ["application/json"], "x-request-id": ["req_pure"],
                                            "openai-processing-ms": ["250"]}
    [reply] = to_scenario(path).model
    assert reply.end_turn == "Sunny." and reply.latency == 0.25  # the recorded processing time
    evil = tmp_path / "evil.yaml"
    evil.write_text("interactions:\n- request: !!python/object/new:os.system ['echo pwned']\n", encoding="utf-8")
    with pytest.raises(CassetteError, match=r"evil\.yaml:2: not valid YAML"):
        load_cassette(evil)


SECRET = "hunter2-correct-horse-battery-staple"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_secret_an_openai_stream_spells_across_its_deltas_never_reaches_the_disk(tmp_path: Path, api: str) -> None:
    """The simulator streams text and arguments in 12-character pieces, so the secret is split across chunks (Chat
    Completions) or ``*.delta`` events (Responses); recorded with ``secrets=``, no piece of it is on disk and the
    stream still replays."""
    scenario = Scenario(task=TASK, tools=SCENARIO.tools, model=[
        Reply(tool_use=[ToolCall(name="get_weather", input={"city": f"Paris {SECRET}"})]),
        Reply(end_turn=f"The password is {SECRET}, sunny."),
    ])  # fmt: skip
    path = tmp_path / "secret.yaml"
    with record(path, secrets=[SECRET]), loopback.serve(scenario) as server:
        client = _client(server)
        tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
        if api == "chat":
            messages: list[Any] = [{"role": "user", "content": TASK}]
            with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=tools) as events:
                first = events.get_final_completion().choices[0].message
            assert SECRET in str(first.tool_calls)
        else:
            with client.responses.stream(model="gpt-4o", input=TASK, tools=[{**tools[0]["function"],
                                         "type": "function", "strict": False}]) as events:
                assert SECRET in str(events.get_final_response().output)
    text = path.read_text(encoding="utf-8")
    assert "hunter" not in text and "staple" not in text and "horse" not in text
    [call] = load_recording(path).calls
    assert "[REDACTED]" in json.dumps(call.answer.content)  # type: ignore[union-attr]


@pytest.mark.parametrize(("api", "stream"), [("chat", False), ("chat", True), ("responses", False), ("responses", True)])
def test_vcrpy_replays_an_openai_cassette_simloop_recorded(tmp_path: Path, api: str, stream: bool) -> None:
    """``record(path, mode="none")`` plays the recorded session back through vcrpy (no server): the JSON bodies
    stored parsed and the streams stored as their text read back as the SDK parsed them when recording."""
    path = _record(tmp_path / "session.yaml", api, stream=stream)  # the server it was recorded on is closed
    base = load_cassette(path)[0].request.uri.split("/v1/")[0] + "/v1"
    with record(path, mode="none"):  # every answer must come from the cassette
        client = openai.OpenAI(api_key="sk-test", base_url=base, max_retries=0)
        finals = (_chat_session(client, TASK, stream=stream) if api == "chat"
                  else _responses_session(client, TASK, stream=stream, chained=False))
    assert finals == ["Sunny in Paris, rainy in Rome.", "Snow in Oslo."]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_recorded_openai_400_the_simulator_also_gives_is_used_up(tmp_path: Path, api: str) -> None:
    """The loop sent a tool output answering no call, the API said 400, the loop recovered.  Replayed, the simulator
    refuses the same request itself: the recorded 400 is used up with it (before: left in place, so the loop's
    recovery was answered with the recorded 400)."""
    scenario = Scenario(task=TASK, model=[Reply(end_turn="Paris.")])
    orphan: Any = ([{"role": "user", "content": TASK}, {"role": "tool", "tool_call_id": "call_x", "content": "?"}]
                   if api == "chat" else
                   [{"role": "user", "content": TASK}, {"type": "function_call_output", "call_id": "call_x", "output": "?"}])

    def session(client: openai.OpenAI) -> str:
        with pytest.raises(openai.BadRequestError):
            if api == "chat":
                client.chat.completions.create(model="gpt-4o", messages=orphan)
            else:
                client.responses.create(model="gpt-4o", input=orphan)
        if api == "chat":
            return str(client.chat.completions.create(model="gpt-4o", messages=orphan[:1]).choices[0].message.content)
        return client.responses.create(model="gpt-4o", input=orphan[:1]).output_text

    path = tmp_path / "recovers.yaml"
    with record(path), loopback.serve(scenario) as server:
        assert session(_client(server)) == "Paris."
    assert [c.kind for c in load_recording(path).calls] == ["error 400", "end_turn"]
    model = Recorded(path)
    with Sim(scenario, model=model) as sim:
        outcome = sim.run(lambda s: simloop.Outcome("final", session(s.openai_client.with_options(max_retries=0))))
    assert outcome.text == "Paris." and model.served == 2 and sim.leftovers() == []


def test_a_recording_that_ends_on_tool_calls_converts_with_then_end_turn(tmp_path: Path) -> None:
    """pydantic-ai's structured output ends a run on the output tool's call, unanswered (half the corpus's
    failures before).  The scenario replays it and answers a loop that goes on with a final answer."""
    scenario = Scenario(task=TASK, tools=SCENARIO.tools, model=[SCENARIO.model[0]])
    path = tmp_path / "output_tool.yaml"
    with record(path), loopback.serve(scenario) as server:
        reply = _client(server).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": TASK}])
        assert reply.choices[0].finish_reason == "tool_calls"  # and the loop stops here
    converted = to_scenario(path)
    assert [r.kind for r in converted.model] == ["tool_use"] and converted.then == "end_turn"
    assert any("its loop stopped there" in note for note in load_recording(path).notes)
    assert simloop.replay(loop("chat"), convert(path, tmp_path / "s.yaml")).ok


def test_a_loop_that_calls_again_after_its_final_answer_is_refused_with_why(tmp_path: Path) -> None:
    """A loop that goes on after a final answer with no user message (pydantic-ai adding tools with a developer
    message) makes a turn no scenario can begin: refused, naming the interaction, rather than a scenario whose
    replay leaves a reply unserved."""
    path = tmp_path / "went_on.yaml"
    messages: list[Any] = [{"role": "user", "content": TASK}]
    scenario = Scenario(task=TASK, model=[Reply(end_turn="Ready."), Reply(end_turn="Sunny.")])
    with record(path), loopback.serve(scenario) as server:
        client = _client(server)
        answer = client.chat.completions.create(model="gpt-4o", messages=messages).choices[0].message
        messages += [{"role": "assistant", "content": answer.content}, {"role": "developer", "content": "More tools."}]
        client.chat.completions.create(model="gpt-4o", messages=messages)
    with pytest.raises(CassetteError, match=r"cannot convert: interaction 1 calls the model again after a final "
                                            r"answer with no new user message"):
        convert(path, tmp_path / "s.yaml")


@pytest.mark.parametrize(("api", "stream"), [("chat", False), ("chat", True), ("responses", False), ("responses", True)])
def test_an_openai_call_whose_uri_was_redacted_is_told_by_its_answer(tmp_path: Path, api: str, stream: bool) -> None:
    path = _record(tmp_path / "session.yaml", api, stream=stream)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for item in data["interactions"]:
        item["request"]["uri"] = "**REDACTED**"  # as newer langchain cassettes hide it
    hidden = tmp_path / "hidden.yaml"
    hidden.write_text(yaml.safe_dump(data), encoding="utf-8")
    recording = load_recording(hidden)
    assert [c.wire for c in recording.calls] == [api] * 4
    assert [r.kind for r in recording.scenario.model] == ["tool_use", "end_turn", "tool_use", "end_turn"]
