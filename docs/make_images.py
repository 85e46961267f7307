"""Regenerate the README's run pictures: docs/timeline.txt (the terminal timeline) and docs/report.png.

The run: a refund agent with a bug (``examples.rerun_after_api_error``: when a model call fails after
the SDK's retries, it re-runs the previous turn's tools) meets a 529 burst right after it issued a
refund, so the refund is issued twice.  The searches before it make the history, and so the input
tokens, grow step by step.

    python docs/make_images.py          # from the project root; needs Debian's chromium for the PNG

Deterministic: the same simloop gives the same text and page.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import simloop
from simloop.report import timeline_text, write_html

DOCS = ROOT / "docs"
POLICY = "Refunds: full refund within 30 days of delivery for unused items; " * 12
SCENARIO = {
    "name": "refund-then-overload",
    "task": "Order 5531 came back unused. Check the policy and the order, refund it, and tell the customer.",
    "tools": [
        {
            "name": "search_policy",
            "kind": "read",
            "description": "Search the refund policy.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            "results": [POLICY],
        },
        {
            "name": "get_order",
            "kind": "read",
            "description": "Look up an order.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
            "results": ['{"order_id": "5531", "delivered": "2026-11-12", "amount": "89.90 EUR", "items": 2}' * 8],
        },
        {
            "name": "issue_refund",
            "kind": "write",
            "description": "Refund an order.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
            "results": ['{"refund_id": "rf_8841", "status": "succeeded"}'],
        },
        {
            "name": "send_email",
            "kind": "write",
            "description": "Email the customer.",
            "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
            "results": ["sent"],
        },
    ],
    "model": [
        {"tool_use": [{"name": "search_policy", "input": {"q": "refund unused return"}}], "latency": 1.2},
        {"tool_use": [{"name": "get_order", "input": {"order_id": "5531"}}], "latency": 0.9},
        {"tool_use": [{"name": "search_policy", "input": {"q": "refund window days"}}], "latency": 1.1},
        {"tool_use": [{"name": "issue_refund", "input": {"order_id": "5531"}}], "latency": 1.4},
        {"error": 529, "repeat": 3},
        {"tool_use": [{"name": "send_email", "input": {"to": "ana@example.com"}}], "latency": 1.0},
        {"end_turn": "Refunded 89.90 EUR (rf_8841) and emailed the customer.", "latency": 0.8},
    ],
    "faults": [{"tool": "get_order", "kind": "slow", "latency": 12}],
    "limits": {"max_steps": 12, "deadline_s": 300},
}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def main() -> None:
    from examples.rerun_after_api_error import drive

    with simloop.Sim(SCENARIO, seed=0) as sim:
        sim.run(drive)
    violations = sim.check().violations
    (DOCS / "timeline.txt").write_text(timeline_text(sim.transcript, violations, width=120), encoding="utf-8")
    print((DOCS / "timeline.txt").read_text(encoding="utf-8"))
    chromium = shutil.which("chromium")
    if chromium is None:
        print("no chromium on PATH: docs/report.png not made (apt-get install chromium)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        page = write_html(sim.transcript, Path(tmp) / "report.html", violations)
        subprocess.run(
            [
                chromium,
                *FLAGS,
                f"--user-data-dir={tmp}/profile",
                f"--screenshot={DOCS / 'report.png'}",
                "--window-size=1200,1500",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"wrote {DOCS / 'report.png'}")


if __name__ == "__main__":
    main()
