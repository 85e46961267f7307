"""Cassettes end to end: record a loop against the loopback simulator, replay it as a model, convert, fuzz.

Recording needs a server; this machine has no key and no network, so the "real API" is the simulator
on a real loopback socket (`simloop.wire.loopback`), which is also what users get from ``simloop serve``.
Recording runs in real time (the server answers at once); replays run in a `Sim` on virtual time.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

import simloop
from examples import correct_sync, rerun_after_api_error
from examples._common import MAX_TOKENS, THINKING
from simloop import Outcome, Scenario, Sim
from simloop._runtime.clock import VirtualClock
from simloop.cassettes import (
    CassetteError,
    Recorded,
    Scrubber,
    cassette_path,
    convert,
    load_cassette,
    load_recording,
    record,
    request_diff,
    to_scenario,
)
from simloop.sim import DEFAULT_MODEL
from simloop.tools import ToolBox
from simloop.transcript import Header, Transcript
from simloop.wire import loopback

SECRET_KEY = "sk-ant-test-SECRET-" + "Zq7" * 14
COOKIE = "sid=SECRET-COOKIE-4242"

REFUND = Scenario.model_validate({
    "name": "refund",
    "task": "Refund order 5531 in full; the customer returned it.",
    "tools": [
        {"name": "get_order", "kind": "read", "description": "Look up an order.",
         "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
         "results": ['{"order_id": "5531", "total": "89.90 EUR", "status": "returned"}']},
        {"name": "issue_refund", "kind": "write", "description": "Refund an order.",
         "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "string"}},
                          "required": ["order_id", "amount"]},
         "results": ['{"refund_id": "rf_8841", "status": "succeeded"}']},
    ],
    "model": [
        {"text": "Let me check the order first.", "tool_use": [{"name": "get_order", "input": {"order_id": "5531"}}],
         "latency": 2.5},
        {"tool_use": [{"name": "issue_refund", "input": {"order_id": "5531", "amount": "89.90 EUR"}}]},
        {"end_turn": "Order 5531 was refunded in full (89.90 EUR)."},
    ],
})


def record_session(
    path: Path, scenario: Scenario = REFUND, *, loop: Any = correct_sync.run_agent, stream: bool = False
) -> tuple[Outcome, list[bytes]]:
    """Run ``loop`` against the simulator on a loopback socket while recording; returns its outcome and the
    request bodies exactly as they went on the wire."""
    sent: list[bytes] = []
    tools = ToolBox(scenario, Transcript(header=Header(scenario="rec", seed=0)), now=lambda: 0.0, sleep=lambda s: None)
    with loopback.serve(scenario) as server, record(path):
        http = httpx2.Client(event_hooks={"request": [lambda r: sent.append(r.read())], "response": []})
        client = anthropic.Anthropic(
            api_key=SECRET_KEY, base_url=server.base_url, max_retries=0, http_client=http,
            default_headers={"cookie": COOKIE},
        )
        schemas: list[Any] = [t.schema_dict() for t in scenario.tools]
        outcome = loop(client, schemas, tools.run, scenario.task, model=DEFAULT_MODEL)
        http.close()
    return outcome, sent


@pytest.fixture(scope="module")
def refund(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    path = tmp_path_factory.mktemp("cassettes") / "test_refund.yaml"
    outcome, sent = record_session(path)
    assert outcome.reason == "final", outcome
    return path, sent


def capture(sim: Sim) -> list[bytes]:
    """The request bodies the SDK sends in this Sim, as bytes."""
    sent: list[bytes] = []
    sim.http_client.event_hooks = {"request": [lambda r: sent.append(r.read())], "response": []}
    return sent


# --------------------------------------------------------------------------- recording


def test_recording_keeps_no_secret_and_stores_json_parsed_and_streams_exactly(
    refund: tuple[Path, list[bytes]],
) -> None:
    path, sent = refund
    text = path.read_text(encoding="utf-8")
    assert SECRET_KEY not in text and "SECRET" not in text and "sk-ant" not in text
    assert "authorization" not in text.lower() and "cookie" not in text.lower()
    data = json.loads(json.dumps(__import__("yaml").safe_load(text)))
    first = data["interactions"][0]
    assert first["request"]["parsed_body"]["messages"][0] == {"role": "user", "content": REFUND.task}
    assert first["response"]["parsed_body"]["stop_reason"] == "tool_use"
    # The bodies read back are the exact bytes that went on the wire.
    assert [i.request.body for i in load_cassette(path)] == sent


def test_a_streamed_session_is_kept_as_its_exact_sse_text(tmp_path: Path) -> None:
    path = tmp_path / "stream.yaml"
    from examples import correct_stream

    outcome, _ = record_session(path, loop=correct_stream.run_agent)
    assert outcome.reason == "final"
    interactions = load_cassette(path)
    assert all(i.response.is_sse for i in interactions)
    assert "      string: |+\n        event: message_start\n" in path.read_text(encoding="utf-8")
    assert b"event: message_stop" in interactions[-1].response.body


def test_every_key_shaped_string_and_account_header_is_scrubbed() -> None:
    scrub = Scrubber(secrets=["my-private-token-123"])
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {"Set-Cookie": ["_cfuvid=abc"], "anthropic-organization-id": ["0a1b"], "request-id": ["req_1"],
                    "x-echo": ["sk-ant-api03-abcdefghijklmnop"]},
        "body": {"string": b'{"note": "my-private-token-123 and sk-ant-admin01-zzzzzzzzzz"}'},
    }
    cleaned = scrub.response(response)
    assert cleaned["headers"] == {"request-id": ["req_1"], "x-echo": ["[REDACTED]"]}
    assert cleaned["body"]["string"] == b'{"note": "[REDACTED] and [REDACTED]"}'


def test_a_recorded_cassette_replays_through_vcrpy_with_the_server_gone(refund: tuple[Path, list[bytes]]) -> None:
    path, _ = refund
    base_url = load_cassette(path)[0].request.uri.removesuffix("/v1/messages")
    tools = ToolBox(REFUND, Transcript(header=Header(scenario="r", seed=0)), now=lambda: 0.0, sleep=lambda s: None)
    with record(path, mode="none") as cassette:
        client = anthropic.Anthropic(
            api_key="sk-ant-test-other-key-000000000", base_url=base_url, max_retries=0,
            default_headers={"cookie": COOKIE},
        )
        schemas: list[Any] = [t.schema_dict() for t in REFUND.tools]
        outcome = correct_sync.run_agent(client, schemas, tools.run, REFUND.task, model=DEFAULT_MODEL)
    assert outcome.reason == "final" and outcome.text == "Order 5531 was refunded in full (89.90 EUR)."
    assert cassette.play_count == 3 and cassette.all_played


def test_record_refuses_the_virtual_clock_and_unknown_modes(tmp_path: Path) -> None:
    with pytest.raises(simloop.UsageError, match="the record modes are once, new_episodes, none, all, rewrite"), \
            record(tmp_path / "x.yaml", mode="sometimes"):
        pass
    with VirtualClock().patched(), pytest.raises(simloop.UsageError, match=r"record\(\) runs in real time"), \
            record(tmp_path / "x.yaml"):
        pass


def test_cassette_path_follows_pytest_recording() -> None:
    assert cassette_path("tests/test_agent.py", "test_refund") == Path("tests/cassettes/test_agent/test_refund.yaml")
    assert cassette_path("/a/test_x.py", "test_y[a/b]", cls="TestZ") == Path("/a/cassettes/test_x/TestZ.test_y[a-b].yaml")


def test_a_whole_gzip_file_loads_like_the_plain_one(refund: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    path, _ = refund
    packed = tmp_path / "test_refund.yaml.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert load_cassette(packed) == load_cassette(path)
    assert to_scenario(packed).name == "test_refund"
    broken = tmp_path / "broken.yaml.gz"
    broken.write_bytes(gzip.compress(path.read_bytes())[:40])
    with pytest.raises(CassetteError, match="broken.yaml.gz: the gzip-compressed cassette is truncated or corrupt"):
        load_cassette(broken)


# --------------------------------------------------------------------------- replay as a model


def as_recorded(loop: Any) -> Any:
    """A drive that runs ``loop`` as `record_session` did (the scenario's tools only: no web search declared)."""

    def drive(sim: Sim) -> Outcome:
        tools: Any = sim.tool_schemas
        return loop(sim.client, tools, sim.run_tool, sim.task, sim.limits, model=sim.model)  # type: ignore[no-any-return]

    return drive


def test_a_recorded_session_replays_byte_identical_requests(refund: tuple[Path, list[bytes]]) -> None:
    path, recorded = refund
    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        replayed = capture(sim)
        outcome = sim.run(as_recorded(correct_sync.run_agent))
    assert outcome.reason == "final" and outcome.text == "Order 5531 was refunded in full (89.90 EUR)."
    assert len(replayed) == 3
    assert replayed == recorded, "the replayed requests are byte-identical to the recorded ones"
    assert sim.check().ok
    assert sim.leftovers() == []


def test_the_replay_serves_the_recorded_reply_streamed_when_the_loop_now_streams(
    refund: tuple[Path, list[bytes]],
) -> None:
    from examples import correct_stream

    path, _ = refund
    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        outcome = sim.run(as_recorded(correct_stream.run_agent))
    assert outcome.reason == "final" and outcome.text == "Order 5531 was refunded in full (89.90 EUR)."
    recorded_ids = [i.response.json()["id"] for i in load_cassette(path)]
    assert [r.message["id"] for r in sim.transcript.responses] == recorded_ids  # type: ignore[index]


def changed_drive(sim: Sim) -> Outcome:
    """correct_sync with one change: the tool output is decorated before it goes back to the model."""
    def run_tool(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        return sim.run_tool(name, input, tool_use_id=tool_use_id) + " (verified)"

    tools: Any = sim.tool_schemas
    return correct_sync.run_agent(sim.client, tools, run_tool, sim.task, sim.limits, model=sim.model)


def test_a_changed_loop_gets_a_diff_naming_the_call_the_message_and_the_block(
    refund: tuple[Path, list[bytes]],
) -> None:
    path, _ = refund
    with Sim(to_scenario(path), model=Recorded(path)) as sim, pytest.raises(simloop.UsageError) as exc:
        sim.run(changed_drive)
    message = str(exc.value)
    tool_use_id = load_cassette(path)[0].response.json()["content"][2]["id"]
    assert message.splitlines()[:2] == [
        f"the loop's request for model call 2 differs from the recording ({path}, interaction 1):",
        (f"  messages[2].content[0].content (message 2, user; block 0: tool_result {tool_use_id}): "
        "recorded ...'\", \"status\": \"returned\"}', sent ...'\", \"status\": \"returned\"} (verified)' "
        "(they differ at character 64)"),
    ]
    assert "Recorded(path, strict=False)" in message


def test_a_tolerant_replay_serves_by_position_and_reports_the_drift(refund: tuple[Path, list[bytes]]) -> None:
    path, _ = refund
    model = Recorded(path, strict=False)
    with Sim(to_scenario(path), model=model) as sim:
        outcome = sim.run(changed_drive)
    assert outcome.reason == "final"
    assert [d.call for d in model.drift] == [2, 3]  # call 3 still carries the changed result in its history
    assert "messages[2].content[0].content" in str(model.drift[0])


def test_a_loop_asking_for_more_than_was_recorded_is_told_so(refund: tuple[Path, list[bytes]]) -> None:
    path, _ = refund

    def one_more(sim: Sim) -> Outcome:
        correct_sync.drive(sim)
        sim.client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": "Again?"}])
        return Outcome("final", "")

    with Sim(to_scenario(path), model=Recorded(path, strict=False)) as sim, \
            pytest.raises(simloop.UsageError, match="has 3 model call\\(s\\) and the loop asked for another: model call 4"):
        sim.run(one_more)


def test_unplayed_interactions_are_leftovers(refund: tuple[Path, list[bytes]]) -> None:
    path, _ = refund

    def first_call_only(sim: Sim) -> Outcome:
        tools: Any = sim.tool_schemas
        sim.client.messages.create(
            model=sim.model, max_tokens=MAX_TOKENS, thinking=THINKING, tools=tools,
            messages=[{"role": "user", "content": sim.task}],
        )
        return Outcome("final", "")

    with Sim(to_scenario(path), model=Recorded(path)) as sim:
        sim.run(first_call_only)
    assert sim.leftovers() == [
        f"{path}: interaction 1 (recorded model call 2, tool_use) was never played back",
        f"{path}: interaction 2 (recorded model call 3, end_turn) was never played back",
    ]


def test_request_diff_reads_like_a_report() -> None:
    recorded = {"model": "m", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "refund"}}]}]}
    sent = {"model": "m2", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "refunds", "page": 2}}]},
        {"role": "user", "content": "more"}], "temperature": 0}
    assert request_diff(recorded, sent) == [
        "model: recorded 'm', sent 'm2' (they differ at character 1)",
        "messages: the recording has 2 messages, the loop's request 3",
        ("messages[1].content[0].input.q (message 1, assistant; block 0: tool_use search toolu_1): "
        "recorded 'refund', sent 'refunds' (they differ at character 6)"),
        ("messages[1].content[0].input.page (message 1, assistant; block 0: tool_use search toolu_1): "
        "only in the loop's request: 2"),
        "messages[2] (message 2, user): only in the loop's request: {\"role\": \"user\", \"content\": \"more\"}",
        "temperature: only in the loop's request: 0",
    ]
    assert request_diff(recorded, json.loads(json.dumps(recorded))) == []


def test_recorded_refuses_what_is_not_a_recording() -> None:
    with pytest.raises(simloop.UsageError, match="Recorded\\(source\\): give a cassette path"):
        Recorded(3.5)  # type: ignore[arg-type]
    with pytest.raises(CassetteError, match="no-such.yaml: cannot read the cassette file"):
        Recorded("no-such.yaml")


# --------------------------------------------------------------------------- conversion


def test_the_scenario_of_a_recording_is_the_recorded_session(refund: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    path, _ = refund
    scenario = to_scenario(path)
    assert scenario.task == REFUND.task and scenario.name == "test_refund"
    assert [t.schema_dict() for t in scenario.tools] == [t.schema_dict() for t in REFUND.tools]
    assert [(t.name, t.kind, t.results) for t in scenario.tools] == [(t.name, t.kind, t.results) for t in REFUND.tools]
    kinds = [r.kind for r in scenario.model]
    assert kinds == ["tool_use", "tool_use", "end_turn"]
    assert scenario.model[0].text == "Let me check the order first." and scenario.model[0].latency == 2.5
    assert scenario.model[0].thinking == "Let me work out the next step."  # the loop asked for thinking
    assert scenario.model[0].usage is not None and scenario.model[0].usage.output_tokens
    # Replaying the scenario gives the same replies the recording holds (the model's own ids aside).
    with Sim(scenario) as sim:
        outcome = sim.run(correct_sync.drive)
    assert outcome.text == "Order 5531 was refunded in full (89.90 EUR)."
    recorded = [i.response.json() for i in load_cassette(path)]
    replayed = [r.message for r in sim.transcript.responses]
    assert [_without_ids(m) for m in replayed] == [_without_ids(m) for m in recorded]
    assert [m["usage"] for m in replayed] == [m["usage"] for m in recorded]  # type: ignore[index]
    written = convert(path, tmp_path / "refund.scenario.yaml")
    assert written.read_text(encoding="utf-8").startswith("# Converted by simloop from the cassette test_refund.yaml")
    assert simloop.load_scenario(written) == scenario


def _without_ids(message: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "id"} for b in message["content"]]


def test_tool_errors_in_the_recording_become_faults_and_kinds_can_be_given(tmp_path: Path) -> None:
    path = tmp_path / "raises.yaml"
    raising = REFUND.model_copy(update={"faults": [simloop.Fault(tool="get_order", kind="raise", call=1)]})
    record_session(path, raising)
    scenario = to_scenario(path, kinds={"get_order": "write"})
    assert scenario.faults == [simloop.Fault(tool="get_order", kind="raise", call=1)]
    assert scenario.tool("get_order").kind == "write"
    with pytest.raises(simloop.UsageError, match="a tool's kind is 'read' or 'write'"):
        to_scenario(path, kinds={"get_order": "delete"})


# --------------------------------------------------------------------------- fault mutation


@pytest.fixture(scope="module")
def write_then_done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cassettes") / "test_write.yaml"
    plan = REFUND.model_copy(update={"model": REFUND.model[1:]})  # refund, then the answer: nothing fails
    outcome, _ = record_session(path, plan, loop=rerun_after_api_error.run_agent)
    assert outcome.reason == "final"
    return path


def test_fuzzing_a_clean_recording_finds_the_double_write(write_then_done: Path, tmp_path: Path) -> None:
    recording = load_recording(write_then_done)
    assert recording.scenario.tool("issue_refund").kind == "write"
    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(rerun_after_api_error.drive, recorded=write_then_done, max_examples=200, seed=0, out_dir=tmp_path)
    assert "no_rerun" in {v.invariant for v in found.value.violations}
    # Shrunk to the recording plus the faults that matter: the refund, an outage outlasting the SDK's
    # retries, then the rest of the recording.
    minimal = found.value.scenario
    assert minimal.model[0].tool_use == recording.scenario.model[0].tool_use
    assert any(r.kind == "error" and r.repeat == 3 for r in minimal.model), minimal.to_yaml()
    assert minimal.faults == []
    with pytest.raises(simloop.InvariantViolation) as again:
        simloop.replay(rerun_after_api_error.drive, found.value.scenario_path)
    assert "no_rerun" in {v.invariant for v in again.value.violations}


def test_fuzzing_the_same_recording_leaves_a_correct_loop_alone(write_then_done: Path) -> None:
    report = simloop.verify(correct_sync.drive, recorded=write_then_done, max_examples=60, seed=0)
    assert report.ok


# --------------------------------------------------------------------------- both dialects through vcrpy

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "cassettes"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/data/cassettes not present")
@pytest.mark.parametrize("name", [
    "pydantic-ai/test_anthropic/test_anthropic_tool_with_thinking.yaml",  # parsed_body, JSON
    "llm-anthropic/test_anthropic/test_tools.yaml",  # raw body, gzip-compressed SSE as !!binary
])
def test_vcrpy_replays_both_dialects_with_the_simloop_serializer(name: str) -> None:
    path = CORPUS / name
    before = path.read_bytes()
    interactions = load_cassette(path)
    with record(path, mode="none") as cassette, httpx2.Client() as http:
        for item in interactions:
            headers = {"content-type": "application/json"}
            answer = http.post(item.request.uri, content=item.request.body, headers=headers)
            assert answer.status_code == item.response.status
            assert answer.content == item.response.body
    assert cassette.play_count == len(interactions)
    assert path.read_bytes() == before, "replaying never writes the cassette"
