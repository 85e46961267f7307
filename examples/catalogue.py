"""Which scenario shows which defect: the table the example tests run.

``DEFECTS`` maps each defect module of `examples` to ``(scenario file in
scenarios/, the invariant id that must catch it)``: running the module's
``drive`` on that scenario must violate exactly that invariant.  ``CORRECT``
lists the loops that must violate nothing on every scenario in scenarios/.
This module is plain data so it imports without simloop's runtime.
"""

from __future__ import annotations

__all__ = ["CORRECT", "DEFECTS", "NEEDS_RULE", "pending"]

CORRECT: list[str] = ["correct_sync", "correct_async", "correct_stream", "correct_typed"]

DEFECTS: dict[str, tuple[str, str]] = {
    "stop_not_tool_use_as_done": ("max-tokens-thinking.yaml", "truncation"),
    "tools_from_max_tokens": ("max-tokens-mid-tool.yaml", "truncation"),
    "no_step_cap": ("stuck-search.yaml", "stops"),
    "cap_reported_final": ("cap-before-done.yaml", "honest_outcome"),
    "refusal_retried": ("refusal.yaml", "refusal"),
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
    "typed_write_retried": ("typed-write-lost.yaml", "no_rerun"),
    "cut_calls_run": ("max-tokens-after-calls.yaml", "truncation"),
    "cut_retried_once": ("max-tokens-again.yaml", "truncation"),
    "cache_control_every_block": ("wide-turn-cached.yaml", "request_valid"),
}

#: Under `simloop.verify` (generated runs rather than one scenario) a defect may show first as another
#: honest violation.  Per defect: the limits the loop declares, and the invariant ids that are a
#: correct report of it.  ``bench/detect.py`` and the tests hold verify to this table.
DECLARED = {"max_steps": 10, "deadline_s": 300, "max_total_tokens": 200_000}  # the example loops' defaults
VERIFY: dict[str, tuple[dict[str, int], frozenset[str]]] = {
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
    # retries a failing tool until it gives up and lets the last exception out, as tool_retry_on_error
    "typed_write_retried": (DECLARED, frozenset({"no_rerun", "tool_errors"})),
})

#: Defects only a validator rule still to come can catch (the rule, in words).  `pending()` says which of them
#: this simloop cannot catch yet: the tests skip those and ``bench/detect.py`` marks them, until the rule lands.
NEEDS_RULE: dict[str, str] = {
    "cache_control_every_block": "a 400 for more than 4 cache_control breakpoints (the server-tools work)",
}


def pending() -> dict[str, str]:
    """The defects of `NEEDS_RULE` whose rule the simulated API does not have yet (imports simloop)."""
    from simloop.wire.validate import validate_messages_request

    marked = {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}
    five = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": [marked] * 5}]}
    has_rule = validate_messages_request(five) is not None
    return {} if has_rule else dict(NEEDS_RULE)
