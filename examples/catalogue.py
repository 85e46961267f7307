"""Which scenario shows which defect: the table the example tests run.

``DEFECTS`` maps each defect module of `examples` to ``(scenario file in
scenarios/, the invariant id that must catch it)``: running the module's
``drive`` on that scenario must violate exactly that invariant.  ``CORRECT``
lists the loops that must violate nothing on every scenario in scenarios/.
This module is plain data so it imports without simloop's runtime.
"""

from __future__ import annotations

__all__ = ["CORRECT", "DEFECTS"]

CORRECT: list[str] = ["correct_sync", "correct_async", "correct_stream"]

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
}
