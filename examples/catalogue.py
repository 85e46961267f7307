"""Which scenario shows which defect: the table the example tests run.

``DEFECTS`` maps each defect module of `examples` to ``(scenario file in
scenarios/, the invariant id that must catch it)``: running the module's
``drive`` on that scenario must violate exactly that invariant.  ``CORRECT``
lists the loops that must violate nothing on every scenario in scenarios/.
This module is plain data so it imports without simloop's runtime.
"""

from __future__ import annotations

__all__ = [
    "ABORTS", "APPROVALS", "CONTEXT", "CONTEXT_DECLARED", "CORRECT", "COST_BUDGET", "DECLARED", "DEFECTS", "OPENAI",
    "OWN_TOOLS",
    "POLICY_ROWS", "RESTARTS", "TURNS", "TWIN", "VERIFY",
]

CORRECT: list[str] = [
    "correct_sync", "correct_async", "correct_stream", "correct_policies", "correct_typed", "correct_delegate",
]

DEFECTS: dict[str, tuple[str, str]] = {
    "stop_not_tool_use_as_done": ("max-tokens-thinking.yaml", "truncation"),
    "tools_from_max_tokens": ("max-tokens-mid-tool.yaml", "truncation"),
    "no_step_cap": ("stuck-search.yaml", "stops"),
    "cap_reported_final": ("cap-before-done.yaml", "honest_outcome"),
    "refusal_retried": ("refusal.yaml", "refusal"),
    "refusal_carried_on": ("refusal.yaml", "refusal"),
    "tool_exception_escapes": ("tool-raises.yaml", "tool_errors"),
    "tool_retry_on_error": ("commit-then-lost.yaml", "no_rerun"),
    "rerun_after_api_error": ("overload-after-write.yaml", "no_rerun"),
    "assistant_not_appended": ("happy-path.yaml", "pairing"),
    "failed_result_dropped": ("parallel-one-fails.yaml", "pairing"),
    "text_before_results": ("parallel-reads.yaml", "pairing"),
    "made_up_ids": ("happy-path.yaml", "pairing"),
    "results_split": ("parallel-reads.yaml", "pairing"),
    "pause_turn_final": ("pause-turn.yaml", "honest_outcome"),
    "deadline_unchecked": ("slow-tool-deadline.yaml", "limits"),
    "token_budget_unchecked": ("token-budget-huge-output.yaml", "limits"),
    "api_errors_forever": ("outage.yaml", "stops"),
    "async_tasks_left_running": ("slow-parallel-deadline.yaml", "no_work_after_return"),
    "thinking_dropped": ("thinking-pass-back.yaml", "request_valid"),
    "server_pause_final": ("pause-turn-server-tool.yaml", "honest_outcome"),
    "pause_resumed_with_user_turn": ("pause-turn-server-tool.yaml", "request_valid"),
    "first_block_as_text": ("first-block-not-text.yaml", "crash"),
    "note_drops_results": ("note-during-tools.yaml", "results_sent"),
    "results_one_by_one": ("parallel-reads.yaml", "results_together"),
    "error_budget_off_by_one": ("error-budget.yaml", "limits"),
    "write_not_terminal": ("one-write.yaml", "limits"),
    "repeats_keyed_by_id": ("repeated-call.yaml", "limits"),
    "pause_left_in_history": ("pause-then-followup.yaml", "request_valid"),
    "empty_answer_appended": ("pause-then-followup.yaml", "request_valid"),
    "abort_ignored": ("stop-button-during-tool.yaml", "abort"),
    "abort_streaming_continued": ("stop-button-while-streaming.yaml", "abort"),
    "durable_resend": ("crash-after-email.yaml", "no_rerun"),
    "typed_write_retried": ("typed-write-lost.yaml", "no_rerun"),
    "cut_calls_run": ("max-tokens-after-calls.yaml", "truncation"),
    "cut_retried_once": ("max-tokens-again.yaml", "truncation"),
    "cache_control_every_block": ("wide-turn-cached.yaml", "request_valid"),
    "fabricated_results": ("happy-path.yaml", "results_real"),
    "approval_after_write": ("approval-denied.yaml", "approval"),
    "approval_reused": ("approval-two-emails.yaml", "approval"),
    "denial_swallowed": ("approval-denied.yaml", "approval"),
    "context_retried": ("context-window.yaml", "request_valid"),
    "cost_budget_dropped": ("cost-budget.yaml", "limits"),
    "subagent_partial_as_done": ("subagent-truncated.yaml", "subagent_honest"),
    "window_filled_final": ("window-filled.yaml", "truncation"),
}

#: Under `simloop.verify` (generated runs rather than one scenario) a defect may show first as another
#: honest violation.  Per defect: the limits the loop declares, and the invariant ids that are a
#: correct report of it.  ``bench/detect.py`` and the tests hold verify to this table.
DECLARED: dict[str, float] = {"max_steps": 10, "deadline_s": 300, "max_total_tokens": 200_000}  # the loops' defaults
#: A token budget past the model's window (claude-sonnet-5's 1M, several times over): the loops declared so reach
#: the window in a long run instead of stopping at their budget first.
CONTEXT_DECLARED: dict[str, float] = {"max_steps": 10, "deadline_s": 300, "max_total_tokens": 10_000_000}
#: The small cost budget (US dollars) the cost rows declare: a few calls' worth at the default model's price.
COST_BUDGET = 0.01
VERIFY: dict[str, tuple[dict[str, float], frozenset[str]]] = {
    name: (DECLARED, frozenset({invariant})) for name, (_, invariant) in DEFECTS.items()
}
VERIFY.update({
    # takes refusal and pause_turn for answers too, not only max_tokens
    "stop_not_tool_use_as_done": (DECLARED, frozenset({"truncation", "honest_outcome"})),
    # declares no step cap (it has none), so the runaway is its only violation
    "no_step_cap": ({"deadline_s": 300, "max_total_tokens": 200_000}, frozenset({"stops"})),
    # retries a failing tool until it gives up and lets the last exception out
    "tool_retry_on_error": (DECLARED, frozenset({"no_rerun", "tool_errors"})),
    # its retries are model calls beyond its declared step cap as well as a runaway
    "api_errors_forever": (DECLARED, frozenset({"stops", "limits"})),
    # its step retries are model calls beyond its declared step cap too
    "rerun_after_api_error": (DECLARED, frozenset({"no_rerun", "limits"})),
    # the loops that ignore a stop policy are verified declaring it
    "error_budget_off_by_one": ({**DECLARED, "max_tool_errors": 1}, frozenset({"limits"})),
    "write_not_terminal": ({**DECLARED, "max_writes": 1}, frozenset({"limits"})),
    "repeats_keyed_by_id": ({**DECLARED, "max_repeats": 2}, frozenset({"limits"})),
    # a conversation loop: verified with a tight step cap, so that a turn stops on a paused server call
    "pause_left_in_history": ({**DECLARED, "max_steps": 2}, frozenset({"request_valid"})),
    # its compact history (texts only) also forgets the results of a turn that stopped right after its tools
    "empty_answer_appended": (DECLARED, frozenset({"request_valid", "results_sent"})),
    # its step count starts over in each life, so a run of restarts also passes its declared cap
    "durable_resend": (DECLARED, frozenset({"no_rerun", "limits"})),
    # retries a failing tool until it gives up and lets the last exception out, as tool_retry_on_error
    "typed_write_retried": (DECLARED, frozenset({"no_rerun", "tool_errors"})),
    # its history reaches the window only with a budget past it (a long run's outputs)
    "context_retried": (CONTEXT_DECLARED, frozenset({"request_valid"})),
    # verified declaring a small cost budget, which the loop never receives
    "cost_budget_dropped": ({**DECLARED, "max_cost_usd": COST_BUDGET}, frozenset({"limits"})),
    # a long history fills the window only with a budget past it (the long-history stage); a cut reply taken for an
    # answer is truncation's (and honest_outcome's where truncation does not speak)
    "window_filled_final": (CONTEXT_DECLARED, frozenset({"truncation", "honest_outcome"})),
})

#: The loops `verify` holds to the context claim (``verify(drive, context=True)``: every request inside the
#: model's window), with a budget past the window: module -> the invariant ids that are a correct report of it,
#: or None for a correct loop.  Not in `CORRECT`: the reference loops claim no context management (their honest
#: end of a history past the window is the API's 400 and ``error``).
CONTEXT: dict[str, frozenset[str] | None] = {
    "context_unmanaged": frozenset({"request_valid"}),
    "context_trimmed": None,
}

#: The rows `verify` tries as conversations (``verify(drive, turns=N)``): row -> the most user turns.  The
#: correct loops run every turn through one history, so they are verified as conversations too.
TURNS: dict[str, int] = {
    "pause_left_in_history": 3,
    "empty_answer_appended": 3,
    **{loop: 3 for loop in CORRECT},
}

#: The rows `verify` tries with the user's Stop pressed at a drawn point (``verify(drive, abort=True)``); the
#: correct loops are wired to ``sim.abort`` and verified so too.
ABORTS: frozenset[str] = frozenset({"abort_ignored", "abort_streaming_continued", *CORRECT})

#: The rows `verify` tries with a person at the permission gate (``verify(drive, approvals=True)``); the correct
#: loops ask ``sim.approve`` before each call that needs approval (``examples._common.gated_run_tool``).
APPROVALS: frozenset[str] = frozenset({"approval_after_write", "approval_reused", "denial_swallowed", *CORRECT})

#: The rows `verify` tries with simulated process deaths (``verify(drive, restarts=N)``): row -> the most restarts.
#: The reference loops keep an idempotency key per write in ``sim.store`` and are verified so too.
RESTARTS: dict[str, int] = {"durable_resend": 1, **{loop: 1 for loop in CORRECT}}

#: The correct loops verified under each declared stop policy as well: row name -> (module, declared limits).
#: ``bench/detect.py`` holds them to no violation, like `CORRECT` under `DECLARED`.
POLICY_ROWS: dict[str, tuple[str, dict[str, float]]] = {
    f"{loop}+{policy}": (loop, {**DECLARED, policy: n})
    for loop in ("correct_sync", "correct_async")
    for policy, n in (("max_tool_errors", 1), ("max_writes", 1), ("max_repeats", 2), ("max_cost_usd", COST_BUDGET))
}
# the delegating loop, verified with its delegate tool (`OWN_TOOLS`): its sub-agents are checked as runs of their own
POLICY_ROWS["correct_delegate+delegate"] = ("correct_delegate", DECLARED)
# the same with no deadline: a parent capped at 10 calls, its sub-agents at 4, in slow worlds (model calls and tools
# of up to ten minutes) is inside its own bounds, never a runaway in virtual time (issue 40, item 7)
POLICY_ROWS["correct_delegate+no_deadline"] = (
    "correct_delegate", {k: v for k, v in DECLARED.items() if k != "deadline_s"}
)

#: The rows verified with a toolset of their own (the module's ``TOOLS``: ``verify(drive, tools=module.TOOLS)``):
#: the loops whose delegate tool runs a sub-agent.  ``bench/detect.py`` and the tests pass them.
OWN_TOOLS: frozenset[str] = frozenset({"correct_delegate+delegate", "correct_delegate+no_deadline",
                                       "subagent_partial_as_done"})

#: Each defect loop's correct twin: the loop it is a one-bug variant of.  A failure `verify` saves for the
#: defect must replay cleanly on its twin (the saved file is a regression test that passes once fixed).
TWIN: dict[str, str] = {name: "correct_sync" for name in DEFECTS}
TWIN["async_tasks_left_running"] = "correct_async"
TWIN["abort_streaming_continued"] = "correct_stream"
TWIN["subagent_partial_as_done"] = "correct_delegate"
TWIN.update({name: "correct_typed" for name in (
    "typed_write_retried", "cut_calls_run", "cut_retried_once", "cache_control_every_block",
)})


#: The loops on the openai SDK's wires: `examples.openai_loop` (Chat Completions) and `examples.openai_responses_loop`
#: (Responses), whose reference loops and one-bug twins are functions of them ("module:function" -> the ids that
#: catch it; None: correct).
OPENAI: dict[str, frozenset[str] | None] = {
    "openai_loop:drive": None,
    "openai_loop:drive_partial_answers": frozenset({"pairing"}),
    "openai_loop:drive_tools_from_length": frozenset({"truncation"}),
    "openai_loop:drive_rerun_after_500": frozenset({"no_rerun"}),
    "openai_loop:drive_refusal_from_finish_reason": frozenset({"honest_outcome"}),
    # the Responses API (`examples.openai_responses_loop`): a plain list of input items, and a previous_response_id chain
    "openai_responses_loop:drive": None,
    "openai_responses_loop:drive_chained": None,
    "openai_responses_loop:drive_partial_answers": frozenset({"pairing"}),
    "openai_responses_loop:drive_tools_from_incomplete": frozenset({"truncation"}),
    "openai_responses_loop:drive_rerun_after_500": frozenset({"no_rerun"}),
}
