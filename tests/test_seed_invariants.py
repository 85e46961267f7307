"""The seeds' stop conditions and harness rules (issue 16): crash, results_sent, results_together, the declared
stop policies (max_tool_errors, max_writes, max_repeats), runs that never reach the model, and the loop's own
SystemExit / KeyboardInterrupt (issue 21, item 1).

Each false "all invariants hold" the issue measured is a test here, from both sides: the defect is caught with
its id and a message that says what happened, where, and what a correct loop does; the correct loop holds.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from _isolated import in_fresh_process
from hypothesis import given, settings
from hypothesis import strategies as st
from test_invariants import Run, assistant, only, text, tool_result, tool_use, user

import simloop
from simloop.cli import main
from simloop.invariants import check

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
HERE = "tests/test_seed_invariants.py"
ONE_TOOL = {
    "name": "lookup",
    "tools": [{"name": "get_order", "input_schema": {"type": "object"}}],
    "model": [{"tool_use": [{"name": "get_order", "input": {"order_id": "1"}}]}, {"end_turn": "Shipped."}],
}


def run(scenario: Any, drive: Any, **kwargs: Any) -> tuple[simloop.Outcome, simloop.Report]:
    with simloop.Sim(scenario, seed=0, **kwargs) as sim:
        outcome = sim.run(drive)
    return outcome, sim.check()


def example(name: str) -> Any:
    import importlib

    return importlib.import_module(f"examples.{name}").drive


# -- crash ------------------------------------------------------------------------------------------------------


def reads_first_block(sim: simloop.Sim) -> simloop.Outcome:
    reply = sim.client.messages.create(
        model=sim.model, max_tokens=100, tools=sim.tool_schemas,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": sim.task}],
    )
    return simloop.Outcome("final", reply.content[0].text)  # type: ignore[union-attr]


def test_a_loop_that_crashes_on_a_reply_fails_verify_with_crash(tmp_path: Path) -> None:
    # was: "all 10 invariants hold" for every example (an escaped exception became outcome 'error')
    with pytest.raises(simloop.InvariantViolation) as info:
        simloop.verify(reads_first_block, max_examples=5, seed=0, out_dir=tmp_path)
    crash = [v for v in info.value.violations if v.invariant == "crash"]
    assert crash and crash[0].step == 1
    assert "AttributeError: 'ToolUseBlock' object has no attribute 'text' escaped the drive" in crash[0].message
    assert crash[0].evidence["where"].startswith(f"{HERE}:")  # the loop's own line, not the SDK's
    assert crash[0].evidence["where"].endswith(" in reads_first_block")


def sdk_argument_gone(sim: simloop.Sim) -> simloop.Outcome:
    sim.client.messages.create(model=sim.model, max_tokens=100, messages=[], temperture=0.5)  # type: ignore[call-overload]
    return simloop.Outcome("final", "")


def test_a_crash_before_the_first_model_call_names_the_loops_line() -> None:
    outcome, report = run(ONE_TOOL, sdk_argument_gone)
    assert outcome.reason == "error" and isinstance(outcome.exception, TypeError)
    [v] = report.violations
    assert v.invariant == "crash" and v.step is None
    assert v.message.startswith("the loop crashed before its first model call: TypeError: ")
    assert f"(raised at {HERE}:" in v.message and "in sdk_argument_gone)" in v.message
    assert "returning Outcome(reason='error', text=...)" in v.message  # how to adapt a library loop


def api_error_propagates(sim: simloop.Sim) -> simloop.Outcome:
    sim.client.messages.create(model=sim.model, max_tokens=100, messages=[{"role": "user", "content": ""}])
    return simloop.Outcome("final", "")


def test_an_api_error_raised_deep_in_the_sdk_is_placed_at_the_loops_call() -> None:
    outcome, report = run(ONE_TOOL, api_error_propagates)
    assert outcome.exception is not None
    crash = only(report.transcript, "crash")  # type: ignore[arg-type]
    assert crash[0].evidence["where"].startswith(f"{HERE}:") and "api_error_propagates" in crash[0].evidence["where"]


def test_a_tools_exception_that_escapes_is_tool_errors_not_crash_too() -> None:
    scenario = {**ONE_TOOL, "faults": [{"tool": "get_order", "kind": "raise"}]}
    _, report = run(scenario, example("tool_exception_escapes"))
    assert [v.invariant for v in report.violations] == ["tool_errors"]
    # with tool_errors left out, its escaped exception does not come back as a crash (issue 31: set a known finding
    # aside without it resurfacing under another id)
    assert only(report.transcript, "crash") == []  # type: ignore[arg-type]


def test_a_known_finding_set_aside_with_invariants_does_not_resurface_as_crash(tmp_path: Path) -> None:
    """The peeling workflow (issue 31): a loop with a known tool_errors bug, verified with tool_errors left out,
    passes (its escaped exceptions are tool_errors' fallout, not crash's); with every invariant it is caught."""
    from examples.catalogue import DECLARED

    drive = example("tool_exception_escapes")
    rest = [i for i in simloop.invariants.CATALOGUE if i != "tool_errors"]
    report = simloop.verify(drive, invariants=rest, limits=simloop.Limits(**DECLARED), max_examples=80, seed=3,
                            out_dir=tmp_path)
    assert report.ok and "crash" in report.checked
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(drive, limits=simloop.Limits(**DECLARED), max_examples=80, seed=3, out_dir=tmp_path)
    assert {v.invariant for v in caught.value.violations} == {"tool_errors"}


def test_a_halted_runaway_is_stops_not_crash() -> None:
    stuck = {"tool_use": [{"name": "get_order", "input": {}}], "usage": {"input_tokens": 10, "output_tokens": 5}}
    _, report = run({**ONE_TOOL, "model": [stuck], "then": "repeat_last"}, example("no_step_cap"))
    assert [v.invariant for v in report.violations] == ["stops"]


def test_a_correct_loop_does_not_crash() -> None:
    outcome, report = run(SCENARIOS / "first-block-not-text.yaml", example("correct_sync"))
    assert outcome.reason == "final" and report.ok


# -- SystemExit and KeyboardInterrupt from the loop (issue 21, item 1) ------------------------------------------


def exits(sim: simloop.Sim) -> simloop.Outcome:
    raise SystemExit(0)


def interrupts(sim: simloop.Sim) -> simloop.Outcome:
    sim.client.messages.create(model=sim.model, max_tokens=100, messages=[{"role": "user", "content": sim.task}])
    raise KeyboardInterrupt


async def async_exits(sim: simloop.Sim) -> simloop.Outcome:
    raise SystemExit(3)


@pytest.mark.parametrize("drive", [exits, interrupts, async_exits])
def test_the_loops_own_exit_is_its_outcome_and_a_crash(drive: Any) -> None:
    outcome, report = run(ONE_TOOL, drive)
    assert outcome.reason == "error" and isinstance(outcome.exception, (SystemExit, KeyboardInterrupt))
    assert [v.invariant for v in report.violations] == ["crash"]


def user_presses_ctrl_c(sim: simloop.Sim) -> simloop.Outcome:
    signal.raise_signal(signal.SIGINT)  # what the terminal does on Ctrl-C
    return simloop.Outcome("error", "not reached")


def swallows_ctrl_c(sim: simloop.Sim) -> simloop.Outcome:
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pass
    return simloop.Outcome("error", "swallowed")


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler, reason="SIGINT is handled")
@pytest.mark.parametrize("drive", [user_presses_ctrl_c, swallows_ctrl_c])
@in_fresh_process
def test_only_the_users_ctrl_c_aborts_simloop(drive: Any) -> None:
    with pytest.raises(KeyboardInterrupt):
        run(ONE_TOOL, drive)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_simloop_verify_exits_nonzero_on_a_drive_raising_systemexit_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["verify", "test_seed_invariants:exits", "--max-examples", "3", "--seed", "0", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "[crash] the loop crashed before its first model call: SystemExit: 0 escaped the drive" in out


def test_simloop_run_exits_nonzero_on_a_drive_raising_systemexit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(SCENARIOS / "happy-path.yaml"), "--drive", "test_seed_invariants:exits"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL" in out and "crash, expect, unreached" in out and "SystemExit: 0" in out


# -- runs that never reach the model ------------------------------------------------------------------------------


def not_wired(sim: simloop.Sim) -> simloop.Outcome:
    return simloop.Outcome("error", "the loop talked to something else")


def test_verify_fails_when_no_example_reached_the_model(tmp_path: Path) -> None:
    with pytest.raises(simloop.UsageError) as info:
        simloop.verify(not_wired, max_examples=4, seed=0, out_dir=tmp_path)
    message = str(info.value)
    assert message.startswith("verify ran 4 example(s) of test_seed_invariants.not_wired and not one made a model "
                              "call to the simulated API: the drive is probably not wired to the Sim")
    assert "sim.client (anthropic.Anthropic)" in message and "sim.run_tool" in message


def test_cli_verify_of_an_unwired_drive_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["verify", "test_seed_invariants:not_wired", "--max-examples", "2", "--out", str(tmp_path)])
    assert code == 2
    assert "not wired to the Sim" in capsys.readouterr().err


def test_a_scenario_run_that_made_no_model_call_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(SCENARIOS / "happy-path.yaml"), "--drive", "test_seed_invariants:not_wired"])
    out = capsys.readouterr().out
    assert code == 1
    assert "[unreached] the scenario scripts 2 replies but the loop made no model call" in out
    with pytest.raises(simloop.InvariantViolation, match=r"\[unreached\] the scenario scripts 2 replies"):
        simloop.replay(not_wired, SCENARIOS / "happy-path.yaml")


# -- results_sent ---------------------------------------------------------------------------------------------------


def test_a_dropped_success_is_results_sent() -> None:
    # was: flagged only when the dropped tool raised
    outcome, report = run(SCENARIOS / "note-during-tools.yaml", example("note_drops_results"))
    assert outcome.reason == "final"
    [v] = report.violations
    assert v.invariant == "results_sent" and v.step == 2
    assert v.message.startswith("send_email ran (exec 1, for tool_use toolu_")
    assert "and committed its write, but the next request (step 2) carries no tool_result for it" in v.message
    assert "a note from the user goes in the same user message, after the results" in v.message


def dropped_turn(*, then_call: bool, status: str = "ok") -> Any:
    r = Run()
    history = [user("Email the customer.")]
    r.request(history)
    r.reply("tool_use", tool_use("toolu_1", "send_email", {"to": "a"}))
    r.tool("send_email", {"to": "a"}, matched="toolu_1", status=status, error="ConnectionError: down" if status != "ok" else None)
    if then_call:  # the turn is dropped: a note replaces it
        history.append(user("Also cc my manager."))
        r.request(history)
        r.reply("end_turn", text("Done."))
    return r.outcome("final" if then_call else "aborted")


def test_results_sent_from_both_sides_on_hand_built_runs() -> None:
    [v] = only(dropped_turn(then_call=True), "results_sent")
    assert v.evidence == {"request": 2, "exec": 1, "tool": "send_email", "tool_use_id": "toolu_1", "status": "ok",
                          "dropped": ["toolu_1"]}
    assert only(dropped_turn(then_call=False), "results_sent") == []  # stopping right after the tools is fine
    assert only(clean(), "results_sent") == []


def test_a_dropped_failure_is_still_tool_errors_only() -> None:
    report = check(dropped_turn(then_call=True, status="raised"))
    assert [v.invariant for v in report.violations] == ["tool_errors"]
    assert only(report.transcript, "results_sent") == []  # type: ignore[arg-type]  (tool_errors' fault, left out)


def clean() -> Any:
    r = Run()
    history = [user("Find it.")]
    r.request(history)
    history.append(assistant(*r.reply("tool_use", tool_use("toolu_1"), tool_use("toolu_2", input={"q": "b"}))))
    r.tool("search", matched="toolu_1")
    r.tool("search", {"q": "b"}, matched="toolu_2")
    history.append(user(tool_result("toolu_1"), tool_result("toolu_2")))
    r.request(history)
    r.reply("end_turn", text("Found."))
    return r.outcome("final")


# -- results_together -------------------------------------------------------------------------------------------


def test_split_results_are_results_together() -> None:
    # was: a pass (the API merges consecutive user messages)
    _, report = run(SCENARIOS / "parallel-reads.yaml", example("results_one_by_one"))
    [v] = report.violations
    assert v.invariant == "results_together" and v.step == 2
    assert str(v).startswith(
        "[results_together] step 2, messages[3]: the results of the 3 tool call(s) of the assistant turn at "
        "messages[1] went back in 3 separate user messages (messages[2], messages[3], messages[4])"
    )
    assert "a correct loop sends all the tool_results of a turn in ONE user message" in v.message
    _, held = run(SCENARIOS / "parallel-reads.yaml", example("correct_sync"))
    assert held.ok


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=4), st.data())
def test_results_together_flags_exactly_the_split_turns(turns: list[int], data: st.DataObject) -> None:
    r = Run()
    history: list[Any] = [user("Go.")]
    split_turns = []
    for n, calls in enumerate(turns):
        r.request(history)
        uses = [tool_use(f"toolu_{n}_{k}", input={"q": f"{n}{k}"}) for k in range(calls)]
        history.append(assistant(*r.reply("tool_use", *uses)))
        results = [tool_result(u["id"]) for u in uses]
        for u in uses:
            r.tool("search", u["input"], matched=u["id"])
        split = calls > 1 and data.draw(st.booleans())
        if split:
            split_turns.append(uses[0]["id"])
            history.extend(user(b) for b in results)  # one message per result: merged by the API
        else:
            history.append(user(*results))
    r.request(history)
    r.reply("end_turn", text("Done."))
    report = check(r.outcome("final"))
    assert [v.evidence["tool_use_id"] for v in report.violations if v.invariant == "results_together"] == split_turns
    assert {v.invariant for v in report.violations} <= {"results_together"}


# -- the declared stop policies -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "defect", "reason", "message"),
    [
        ("error-budget.yaml", "error_budget_off_by_one", "error_budget",
         ("the scenario declares max_tool_errors=2 (its limits:) and 2 tool execution(s) had failed (the last: "
         "check_stock, exec 2), but the loop made model call 3; a correct loop counts failed tool executions and, once the budget is spent, "
         "stops with reason 'error_budget' instead of calling the model again")),
        ("one-write.yaml", "write_not_terminal", "final",
         ("the scenario declares max_writes=1 (its limits:) and 1 write(s) had succeeded (the last: issue_refund, "
         "exec 1), but the loop made model call 2; a correct loop treats its last allowed write as terminal: it stops (reason 'final': the "
         "write is the result) instead of calling the model again")),
        ("repeated-call.yaml", "repeats_keyed_by_id", "repetition",
         ("the scenario declares max_repeats=2 (its limits:) but the loop ran get_weather with the same input 3 times (exec 1 first, exec 3 "
         "last); a correct loop counts each tool and input it runs and, rather than run one again past the limit, "
         "stops with reason 'repetition'")),
    ],
)
def test_each_policy_is_caught_when_ignored_and_holds_when_honoured(
    scenario: str, defect: str, reason: str, message: str
) -> None:
    _, caught = run(SCENARIOS / scenario, example(defect))
    assert [(v.invariant, v.message) for v in caught.violations] == [("limits", message)]
    for loop in ("correct_sync", "correct_async", "correct_stream"):
        outcome, held = run(SCENARIOS / scenario, example(loop))
        assert held.ok and outcome.reason == reason, (loop, outcome, held)
    _, undeclared = run(SCENARIOS / scenario, example(defect), limits=simloop.Limits())
    assert undeclared.ok or "limits" not in {v.invariant for v in undeclared.violations}  # checked only if declared


def test_a_write_after_the_write_budget_is_named() -> None:
    r = Run(limits={"max_writes": 1})
    r.request([user("Email both.")])
    r.reply("tool_use", tool_use("toolu_1", "send_email", {"to": "a"}), tool_use("toolu_2", "send_email", {"to": "b"}))
    r.tool("send_email", {"to": "a"}, matched="toolu_1")
    r.tool("send_email", {"to": "b"}, matched="toolu_2")
    [v] = only(r.outcome("final"), "limits")
    assert v.message.startswith("the loop declared max_writes=1 and 1 write(s) had succeeded (the last: send_email, "
                                "exec 1), but it ran send_email (exec 2), another write")
    assert v.evidence == {"limit": "max_writes", "max_writes": 1, "exec": 2, "tool": "send_email", "spent_by": 1}


def test_final_after_the_last_allowed_write_is_honest_only_under_max_writes() -> None:
    def wrote(limits: dict[str, Any]) -> Any:
        r = Run(limits=limits)
        r.request([user("Email them.")])
        r.reply("tool_use", tool_use("toolu_1", "send_email", {"to": "a"}))
        r.tool("send_email", {"to": "a"}, matched="toolu_1")
        return r.outcome("final")

    assert check(wrote({"max_writes": 1})).ok
    assert [v.invariant for v in check(wrote({})).violations] == ["honest_outcome"]


def test_a_failed_write_does_not_spend_the_write_budget() -> None:
    r = Run(limits={"max_writes": 1})
    history = [user("Email them.")]
    r.request(history)
    history.append(assistant(*r.reply("tool_use", tool_use("toolu_1", "send_email", {"to": "a"}))))
    r.tool("send_email", {"to": "a"}, matched="toolu_1", status="raised", error="ConnectionError: down")
    history.append(user(tool_result("toolu_1", "ConnectionError: down", is_error=True)))
    r.request(history)
    r.reply("end_turn", text("It failed."))
    assert only(r.outcome("final"), "limits") == []


def test_the_policies_are_scenario_file_keys(tmp_path: Path) -> None:
    limits = simloop.load_scenario(SCENARIOS / "error-budget.yaml").limits
    assert limits == simloop.Limits(max_tool_errors=2)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nlimits: {max_repeats: 0}\n", encoding="utf-8")
    with pytest.raises(simloop.ScenarioError, match=r"bad.yaml:2: limits.max_repeats: input should be greater"):
        simloop.load_scenario(bad)


@pytest.mark.parametrize(
    ("flag", "defect"),
    [("--max-tool-errors=1", "error_budget_off_by_one"), ("--max-writes=1", "write_not_terminal"),
     ("--max-repeats=1", "repeats_keyed_by_id")],
)
def test_the_policies_are_cli_options(flag: str, defect: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["verify", "--max-examples", "60", "--seed", "1", "--out", str(tmp_path), flag]
    assert main([*args, f"examples.{defect}:drive"]) == 1
    assert "[limits]" in capsys.readouterr().out


def test_the_runaway_budget_is_above_the_frameworks_default_caps() -> None:
    with simloop.Sim(ONE_TOOL) as sim:
        assert sim.budget.model_calls > 50  # pydantic-ai's default request_limit is 50


def test_the_policies_are_plugin_options(tmp_path: Path) -> None:
    from simloop._pytest_support import SimloopFixture, resolve_options

    def fixture(limits: dict[str, Any]) -> SimloopFixture:
        config = {"drive": "examples.write_not_terminal:drive", "max_examples": 30, "limits": limits,
                  "out_dir": str(tmp_path)}
        options = resolve_options(nodeid="t.py::a", session_seed=1, session_seed_explicit=True, marker={}, cli={},
                                  ini={}, config=config)
        return SimloopFixture(options)

    with pytest.raises(simloop.InvariantViolation) as info:
        fixture({"max_steps": 10, "max_writes": 1}).verify()
    assert {v.invariant for v in info.value.violations} == {"limits"}
    assert fixture({"max_steps": 10}).verify().ok  # the policy is checked only when declared


# -- refusal honoured (issue 26, item 2) ------------------------------------------------------------------------
#
# The seeds: "refusal: ... Stop and surface this; do not retry the same request in a loop".  The API's guidance
# adds two recoveries: reset the context (remove or rephrase the refused turn) or retry on another model.


def test_a_loop_that_carries_on_after_a_refusal_fails_verify(tmp_path: Path) -> None:
    from examples import refusal_carried_on

    with pytest.raises(simloop.InvariantViolation) as found:
        simloop.verify(refusal_carried_on.drive, limits={"max_steps": 10}, max_examples=100, seed=0, out_dir=tmp_path)
    assert {v.invariant for v in found.value.violations} == {"refusal"}
    [v] = found.value.violations
    assert "called the model again in the same user turn" in v.message
    assert "a correct loop stops the turn on a refusal and reports reason 'refusal'" in v.message


def _fallback_loop(fallback: str) -> Any:
    """A loop that retries a refused request once on ``fallback`` (the same model: carrying on), then stops."""

    def drive(sim: simloop.Sim) -> simloop.Outcome:
        messages: list[Any] = [{"role": "user", "content": sim.task}]
        for model in ("claude-primary", fallback):
            reply = sim.client.messages.create(model=model, max_tokens=1024, messages=messages)
            if reply.stop_reason != "refusal":
                return simloop.Outcome("final", "".join(b.text for b in reply.content if b.type == "text"))
        return simloop.Outcome("refusal", "declined")

    return drive


def _refuses_primary(request: Any) -> dict[str, str]:
    return {"refusal": "I can't help with that."} if request.body["model"] == "claude-primary" else {"end_turn": "Here."}


@pytest.mark.parametrize(("fallback", "ok"), [("claude-fallback", True), ("claude-primary", False)])
def test_a_retry_on_another_model_is_a_recovery_and_on_the_same_one_is_not(fallback: str, ok: bool) -> None:
    outcome, report = run({"name": "fallback", "task": "Do it."}, _fallback_loop(fallback),
                          model=simloop.FunctionModel(_refuses_primary))
    assert report.ok is ok, report.violations
    assert outcome.reason == ("final" if ok else "refusal")


def test_a_new_user_turn_after_a_refused_turn_holds_for_the_reference_loop() -> None:
    from examples import correct_sync

    scenario = {"name": "refused-then-asked-again", "task": "Find their home addresses.",
                "followups": ["Then draft a public reply instead."],
                "model": [{"refusal": "I can't help find home addresses."}, {"end_turn": "Here is a draft."}]}
    with simloop.Sim(scenario, seed=0) as sim:
        sim.run(correct_sync.drive)
    assert sim.check().ok
    assert [o.reason for o in sim.outcomes] == ["refusal", "final"]
