"""Tests for simloop.invariants: each invariant on small hand-built transcripts.

Each invariant gets at least one violating transcript (the id, step and
evidence pinned exactly) and a clean one.  A small builder, `Run`, writes the
events a simulated run would record, so the tests read like the run they
describe.  A Hypothesis property covers pairing on generated conversations,
and the recorded real API traffic (cassettes) must pass pairing unflagged.
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simloop.errors import InvariantViolation, UsageError
from simloop.invariants import CATALOGUE, Violation, check
from simloop.scenario import INVARIANT_IDS
from simloop.transcript import (
    AbortEvent,
    Halt,
    Header,
    OutcomeEvent,
    Request,
    Response,
    ToolEnd,
    ToolStart,
    Transcript,
    TurnStart,
)

CASSETTES = Path(__file__).resolve().parents[2] / "shared" / "data" / "cassettes"
TOOLS = {"search": "read", "send_email": "write"}

# -- message blocks ----------------------------------------------------------------------------------------------


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def tool_use(uid: str, name: str = "search", input: Any = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": uid, "name": name, "input": {"q": "refund"} if input is None else input}


def tool_result(uid: str, content: str = "ok", *, is_error: bool | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": uid, "content": content}
    if is_error is not None:
        block["is_error"] = is_error
    return block


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content[0] if len(content) == 1 and isinstance(content[0], str) else list(content)}


def assistant(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


# -- a transcript builder ----------------------------------------------------------------------------------------


class Run:
    """Writes the events of a run in order: requests, replies, tool executions, the outcome."""

    def __init__(self, *, limits: dict[str, Any] | None = None, tools: dict[str, str] | None = None) -> None:
        self.t = Transcript(Header(scenario="hand-built", seed=0, limits=dict(limits or {}), tools=dict(tools or TOOLS)))
        self.now = 0.0
        self.index = 0
        self.call = 0
        self.attempt = 0
        self.execs = 0

    def request(
        self, messages: list[Any], *, retry: bool = False, at: float | None = None, path: str = "/v1/messages",
        **body: Any,
    ) -> Request:
        """A request; ``retry=True`` is an SDK retry of the previous logical call."""
        self.index += 1
        if retry:
            self.attempt += 1
        else:
            self.call, self.attempt = self.call + 1, 0
        self.now = at if at is not None else self.now + 1.0
        req = Request(
            t=self.now, index=self.index, call=self.call, attempt=self.attempt, path=path, stream=False,
            body={"model": "claude-test", "max_tokens": 1024, "messages": copy.deepcopy(messages), **body},
        )
        self.t.append(req)
        return req

    def reply(self, stop_reason: str, *content: dict[str, Any], usage: tuple[int, int] = (10, 5)) -> list[Any]:
        """A model reply to the last request; returns its content (for the history)."""
        blocks = list(content) or [text("Done.")]
        message = {
            "id": f"msg_{self.index}", "type": "message", "role": "assistant", "model": "claude-test",
            "content": blocks, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }
        self.t.append(Response(t=self.now, index=self.index, call=self.call, status=200, kind=stop_reason,
                               stop_reason=stop_reason, message=message))
        return copy.deepcopy(blocks)

    def error(self, status: int = 529) -> None:
        self.t.append(Response(t=self.now, index=self.index, call=self.call, status=status, kind="error",
                               error={"type": "overloaded_error", "message": "Overloaded"}, fault="http"))

    def rejected(self, message: str, *, path: str | None = None, status: int = 400,
                 type: str = "invalid_request_error") -> None:
        rejection = {"message": message, "path": path, "status": status, "type": type}
        self.t.append(Response(t=self.now, index=self.index, call=self.call, status=status, kind="rejected",
                               rejection=rejection))

    def start(self, name: str, input: Any = None, *, matched: str | None, tool_use_id: str | None = None) -> int:
        self.execs += 1
        input = {"q": "refund"} if input is None else input
        nth = 1 + sum(1 for e in self.t.events if isinstance(e, ToolStart) and e.tool == name)
        self.t.append(ToolStart(t=self.now, exec=self.execs, tool=name, input=input, nth=nth,
                                kind=TOOLS.get(name, "read"), tool_use_id=tool_use_id or matched, matched=matched))
        return self.execs

    def end(self, exec: int, *, status: str = "ok", error: str | None = None, committed: bool | None = None) -> None:
        start = next(e for e in self.t.events if isinstance(e, ToolStart) and e.exec == exec)
        if committed is None:
            committed = status == "ok" and self.t.header.tools.get(start.tool) == "write"
        self.t.append(ToolEnd(t=self.now, exec=exec, status=status, result="ok" if status == "ok" else None,
                              error=error, committed=committed))

    def tool(self, name: str, input: Any = None, *, matched: str | None, **end: Any) -> int:
        exec = self.start(name, input, matched=matched)
        self.end(exec, **end)
        return exec

    def outcome(self, reason: str = "final", *, exception: str | None = None) -> Transcript:
        self.t.append(OutcomeEvent(t=self.now, reason=reason, text="", exception=exception))
        return self.t

    def halt(self, budget: str) -> Transcript:
        self.t.append(Halt(t=self.now, budget=budget, detail=f"{budget} budget spent"))
        return self.t


def clean_run() -> Transcript:
    """Search, then answer: what a correct loop records."""
    run = Run()
    history = [user("Find the refund policy.")]
    run.request(history)
    history.append(assistant(*run.reply("tool_use", text("Searching."), tool_use("toolu_1"))))
    run.tool("search", matched="toolu_1")
    history.append(user(tool_result("toolu_1", "Refunds within 30 days.")))
    run.request(history)
    run.reply("end_turn", text("Refunds are accepted within 30 days."))
    return run.outcome("final")


def only(t: Transcript, invariant: str) -> list[Violation]:
    return check(t, invariants=[invariant]).violations


# -- the catalogue, reports, check() -----------------------------------------------------------------------------


def test_catalogue_follows_design_order() -> None:
    assert tuple(CATALOGUE) == INVARIANT_IDS


@pytest.mark.parametrize("invariant", INVARIANT_IDS)
def test_clean_run_has_no_violation(invariant: str) -> None:
    assert only(clean_run(), invariant) == []


def test_check_all_on_clean_run() -> None:
    report = check(clean_run())
    assert report.ok and report.checked == INVARIANT_IDS
    report.raise_for_violations()  # does not raise
    assert str(report).startswith("simloop: all 17 invariants hold in scenario 'hand-built' (seed 0): stops, pairing")


def test_unknown_invariant_is_a_usage_error_listing_the_ids() -> None:
    with pytest.raises(UsageError) as info:
        check(clean_run(), invariants=["nope"])
    assert str(info.value) == (
        "unknown invariant id 'nope'; the known ids are: stops, pairing, request_valid, no_rerun, truncation, "
        "refusal, honest_outcome, limits, tool_errors, no_work_after_return, crash, results_sent, "
        "results_together, abort, results_real, approval, subagent_honest. "
        "Pass a subset of them as invariants=, or None to check all."
    )


def test_near_miss_id_gets_a_suggestion_and_a_string_is_refused() -> None:
    with pytest.raises(UsageError, match=r"did you mean 'pairing'\?"):
        check(clean_run(), invariants=["paring"])
    with pytest.raises(UsageError, match=r"not the string 'pairing'; try \['pairing'\]"):
        check(clean_run(), invariants="pairing")
    with pytest.raises(UsageError, match="takes a simloop Transcript, got dict"):
        check({}, invariants=None)  # type: ignore[arg-type]


def test_checked_ids_are_in_catalogue_order() -> None:
    report = check(clean_run(), invariants=["limits", "stops", "limits"])
    assert report.checked == ("stops", "limits")


def test_raise_for_violations_lists_each_violation() -> None:
    t = broken_history_run(resends=1)
    report = check(t)
    with pytest.raises(InvariantViolation) as info:
        report.raise_for_violations()
    err = info.value
    assert isinstance(err, AssertionError)
    assert err.violations == report.violations
    lines = str(err).splitlines()
    assert lines[0] == (
        "simloop: 1 violation(s) of 1 invariant(s) in scenario 'hand-built' (seed 0) (pairing; 17 checked)"
    )
    assert lines[1].startswith("  [pairing] step 2, messages[1].content[0]: the tool_use toolu_1 (search) has no")
    assert len(lines) == 2


def test_violation_str() -> None:
    v = Violation("pairing", "it broke", 3, {"path": "messages[4].content[0]"})
    assert str(v) == "[pairing] step 3, messages[4].content[0]: it broke"
    assert str(Violation("stops", "ran away", None, {})) == "[stops] ran away"
    assert len({v, Violation("pairing", "it broke", 3, {"path": "messages[4].content[0]"})}) == 1  # hashable


def test_a_transcript_read_back_from_jsonl_checks_the_same() -> None:
    t = broken_history_run(resends=2)
    again = Transcript.from_jsonl(t.to_jsonl())
    assert check(again).violations == check(t).violations != []


# -- stops -------------------------------------------------------------------------------------------------------


def test_stops_flags_a_halt_and_says_what_the_loop_kept_doing() -> None:
    run = Run()
    history: list[Any] = [user("Find it.")]
    for n in range(1, 4):
        run.request(history)
        history.append(assistant(*run.reply("tool_use", tool_use(f"toolu_{n}"))))
        run.tool("search", matched=f"toolu_{n}")
        history.append(user(tool_result(f"toolu_{n}")))
    run.request(history)
    t = run.halt("model_calls")
    [v] = only(t, "stops")
    assert (v.invariant, v.step) == ("stops", 4)
    assert v.evidence == {"budget": "model_calls", "model_calls": 4, "t": 4.0, "detail": "model_calls budget spent"}
    assert v.message == (
        "the loop made 4 model calls without stopping; the model kept asking for search with the same input "
        "(3 times); a correct loop caps its steps (max_steps) and stops on repeated identical tool calls"
    )


def test_a_halted_run_is_reported_by_stops_only() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("tool_use", tool_use("toolu_1"), tool_use("toolu_2", input={"q": "b"}))
    run.tool("search", matched="toolu_1", status="raised", error="LoopHalted: virtual_time: 600s")
    run.start("search", {"q": "b"}, matched="toolu_2")  # cut short mid-flight by the unwinding
    run.halt("virtual_time")
    t = run.outcome("error", exception="LoopHalted: virtual_time: 600s")
    assert [v.invariant for v in check(t).violations] == ["stops"]


def test_stops_describes_a_retry_storm() -> None:
    run = Run()
    for _ in range(3):
        run.request([user("hi")])
        run.error()
    [v] = only(run.halt("virtual_time"), "stops")
    assert v.step == 3
    assert "the last 3 model calls failed (http) and the loop kept retrying" in v.message
    assert "a correct loop enforces a deadline" in v.message


# -- pairing -----------------------------------------------------------------------------------------------------


def broken_history_run(*, resends: int) -> Transcript:
    """Step 1 asks for search; the loop drops the tool_result and re-sends the broken history ``resends`` times."""
    run = Run()
    history = [user("Find it.")]
    run.request(history)
    history.append(assistant(*run.reply("tool_use", tool_use("toolu_1"))))
    run.tool("search", matched="toolu_1")
    history.append(user("and?"))
    for _ in range(resends):
        run.request(history)
        run.reply("end_turn", text("Here it is."))
    return run.outcome("final")


def test_pairing_missing_tool_result() -> None:
    [v] = only(broken_history_run(resends=1), "pairing")
    assert (v.invariant, v.step) == ("pairing", 2)
    assert v.evidence == {
        "request": 2, "path": "messages[1].content[0]", "kind": "missing_result", "tool_use_id": "toolu_1",
        "tool": "search",
    }
    assert v.message == (
        "the tool_use toolu_1 (search) has no tool_result at the start of the next message; a correct loop answers "
        "every tool_use with a tool_result at the start of the very next user message, also when the tool failed "
        "(is_error: true) or was not run"
    )


def test_pairing_reports_a_resent_broken_history_once_and_a_new_break_again() -> None:
    run = Run()
    history = [user("Find it.")]
    run.request(history)
    history.append(assistant(*run.reply("tool_use", tool_use("toolu_1"))))
    history.append(user("and?"))  # toolu_1 is never answered
    for _ in range(5):
        run.request(history)
        run.reply("end_turn")
    history += [assistant(tool_use("toolu_2")), user(text("still?"))]  # a second, new break at step 7
    run.request(history)
    violations = only(run.outcome("final"), "pairing")
    assert [(v.step, v.evidence["tool_use_id"], v.evidence["path"]) for v in violations] == [
        (2, "toolu_1", "messages[1].content[0]"),
        (7, "toolu_2", "messages[3].content[0]"),
    ]


@pytest.mark.parametrize(
    ("messages", "path", "kind", "tool_use_id", "tool"),
    [
        pytest.param(
            [user("go"), assistant(text("hi")), user(tool_result("toolu_9"))],
            "messages[2].content[0]", "orphan_result", "toolu_9", None, id="orphan",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1"), tool_result("toolu_1"))],
            "messages[2].content[1]", "duplicate_result", "toolu_1", "search", id="duplicate-result",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1")), user(text("result:"), tool_result("toolu_1"))],
            "messages[2].content[1]", "result_not_first", "toolu_1", "search", id="text-first",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1")),
             assistant(tool_use("toolu_1")), user(tool_result("toolu_1"))],
            "messages[3].content[0]", "duplicate_tool_use", "toolu_1", "search", id="duplicate-tool-use",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1", "send_email"))],
            "messages[1].content[0]", "missing_result", "toolu_1", "send_email", id="trailing-tool-use",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1"), tool_use("toolu_2")), user(tool_result("toolu_2"))],
            "messages[1].content[0]", "missing_result", "toolu_1", "search", id="one-of-two-parallel",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1")), assistant(text("more")), user(tool_result("toolu_1")),
             user(tool_result("toolu_2"))],
            "messages[4].content[0]", "orphan_result", "toolu_2", None, id="merged-messages-keep-their-paths",
        ),
    ],
)
def test_pairing_offences(messages: list[Any], path: str, kind: str, tool_use_id: str, tool: str | None) -> None:
    run = Run()
    run.request(messages)
    [v] = only(run.t, "pairing")
    expected = {"request": 1, "path": path, "kind": kind, "tool_use_id": tool_use_id}
    if tool:
        expected["tool"] = tool
    assert (v.step, v.evidence) == (1, expected)
    assert "a correct loop" in v.message


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([user("Answer in JSON."), assistant(text("{"))], id="prefill"),
        pytest.param(
            [user("Search the web."),
             assistant({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}})],
            id="pause-turn-continuation",
        ),
        pytest.param(
            [user("go"), assistant(tool_use("toolu_1"), tool_use("toolu_2")), user(tool_result("toolu_2")),
             user(tool_result("toolu_1"), text("both done"))],
            id="results-split-over-consecutive-user-messages",
        ),
        pytest.param(
            [user("go"), assistant(text("Let me look.")), assistant(tool_use("toolu_1")),
             user(tool_result("toolu_1", is_error=True), text("it failed"))],
            id="consecutive-assistant-messages-and-an-error-result",
        ),
    ],
)
def test_pairing_accepts_valid_histories(messages: list[Any]) -> None:
    run = Run()
    run.request(messages)
    assert only(run.t, "pairing") == []


@st.composite
def paired_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Well-paired conversations: parallel tool calls, results in any order, text after them, split messages."""
    ids = itertools.count(1)
    messages: list[dict[str, Any]] = [user("task")]

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        cut = draw(st.integers(0, len(blocks) - 1)) if len(blocks) > 1 else 0
        parts = [blocks[:cut], blocks[cut:]] if cut else [blocks]  # a split is merged back by the API
        messages.extend({"role": role, "content": part} for part in parts)

    for _ in range(draw(st.integers(0, 4))):
        uses = [
            tool_use(f"toolu_{next(ids)}", draw(st.sampled_from(["search", "send_email"])), {"q": draw(st.text(max_size=2))})
            for _ in range(draw(st.integers(0, 3)))
        ]
        add("assistant", ([text("thinking")] if draw(st.booleans()) else []) + uses or [text("hm")])
        results = draw(st.permutations([tool_result(u["id"]) for u in uses]))
        add("user", results + ([text("go on")] if draw(st.booleans()) or not results else []))
    if draw(st.booleans()):
        messages.append(assistant(text("Prefill")))
    return messages


def one_request(messages: list[Any]) -> Transcript:
    run = Run()
    run.request(messages)
    return run.t


@settings(max_examples=200, deadline=None)
@given(paired_conversations())
def test_well_paired_conversations_have_no_pairing_violation(messages: list[Any]) -> None:
    assert only(one_request(messages), "pairing") == []


@settings(max_examples=200, deadline=None)
@given(paired_conversations(), st.data())
def test_removing_one_tool_result_gives_exactly_one_violation(messages: list[Any], data: st.DataObject) -> None:
    places = [
        (i, j) for i, m in enumerate(messages) if isinstance(m["content"], list)
        for j, b in enumerate(m["content"]) if b["type"] == "tool_result"
    ]
    if not places:
        return
    i, j = data.draw(st.sampled_from(places))
    removed = messages[i]["content"].pop(j)["tool_use_id"]
    [v] = only(one_request(messages), "pairing")
    assert (v.evidence["kind"], v.evidence["tool_use_id"]) == ("missing_result", removed)


def cassette_requests() -> list[Any]:
    """The request bodies the real API answered with 200, from the recorded cassettes."""
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (a simloop dependency: pip install -e .)")
    if not CASSETTES.is_dir():
        pytest.skip(f"no recorded cassettes at {CASSETTES}")
    bodies = []
    for path in sorted(CASSETTES.rglob("*.yaml")):
        for interaction in yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)).get("interactions", []):
            req, resp = interaction["request"], interaction["response"]
            if not req["uri"].split("?")[0].endswith("/v1/messages") or resp["status"]["code"] != 200:
                continue
            body = req.get("parsed_body") or json.loads(req["body"] if isinstance(req["body"], str) else req["body"]["string"])
            bodies.append((path.name, body))
    return bodies


def test_real_accepted_requests_pass_pairing() -> None:
    bodies = cassette_requests()
    assert len(bodies) > 100
    with_tools = 0
    for name, body in bodies:
        run = Run()
        run.request(body["messages"])
        with_tools += any(m.get("role") == "user" and isinstance(m["content"], list)
                          and any(b.get("type") == "tool_result" for b in m["content"]) for m in body["messages"])
        assert only(run.t, "pairing") == [], name
    assert with_tools >= 5  # the corpus exercises real tool_use/tool_result histories
    print(f"{len(bodies)} recorded requests checked, {with_tools} with tool_result blocks")


# -- request_valid -----------------------------------------------------------------------------------------------


def test_request_valid_quotes_the_api_and_reports_a_repeat_once() -> None:
    run = Run()
    for _ in range(3):
        run.request([user(text(""))])
        run.rejected("messages: text content blocks must be non-empty", path="messages.0.content.0")
    [v] = only(run.outcome("error"), "request_valid")
    assert v.step == 1
    assert v.evidence == {
        "request": 1, "path": "messages[0].content[0]", "status": 400, "type": "invalid_request_error",
        "api_message": "messages: text content blocks must be non-empty",
    }
    assert v.message == (
        'the API rejected the request with 400 invalid_request_error: "messages: text content blocks must be '
        'non-empty" (the same rejection came back 2 more time(s)); a correct loop builds requests the API accepts '
        "(fix the part the API names) and does not resend one the API rejected"
    )


def test_request_valid_leaves_size_and_pairing_rejections_alone() -> None:
    run = Run()
    run.request([user("huge")])
    run.rejected("prompt is too long: 210000 tokens > 200000 maximum")
    run.request([user("huger")])
    run.rejected("Request exceeds the maximum size", status=413, type="request_too_large")
    broken = [user("go"), assistant(tool_use("toolu_1")), user("next")]
    run.request(broken)
    run.rejected("messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. "
                 "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                 path="messages.1")
    t = run.outcome("error")
    assert only(t, "request_valid") == []
    assert [v.evidence["path"] for v in only(t, "pairing")] == ["messages[1].content[0]"]


# -- no_rerun ----------------------------------------------------------------------------------------------------


def email_step(run: Run, uid: str = "toolu_1") -> list[Any]:
    history = [user("Email the customer.")]
    run.request(history)
    history.append(assistant(*run.reply("tool_use", tool_use(uid, "send_email", {"to": "a@example.com"}))))
    return history


def test_no_rerun_flags_a_loop_that_retries_a_committed_write() -> None:
    run = Run()
    email_step(run)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised",
             error="ConnectionResetError: reset", committed=True)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1")  # the loop's own retry
    [v] = only(run.outcome("final"), "no_rerun")
    assert v.step == 1
    assert v.evidence == {"exec": 2, "first_exec": 1, "tool": "send_email", "tool_use_id": "toolu_1"}
    assert v.message.startswith(
        "send_email ran again with the same input (exec 2) after exec 1 had committed for the same tool_use toolu_1; "
        "a correct loop never re-executes a completed write"
    )


def test_no_rerun_allows_two_identical_writes_the_model_asked_for_in_one_reply() -> None:
    run = Run()
    history = [user("Email the customer.")]
    run.request(history)
    email = {"to": "a@example.com"}
    run.reply("tool_use", tool_use("toolu_1", "send_email", email), tool_use("toolu_2", "send_email", email))
    run.tool("send_email", email, matched="toolu_1")
    run.tool("send_email", email, matched="toolu_2")
    assert only(run.outcome("final"), "no_rerun") == []  # each answers its own tool_use: the model's decision


def test_no_rerun_judges_by_when_the_tool_use_was_issued_not_when_it_ran() -> None:
    run = Run()
    history = [user("Email the customer.")]
    run.request(history)
    email = {"to": "a@example.com"}
    history.append(assistant(*run.reply(
        "tool_use", tool_use("toolu_1", "send_email", email), tool_use("toolu_2", "send_email", email),
    )))
    run.tool("send_email", email, matched="toolu_1")
    history.append(user(tool_result("toolu_1", "sent"), tool_result("toolu_2", "not run yet", is_error=True)))
    run.request(history)  # the commit is reported here, but toolu_2 was issued before it
    run.error()
    run.tool("send_email", email, matched="toolu_2")
    [v] = only(run.outcome("final"), "no_rerun")
    assert (v.step, v.evidence) == (2, {"exec": 2, "first_exec": 1, "tool": "send_email", "tool_use_id": "toolu_2"})
    assert "whose result the loop had already sent to the model" in v.message


def test_no_rerun_allows_a_write_the_model_asks_for_again_after_seeing_the_result() -> None:
    run = Run()
    history = email_step(run)
    email = {"to": "a@example.com"}
    run.tool("send_email", email, matched="toolu_1", status="raised", error="ConnectionResetError: reset",
             committed=True)
    history.append(user(tool_result("toolu_1", "ConnectionResetError: reset", is_error=True)))
    run.request(history)
    history.append(assistant(*run.reply("tool_use", tool_use("toolu_2", "send_email", email))))
    run.tool("send_email", email, matched="toolu_2")
    history.append(user(tool_result("toolu_2", "sent")))
    run.request(history)
    run.reply("end_turn")
    assert check(run.outcome("final")).violations == []


def test_no_rerun_flags_an_execution_nobody_asked_for() -> None:
    run = Run()
    email_step(run)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised", error="TimeoutError: slow",
             committed=False)
    run.start("send_email", {"to": "a@example.com"}, matched=None, tool_use_id=None)
    run.end(2, committed=True)
    [v] = only(run.outcome("final"), "no_rerun")
    assert (v.step, v.evidence) == (1, {"exec": 2, "first_exec": 1, "tool": "send_email", "tool_use_id": None})
    assert v.message.startswith(
        "send_email was executed (exec 2) but no tool_use asked for it; it repeats exec 1 with the same input;"
    )


def test_no_rerun_flags_a_read_run_twice_for_one_tool_use() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("tool_use", tool_use("toolu_1"))
    run.tool("search", matched="toolu_1", status="raised", error="TimeoutError: slow")
    run.tool("search", matched="toolu_1")
    [v] = only(run.outcome("final"), "no_rerun")
    assert (v.step, v.evidence) == (1, {"exec": 2, "first_exec": 1, "tool": "search", "tool_use_id": "toolu_1"})
    assert v.message.startswith("search ran twice for tool_use toolu_1 (exec 1 and exec 2)")


# -- truncation --------------------------------------------------------------------------------------------------


def test_truncation_flags_a_tool_run_from_a_max_tokens_reply() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("max_tokens", text("Let me"), tool_use("toolu_1", "send_email", {"to": "a@exa"}))
    run.tool("send_email", {"to": "a@exa"}, matched="toolu_1")
    [v] = only(run.outcome("truncated"), "truncation")
    assert (v.step, v.evidence) == (1, {"request": 1, "exec": 1, "tool": "send_email", "tool_use_id": "toolu_1"})
    assert "a correct loop never runs tool calls from a max_tokens reply" in v.message


def max_tokens_then_final() -> Transcript:
    run = Run()
    run.request([user("Fix the bugs.")])
    run.reply("max_tokens", text("Three distinct bugs. Let me fix them:"))
    return run.outcome("final")


def test_truncation_flags_max_tokens_reported_as_final_once() -> None:
    [v] = check(max_tokens_then_final()).violations  # honest_outcome's twin is folded into this one
    assert (v.invariant, v.step) == ("truncation", 1)
    assert v.evidence == {"request": 1, "reason": "final", "last_stop_reason": "max_tokens"}
    # checked without truncation, the fault truncation owns is left out with it (a known finding set aside does
    # not come back under another id)
    assert only(max_tokens_then_final(), "honest_outcome") == []


def test_truncated_is_an_honest_reason_after_max_tokens() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("max_tokens", text("Let me"))
    assert check(run.outcome("truncated")).violations == []


# -- refusal -----------------------------------------------------------------------------------------------------


def test_refusal_flags_resending_the_refused_request() -> None:
    run = Run()
    history = [user("Do the bad thing.")]
    for _ in range(3):
        run.request(history, stream=True)
        run.reply("refusal", text("I can't help with that."))
    [v] = only(run.outcome("refusal"), "refusal")
    assert (v.step, v.evidence) == (2, {"request": 2, "refused_request": 1, "calls_after": 2})
    assert v.message.startswith("the model refused at step 1 and the loop called the model again in the same user "
                                "turn (2 more call(s) carrying on the refused conversation, the first at step 2)")
    assert "reports reason 'refusal'" in v.message and "retry on another model" in v.message


def _carried_on(calls: int) -> Run:
    """A loop that appends the refusal, nudges the model and carries on (issue 26, false pass 6)."""
    run = Run()
    history = [user("Do the bad thing.")]
    run.request(history)
    history.append(assistant(*run.reply("refusal", text("I can't."))))
    for _ in range(calls):
        history.append(user("Please carry on with the task."))
        run.request(history)
        history.append(assistant(*run.reply("refusal", text("I can't."))))
    return run


def test_refusal_flags_carrying_on_after_a_refusal_in_the_same_turn() -> None:
    [v] = only(_carried_on(8).outcome("max_steps"), "refusal")
    assert (v.step, v.evidence) == (2, {"request": 2, "refused_request": 1, "calls_after": 8})
    assert "(8 more call(s) carrying on the refused conversation, the first at step 2)" in v.message


def test_an_sdk_retry_of_the_refused_call_is_not_another_call() -> None:
    run = Run()
    history = [user("Do the bad thing.")]
    run.request(history)
    run.error(529)
    run.request(history, retry=True)  # x-stainless-retry-count: 1, the same step
    run.reply("refusal", text("I can't."))
    assert only(run.outcome("refusal"), "refusal") == []
    carried = _carried_on(1)
    carried.request(carried.t.requests[-1].conversation, retry=True)  # a retry of the carried-on call: one call
    [v] = only(carried.outcome("refusal"), "refusal")
    assert v.evidence["calls_after"] == 1


def test_refusal_allows_a_reset_context_or_a_fallback_model() -> None:
    # the API's guidance: remove or rephrase the refused turn (or clear the history), or retry on another model
    run = Run()
    run.request([user("Do the bad thing.")])
    run.reply("refusal", text("I can't."))
    run.request([user("Do the good thing instead.")])  # the refused turn rephrased
    run.reply("end_turn")
    run.request([user("Do the bad thing.")], model="claude-fallback")  # the same request on another model
    run.reply("end_turn")
    assert check(run.outcome("final")).violations == []


def test_a_new_user_turn_may_follow_a_refusal() -> None:
    run = Run()
    run.t.append(TurnStart(t=0.0, turn=0, text="Do the bad thing."))
    history = [user("Do the bad thing.")]
    run.request(history)
    history.append(assistant(*run.reply("refusal", text("I can't."))))
    run.t.append(TurnStart(t=run.now, turn=1, text="Then do the good thing."))
    history.append(user("Then do the good thing."))
    run.request(history)
    run.reply("end_turn")
    # (the drive returns one outcome per turn: recorded when it returns)
    run.t.append(OutcomeEvent(t=run.now, reason="refusal", text="I can't.", turn=0))
    run.t.append(OutcomeEvent(t=run.now, reason="final", text="Done.", turn=1))
    assert check(run.t).violations == []
    run.t.events[-2] = OutcomeEvent(t=run.now, reason="max_steps", text="", turn=0)
    [v] = only(run.t, "refusal")  # the refused turn's own outcome is still held to 'refusal'
    assert v.evidence == {"request": 1, "reason": "max_steps", "turn": 0}


@pytest.mark.parametrize("reason", ["max_steps", "error", "deadline"])
def test_a_turn_that_stops_at_a_refusal_reports_refusal(reason: str) -> None:
    run = Run()
    run.request([user("Do the bad thing.")])
    run.reply("refusal", text("I can't."))
    [v] = only(run.outcome(reason), "refusal")
    assert (v.step, v.evidence) == (1, {"request": 1, "reason": reason})
    assert v.message == (f"the model refused at step 1 and the loop stopped there reporting reason {reason!r}; a "
                         "correct loop reports the refusal as the turn's outcome: reason 'refusal'")


def test_stop_pressed_after_a_refusal_may_report_aborted() -> None:
    run = Run()
    run.request([user("Do the bad thing.")])
    run.reply("refusal", text("I can't."))
    run.t.append(AbortEvent(t=run.now, trigger="after model call 1"))
    assert only(run.outcome("aborted"), "refusal") == []


# -- honest_outcome ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_reason", "reason", "says"),
    [
        ("pause_turn", "final", "the last reply was pause_turn, which is continued (send it back), not final"),
        ("tool_use", "final", "the last reply asked for tools and the loop never sent their results back"),
        ("end_turn", "refusal", "the loop reported 'refusal' but no reply was a refusal"),
        ("end_turn", "truncated", "the loop reported 'truncated' but no reply was cut off at max_tokens"),
        ("end_turn", "done", "the loop declared reason 'done', which is not one of final, max_steps"),
    ],
)
def test_honest_outcome_flags_clear_lies(stop_reason: str, reason: str, says: str) -> None:
    run = Run()
    run.request([user("go")])
    run.reply(stop_reason, tool_use("toolu_1") if stop_reason == "tool_use" else text("..."))
    [v] = only(run.outcome(reason), "honest_outcome")
    assert (v.step, v.evidence) == (1, {"reason": reason, "last_stop_reason": stop_reason, "request": 1})
    assert says in v.message


@pytest.mark.parametrize("reason", ["max_steps", "deadline", "aborted", "error_budget", "repetition", "error"])
def test_honest_outcome_lets_a_loop_stop_early_for_its_own_reasons(reason: str) -> None:
    run = Run(limits={"max_steps": 10})
    run.request([user("go")])
    run.reply("tool_use", tool_use("toolu_1"))
    run.tool("search", matched="toolu_1")
    assert only(run.outcome(reason), "honest_outcome") == []


def test_an_escaped_exception_is_not_an_honest_outcome_violation() -> None:
    run = Run()
    run.request([user("go")])
    run.error()
    assert only(run.outcome("error", exception="anthropic.APIStatusError: Overloaded"), "honest_outcome") == []


def test_final_after_stop_sequence_is_honest() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("stop_sequence", text("Answer: 42"))
    assert check(run.outcome("final")).ok


# -- limits ------------------------------------------------------------------------------------------------------


def steps(run: Run, n: int, *, dt: float = 1.0) -> None:
    history: list[Any] = [user("go")]
    for k in range(1, n + 1):
        run.request(history, at=run.now + dt)
        history.append(assistant(*run.reply("tool_use", tool_use(f"toolu_{k}"), usage=(1000, 500))))
        run.tool("search", matched=f"toolu_{k}")
        history.append(user(tool_result(f"toolu_{k}")))


def test_limits_max_steps() -> None:
    run = Run(limits={"max_steps": 2})
    steps(run, 4)
    [v] = only(run.outcome("max_steps"), "limits")
    assert (v.step, v.evidence) == (3, {"request": 3, "max_steps": 2, "model_calls": 4})
    assert v.message.startswith("the loop declared max_steps=2 but made model call 3 (4 in all)")


def test_sdk_retries_count_as_one_model_call() -> None:
    run = Run(limits={"max_steps": 2})
    steps(run, 1)
    run.request([user("go")])
    run.error()
    run.request([user("go")], retry=True)
    run.error()
    run.request([user("go")], retry=True)
    run.reply("end_turn")
    t = run.outcome("final")
    assert t.model_calls == 2
    assert [r.call for r in t.requests] == [1, 2, 2, 2]
    assert only(t, "limits") == []


def test_limits_deadline_counts_first_attempts_only() -> None:
    run = Run(limits={"deadline_s": 120})
    run.request([user("go")], at=100.0)
    run.error()
    run.request([user("go")], retry=True, at=125.0)  # a retry of a call that started in time: fine
    run.error()
    run.request([user("go")], at=130.0)
    run.reply("end_turn")
    [v] = only(run.outcome("final"), "limits")
    assert (v.step, v.evidence) == (2, {"request": 3, "deadline_s": 120, "t": 130.0})
    assert "a correct loop checks the clock before each call and stops with reason 'deadline'" in v.message


def test_limits_max_total_tokens() -> None:
    run = Run(limits={"max_total_tokens": 3000})
    steps(run, 3)  # 1500 tokens a call: the budget is reached after call 2
    [v] = only(run.outcome("token_budget"), "limits")
    assert (v.step, v.evidence) == (3, {"request": 3, "max_total_tokens": 3000, "used": 3000})


def test_undeclared_limits_are_not_checked() -> None:
    run = Run(limits={"max_steps": None})
    steps(run, 30)
    assert only(run.outcome("max_steps"), "limits") == []


# -- tool_errors -------------------------------------------------------------------------------------------------


def test_tool_errors_flags_an_exception_escaping_the_loop() -> None:
    run = Run()
    email_step(run)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised",
             error="ConnectionResetError: send_email: connection reset")
    t = run.outcome("error", exception="ConnectionResetError: send_email: connection reset")
    [v] = only(t, "tool_errors")
    assert (v.step, v.evidence) == (1, {
        "exec": 1, "tool": "send_email", "tool_use_id": "toolu_1",
        "error": "ConnectionResetError: send_email: connection reset", "kind": "escaped",
    })
    assert v.message.endswith("a correct loop catches a tool's exception and sends it back as a tool_result with "
                              "is_error: true")


def test_tool_errors_matches_an_exception_repr() -> None:
    run = Run()
    email_step(run)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised", error="ValueError: bad")
    assert len(only(run.outcome("error", exception="Traceback (most recent call last):\nValueError('bad')"),
                    "tool_errors")) == 1


@pytest.mark.parametrize(
    ("result", "kind", "how"),
    [
        (user(tool_result("toolu_1", "ERROR: slow")), "not_is_error", "was reported as a success (no is_error)"),
        # the assistant turn dropped with the result (pairing holds): the error is tool_errors' alone
        (user(text("the tool failed")), "unreported", "was never reported to the model"),
    ],
)
def test_tool_errors_wants_an_is_error_observation(result: dict[str, Any], kind: str, how: str) -> None:
    run = Run()
    history = email_step(run)
    if kind == "unreported":
        history = history[:1]
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised", error="TimeoutError: slow")
    run.request([*history, result])
    run.reply("end_turn")
    [v] = only(run.outcome("final"), "tool_errors")
    assert (v.step, v.evidence) == (1, {
        "exec": 1, "tool": "send_email", "tool_use_id": "toolu_1", "error": "TimeoutError: slow", "kind": kind,
    })
    assert f"send_email raised (TimeoutError: slow) and the error {how}" in v.message


def test_a_dropped_error_result_is_reported_once_under_pairing() -> None:
    run = Run()
    history = email_step(run)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised", error="TimeoutError: slow")
    run.request([*history, user("the tool failed")])
    run.reply("end_turn")
    t = run.outcome("final")
    assert [(v.invariant, v.evidence["kind"]) for v in check(t).violations] == [("pairing", "missing_result")]


def test_tool_errors_accepts_an_error_observation_or_a_stop() -> None:
    run = Run()
    history = email_step(run)
    run.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised", error="TimeoutError: slow")
    history.append(user(tool_result("toolu_1", "TimeoutError: slow", is_error=True)))
    run.request(history)
    run.reply("end_turn")
    assert check(run.outcome("final")).ok
    stopped = Run()
    email_step(stopped)
    stopped.tool("send_email", {"to": "a@example.com"}, matched="toolu_1", status="raised", error="TimeoutError: x")
    assert only(stopped.outcome("error_budget"), "tool_errors") == []


# -- no_work_after_return ----------------------------------------------------------------------------------------


def test_no_work_after_return_flags_a_running_tool_and_a_late_call() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("tool_use", tool_use("toolu_1"), tool_use("toolu_2", input={"q": "b"}))
    run.tool("search", matched="toolu_1")
    run.start("search", {"q": "b"}, matched="toolu_2")
    run.outcome("aborted")
    run.end(2)
    run.request([user("go")])
    violations = only(run.t, "no_work_after_return")
    assert [(v.step, v.evidence) for v in violations] == [
        (1, {"exec": 2, "tool": "search"}),
        (2, {"request": 2}),
    ]
    assert violations[0].message.startswith("search (exec 2) was still running when the loop returned;")
    assert violations[1].message.startswith("model call 2 (request 2) started after the loop returned;")


def test_no_work_after_return_flags_a_tool_that_never_ended() -> None:
    run = Run()
    run.request([user("go")])
    run.reply("tool_use", tool_use("toolu_1"))
    run.start("search", matched="toolu_1")
    [v] = only(run.outcome("deadline"), "no_work_after_return")
    assert "was still running when the loop returned (it never ended)" in v.message



# -- the pairing walk resumed on a longer conversation gives what a whole walk gives ----------------------------

_IDS = st.sampled_from(["toolu_a", "toolu_b", "toolu_c"])
_BLOCK = st.one_of(
    st.builds(lambda i: {"type": "tool_use", "id": i, "name": "search", "input": {}}, _IDS),
    st.builds(lambda i: {"type": "tool_result", "tool_use_id": i, "content": "ok"}, _IDS),
    st.just({"type": "text", "text": "hi"}),
)
_MESSAGE = st.one_of(
    st.builds(lambda role, blocks: {"role": role, "content": blocks}, st.sampled_from(["user", "assistant"]),
              st.lists(_BLOCK, max_size=3)),
    st.builds(lambda role: {"role": role, "content": "text"}, st.sampled_from(["user", "assistant"])),
    st.just("not a message"),
)
# what a loop appends per step: an assistant message and a user message (the case the walk resumes on)
_STEP = st.tuples(
    st.builds(lambda blocks: {"role": "assistant", "content": blocks}, st.lists(_BLOCK, max_size=3)),
    st.builds(lambda blocks: {"role": "user", "content": blocks}, st.lists(_BLOCK, max_size=3)),
).map(list)


@settings(max_examples=300)
@given(st.lists(st.one_of(_STEP, st.lists(_MESSAGE, min_size=1, max_size=3)), min_size=1, max_size=6))
def test_a_resumed_pairing_walk_finds_what_a_whole_walk_finds(additions: list[list[Any]]) -> None:
    from simloop.invariants import _walk

    conversation: list[Any] = []
    walk = None
    for added in additions:  # each request: the previous one's history (the same objects) plus new messages
        conversation = [*conversation, *added]
        walk = _walk(conversation, walk)
        assert walk.found == _walk(conversation).found


@pytest.mark.skipif(not hasattr(sys, "getrefcount"), reason="reference counts are CPython's")
def test_check_keeps_no_reference_to_the_transcript() -> None:
    # verify keeps a run past its example only when it fails: a checked transcript (a history of huge tool
    # outputs, say) must not stay alive in the invariants' view cache into the next run
    t = clean_run()
    before = sys.getrefcount(t)
    assert check(t).ok
    assert sys.getrefcount(t) == before


def test_a_loop_that_retries_a_failed_call_itself_spends_one_step_on_it() -> None:
    """SDK retries off, the loop's own retry of the same request after a 500: one step, as the SDK's retries are
    (a step cap of 2 holds over three requests); a third different call is still the violation."""
    import anthropic

    import simloop

    scenario = {"tools": [{"name": "search"}], "limits": {"max_steps": 2},
                "model": [{"tool_use": [{"name": "search", "input": {"q": "a"}}]}, {"error": 500},
                          {"end_turn": "done"}, {"end_turn": "again"}]}

    def drive(sim: simloop.Sim, *, extra: bool = False) -> simloop.Outcome:
        client = sim.client.with_options(max_retries=0)
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        for step in range(2):
            for attempt in range(3):
                try:
                    reply = client.messages.create(model="m", max_tokens=64, tools=sim.tool_schemas,
                                                   messages=messages)
                    break
                except anthropic.InternalServerError:
                    continue
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use":
                break
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": sim.run_tool(b.name, b.input)}
                for b in reply.content if b.type == "tool_use"]})
        if extra:  # one call past the cap
            messages += [{"role": "user", "content": "And?"}]
            client.messages.create(model="m", max_tokens=64, messages=messages)
        return simloop.Outcome("final", "done")

    with simloop.Sim(scenario) as sim:
        outcome = sim.run(drive)
    assert len(sim.transcript.requests) == 3 and sim.check(outcome).violations == []
    with simloop.Sim(scenario) as sim:
        outcome = sim.run(lambda s: drive(s, extra=True))
    assert [v.invariant for v in sim.check(outcome).violations] == ["limits"]
