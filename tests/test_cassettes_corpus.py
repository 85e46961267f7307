"""Every real recording in the corpus loads, replays through the SDK as a model, and converts to a scenario.

For each cassette with Anthropic traffic (``../shared/data/cassettes``, both dialects, gzip bodies
included) the recorded ``/v1/messages`` requests are sent again, in order, through the unmodified SDK
in a `Sim`, once as plain calls and once streaming:

* with the `Recorded` model (strict: every request must equal the recorded one), each reply must parse
  into the same SDK Message as the recorded response (a recorded error: the same status);
* with the cassette's scenario (`to_scenario`), each reply must be the same scenario-level reply: the
  kind, text, tool calls, stop sequence, usage, and thinking where the recording has it.

The requests are the recorded bodies sent verbatim (``extra_body``), with one change a real loop makes
too: thinking blocks carry the signature the simulator gave them, since the simulated API checks that
the loop sends its thinking back unchanged.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from _report import Say
from corpus import CORPORA, all_interactions, describe, is_beta, requires_corpus

from simloop import Outcome, Reply, Sim
from simloop.cassettes import Interaction, Recorded, RecordedCall, Recording, load_recording, reply_of_turn
from simloop.cassettes._openai import openai_wire
from simloop.protocol.render import Turn, turn_from_message
from simloop.protocol.validate import thinking_signature

pytestmark = [
    requires_corpus,
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),  # recorded model names
]


def _is_beta(interaction: Interaction, call: RecordedCall) -> bool:
    return is_beta(interaction, call.answer)


def _resign(body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    for message in body.get("messages") or []:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "thinking":
                block["signature"] = thinking_signature(block.get("thinking", ""))
    return body


def _send(sim: Sim, body: dict[str, Any], *, beta: bool, stream: bool) -> Any:
    """Send a recorded body verbatim through the SDK; the parsed Message as a dict, or ("error", status)."""
    body = {k: v for k, v in _resign(body).items() if k != "stream"}
    client = sim.client.with_options(max_retries=0)  # one recorded interaction, one request: no SDK retry
    api: Any = client.beta.messages if beta else client.messages
    # The real values travel in extra_body; the keyword max_tokens only feeds the SDK's client-side
    # "streaming is required" estimate, which must not refuse a recorded non-streaming call.
    args = {"model": body.get("model", "claude"), "max_tokens": 1, "messages": [], "extra_body": body}
    try:
        if stream:
            with api.stream(**args) as events:
                return events.get_final_message().model_dump()
        return api.create(**args).model_dump()
    except anthropic.APIStatusError as exc:
        return ("error", exc.status_code)


def _recorded_message(interaction: Interaction, *, beta: bool) -> Any:
    """The SDK's parse of the recorded response, thinking re-signed as the replay serves it."""
    response = interaction.response
    if response.status != 200:
        return ("error", response.status)
    content_type = "text/event-stream" if response.is_sse else "application/json"
    client = anthropic.Anthropic(
        api_key="k", base_url="http://recorded.test", max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(
            lambda _: httpx2.Response(200, headers={"content-type": content_type}, content=response.body))),
    )
    api: Any = client.beta.messages if beta else client.messages
    args: dict[str, Any] = {"model": "m", "max_tokens": 1, "messages": []}
    if response.is_sse:
        with api.stream(**args) as events:
            message = events.get_final_message().model_dump()
    else:
        message = api.create(**args).model_dump()
    for block in message["content"]:
        if block.get("type") == "thinking":
            block["signature"] = thinking_signature(block["thinking"])
    return message


def _view(reply: Reply, recorded: Reply) -> Reply:
    """What a scenario reply is compared on: no latency (virtual), thinking only where the recording has it
    (the simulator thinks whenever the request enables thinking)."""
    update: dict[str, Any] = {"latency": 0.0}
    if recorded.thinking is None:
        update["thinking"] = None
    return reply.model_copy(update=update)


def _replay(
    recording: Recording, calls: list[tuple[Interaction, RecordedCall]], *, scenario: bool, stream: bool
) -> list[Any]:
    got: list[Any] = []

    def drive(sim: Sim) -> Outcome:
        for interaction, call in calls:
            got.append(_send(sim, call.request, beta=_is_beta(interaction, call), stream=stream))
        return Outcome("final", "")

    model = None if scenario else Recorded(recording)
    with Sim(recording.scenario, model=model) as sim:
        outcome = sim.run(drive)
    assert outcome.exception is None, f"{recording.scenario.name}: {outcome.text}"
    assert sim.leftovers() == [], f"{recording.scenario.name}: {sim.leftovers()}"
    return got


def test_every_anthropic_cassette_loads_replays_and_converts(say: Say) -> None:
    counts: Counter[str] = Counter()
    failures: list[str] = []
    dropped: Counter[str] = Counter()
    by_file: dict[Path, list[Interaction]] = {}
    for file, interaction in all_interactions():  # parsed once for every corpus test
        by_file.setdefault(file, []).append(interaction)
    for path, interactions in by_file.items():
        if not any(i.is_anthropic_messages for i in interactions):
            continue
        counts["files"] += 1
        name = describe(path, interactions[0]).rsplit("#", 1)[0]
        interactions = [i for i in interactions if openai_wire(i) is None]  # OpenAI calls: their own corpus test
        recording = load_recording(interactions, name=path.stem)
        counts["loaded"] += 1
        for note in recording.notes:
            found = re.search(r": (.*) block\(s\) left out", note)
            for what in (found.group(1).split(", ") if found else [note.split(": ", 1)[-1].split(" (")[0]]):
                dropped[what] += 1
        by_index = {i.index: i for i in interactions}
        calls = [(by_index[c.interaction], c) for c in recording.calls if by_index[c.interaction].is_anthropic_messages]
        if not calls:
            counts["count_tokens only"] += 1
            continue
        expected = [_recorded_message(i, beta=_is_beta(i, c)) for i, c in calls]
        for stream in (False, True):
            form = "SSE" if stream else "JSON"
            got = _replay(recording, calls, scenario=False, stream=stream)
            same = sum(g == e for g, e in zip(got, expected, strict=True))
            counts[f"recorded {form}"] += same
            if same != len(calls):
                bad = next(n for n, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e)
                failures.append(f"{name} call {bad + 1} replayed as {form} parses differently")
        # The scenario is replayed in the form the recording used (its rendering in both forms is
        # what the Recorded runs above and tests/test_fidelity_responses.py check).
        # A cassette of several independent conversations makes one scenario per conversation.
        stream = any(i.response.is_sse for i, _ in calls)
        form = "SSE" if stream else "JSON"
        scripted: list[tuple[Interaction, RecordedCall]] = []
        got = []
        counts["conversations"] += recording.conversations
        for k in range(recording.conversations):
            one = load_recording(interactions, name=path.stem, conversation=k)
            mine = [(by_index[c.interaction], c) for c in one.conversation
                    if by_index[c.interaction].is_anthropic_messages and c.reply is not None]
            scripted += mine
            got += _replay(one, mine, scenario=True, stream=stream)
        for n, ((_, call), message) in enumerate(zip(scripted, got, strict=True)):
            assert call.reply is not None
            replayed = reply_of_turn(turn_from_message(message)) if isinstance(message, dict) else message
            same_error = replayed == ("error", call.reply.error) and call.reply.kind == "error"
            if same_error or (isinstance(replayed, Reply) and _view(replayed, call.reply) == _view(call.reply, call.reply)):
                counts["scenario"] += 1
                counts[f"scenario {form}"] += 1
            else:
                failures.append(f"{name} call {n + 1}: the scenario replays {replayed!r} ({form}), "
                                f"recorded {call.reply!r}")
        counts["model calls"] += len(calls)
        counts["errors"] += sum(1 for _, c in calls if not isinstance(c.answer, Turn))
        counts["scriptable"] += sum(1 for _, c in calls if c.reply is not None)
        counts["unscriptable"] += sum(1 for _, c in calls if c.reply is None)
    summary = (
        f"cassettes [{', '.join(map(str, CORPORA))}]: {counts['files']} files with Anthropic traffic, {counts['loaded']} loaded "
        f"({counts['count_tokens only']} with count_tokens calls only, {counts['conversations']} conversations); "
        f"{counts['model calls']} model calls "
        f"({counts['errors']} recorded errors): {counts['recorded JSON']} replay via Recorded as JSON, "
        f"{counts['recorded SSE']} as SSE; {counts['scriptable']} in the scenarios, which reproduce "
        f"{counts['scenario']} ({counts['scenario JSON']} as JSON, {counts['scenario SSE']} as SSE, as recorded)\n"
        "left out of the scenarios (v1 replies hold text and client tool calls): "
        + ", ".join(f"{what} ({n})" for what, n in sorted(dropped.items()))
    )
    say(summary)
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:10])
    assert counts["files"] == counts["loaded"] > 100
    assert counts["recorded JSON"] == counts["recorded SSE"] == counts["model calls"]
    # A recorded 4xx (other than 429) is not a v1 scenario reply (the shared corpus has one: a 400).
    assert counts["scenario"] == counts["scriptable"] == counts["model calls"] - counts["unscriptable"]
