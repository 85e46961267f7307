"""The fast lane (`simloop.wire.fastlane`) against its oracle, the full path (`simloop.wire.server._FAST_LANE`).

A differential test: the same requests to a server with the lane and to one without it give the same response
bytes and status, the same transcript (JSONL) and the same verdict (`simloop.check`), over generated histories
(tool calls with ids from a small pool, so some repeat; plain and blank text; faults and end turns) and the
edge bodies a loop may send instead of the plain next request (a result for a wrong id, a duplicate or missing
result, text beside the results, cache_control, an edited earlier message or reply, a changed head, streaming,
retries, a body that is no extension at all); and over `simloop.verify`'s generated worlds on reference loops.
A false pass (a request the full path refuses, accepted on the lane) is the bug this guards against first.
"""

from __future__ import annotations

import importlib
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simloop
from simloop.invariants import check
from simloop.models import Ids, ModelRequest
from simloop.protocol.render import Turn
from simloop.protocol.validate import thinking_signature
from simloop.scenario import Reply
from simloop.sim import Sim
from simloop.transcript import Header, Transcript
from simloop.wire import server as server_module
from simloop.wire.planned import Planned
from simloop.wire.server import SimServer
from tests._runs import every_run

AUTH = {"x-api-key": "k"}
POOL = ["toolu_a", "toolu_b", "toolu_c", "toolu_d", "toolu_e", "toolu_f"]  # few: ids repeat across a history

# What a loop sends instead of (or around) the plain next request.
EDITS = [
    "plain", "plain", "plain", "plain", "reorder", "duplicate_result", "wrong_id", "missing_result", "text_after",
    "text_before", "cache_control", "is_error", "is_error_string", "list_content", "list_contents", "list_blank_text",
    "list_cache_control", "list_bad_block", "empty_list", "null_content",
    "int_content", "extra_result_key", "edit_earlier", "edit_reply", "reply_extra_key", "user_extra_key",
    "head_model", "head_tools", "head_system", "head_max_tokens", "retry", "resend", "no_auth", "count_tokens",
    "fresh", "no_assistant", "invalid_json", "spaced_json", "bad_tool_id", "only_user_text", "result_for_another",
    "retyped_result",
]


class Replies:
    """A policy answering from a list: `Turn` values with the ids given, or scripted `Reply` values."""

    def __init__(self, answers: list[Turn | Reply]) -> None:
        self.answers = answers
        self.n = 0

    def reply(self, request: ModelRequest) -> Turn | Reply:
        answer = self.answers[self.n % len(self.answers)]
        self.n += 1
        return answer

    def leftovers(self) -> list[str]:
        return []


def _server(answers: list[Turn | Reply], *, fast: bool) -> SimServer:
    server = SimServer(Replies(answers), Transcript(header=Header(scenario="fastlane", seed=0)),
                       ids=Ids(random.Random(0)), now=lambda: 0.0)
    server._fast_lane = fast
    return server


def _outcome(planned: Planned) -> tuple[Any, ...]:
    return (planned.status, planned.headers, planned.body, planned.events, planned.cut_after, planned.error_event,
            planned.raise_, planned.latency)


def _dump(body: Any, *, spaced: bool = False) -> bytes:
    return json.dumps(body, separators=(", ", ": ") if spaced else (",", ":")).encode()


class Loop:
    """A tool loop speaking raw JSON to one server, sending what ``edit`` makes of its next request."""

    def __init__(self, server: SimServer, head: dict[str, Any]) -> None:
        self.server, self.head = server, head
        self.messages: list[Any] = [{"role": "user", "content": "Find the refund policy."}]
        self.last: bytes = b""
        self.reply: dict[str, Any] | None = None
        self.outcomes: list[tuple[Any, ...]] = []

    def send(self, body: bytes, *, path: str = "/v1/messages", headers: dict[str, str] | None = None) -> int:
        planned = self.server.handle("POST", path, AUTH if headers is None else headers, body)
        self.server.deliver(planned)
        self.outcomes.append(_outcome(planned))
        last = self.server.transcript.events[-1]
        message = getattr(last, "message", None) if path == "/v1/messages" else None
        self.reply = message if getattr(last, "status", 0) == 200 and message is not None else None
        return planned.status

    def body(self, messages: list[Any], head: dict[str, Any] | None = None) -> dict[str, Any]:
        head = self.head if head is None else head
        return {"max_tokens": head["max_tokens"], "messages": messages, **{k: v for k, v in head.items()
                                                                           if k != "max_tokens"}}

    def step(self, edit: str) -> None:
        reply = self.reply
        if reply is None:  # a fault or a refusal: the same history again
            messages = list(self.messages)
        elif reply.get("stop_reason") != "tool_use":  # an answer: the user's next turn
            messages = [*self.messages, {"role": "assistant", "content": reply["content"]},
                        {"role": "user", "content": "Go on."}]
        else:
            assistant = {"role": "assistant", "content": [dict(b) for b in reply["content"]]}
            results = [{"type": "tool_result", "tool_use_id": b["id"], "content": f"result of {b['name']}"}
                       for b in reply["content"] if b["type"] == "tool_use"]
            messages = _edited([*self.messages, assistant, {"role": "user", "content": results}], edit)
        if edit == "retry" and self.last:
            self.send(self.last, headers={**AUTH, "x-stainless-retry-count": "1"})
            return
        if edit == "resend" and self.last:
            self.send(self.last)
            return
        if edit == "count_tokens":
            count = {k: v for k, v in self.body(messages).items() if k not in ("max_tokens", "stream")}
            self.send(_dump(count), path="/v1/messages/count_tokens")
        head = _edited_head(self.head, edit)
        if edit == "fresh":
            messages = [{"role": "user", "content": "Start again."}]
        if edit == "invalid_json":
            raw = _dump(self.body(messages))[:-3]
        else:
            raw = _dump(self.body(messages, head), spaced=edit == "spaced_json")
        if self.send(raw, headers={} if edit == "no_auth" else None) not in (400, 401):  # the rules let it through
            self.messages, self.head, self.last = messages, head, raw


def _edited(messages: list[Any], edit: str) -> list[Any]:
    """``messages`` (the plain next request's: ..., the reply, its results) as ``edit`` changes it."""
    *history, assistant, user = messages
    results: list[Any] = user["content"]
    first = results[0]
    if edit == "reorder":
        results.reverse()
    elif edit == "duplicate_result":
        results.append(dict(first))
    elif edit == "wrong_id":
        first["tool_use_id"] = "toolu_wrong"
    elif edit == "missing_result":
        results.pop()
    elif edit == "text_after":
        results.append({"type": "text", "text": "note"})
    elif edit == "text_before":
        results.insert(0, {"type": "text", "text": "note"})
    elif edit == "cache_control":
        first["cache_control"] = {"type": "ephemeral"}
    elif edit == "is_error":
        first["is_error"] = True
    elif edit == "is_error_string":
        first["is_error"] = "yes"
    elif edit == "list_content":
        first["content"] = [{"type": "text", "text": "result"}]
    elif edit == "list_contents":  # every result a list of text blocks, keys in pydantic-ai's order
        for result in results:
            result["content"] = [{"text": "result", "type": "text"}, {"text": "more", "type": "text"}]
    elif edit == "list_blank_text":
        first["content"] = [{"type": "text", "text": ""}]
    elif edit == "list_cache_control":
        first["content"] = [{"type": "text", "text": "result", "cache_control": {"type": "ephemeral"}}]
    elif edit == "list_bad_block":
        first["content"] = [{"type": "text", "text": "result"}, {"type": "video"}]
    elif edit == "empty_list":
        first["content"] = []
    elif edit == "null_content":
        first["content"] = None
    elif edit == "int_content":
        first["content"] = 7
    elif edit == "extra_result_key":
        first["note"] = "x"
    elif edit == "edit_earlier":
        history[0] = {"role": "user", "content": "Find the shipping policy."}
    elif edit == "edit_reply":
        assistant["content"][-1] = {**assistant["content"][-1], "input": {"q": "edited"}}
    elif edit == "reply_extra_key":
        assistant["id"] = "msg_x"
    elif edit == "user_extra_key":
        user["name"] = "me"
    elif edit == "bad_tool_id":
        first["tool_use_id"] = "bad id!"
    elif edit == "result_for_another":  # as many results as calls, one call answered twice
        first["tool_use_id"] = results[-1]["tool_use_id"]
    elif edit == "retyped_result":
        first["type"] = "document"
    elif edit == "only_user_text":
        user["content"] = "Here you go."
    if edit == "no_assistant":
        return [*history, user]
    return [*history, assistant, user]


def _edited_head(head: dict[str, Any], edit: str) -> dict[str, Any]:
    if edit == "head_model":
        return {**head, "model": "claude-haiku-4-5"}
    if edit == "head_tools":
        return {**head, "tools": [*head["tools"], {"name": "fetch", "input_schema": {"type": "object"}}]}
    if edit == "head_system":
        return {**head, "system": "You are terse."}
    if edit == "head_max_tokens":
        return {**head, "max_tokens": 0}
    return head


TOOLS = [{"name": "search", "input_schema": {"type": "object"}}, {"name": "lookup", "input_schema": {"type": "object"}}]


@st.composite
def answers(draw: st.DrawFn) -> Turn | Reply:
    kind = draw(st.sampled_from(["tools", "tools", "tools", "end", "error", "blank", "scripted", "scripted"]))
    if kind == "end":
        return Reply(end_turn=draw(st.sampled_from(["Done.", "Done.", " ", ""])))
    if kind == "scripted":  # the server draws the ids: answered on the lane by `answer.plain` where it can
        return scripted_calls(draw)
    if kind == "error":
        return Reply.model_validate({"error": draw(st.sampled_from([500, 529]))})
    ids = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=3))  # may repeat, within a reply or across
    content: list[dict[str, Any]] = []
    thinking = draw(st.sampled_from(["none", "none", "signed", "unsigned"]))
    if thinking != "none":
        signature = thinking_signature("Hmm.") if thinking == "signed" else "forged"
        content.append({"type": "thinking", "thinking": "Hmm.", "signature": signature})
    if kind == "blank" or draw(st.booleans()):
        content.append({"type": "text", "text": draw(st.sampled_from(["Let me look.", " ", ""]))
                        if kind == "blank" else "Let me look."})
    content += [{"type": "tool_use", "id": i, "name": draw(st.sampled_from(["search", "lookup"])),
                 "input": {"q": draw(st.sampled_from(["refund", "x"]))}} for i in ids]
    return Turn(content=content, stop_reason="tool_use")


def scripted_calls(draw: st.DrawFn) -> Reply:
    """Scripted tool calls, with what takes one off the lane's own planning (a usage, thinking) or its next request
    off the lane (blank text), and a latency."""
    calls = [{"name": draw(st.sampled_from(["search", "lookup"])), "input": {"q": draw(st.sampled_from(["refund", "x"]))}}
             for _ in range(draw(st.integers(1, 3)))]
    spec: dict[str, Any] = {"tool_use": calls}
    text = draw(st.sampled_from([None, None, "Let me look.", " ", ""]))
    if text is not None:
        spec["text"] = text
    if draw(st.integers(0, 3)) == 0:
        spec["usage"] = {"input_tokens": 7, "output_tokens": 3}
    if draw(st.integers(0, 3)) == 0:
        spec["thinking"] = "Hmm."
    if draw(st.booleans()):
        spec["latency"] = 1.5
    return Reply.model_validate(spec)


@st.composite
def heads(draw: st.DrawFn) -> dict[str, Any]:
    head: dict[str, Any] = {"max_tokens": 1024, "model": draw(st.sampled_from(["claude-sonnet-5", "claude-3-haiku"])),
                            "tools": TOOLS}
    if draw(st.booleans()):
        head["stream"] = True
    extra = draw(st.sampled_from(["none", "none", "system", "cache_control", "thinking_off", "thinking_on"]))
    if extra == "system":
        head["system"] = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    elif extra == "cache_control":
        head["cache_control"] = {"type": "ephemeral"}
    elif extra == "thinking_off":
        head["thinking"] = {"type": "disabled"}
    elif extra == "thinking_on":
        head["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        head["max_tokens"] = 4096
    return head


def _play(script: list[Turn | Reply], head: dict[str, Any], edits: list[str], *, fast: bool) -> tuple[Loop, str]:
    loop = Loop(_server(script, fast=fast), head)
    loop.last = _dump(loop.body(loop.messages))
    loop.send(loop.last)
    for edit in edits:
        loop.step(edit)
    transcript = loop.server.transcript
    return loop, transcript.to_jsonl()


def _same(script: list[Turn | Reply], head: dict[str, Any], edits: list[str]) -> Loop:
    """Both paths on one history: the same bytes, transcript and verdict; the lane's loop back."""
    fast, fast_jsonl = _play(script, head, edits, fast=True)
    full, full_jsonl = _play(script, head, edits, fast=False)
    assert full.server._lane_taken == 0
    for k, (a, b) in enumerate(zip(fast.outcomes, full.outcomes, strict=True)):
        assert a == b, f"request {k} (edits {edits})"
    assert fast_jsonl == full_jsonl
    verdict = check(fast.server.transcript)
    assert str(verdict) == str(check(full.server.transcript))
    return fast


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(answers(), min_size=1, max_size=6), head=heads(),
       edits=st.lists(st.one_of(st.just("plain"), st.sampled_from(EDITS)), min_size=1, max_size=8))
def test_both_paths_answer_generated_histories_alike(
    script: list[Turn | Reply], head: dict[str, Any], edits: list[str],
) -> None:
    _same(script, head, edits)


def _calls(ids: list[str], text: str | None = "Let me look.") -> Turn:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
    content += [{"type": "tool_use", "id": i, "name": "search", "input": {"q": "refund"}} for i in ids]
    return Turn(content=content, stop_reason="tool_use")


HEAD = {"max_tokens": 1024, "model": "claude-sonnet-5", "tools": TOOLS}


@pytest.mark.parametrize("edit", EDITS)
def test_each_edge_body_is_answered_alike(edit: str) -> None:
    script: list[Turn | Reply] = [_calls(["toolu_a", "toolu_b"]), _calls(["toolu_c"]), _calls(["toolu_d"], None)]
    loop = _same(script, HEAD, ["plain", edit, "plain", "plain"])
    assert loop.server._lane_taken >= 1  # the second request took it (then ``edit`` may leave it)


def test_a_reused_tool_id_is_refused_on_both_paths() -> None:
    """The reply reuses an id of the history: the request that sends it back is a 400 (`_MSG_UNIQUE_IDS`)."""
    script: list[Turn | Reply] = [_calls(["toolu_a"]), _calls(["toolu_b"]), _calls(["toolu_a"])]
    loop = _same(script, HEAD, ["plain", "plain", "plain"])
    assert [o[0] for o in loop.outcomes] == [200, 200, 200, 400]
    assert loop.server._lane_taken == 2  # the second and third requests; the fourth left the lane


def test_a_prompt_too_long_leaves_the_lane() -> None:
    """The window (200k tokens for this model) is passed on the next request: the full path counts and refuses it."""
    script: list[Turn | Reply] = [_calls(["toolu_a"]), _calls(["toolu_b"]), _calls(["toolu_c"])]
    head = {**HEAD, "model": "claude-3-haiku"}
    fast, full = Loop(_server(script, fast=True), head), Loop(_server(script, fast=False), head)
    for loop in (fast, full):
        loop.send(_dump(loop.body(loop.messages)))
        loop.step("plain")
        reply = loop.reply
        assert reply is not None
        big = [*loop.messages, {"role": "assistant", "content": reply["content"]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "x" * 900_000}]}]
        loop.send(_dump(loop.body(big)))
    assert fast.outcomes == full.outcomes and fast.outcomes[-1][0] == 400
    assert fast.server._lane_taken == 1  # the second request; the third left the lane
    assert fast.server.transcript.to_jsonl() == full.server.transcript.to_jsonl()


# -- on a Sim: the lane is taken by a README-style loop, and verify's generated worlds are the same on both paths


def readme_loop(sim: Sim) -> simloop.Outcome:
    """The README's loop shape: the SDK's content blocks appended as they are, all results in one user message."""
    messages: list[Any] = [{"role": "user", "content": sim.task}]
    while True:
        reply = sim.client.messages.create(model="claude-sonnet-5", max_tokens=1024, messages=messages,
                                           tools=sim.tool_schemas)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            return simloop.Outcome(reason="final", text="".join(b.text for b in reply.content if b.type == "text"))
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": str(sim.run_tool(b.name, b.input))}
            for b in reply.content if b.type == "tool_use"
        ]})


def test_the_lane_is_taken_by_a_plain_tool_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call after the first of a README-style tool loop is answered on the lane, its scripted replies planned
    at once (`answer.plain`), and the run is the same."""
    planned: list[tuple[Any, bool]] = []  # (the request, whether `answer.plain` planned its reply)

    def plain(*args: Any) -> Any:
        lean = real(*args)
        planned.append((args[2], lean is not None))
        return lean

    real = server_module.plain
    monkeypatch.setattr(server_module, "plain", plain)
    scenario = simloop.Scenario.model_validate({
        "task": "Find the refund policy.", "tools": [{"name": "search"}],
        "model": [{"text": "Let me look.", "tool_use": [{"name": "search", "input": {"q": "refund"}},
                                                        {"name": "search", "input": {"q": "returns"}}], "repeat": 5},
                  {"end_turn": "Refunds take 5 days."}],
    })
    runs = []
    for fast in (True, False):
        with Sim(scenario, seed=3) as sim:
            sim.server._fast_lane = fast
            sim.run(readme_loop)
            runs.append((sim.server._lane_taken, sim.server.calls, sim.transcript.to_jsonl()))
            ours = {id(event) for event in sim.transcript.events}  # (not the SDK's warm-up run's, when it comes first)
            runs[-1] += ([at_once for request, at_once in planned if id(request) in ours],)
    (taken, calls, jsonl, at_once), (none, _, oracle, not_at_once) = runs
    assert calls == 6 and taken == 5 and none == 0
    assert at_once == [True] * 5 and not_at_once == []
    assert jsonl == oracle


@pytest.mark.parametrize("framework", ["pydantic_ai", "langgraph"])
def test_the_lane_is_taken_by_framework_loops(framework: str) -> None:
    """pydantic-ai sends every tool result as a list of text blocks, LangGraph as a string: both take the lane after
    the first call, and the run is the one the full path gives."""
    pytest.importorskip({"pydantic_ai": "pydantic_ai", "langgraph": "langgraph"}[framework],
                        reason=f"pip install 'simloop[{framework.replace('_', '-')}]'")
    adapter = importlib.import_module(f"simloop.adapters.{framework}")
    scenario = simloop.Scenario.model_validate({
        "task": "Find the refund policy.", "tools": [{"name": "search"}],
        "model": [{"text": "Let me look.", "tool_use": [{"name": "search", "input": {"q": "refund"}}], "repeat": 4},
                  {"end_turn": "Refunds take 5 days."}],
    })
    runs = []
    for fast in (True, False):
        with Sim(scenario, seed=3) as sim:
            sim.server._fast_lane = fast
            sim.run(adapter.make_drive())
            runs.append((sim.server._lane_taken, sim.server.calls, sim.transcript.to_jsonl(), sim.check().ok))
    (taken, calls, jsonl, ok), (none, _, oracle, oracle_ok) = runs
    assert calls == 5 and taken == 4 and none == 0
    assert jsonl == oracle and ok and oracle_ok


def _search(drive: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, *, fast: bool,
            options: dict[str, Any]) -> tuple[list[str], str]:
    monkeypatch.setattr(server_module, "_FAST_LANE", fast)
    with every_run() as ran:
        try:
            simloop.verify(drive, max_examples=12, seed=5, out_dir=tmp_path / str(fast), **options)
            said = "passed"
        except simloop.InvariantViolation as e:
            said = ",".join(v.invariant for v in e.violations)
    assert (sum(sim.server._lane_taken for sim in ran) > 0) == fast  # on: some calls took the lane; off: none
    return [sim.transcript.to_jsonl() for sim in ran], said


@pytest.mark.parametrize(("module", "options"), [
    ("correct_sync", {}), ("correct_stream", {}), ("correct_sync", {"turns": 2, "abort": True}),
    ("results_split", {}), ("tools_from_max_tokens", {}),
])
def test_verify_worlds_are_the_same_on_both_paths(
    module: str, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
) -> None:
    import importlib

    drive = importlib.import_module(f"examples.{module}").drive
    fast = _search(drive, monkeypatch, tmp_path, fast=True, options=options)
    full = _search(drive, monkeypatch, tmp_path, fast=False, options=options)
    assert fast[1] == full[1]
    assert len(fast[0]) == len(full[0]) and fast[0] == full[0]


# -- the lane's own rule, against the rules: whatever it admits, `validate_messages_request` accepts


def mostly(plain: Any, *others: Any) -> st.SearchStrategy[Any]:
    """``plain`` at least half the time, else any of ``others``: the lane's cases are reached, and its edges."""
    return st.one_of(st.just(plain), st.sampled_from([plain, *others]))


def _odd_block(draw: st.DrawFn) -> dict[str, Any]:
    """A reply block the lane may have to refuse: blank text, a bad id, a forged signature, a server call, ..."""
    kind = draw(st.sampled_from(["text", "tool_use", "thinking", "server_tool_use", "redacted_thinking"]))
    if kind == "text":
        block: dict[str, Any] = {"type": "text", "text": draw(st.sampled_from(["ok", " ", "", 5]))}
    elif kind == "tool_use":
        block = {"type": "tool_use", "id": draw(st.sampled_from([*POOL, "bad id", ""])),
                 "name": draw(st.sampled_from(["search", 3])), "input": draw(st.sampled_from([{}, {"q": "x"}, []]))}
    elif kind == "thinking":
        block = {"type": "thinking", "thinking": "Hmm.",
                 "signature": draw(st.sampled_from([thinking_signature("Hmm."), "forged"]))}
    elif kind == "server_tool_use":
        block = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}
    else:
        block = {"type": kind, "data": "x"}
    extra = draw(st.sampled_from(["none", "cache_control", "citations", "other"]))
    if extra == "cache_control":
        block["cache_control"] = {"type": "ephemeral"}
    elif extra == "citations":
        block["citations"] = None
    elif extra == "other":
        block["other"] = 1
    return block


@st.composite
def replies(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A plain reply (signed thinking, text, calls with ids from the pool: distinct or not), or one made odd."""
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocks.append({"type": "thinking", "thinking": "Hmm.", "signature": thinking_signature("Hmm.")})
    if draw(st.booleans()):
        blocks.append({"type": "text", "text": "Let me look."})
    ids = draw(st.one_of(st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True),
                         st.lists(st.sampled_from(POOL), min_size=1, max_size=3)))
    blocks += [{"type": "tool_use", "id": i, "name": "search", "input": {"q": "x"}} for i in ids]
    if draw(st.booleans()):
        at = draw(st.integers(0, len(blocks)))
        odd = _odd_block(draw)
        if draw(st.booleans()) and at < len(blocks):
            blocks[at] = odd
        else:
            blocks.insert(at, odd)
    return blocks


@st.composite
def results(draw: st.DrawFn, ids: list[str]) -> list[Any]:
    chosen = draw(st.one_of(st.just(ids), st.permutations(ids), st.lists(st.sampled_from([*ids, *POOL]), max_size=4),
                            st.lists(st.sampled_from(ids or POOL), min_size=len(ids), max_size=len(ids))))
    blocks: list[Any] = []
    for use_id in chosen:
        block: dict[str, Any] = {"type": draw(mostly("tool_result", "document")), "tool_use_id": use_id,
                                 "content": draw(mostly("r", "", None, 7, [], *TEXT_LISTS))}
        extra = draw(mostly("none", "is_error", "is_error_string", "cache_control", "other"))
        if extra == "is_error":
            block["is_error"] = True
        elif extra == "is_error_string":
            block["is_error"] = "yes"
        elif extra == "cache_control":
            block["cache_control"] = {"type": "ephemeral"}
        elif extra == "other":
            block["other"] = 1
        blocks.append(block)
    if blocks and draw(mostly(False, True)):
        blocks.insert(draw(st.integers(0, len(blocks))), {"type": "text", "text": "note"})
    return blocks


#: A tool_result's content as a list of blocks: plain text (as pydantic-ai sends every result, in its key order) and
#: what the lane must leave to the full path, or pass exactly as the rules do.
TEXT_LISTS: list[list[Any]] = [
    [{"type": "text", "text": "r"}], [{"text": "r", "type": "text"}], [{"type": "text", "text": "r"}] * 2,
    [{"type": "text", "text": ""}], [{"type": "text", "text": " "}], [{"type": "text", "text": 5}], [{"type": "text"}],
    [{"type": "text", "text": "r", "cache_control": {"type": "ephemeral"}}], [{"type": "text", "text": "r", "x": 1}],
    [{"type": "texts", "text": "r"}], ["r"], [{"type": "text", "text": "r"}, {"type": "image"}],
    [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}],
]

HISTORIES: list[list[Any]] = [
    [{"role": "user", "content": "Go."}],
    [{"role": "user", "content": "Go."},
     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "search", "input": {}}]},
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "r"}]}],
    [{"role": "user", "content": "Go."},  # a server call in flight beside a client call: accepted only as last
     {"role": "assistant", "content": [
         {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
         {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {}}]},
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "r"}]}],
    [{"role": "user", "content": "Go."},
     {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]},
     {"role": "user", "content": [{"type": "text", "text": "More.", "cache_control": {"type": "ephemeral"}}]}],
    [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "Prefill"}],
    [{"role": "user", "content": "Go."},  # a prefill with a call of its own: the reply merges into its turn
     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_e", "name": "search", "input": {}}]}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Go."}],
]


@settings(max_examples=400, deadline=None, database=None)
@given(data=st.data(), head=heads(), history=st.sampled_from(HISTORIES), reply=replies())
def test_what_the_lane_admits_the_rules_accept(
    data: st.DataObject, head: dict[str, Any], history: list[Any], reply: list[dict[str, Any]],
) -> None:
    from simloop.protocol.validate import validate_messages_request
    from simloop.wire.bodies import _BodyParser
    from simloop.wire.fastlane import offer

    head = {k: v for k, v in head.items() if k != "stream"}
    before = {**head, "messages": history}
    if validate_messages_request(before, signed_by_sim=True) is not None:
        return  # the previous request must have passed for a lane to be offered
    parser = _BodyParser()
    doc = parser.parse(_dump(before))
    lane = offer(doc, {"content": reply}, None)
    if lane is None:
        return
    ids = [b["id"] for b in reply if b.get("type") == "tool_use"]
    assistant = {"role": "assistant", "content": data.draw(mostly(reply, reply[:-1], reply[1:]))}
    user = {"role": "user", "content": data.draw(results(ids))}
    if data.draw(mostly(False, True)):
        user["name"] = "me"
    after = parser.parse(_dump({**head, "messages": [*history, assistant, user]}))
    if lane.admit(after, parser) is not None:
        assert validate_messages_request(after, signed_by_sim=True) is None, (history, reply, user)


def test_the_lane_admits_a_plain_next_request() -> None:
    """The positive case of the rule above: a reply of text, signed thinking and calls, answered in any order."""
    from simloop.wire.bodies import _BodyParser
    from simloop.wire.fastlane import offer

    reply = [{"type": "thinking", "thinking": "Hmm.", "signature": thinking_signature("Hmm.")},
             {"type": "text", "text": "Let me look."},
             {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {}},
             {"type": "tool_use", "id": "toolu_c", "name": "search", "input": {"q": "x"}}]
    head = {**HEAD, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    parser = _BodyParser()
    history = HISTORIES[1]
    lane = offer(parser.parse(_dump({**head, "messages": history})), {"content": reply}, None)
    assert lane is not None
    user = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "r"},
                                         {"type": "tool_result", "tool_use_id": "toolu_b", "content": "s"}]}
    after = parser.parse(_dump({**head, "messages": [*history, {"role": "assistant", "content": reply}, user]}))
    assert lane.admit(after, parser) == frozenset({"toolu_a", "toolu_b", "toolu_c"})


def _use(use_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": "search", "input": {}}


def _result(use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "r"}


THINKING_ON = {**HEAD, "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024}}
SIGNED = {"type": "thinking", "thinking": "Hmm.", "signature": thinking_signature("Hmm.")}
# (what, head, history, reply, the assistant message's content as sent back (None: the reply), the results)
REFUSED: list[tuple[str, dict[str, Any], list[Any], list[Any], list[Any] | None, list[Any]]] = [
    ("one call answered twice", HEAD, HISTORIES[0], [_use("toolu_b"), _use("toolu_c")], None,
     [_result("toolu_b"), _result("toolu_b")]),
    ("a reply repeating its own id", HEAD, HISTORIES[0], [_use("toolu_b"), _use("toolu_b")], None,
     [_result("toolu_b")]),
    ("a result of another type", HEAD, HISTORIES[0], [_use("toolu_b")], None,
     [{"type": "document", "tool_use_id": "toolu_b", "content": "r"}]),
    ("an id of the history again", HEAD, HISTORIES[1], [_use("toolu_a")], None, [_result("toolu_a")]),
    ("a forged thinking signature", HEAD, HISTORIES[0], [{**SIGNED, "signature": "forged"}, _use("toolu_b")], None,
     [_result("toolu_b")]),
    ("an empty text block", HEAD, HISTORIES[0], [{"type": "text", "text": ""}, _use("toolu_b")], None,
     [_result("toolu_b")]),
    ("a server call left in flight", HEAD, HISTORIES[2], [_use("toolu_c")], None, [_result("toolu_c")]),
    ("a call dropped from the reply", HEAD, HISTORIES[0], [_use("toolu_b"), _use("toolu_c")], [_use("toolu_b")],
     [_result("toolu_b"), _result("toolu_c")]),
    ("a prefill's call left unanswered", HEAD, HISTORIES[5], [_use("toolu_b")], None, [_result("toolu_b")]),
    ("thinking on, a tool turn without it", THINKING_ON, HISTORIES[0], [_use("toolu_b")], None, [_result("toolu_b")]),
    ("a stray result", HEAD, HISTORIES[0], [_use("toolu_b")], None, [_result("toolu_z")]),
    ("a result beside a text", HEAD, HISTORIES[0], [_use("toolu_b")], None,
     [{"type": "text", "text": "note"}, _result("toolu_b")]),
    ("a result with a bad cache_control", HEAD, HISTORIES[0], [_use("toolu_b")], None,
     [{**_result("toolu_b"), "cache_control": {"type": "forever"}}]),
    ("a fifth cache breakpoint", {**HEAD, "system": [{"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}
                                                     for t in ("a", "b", "c", "d")]},
     HISTORIES[0], [_use("toolu_b")], None, [{**_result("toolu_b"), "cache_control": {"type": "ephemeral"}}]),
    ("a reply's text with bad citations", HEAD, HISTORIES[0],
     [{"type": "text", "text": "ok", "citations": 5}, _use("toolu_b")], None, [_result("toolu_b")]),
    ("a reply's call with a bad cache_control", HEAD, HISTORIES[0],
     [{**_use("toolu_b"), "cache_control": {"type": "forever"}}], None, [_result("toolu_b")]),
]


@pytest.mark.parametrize(("what", "head", "history", "reply", "sent", "answers"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_lane_refuses_what_the_rules_refuse(
    what: str, head: dict[str, Any], history: list[Any], reply: list[Any], sent: list[Any] | None, answers: list[Any],
) -> None:
    """Each a 400 from the full rules; the lane offers nothing or admits nothing, and leaves it to them."""
    from simloop.protocol.validate import validate_messages_request
    from simloop.wire.bodies import _BodyParser
    from simloop.wire.fastlane import offer

    before = {**head, "messages": history}
    assert validate_messages_request(before, signed_by_sim=True) is None
    parser = _BodyParser()
    lane = offer(parser.parse(_dump(before)), {"content": reply}, None)
    assistant = {"role": "assistant", "content": reply if sent is None else sent}
    after = parser.parse(_dump({**head, "messages": [*history, assistant, {"role": "user", "content": answers}]}))
    assert validate_messages_request(after, signed_by_sim=True) is not None
    assert lane is None or lane.admit(after, parser) is None
