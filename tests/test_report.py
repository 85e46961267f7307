"""The timelines and the HTML report: structured steps, the plain and rich text, the page, and a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simloop import Sim, Violation
from simloop.report import bar, render_html, timeline_text, write_html
from simloop.timeline import render_timeline, steps
from simloop.transcript import Event, Halt, Header, OutcomeEvent, Request, Response, ToolEnd, ToolStart, Transcript

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
TOOLS = [
    {"name": "search", "input_schema": {"type": "object"}},
    {"name": "send_email", "input_schema": {"type": "object"}},
]
EVIL = "</pre><script>alert('x')</script>"


def _message(content: list[dict[str, Any]], stop: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def _request(index: int, call: int, attempt: int, messages: list[Any], tokens: int, t: float) -> Request:
    body = {"model": "claude-sonnet-5", "max_tokens": 1024, "tools": TOOLS, "messages": messages}
    return Request(
        t=t, index=index, call=call, attempt=attempt, path="/v1/messages", stream=False, body=body, input_tokens=tokens
    )


def demo() -> tuple[Transcript, list[Violation]]:
    """A hand-built run: a slow read and a commit-then-lost write, a 529 burst retried by the SDK, the write re-run."""
    task = [{"role": "user", "content": "Refund order 1234 and tell the customer."}]
    uses = [
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "refund"}},
        {"type": "tool_use", "id": "toolu_2", "name": "send_email", "input": {"to": "a@example.com"}},
    ]
    after = [
        *task,
        {"role": "assistant", "content": uses},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": EVIL},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "connection reset", "is_error": True},
            ],
        },
    ]
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    t = Transcript(
        Header(scenario="demo-run", seed=3, limits={"max_steps": 5}, tools={"search": "read", "send_email": "write"})
    )
    events: list[Event] = [
        _request(0, 1, 0, task, 120, 0.0),
        Response(
            t=0.8,
            index=0,
            call=1,
            status=200,
            kind="tool_use",
            stop_reason="tool_use",
            message=_message([{"type": "text", "text": "Let me check."}, *uses], "tool_use", (120, 40)),
            latency=0.8,
        ),
        ToolStart(
            t=0.8,
            exec=1,
            tool="search",
            input={"q": "refund"},
            nth=1,
            kind="read",
            tool_use_id="toolu_1",
            matched="toolu_1",
            fault="slow",
        ),
        ToolEnd(t=30.8, exec=1, status="ok", result=EVIL + "x" * 5000),
        ToolStart(
            t=30.8,
            exec=2,
            tool="send_email",
            input={"to": "a@example.com"},
            nth=1,
            kind="write",
            tool_use_id="toolu_2",
            matched="toolu_2",
            fault="commit_then_raise",
        ),
        ToolEnd(t=30.8, exec=2, status="raised", error="ConnectionResetError: reset", committed=True),
        _request(1, 2, 0, after, 480, 30.8),
        Response(t=30.8, index=1, call=2, status=529, kind="error", fault="http", error=overloaded),
        _request(2, 2, 1, after, 480, 31.2),
        Response(t=31.2, index=2, call=2, status=529, kind="error", fault="http", error=overloaded),
        _request(3, 2, 2, after, 480, 32.0),
        Response(t=32.0, index=3, call=2, status=529, kind="error", fault="http", error=overloaded),
        ToolStart(
            t=32.0,
            exec=3,
            tool="send_email",
            input={"to": "a@example.com"},
            nth=2,
            kind="write",
            tool_use_id="toolu_2",
            matched="toolu_2",
        ),
        ToolEnd(t=32.0, exec=3, status="ok", result="sent", committed=True),
        _request(4, 3, 0, after, 510, 32.0),
        Response(
            t=33.0,
            index=4,
            call=3,
            status=200,
            kind="end_turn",
            stop_reason="end_turn",
            message=_message([{"type": "text", "text": "Done."}], "end_turn", (510, 12)),
            latency=1.0,
        ),
        OutcomeEvent(t=33.0, reason="final", text="Done."),
    ]
    for e in events:
        t.append(e)
    violations = [
        Violation(
            "no_rerun",
            "send_email ran again (exec 3) after exec 2 had committed",
            step=2,
            evidence={"exec": 3, "first_exec": 2, "tool": "send_email", "tool_use_id": "toolu_2"},
        ),
        Violation(
            "limits", "a run-level finding with <b>markup</b>", step=None, evidence={"path": "messages[2].content[1]"}
        ),
    ]
    return t, violations


# -- the structured steps --------------------------------------------------------------------------------------------


def test_steps_carry_kinds_retries_tool_outcomes_and_violations() -> None:
    transcript, violations = demo()
    rows = steps(transcript, violations)
    assert [s.call for s in rows] == [1, 2, 3]
    assert [s.kind for s in rows] == ["tool_use", "", "end_turn"]
    assert [s.retries for s in rows] == [0, 2, 0]
    assert [len(s.requests) for s in rows] == [1, 3, 1] and [len(s.responses) for s in rows] == [1, 3, 1]
    assert [(r.tool, r.outcome, r.took) for r in rows[0].runs] == [
        ("search", "slow", 30.0),
        ("send_email", "committed-then-lost", 0.0),
    ]
    assert [(r.tool, r.outcome) for r in rows[1].runs] == [("send_email", "ok")]
    assert [v.invariant for v in rows[1].violations] == ["no_rerun"] and rows[1].marks == ["no_rerun"]
    assert rows[0].violations == [] and rows[2].violations == []


@pytest.mark.parametrize(
    ("scenario", "outcome"),
    [
        ("slow-parallel-deadline.yaml", "slow"),
        ("tool-timeout.yaml", "timeout"),
        ("tool-raises.yaml", "raised"),
        ("commit-then-lost.yaml", "committed-then-lost"),
        ("token-budget-huge-output.yaml", "huge"),
    ],
)
def test_tool_outcomes_of_real_runs(scenario: str, outcome: str) -> None:
    from examples.correct_sync import drive

    with Sim(SCENARIOS / scenario, seed=0) as sim:
        sim.run(drive)
    found = {r.outcome for s in steps(sim.transcript) for r in s.runs}
    assert outcome in found, found


def test_plain_timeline_text_is_stable() -> None:
    transcript, violations = demo()
    expected = [
        "step       time       in    out  reply",
        '   1     0.000s      120     40  tool_use: "Let me check." search(q="refund") send_email(to="a@example.com")',
        '                                 -> search(q="refund") ok after 30.0s',
        '                                 -> send_email(to="a@example.com") committed, then raised ConnectionResetError: reset',
        "   2    30.800s      480      0  (no reply)  [529, 529, 529]  <-- no_rerun",
        '                                 -> send_email(to="a@example.com") ok',
        '   3    32.000s      510     12  end_turn: "Done."',
        'outcome: final "Done." at 33.000s',
        "  <-- limits",
    ]
    assert render_timeline(transcript, violations, width=140).splitlines() == expected


# -- the rich terminal timeline --------------------------------------------------------------------------------------


def test_bar_is_proportional_in_eighths() -> None:
    assert bar(0, 100) == "" and bar(5, 0) == ""
    assert bar(100, 100, 12) == "█" * 12
    assert bar(50, 100, 12) == "█" * 6
    assert bar(1, 1000, 12) == "▏"  # never invisible when non-zero
    assert bar(53, 100, 4) == "██▏"  # 8*4*0.53 = 16.96 -> 17 eighths = 2 full cells and 1 eighth


def test_rich_timeline_rows() -> None:
    transcript, violations = demo()
    text = timeline_text(transcript, violations, width=150)
    lines = text.splitlines()
    assert lines[0] == "simloop run demo-run  seed 3  limits: max_steps=5"
    assert re.match(r"^step\s+time\s+in\s+out\s+reply\s+tools\s+retries$", lines[1])
    row1 = next(x for x in lines if x.lstrip().startswith("1 "))
    assert "120 " in row1 and "tool_use" in row1 and 'search(q="refund") slow 30.0s' in row1
    assert 'send_email(to="a@example.com") committed-then-lost' in text
    row2 = next(x for x in lines if x.lstrip().startswith("2 "))
    assert "480 ███████████▎ " in row2  # 480/510 of 12 cells: 90 eighths
    assert "no reply" in row2 and "2 (529 ×3)" in row2 and row2.endswith("◀ no_rerun")
    row3 = next(x for x in lines if x.lstrip().startswith("3 "))
    assert "510 ████████████" in row3 and 'end_turn "Done."' in row3 and "◀" not in row3
    assert 'outcome: final "Done." at 33.000s' in text
    assert "2 violation(s):" in text and "[no_rerun] step 2: send_email ran again" in text
    assert all(len(x) <= 150 for x in lines)
    narrow = timeline_text(transcript, violations, width=110)
    assert all(len(x) <= 110 for x in narrow.splitlines())
    assert "send_email(…) committed-then-lost" in narrow  # arguments give way before outcomes do


def test_rich_timeline_fits_narrow_terminals_and_shows_halts() -> None:
    from examples.no_step_cap import drive

    with Sim(SCENARIOS / "stuck-search.yaml", seed=0) as sim:
        sim.run(drive)
    report = sim.check()
    text = timeline_text(sim.transcript, report.violations, width=80)
    assert all(len(x) <= 80 for x in text.splitlines())
    assert "halted by simloop at 15.300s" in text and "◀ stops" in text
    assert len([x for x in text.splitlines() if re.match(r"^\s+\d+\s+\d+\.\d{3}s", x)]) == 52


def test_import_simloop_does_not_import_rich() -> None:
    code = (
        "import sys, simloop, simloop.timeline, simloop.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# -- the HTML report -------------------------------------------------------------------------------------------------


def test_html_report_is_self_contained_and_complete() -> None:
    transcript, violations = demo()
    page = render_html(transcript, violations)
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    # nothing is fetched at view time
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    # the chart: one bar per step, the violated step marked
    assert page.count('<rect class="bar') == 3
    assert 'id="bar-2"' in page and re.search(r'<rect class="bar violated noreply" id="bar-2"', page)
    # the violations with their evidence
    assert page.count('<li class="violation"') == 2
    assert 'data-invariant="no_rerun" data-step="2"' in page and "<dt>first_exec</dt><dd><code>2</code></dd>" in page
    assert "a run-level finding with &lt;b&gt;markup&lt;/b&gt;" in page
    # every step expandable, with its requests and replies
    assert page.count('<details class="exchange"') == 3 and "(3 attempts)" in page
    assert "reply · 529 error · http" in page and "committed-then-lost" in page
    # content is escaped and long strings cut
    assert EVIL not in page and "&lt;/pre&gt;&lt;script&gt;alert(" in page
    assert "more characters]" in page


def test_html_report_is_deterministic_and_repeats_no_history(tmp_path: Path) -> None:
    transcript, violations = demo()
    assert render_html(transcript, violations) == render_html(transcript, violations)
    page = render_html(transcript, violations)
    assert "messages[1:] shown; messages[0:1] are as in request #0" in page
    assert "&quot;tools&quot;: &quot;(2 tool definitions, as in request #0)&quot;" in page
    path = write_html(transcript, tmp_path / "sub" / "r.html", violations)
    assert path.read_text(encoding="utf-8") == page


def test_html_report_of_an_empty_run() -> None:
    page = render_html(Transcript(Header(scenario="empty", seed=0)))
    assert "no model calls" in page and "every checked invariant holds" in page and '<rect class="bar' not in page


# -- in a real browser -----------------------------------------------------------------------------------------------

CHROMIUM_FLAGS = [
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


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    assert exe is not None
    profile = tmp_path / "chromium-profile"
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="no chromium on PATH: `make browser` installs it (Debian's chromium, as root); `make test` never does",
)
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    from examples.rerun_after_api_error import drive

    with Sim(SCENARIOS / "overload-after-write.yaml", seed=0) as sim:
        sim.run(drive)
    violations = sim.check().violations
    assert violations
    page = write_html(sim.transcript, tmp_path / "report.html", violations)
    url = page.as_uri() + "#step-2"
    dom = _chromium(tmp_path, "--virtual-time-budget=2000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-js="ready"' in html  # the inline script ran
    assert len(re.findall(r'<rect class="bar[^"]*" id="bar-\d+"', html)) == len(steps(sim.transcript))
    assert len(re.findall(r'<li class="violation"', html)) == len(violations)
    assert re.search(r'<details class="exchange" id="detail-2" open', html)  # the #step-2 link opened its details
    shot = tmp_path / "report.png"
    run = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1600) and len(data) > 20_000  # a page with a chart, not a blank one


def test_violation_dicts_from_json_round_trip() -> None:
    # the report reads evidence values that are not strings as JSON
    transcript, _ = demo()
    v = Violation("pairing", "x", step=1, evidence={"ids": ["toolu_1", "toolu_2"]})
    assert json.dumps(["toolu_1", "toolu_2"]).replace('"', "&quot;") in render_html(transcript, [v])


def test_halted_runs_say_so() -> None:
    transcript, violations = demo()
    transcript.append(Halt(t=40.0, budget="model_calls", detail="the loop made 31 model calls"))
    assert "halted" in render_html(transcript, violations) and "the loop made 31 model calls" in render_html(transcript)


def test_html_report_shows_turns_the_stop_and_restarts() -> None:
    """A conversation of two turns, the user's Stop in the first and a crash in the second: each is on the page."""
    import yaml

    from examples import correct_sync

    scenario = yaml.safe_load((SCENARIOS / "stop-button-during-tool.yaml").read_text(encoding="utf-8"))
    scenario.pop("expect")
    scenario["model"] = [scenario["model"][0],
                         {"tool_use": [{"name": "send_email", "input": {"to": "ann@example.com", "body": "30 days."}}]},
                         {"end_turn": "Thirty days from delivery."}]
    scenario["faults"].append({"tool": "send_email", "call": 1, "kind": "crash"})
    with Sim(scenario, seed=0) as sim:
        sim.run(correct_sync.drive)
    page = render_html(sim.transcript, [])
    rows = re.findall(r'<tr class="turn" id="turn-(\d)"><td colspan="8">user turn \d: <q>([^<]*)</q>', page)
    assert [n for n, _ in rows] == ["1", "2", "1", "2"]  # the second life takes the turns again
    assert rows[1][1] == "Never mind the email. What is the refund window?"
    assert page.count('<div class="event abort">STOP pressed (while tool execution 1 runs) at 2.000s</div>') == 1
    assert page.count('<div class="event restart">PROCESS DIED at 2.000s: the loop restarts (life 2), '
                      "sim.store kept</div>") == 1
    assert "<dt>Stop pressed</dt><dd>while tool execution 1 runs (at 2.000s virtual)</dd>" in page
    assert re.search(r"<dt>process died</dt><dd>at 2\.000s virtual: life 2 began, sim.store kept", page)
    facts = re.search(r"<dt>user turns \(4\)</dt><dd>(.*?)</dd>", page)
    assert facts is not None
    assert re.findall(r"-&gt; ([a-z A-Z]+)", facts[1]) == [
        "Stop pressed", "the process died", "final", "final"]
    text = timeline_text(sim.transcript, [], width=120)  # the terminal's timeline (simloop show) shows them too
    assert [ln.split("turn ")[1][:1] for ln in text.splitlines() if ln.strip().startswith("turn ")] == ["1", "2", "1", "2"]
    assert text.count("STOP pressed (while tool execution 1 runs)") == 1 and text.count("PROCESS DIED at 2.000s") == 1
    single = render_html(demo()[0], demo()[1])
    assert '<tr class="turn"' not in single and "Stop pressed" not in single and "process died" not in single


def test_a_crash_at_the_start_of_a_later_turn_is_drawn_in_that_turn() -> None:
    """Issue 40, item 13: the turn the loop crashed in before its first model call has its line, and the crash names it."""
    import anthropic

    from simloop import Outcome

    def drive(sim: Sim) -> list[Outcome]:
        client = anthropic.Anthropic(api_key="k", http_client=sim.http_client)
        messages: list[Any] = []
        outcomes = []
        for n, text in enumerate(sim.user_turns):
            if n == 1:
                raise RuntimeError("history store unavailable")
            messages.append({"role": "user", "content": text})
            reply = client.messages.create(model=sim.model, max_tokens=256, messages=messages)
            messages.append({"role": "assistant", "content": reply.content})
            outcomes.append(Outcome("final", reply.content[0].text))
        return outcomes

    scenario = {"name": "turns", "task": "Where is my order?", "followups": ["And the refund?"],
                "model": [{"end_turn": "On its way."}], "strict": False}
    with Sim(scenario) as sim:
        sim.run(drive)
    [crash] = sim.check().violations
    assert crash.invariant == "crash" and crash.step is None
    assert crash.message.startswith("the loop crashed at the start of user turn 2, before its first model call "
                                    "(after step 1): RuntimeError: history store unavailable escaped the drive")
    text = render_timeline(sim.transcript, [crash])
    assert '-- user turn 2: "And the refund?" (no model call)\noutcome: error RuntimeError' in text
    assert '\n                                        turn 2: "And the refu' in timeline_text(sim.transcript, [crash])


def test_a_body_the_api_cannot_parse_is_reported_with_the_apis_words() -> None:
    """Issue 40, item 13: no "400 None" and an empty text for a request rejected before it was read."""
    from simloop import Outcome

    def drive(sim: Sim) -> Outcome:
        sent = sim.http_client.post("https://api.anthropic.com/v1/messages", content=b"{not json",
                                    headers={"content-type": "application/json", "x-api-key": "k",
                                             "anthropic-version": "2023-06-01"})
        return Outcome("error", sent.text)

    with Sim({"name": "bad-body", "task": "t", "model": [{"end_turn": "hi"}], "strict": False}) as sim:
        sim.run(drive)
    [violation] = sim.check().violations
    assert violation.message.startswith(
        'the API rejected the request with 400 invalid_request_error: "There was an error parsing the body of your '
        'request."')
