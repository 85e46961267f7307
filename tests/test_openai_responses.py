"""The OpenAI wire's Responses API through the official ``openai`` SDK, unmodified: response objects, event
streams, ``previous_response_id`` chains, errors and the real API's 400s, the translation into the one world,
and the loops of examples/openai_responses_loop.py under `simloop.verify` (docs/design.md, The OpenAI wire)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the OpenAI wire needs the openai SDK: pip install 'simloop[openai]'")

import simloop
from examples import openai_loop, openai_responses_loop
from examples.catalogue import DECLARED
from simloop.protocol import openai_responses
from simloop.protocol.render import Turn

TOOLS: list[Any] = [{"type": "function", "name": "search", "description": "Search.",
                     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]
CALLS = {"tool_use": [{"name": "search", "input": {"q": "a"}}, {"name": "search", "input": {"q": "b"}}]}
LIMITS = simloop.Limits(**DECLARED)


def scenario(*replies: dict[str, Any]) -> dict[str, Any]:
    return {"name": "wire", "task": "Find it.", "tools": [{"name": "search"}], "model": list(replies)}


def outputs(response: Any, text: str = "ok") -> list[dict[str, Any]]:
    return [{"type": "function_call_output", "call_id": item.call_id, "output": text}
            for item in response.output if item.type == "function_call"]


def test_function_calls_render_as_the_sdk_reads_them_and_input_items_round_trip() -> None:
    with simloop.Sim(scenario(CALLS, {"end_turn": "Found both."})) as sim:
        client = sim.openai_client
        items: list[Any] = [{"role": "user", "content": sim.task}]
        response = client.responses.create(model="gpt-4o", instructions="Be brief.", input=items, tools=TOOLS)
        assert response.object == "response" and response.id.startswith("resp_") and response.status == "completed"
        calls = [item for item in response.output if item.type == "function_call"]
        assert [json.loads(c.arguments) for c in calls] == [{"q": "a"}, {"q": "b"}]
        assert all(c.call_id.startswith("call_") and len(c.call_id) == 29 and c.id.startswith("fc_") for c in calls)
        assert response.usage is not None
        assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
        assert response.instructions == "Be brief." and response.tools[0].name == "search"  # type: ignore[union-attr]
        items += [*response.output, *outputs(response)]
        final = client.responses.create(model="gpt-4o", instructions="Be brief.", input=items, tools=TOOLS)
        assert final.output_text == "Found both." and final.output[0].type == "message"
    # the transcript holds the Messages shape the invariants read: the calls one assistant turn, their call_ids
    req = sim.transcript.requests[1]
    assert req.path == "/v1/responses" and req.body["system"] == "Be brief."
    conv = req.conversation
    assert [b["id"] for b in conv[1]["content"]] == [c.call_id for c in calls]
    assert [m["content"][0]["tool_use_id"] for m in conv[2:]] == [c.call_id for c in calls]
    assert sim.check(invariants=["pairing", "request_valid"]).ok


def test_the_chat_wire_names_its_calls_as_the_real_api_does() -> None:
    chat_tools: list[Any] = [{"type": "function", "function": {"name": "search", "parameters": TOOLS[0]["parameters"]}}]
    with simloop.Sim(scenario(CALLS)) as sim:
        reply = sim.openai_client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}], tools=chat_tools)
    ids = [c.id for c in reply.choices[0].message.tool_calls or []]
    assert len(ids) == 2 and all(i.startswith("call_") and len(i) == 29 for i in ids)
    with simloop.Sim(scenario(CALLS)) as sim:  # the same seed draws the same world on the Messages wire
        message = sim.client.messages.create(model="claude-sonnet-5", max_tokens=100,
                                             messages=[{"role": "user", "content": "x"}],
                                             tools=[{"name": "search", "input_schema": TOOLS[0]["parameters"]}])
    assert [b.id[8:] for b in message.content if b.type == "tool_use"] == [i[5:27] for i in ids]


def test_previous_response_id_chains_the_stored_conversation() -> None:
    with simloop.Sim(scenario(CALLS, {"end_turn": "Found both."})) as sim:
        client = sim.openai_client
        first = client.responses.create(model="gpt-4o", instructions="Be brief.", input=sim.task, tools=TOOLS)
        final = client.responses.create(model="gpt-4o", previous_response_id=first.id, input=outputs(first),
                                        tools=TOOLS)
        assert final.previous_response_id == first.id and final.output_text == "Found both."
    req = sim.transcript.requests[1]
    assert [m["role"] for m in req.conversation] == ["user", "assistant", "user", "user"]
    assert "system" not in req.body  # instructions are not carried over by previous_response_id
    assert sim.check(invariants=["pairing", "request_valid"]).ok


def _refused(*requests: dict[str, Any]) -> tuple[Any, simloop.Sim]:
    """Send ``requests`` in turn (the first ones must pass; each may name ``"$prev"``), the last one refused."""
    with simloop.Sim(scenario(CALLS, CALLS, {"end_turn": "ok"})) as sim:
        client = sim.openai_client
        previous = None
        for k, body in enumerate(requests):
            body = {key: (previous.id if value == "$prev" and previous is not None else value)
                    for key, value in body.items()}
            if callable(body.get("input")):
                body["input"] = body["input"](previous)
            if k < len(requests) - 1:
                previous = client.responses.create(model="gpt-4o", tools=TOOLS, **body)
                continue
            with pytest.raises(openai.BadRequestError) as info:
                client.responses.create(model="gpt-4o", tools=TOOLS, **body)
    assert sim.transcript.requests[-1].attempt == 0 and sim.transcript.responses[-1].kind == "rejected"
    return info.value, sim


def test_a_call_without_its_output_gets_the_real_400_and_pairing_reports_it() -> None:
    err, sim = _refused({"input": "x"}, {"input": lambda prev: [{"role": "user", "content": "x"}, *prev.output, outputs(prev)[0]]})
    unanswered = sim.transcript.responses[0].message["content"][1]["id"]  # type: ignore[index]
    assert err.body == {"message": f"No tool output found for function call {unanswered}.",
                        "type": "invalid_request_error", "param": "input", "code": None}
    report = sim.check(invariants=["pairing", "request_valid"])
    assert [v.invariant for v in report.violations] == ["pairing"]
    assert "has no function_call_output answering it before the next request" in report.violations[0].message


def test_an_output_answering_no_call_and_an_unknown_previous_response_get_the_real_400s() -> None:
    err, _ = _refused({"input": [{"type": "function_call_output", "call_id": "call_zz", "output": "1"}]})
    assert err.body == {"message": "No tool call found for function call output with call_id call_zz.",
                        "type": "invalid_request_error", "param": "input", "code": None}
    err, _ = _refused({"input": "x", "previous_response_id": "resp_nope"})
    assert err.body == {"message": "Previous response with id 'resp_nope' not found.", "type": "invalid_request_error",
                        "param": "previous_response_id", "code": "previous_response_not_found"}
    # the output both chained and sent again: its items twice
    err, _ = _refused({"input": "x"}, {"input": lambda prev: [*prev.output, *outputs(prev)], "previous_response_id": "$prev"})
    assert err.body["message"].startswith("Duplicate item found with id fc_") and err.body["param"] == "input"
    # store: false: the response is not kept, so it cannot be chained
    err, _ = _refused({"input": "x", "store": False}, {"input": lambda prev: outputs(prev), "previous_response_id": "$prev"})
    assert err.body["code"] == "previous_response_not_found"


def test_the_event_stream() -> None:
    with simloop.Sim(scenario(CALLS, {"end_turn": "Done, and done well."})) as sim:
        client = sim.openai_client
        events = list(client.responses.create(model="gpt-4o", input="x", tools=TOOLS, stream=True))
        kinds = [e.type for e in events]
        assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
        assert kinds[-1] == "response.completed" and [e.sequence_number for e in events] == list(range(len(events)))
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert [json.loads(e.arguments) for e in done] == [{"q": "a"}, {"q": "b"}]
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta"
                         and e.output_index == 0)
        assert json.loads(deltas) == {"q": "a"}
        final = events[-1].response  # type: ignore[union-attr]
        with client.responses.stream(model="gpt-4o", previous_response_id=final.id, input=outputs(final),
                                     tools=TOOLS) as stream:
            text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            assert stream.get_final_response().output_text == text == "Done, and done well."


def test_the_async_client_streams_and_a_tool_error_told_in_text() -> None:
    def boom(q: str) -> str:
        raise RuntimeError("index offline")

    async def drive(sim: simloop.Sim) -> simloop.Outcome:
        client = sim.async_openai_client
        items: list[Any] = [{"role": "user", "content": sim.task}]
        response = await client.responses.create(model="gpt-4o", input=items, tools=TOOLS)
        items += response.output
        for call in (item for item in response.output if item.type == "function_call"):
            try:
                out = await sim.arun_tool(call.name, json.loads(call.arguments), tool_use_id=call.call_id)
            except RuntimeError as exc:
                out = f"Error: {exc}"
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": out})
        stream = await client.responses.create(model="gpt-4o", input=items, tools=TOOLS, stream=True)
        text = "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])
        return simloop.Outcome(reason="final", text=text)

    with simloop.Sim(scenario(CALLS, {"end_turn": "The index is offline."}), tools={"search": boom}) as sim:
        outcome = sim.run(drive)
    assert outcome.reason == "final" and outcome.text == "The index is offline."
    report = sim.check(outcome)
    assert report.ok, str(report)  # tool_errors: this wire has no is_error; the text says it


def test_incomplete_responses_keep_the_cut_arguments_and_a_refusal_is_a_refusal_part() -> None:
    cut = {"max_tokens": {"text": "Let me", "tool_use": [{"name": "search", "input": {"q": "abcdefgh"}}]}}
    with simloop.Sim(scenario(cut, {"refusal": "I can't help with that."})) as sim:
        client = sim.openai_client
        response = client.responses.create(model="gpt-4o", input="x", tools=TOOLS, max_output_tokens=50)
        assert response.status == "incomplete" and response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens" and response.max_output_tokens == 50
        call = response.output[-1]
        assert call.type == "function_call" and call.status == "incomplete"
        assert call.arguments.startswith('{"q"') and not call.arguments.endswith("}")  # cut off: not JSON
        refused = client.responses.create(model="gpt-4o", input="y")
        assert refused.status == "completed" and refused.incomplete_details is None  # the model declined
        assert refused.output_text == ""  # nothing to take for an answer
        part = refused.output[0].content[0]  # type: ignore[union-attr]
        assert part.type == "refusal" and part.refusal == "I can't help with that."
    assert sim.transcript.requests[0].body["max_tokens"] == 50


def test_faults_reach_the_loop_as_the_sdk_raises_them() -> None:
    with simloop.Sim(scenario({"error": "stream_cut"}, {"error": "stream_error"}, {"error": 500, "repeat": 3})) as sim:
        client = sim.openai_client.with_options(max_retries=0)
        for error in (openai.APIConnectionError, openai.APIError):
            with pytest.raises(error) as info:
                list(client.responses.create(model="gpt-4o", input="x", stream=True))
            assert type(info.value) is error
        assert info.value.body == {"type": "server_error", "code": "server_error", "param": None,
                                   "message": "The server had an error while processing your request. Sorry about that!"}
        with pytest.raises(openai.InternalServerError) as failed:
            sim.openai_client.responses.create(model="gpt-4o", input="x")
        assert failed.value.body["type"] == "server_error"  # type: ignore[index]
    assert [r.fault for r in sim.transcript.responses[:2]] == ["stream_cut", "stream_error"]
    assert [r.attempt for r in sim.transcript.requests[2:]] == [0, 1, 2]


def test_a_429_waits_its_retry_after_on_the_virtual_clock() -> None:
    def drive(sim: simloop.Sim) -> simloop.Outcome:
        return simloop.Outcome(reason="final", text=sim.openai_client.responses.create(model="gpt-4o", input="x").output_text)

    with simloop.Sim(scenario({"error": 429, "retry_after": 7.0}, {"end_turn": "ok"})) as sim:
        assert sim.run(drive).text == "ok"
    first, second = sim.transcript.requests
    assert second.t - first.t == pytest.approx(7.0) and second.call == first.call


def test_the_context_window_in_this_wires_words() -> None:
    with simloop.Sim(scenario({"end_turn": "ok"})) as sim, pytest.raises(openai.BadRequestError) as info:
        sim.openai_client.responses.create(model="gpt-4o", input="word " * 200_000)
    assert info.value.body == {"message": openai_responses.CONTEXT_EXCEEDED, "type": "invalid_request_error",
                               "param": "input", "code": "context_length_exceeded"}


def test_translation_into_the_messages_shape() -> None:
    items: list[Any] = [
        {"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
        {"type": "function_call", "call_id": "call_a", "name": "search", "arguments": '{"q":"a"}'},
        {"type": "function_call", "call_id": "call_b", "name": "search", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "call_a", "output": "1"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "2"}]},
    ]
    body = {"model": "gpt-4o", "instructions": "Be brief.", "max_output_tokens": 99, "parallel_tool_calls": False,
            "tool_choice": {"type": "function", "name": "search"}, "tools": TOOLS, "input": items}
    assert openai_responses.validate_responses(body, items) is None
    internal = openai_responses.to_internal(body, items)
    assert internal["system"] == "Be brief.\n\nRules." and internal["max_tokens"] == 99
    assert internal["tool_choice"] == {"type": "tool", "name": "search", "disable_parallel_tool_use": True}
    assert internal["messages"][1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "call_a", "name": "search", "input": {"q": "a"}},
        {"type": "tool_use", "id": "call_b", "name": "search", "input": "not json"}]}
    assert internal["messages"][3] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_b", "content": "2"}]}
    assert openai_responses.to_internal({**body, "tool_choice": "required"}, items)["tool_choice"]["type"] == "any"
    bad = openai_responses.validate_responses({"model": "m", "input": items[:5]}, items[:5])
    assert bad is not None and bad.message == "No tool output found for function call call_a."
    raw = openai_responses.render_events(Turn([{"type": "text", "text": "hi"}], "end_turn"),
                                         {"id": "msg_01x", "usage": {}}, {}, model="m", created=0)
    assert raw[-1].startswith(b"event: response.completed\ndata: ")


# -- the loops of examples/openai_responses_loop.py -----------------------------------------------------------------


@pytest.mark.parametrize("loop", ["drive", "drive_chained"])
def test_the_correct_loops_pass(loop: str, tmp_path: Path) -> None:
    report = simloop.verify(getattr(openai_responses_loop, loop), limits=LIMITS, max_examples=40, seed=1,
                            out_dir=tmp_path)
    assert report.ok and report.examples == 40


@pytest.mark.parametrize(("twin", "invariant"), [
    ("drive_partial_answers", "pairing"),
    ("drive_tools_from_incomplete", "truncation"),
    ("drive_rerun_after_500", "no_rerun"),
])
def test_each_twin_is_caught_and_its_scenario_replays_on_either_wire(twin: str, invariant: str, tmp_path: Path) -> None:
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(getattr(openai_responses_loop, twin), limits=LIMITS, max_examples=60, seed=0, out_dir=tmp_path)
    assert {v.invariant for v in info.value.violations} == {invariant}
    if invariant == "truncation":  # in this wire's words
        assert 'cut off at status "incomplete" (max_output_tokens)' in info.value.violations[0].message
    saved = list(tmp_path.glob("*.yaml"))
    assert len(saved) == 1
    with pytest.raises(simloop.InvariantViolation, match=invariant):
        simloop.replay(getattr(openai_responses_loop, twin), saved[0])
    chat_twin = {"drive_tools_from_incomplete": "drive_tools_from_length"}.get(twin, twin)
    with pytest.raises(simloop.InvariantViolation, match=invariant):  # one world: the Chat Completions twin too
        simloop.replay(getattr(openai_loop, chat_twin), saved[0])
    for correct in (openai_responses_loop.drive, openai_responses_loop.drive_chained, openai_loop.drive):
        assert simloop.replay(correct, saved[0]).ok


def test_the_readme_responses_loop_passes(tmp_path: Path) -> None:
    """The README's Responses loop, as printed there, passes verify (no limits declared: its own cap)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Loops on the openai SDK", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    code = next(b for b in blocks if "responses.create" in b)
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the project's own README
    report = simloop.verify(namespace["drive"], max_examples=40, seed=2, out_dir=tmp_path)
    assert report.ok


def test_a_call_id_that_is_a_json_object_gets_the_400_and_the_run_is_checked_without_a_crash() -> None:
    # ids from a rejected request are whatever JSON the loop sent: checking reads them defensively
    import anthropic

    with simloop.Sim(scenario(CALLS, {"end_turn": "Found both."})) as sim:
        client = sim.openai_client
        first = client.responses.create(model="gpt-4o", input=sim.task, tools=TOOLS)
        bad = [{"type": "function_call_output", "call_id": {"id": item.call_id}, "output": "1"}
               for item in first.output if item.type == "function_call"]
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="gpt-4o", input=[{"role": "user", "content": sim.task}, *first.output, *bad],
                                    tools=TOOLS)
        with pytest.raises(anthropic.BadRequestError):  # the Messages wire's 400 alike
            sim.client.messages.create(model="claude-sonnet-5", max_tokens=10, messages=[
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": {"a": [1]}, "content": "x"}]}])
    assert info.value.status_code == 400 and "call_id" in str(info.value.body)
    report = sim.check()
    assert [v.invariant for v in report.violations] == ["pairing", "pairing"]
    assert "has no function_call_output answering it" in report.violations[0].message
    assert "[400" in simloop.timeline.render_timeline(sim.transcript, report.violations)
