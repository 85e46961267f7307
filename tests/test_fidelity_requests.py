"""Fidelity of the request rules against real recorded traffic.

The real API is the judge: every Messages request it answered 200 in the cassette corpus must
pass `validate_messages_request` (a false rejection would break a correct loop), and every
recorded 4xx must be reproduced with the same status and error type, unless the error is about
something the simulator cannot know, which is then listed in `BEYOND_THE_SIMULATOR` with why.

The corpus is also turned against the validator: real accepted conversations, minimally broken
(a tool_result dropped, a thinking block stripped), must be rejected with the real texts.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _report import Say
from corpus import (
    CASSETTES,
    CORPORA,
    all_interactions,
    cassette_paths,
    corpus_of,
    describe,
    messages_interactions,
    requires_corpus,
)

from simloop.cassettes import Interaction, load_cassette
from simloop.protocol.validate import Rejection, validate_count_tokens_request, validate_messages_request

pytestmark = requires_corpus

# Recorded errors the simulator deliberately does not reproduce: it accepts any model name and
# does not model per-model capabilities.  Keyed by "folder/file.yaml#interaction".
BEYOND_THE_SIMULATOR: dict[str, str] = {
    "pydantic-ai/test_anthropic/test_anthropic_count_tokens_error.yaml#0": (
        "404 not_found_error 'model: claude-does-not-exist': the simulator accepts any model name"
    ),
    "pydantic-ai/test_anthropic/test_anthropic_explicit_effort_xhigh_unsupported_model_errors.yaml#0": (
        "400 effort 'xhigh' on claude-opus-4-6: a model capability the simulator does not model"
    ),
}


# Statuses that say something about the request (the simulator must answer them itself); the others
# (429, 5xx, 529, 401, 403...) are about the moment or the account: a replay serves them as recorded.
REQUEST_ERRORS = frozenset({400, 404, 413, 422})


def _request_errors(root: Path | None = None) -> list[tuple[Path, Interaction]]:
    return [
        (p, i) for p, i in messages_interactions()
        if i.response.status in REQUEST_ERRORS and (root is None or corpus_of(p) == root)
    ]  # fmt: skip


def _validate(interaction: Interaction) -> Rejection | None:
    body = interaction.request.json()
    if interaction.request.path.endswith("/count_tokens"):
        return validate_count_tokens_request(body)
    return validate_messages_request(body)


def test_every_cassette_loads(say: Say) -> None:
    for root in CORPORA:
        paths = cassette_paths(root)
        total = sum(len(load_cassette(path)) for path in paths)
        calls = sum(1 for p, _ in messages_interactions() if corpus_of(p) == root)
        manifest = root / "MANIFEST.md"
        if root == CASSETTES.resolve() and manifest.is_file():
            found = re.search(
                r"Grand total: (\d+) cassette files, .*?(\d+) recorded HTTP interactions",
                manifest.read_text(encoding="utf-8"),
            )
            assert found, "MANIFEST.md no longer states the grand total; update this test"
            assert (len(paths), total) == (int(found.group(1)), int(found.group(2)))
            assert calls > 100
        say(f"fidelity [{root}]: {len(paths)} cassettes, {total} interactions loaded, "
                     f"{calls} Anthropic messages/count_tokens")  # fmt: skip


def test_every_accepted_recorded_request_passes(say: Say) -> None:
    accepted = [(p, i) for p, i in messages_interactions() if i.response.status < 400]
    false_rejections = [f"{describe(p, i)}: {rejection}" for p, i in accepted if (rejection := _validate(i))]
    assert not false_rejections, "requests the real API accepted were rejected:\n" + "\n".join(false_rejections)
    assert accepted, "no accepted Anthropic requests found in the corpus"

    for root in CORPORA:
        mine = [i for p, i in accepted if corpus_of(p) == root]
        errors = _request_errors(root)
        other = sum(1 for p, i in messages_interactions() if corpus_of(p) == root and i.response.status >= 400) - len(
            errors
        )
        listed = [describe(p, i) for p, i in errors if describe(p, i) in BEYOND_THE_SIMULATOR]
        reproduced = sum(1 for p, i in errors if describe(p, i) not in BEYOND_THE_SIMULATOR and _reproduces(i))
        reasons = "; ".join(BEYOND_THE_SIMULATOR[name] for name in listed)
        say(
            f"fidelity [{root}]: {len(mine)}/{len(mine)} recorded requests accepted; {len(errors)} recorded request "
            f"errors ({reproduced} reproduced, {len(listed)} allow-listed{': ' + reasons if reasons else ''}); "
            f"{other} transient or account errors (429, 5xx...: a replay serves them as recorded)",
        )


def _reproduces(interaction: Interaction) -> bool:
    """The simulator answers this recorded error's request with the recorded status and error type."""
    rejection = _validate(interaction)
    recorded = interaction.response.json() or {}
    error = recorded.get("error") if isinstance(recorded, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return rejection is not None and (rejection.status, rejection.type) == (interaction.response.status, kind)


def test_every_recorded_error_is_reproduced_or_explained() -> None:
    problems = []
    errors = _request_errors()
    for path, interaction in errors:
        name = describe(path, interaction)
        rejection = _validate(interaction)
        if name in BEYOND_THE_SIMULATOR:
            if rejection is not None:
                problems.append(f"{name}: now rejected ({rejection.message!r}); drop it from BEYOND_THE_SIMULATOR")
            continue
        recorded = interaction.response.json() or {}
        want = (interaction.response.status, recorded.get("error", {}).get("type"))
        got = (rejection.status, rejection.type) if rejection else None
        if got != want:
            problems.append(f"{name}: recorded {want} {recorded.get('error')!r}, simulator gave {rejection!r}")
    listed = {describe(p, i) for p, i in errors}
    if CASSETTES.resolve() in CORPORA:  # the allow-list names the shared corpus's files
        problems += [f"{name}: in BEYOND_THE_SIMULATOR but not a recorded error" for name in BEYOND_THE_SIMULATOR
                     if name not in listed]  # fmt: skip
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- the corpus, minimally broken


def _accepted_bodies(keep: Callable[[dict[str, Any]], bool]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path, interaction in messages_interactions():
        body = interaction.request.json()
        if interaction.response.status == 200 and not interaction.request.path.endswith("/count_tokens") and keep(body):
            out.append((describe(path, interaction), body))
    return out


def _ends_with_tool_results(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and isinstance(last["content"], list) and last["content"][0]["type"] == "tool_result"


def test_dropping_a_recorded_tool_result_is_rejected() -> None:
    cases = _accepted_bodies(_ends_with_tool_results)
    assert len(cases) >= 10
    for name, body in cases:
        broken = copy.deepcopy(body)
        dropped = broken["messages"][-1]["content"].pop(0)["tool_use_id"]
        if not broken["messages"][-1]["content"]:
            broken["messages"][-1]["content"] = [{"type": "text", "text": "continue"}]
        rejection = validate_messages_request(broken)
        assert rejection is not None, name
        assert re.fullmatch(
            r"messages\.\d+: `tool_use` ids were found without `tool_result` blocks immediately after: (.*)\. "
            r"Each `tool_use` block must have a corresponding `tool_result` block in the next message\.",
            rejection.message,
        ), f"{name}: {rejection.message}"
        assert dropped in rejection.message, name


def test_a_recorded_tool_result_with_a_foreign_id_is_rejected() -> None:
    for name, body in _accepted_bodies(_ends_with_tool_results):
        broken = copy.deepcopy(body)
        broken["messages"][-1]["content"][0]["tool_use_id"] = "toolu_foreign"
        rejection = validate_messages_request(broken)
        assert rejection is not None and rejection.message.startswith(
            f"messages.{len(body['messages']) - 1}.content.0: unexpected `tool_use_id` found in `tool_result` "
            "blocks: toolu_foreign."
        ), f"{name}: {rejection}"


def test_stripping_thinking_from_a_recorded_tool_turn_is_rejected() -> None:
    def thinking_tool_turn(body: dict[str, Any]) -> bool:
        thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        return thinking and _ends_with_tool_results(body)

    cases = _accepted_bodies(thinking_tool_turn)
    assert cases, "the corpus has no thinking-enabled tool turn any more"
    for name, body in cases:
        broken = copy.deepcopy(body)
        turn = broken["messages"][-2]
        turn["content"] = [b for b in turn["content"] if b["type"] not in ("thinking", "redacted_thinking")]
        rejection = validate_messages_request(broken)
        assert rejection is not None and "Expected `thinking` or `redacted_thinking`, but found" in rejection.message, (
            f"{name}: {rejection}"
        )


def test_interactions_outside_the_messages_api_are_told_apart() -> None:
    others = [i for _, i in all_interactions() if not i.is_anthropic_messages]
    assert others, "the corpus has non-Anthropic interactions (bedrock, openai, image downloads)"
    assert all("api.anthropic.com" not in i.request.uri or i.request.method != "POST" for i in others)


def test_compressed_bodies_are_decoded() -> None:
    gz = [p for p in cassette_paths() if b"!!binary" in Path(p).read_bytes()]
    assert gz
    for path in gz:
        for interaction in load_cassette(path):
            assert "content-encoding" not in interaction.response.headers, describe(path, interaction)
            if interaction.is_anthropic_messages:
                assert interaction.response.is_sse or interaction.response.json() is not None


# --------------------------------------------------------------------------- the context window


def test_every_accepted_recorded_request_fits_its_models_context_window(say: Say) -> None:
    """The window rule rejects none of the requests the real API accepted (counted as the simulator counts)."""
    from simloop.protocol.validate import context_window
    from simloop.wire.server import request_tokens

    over = []
    counted = []
    for path, interaction in messages_interactions():
        body = interaction.request.json()
        if interaction.response.status >= 400 or interaction.request.path.endswith("/count_tokens"):
            continue
        tokens = request_tokens(body, len(interaction.request.body))
        counted.append(tokens)
        betas = ",".join(interaction.request.headers.get("anthropic-beta", []))
        if tokens > context_window(body.get("model"), betas):
            over.append(f"{describe(path, interaction)}: {tokens} tokens")
    assert not over, over
    say(f"fidelity: {len(counted) - len(over)}/{len(counted)} recorded requests within their model's context "
                 f"window (the largest {max(counted):,} tokens as simloop counts them)")


def test_the_largest_recorded_request_grown_past_the_window_gets_the_real_400() -> None:
    """The largest request of the corpus, its history grown by one long tool output, as an unbounded loop grows
    it: the SDK raises the BadRequestError the real API answers; the same request on a 1M model is served."""
    import anthropic

    import simloop

    ends_with_user = lambda b: b["messages"][-1]["role"] == "user"
    name, body = max(_accepted_bodies(ends_with_user), key=lambda item: len(json.dumps(item[1])))
    grown = copy.deepcopy(body)
    last = grown["messages"][-1]
    blocks = [{"type": "text", "text": last["content"]}] if isinstance(last["content"], str) else last["content"]
    last["content"] = [*blocks, {"type": "text", "text": "x " * 450_000}]  # about 225k tokens more
    grown.pop("stream", None)

    def send(sim: simloop.Sim, model: str) -> str:
        try:
            sim.client.messages.create(model=model, max_tokens=1, messages=[], extra_body={**grown, "model": model})
        except anthropic.BadRequestError as e:
            return str(e.body["error"]["message"])  # type: ignore[index]
        return "served"

    scenario = simloop.Scenario(task="t", model=[simloop.Reply(end_turn="ok")], strict=False)
    with simloop.Sim(scenario) as sim:
        said = sim.run(lambda s: simloop.Outcome("final", send(s, "claude-sonnet-4-5"))).text
    assert re.fullmatch(r"prompt is too long: \d+ tokens > 200000 maximum", said), (name, said)
    with simloop.Sim(scenario) as sim:
        assert sim.run(lambda s: simloop.Outcome("final", send(s, "claude-opus-4-6"))).text == "served"
