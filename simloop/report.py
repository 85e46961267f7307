"""A run for people: the rich terminal timeline and the self-contained HTML report.

Both render the rows of `simloop.timeline.steps` (one logical model call a
row).  The terminal timeline shows per step the virtual time, input/output
tokens with a bar for the input size (it grows as the history is re-sent),
the reply kind, the tools run with their outcome, the SDK retries and the
violations marked where they happened.  The HTML report is one file with no
network at view time (inline CSS, JS and SVG): the same timeline, a per-step
bar chart of input tokens, every request and reply expandable, and the
violations with their evidence.

rich is imported inside the functions that need it, so `import simloop` (and
the HTML report) never pays for it.  The plain, stable text timeline that
failure messages use stays in `simloop.timeline`.

Example::

    transcript = simloop.Transcript.read("trace.jsonl")
    violations = check(transcript).violations
    print_timeline(transcript, violations)                  # terminal
    write_html(transcript, "report.html", violations)       # browser
"""

from __future__ import annotations

import html
import io
import json
import math
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simloop.timeline import Step, ToolRun, steps, unstarted_turn
from simloop.transcript import AbortEvent, OutcomeEvent, Request, Response, Restart, Transcript, TurnStart

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["bar", "print_timeline", "render_html", "timeline_table", "timeline_text", "write_html"]

_EIGHTHS = " ▏▎▍▌▋▊▉"
_KIND_STYLE = {
    "end_turn": "green",
    "stop_sequence": "green",
    "tool_use": "blue",
    "max_tokens": "yellow",
    "model_context_window_exceeded": "yellow",
    "refusal": "magenta",
    "pause_turn": "cyan",
}
_OUTCOME_STYLE = {
    "ok": "green",
    "slow": "yellow",
    "huge": "yellow",
    "raised": "red",
    "timeout": "red",
    "committed-then-lost": "bold magenta",
    "cancelled": "dim",
    "running": "bold red",
}
_CLIP = 2000  # characters of one JSON string shown in the HTML report before it is cut
_HINT = (
    '<p class="hint">Each bar is one model call; it grows as the history is re-sent. Red: a violation at '
    "that step; grey: no reply arrived. Click a bar to open that step.</p>\n"
)


# -- terminal (rich) -------------------------------------------------------------------------------------------------


def bar(value: int, top: int, width: int = 12) -> str:
    """``value`` of ``top`` as a bar of ``width`` cells, in eighths of a cell."""
    if top <= 0 or value <= 0:
        return ""
    eighths = max(1, round(8 * width * min(value, top) / top))
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def timeline_table(
    transcript: Transcript, violations: Sequence[Any] = (), *, width: int = 120, bar_width: int | None = None
) -> Table:
    """The run as a rich `Table` fitting ``width`` columns: one row a step, tool executions stacked in its cell."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    rows = steps(transcript, violations)
    top = max((s.input_tokens for s in rows), default=0)
    bw = bar_width if bar_width is not None else (12 if width >= 120 else 8 if width >= 95 else 5)
    cells: list[tuple[Step, list[str]]] = []
    for s in rows:
        retries = f"{s.retries} ({_errors(s)})" if s.retries else _errors(s)
        marks = "◀ " + ", ".join(dict.fromkeys(s.marks)) if s.marks else ""
        cells.append((s, [str(s.call), f"{s.t:.3f}s", f"{s.input_tokens:,}", f"{s.output_tokens:,}", retries, marks]))
    heads = ("step", "time", "in", "out", "retries", "")
    sizes = [max([len(h), *(len(c[1][i]) for c in cells)]) for i, h in enumerate(heads)]
    # the numbers, the bar and the marks never shrink; the reply and tools columns share what is left
    rest = width - sum(sizes) - bw - 1 - 3 * 7
    reply_nat = max([5, *(len(_reply_text(s)) for s in rows)])
    room = 18  # characters of a tool's arguments; none when space is short, so its outcome stays in view

    def tools_nat() -> int:
        return max([5, *(len(_tool_text(r, room)) for s in rows for r in s.runs)])

    while room and tools_nat() + min(reply_nat, 16) > rest:
        room = max(0, room - 6)
    tools_w = min(tools_nat(), max(10, rest - 8))  # the tools' outcomes matter more than the reply's summary
    reply_w = max(8, min(reply_nat, rest - tools_w))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("in", no_wrap=True)
    table.add_column("out", justify="right", no_wrap=True)
    table.add_column("reply", no_wrap=True, overflow="ellipsis", max_width=reply_w)
    table.add_column("tools", no_wrap=True, overflow="ellipsis", max_width=tools_w)
    table.add_column("retries", no_wrap=True, style="yellow")
    table.add_column("", no_wrap=True, style="bold red")
    for s, (call, t, tin, tout, retries, marks) in cells:
        if s.turn is not None:  # a conversation: each user turn opens with its message
            table.add_row("", "", "", "", Text(f"turn {s.turn + 1}: {json.dumps(s.turn_text, ensure_ascii=False)}",
                                               style="bold"), "", "", "")
        events = [Text(a, style="bold yellow") for a in s.aborts] + [Text(r, style="bold magenta") for r in s.restarts]
        lines = [_tool_text(r, room) for r in s.runs] + events
        tools = Text("\n").join(lines) if lines else Text("")
        tokens = Text.assemble(
            f"{tin:>{sizes[2]}} ", (bar(s.input_tokens, top, bw).ljust(bw), "red" if s.marks else "cyan")
        )
        table.add_row(call, t, tokens, tout, _reply_text(s), tools, retries, marks)
    waiting = unstarted_turn(transcript)
    if waiting is not None:  # a turn the run began but made no model call in (a crash at its start)
        text = f"turn {waiting.turn + 1}: {json.dumps(waiting.text, ensure_ascii=False)} (no model call)"
        table.add_row("", "", "", "", Text(text, style="bold"), "", "", "")
    return table


def print_timeline(transcript: Transcript, violations: Sequence[Any] = (), *, console: Console | None = None) -> None:
    """Print the header, the timeline table, the outcome and the violations to ``console`` (stdout by default)."""
    from rich.console import Console
    from rich.text import Text

    out = console or Console()
    h = transcript.header
    limits = " ".join(f"{k}={v}" for k, v in h.limits.items()) or "none declared"
    out.print(Text.assemble(("simloop run ", "bold"), (h.scenario, "bold cyan"), f"  seed {h.seed}  limits: {limits}"))
    out.print(timeline_table(transcript, violations, width=out.width))
    halt = transcript.halt
    if halt is not None:
        out.print(Text(f"halted by simloop at {halt.t:.3f}s: {halt.detail}", style="bold red"))
    outcome = transcript.outcome
    if outcome is not None:
        text = outcome.exception or json.dumps(outcome.text[:60], ensure_ascii=False)
        out.print(Text.assemble("outcome: ", (outcome.reason, "bold"), f" {text} at {outcome.t:.3f}s"))
    if violations:
        out.print(Text(f"{len(violations)} violation(s):", style="bold red"))
        for v in violations:
            lines = textwrap.wrap(str(v), width=max(40, out.width - 2), subsequent_indent="  ")
            for i, line in enumerate(lines):
                head, _, tail = line.partition("] ") if i == 0 else ("", "", line)
                out.print(Text.assemble("  ", (head + "]" if i == 0 else "", "bold red"), " " if i == 0 else "", tail))
    else:
        out.print(Text("no violations", style="green"))


def timeline_text(transcript: Transcript, violations: Sequence[Any] = (), *, width: int = 120) -> str:
    """`print_timeline` as plain text (no colours), e.g. for a README or a test."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None, force_terminal=False)
    print_timeline(transcript, violations, console=console)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def _reply_text(s: Step) -> Any:
    from rich.text import Text

    if not s.kind:
        return Text("no reply", style="red")
    return Text.assemble((s.kind, _KIND_STYLE.get(s.kind, "")), " ", (_reply_summary(s), "dim"))


def _tool_text(r: ToolRun, room: int = 18) -> Any:
    from rich.text import Text

    took = f" {r.took:.1f}s" if r.took >= 0.05 else ""
    return Text.assemble(
        _call(r, room),
        " ",
        (r.outcome, _OUTCOME_STYLE.get(r.outcome, "")),
        took,
        ("" if r.matched else " (unasked)", "red"),
    )


def _call(r: ToolRun, room: int = 18) -> str:
    """``tool(args)`` with the arguments cut to ``room`` characters, so the outcome after it stays in view."""
    if isinstance(r.input, dict):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in r.input.items())
    else:
        args = json.dumps(r.input, ensure_ascii=False)
    return f"{r.tool}({args if len(args) <= room else args[: max(0, room - 1)] + '…'})"


def _errors(s: Step) -> str:
    counts = Counter(a.split(" ", 1)[0] for a in s.attempts)
    return ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in counts.items())


def _reply_summary(s: Step) -> str:
    message = s.responses[-1].message if s.responses and s.responses[-1].message else {}
    blocks = message.get("content", []) if isinstance(message, dict) else []
    tools = [str(b.get("name")) for b in blocks if b.get("type") == "tool_use"]
    if tools:
        return ", ".join(tools)
    text = " ".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text").strip()
    return json.dumps(text[:40], ensure_ascii=False) if text else ""


# -- HTML ------------------------------------------------------------------------------------------------------------


def write_html(transcript: Transcript, path: str | Path, violations: Sequence[Any] | None = None) -> Path:
    """Write `render_html` to ``path`` (violations re-checked from the transcript when None); returns the path."""
    if violations is None:
        from simloop.invariants import check

        violations = check(transcript).violations
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_html(transcript, violations), encoding="utf-8")
    return p


def render_html(transcript: Transcript, violations: Sequence[Any] = (), *, title: str | None = None) -> str:
    """The run as one self-contained HTML page (inline CSS, JS and SVG; nothing is fetched when it is viewed).

    Deterministic: the same transcript and violations give the same bytes.
    """
    rows = steps(transcript, violations)
    h = transcript.header
    name = title or f"simloop report: {h.scenario}"
    parts = [
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{_e(name)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n",
        _summary(transcript, rows, violations),
        _violations(violations),
        '<section id="chart-section">\n<h2>Input tokens per step</h2>\n',
        _HINT,
        _chart(rows),
        "</section>\n",
        _timeline(rows),
        f"<script>{_JS}</script>\n</body>\n</html>\n",
    ]
    return "".join(parts)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _summary(t: Transcript, rows: list[Step], violations: Sequence[Any]) -> str:
    h = t.header
    facts = [
        ("seed", str(h.seed)),
        ("limits", ", ".join(f"{k}={v}" for k, v in h.limits.items()) or "none declared"),
        ("tools", ", ".join(f"{k} ({v})" for k, v in h.tools.items()) or "none"),
        ("model calls", str(len(rows))),
        ("tokens", f"{sum(s.input_tokens for s in rows):,} in, {sum(s.output_tokens for s in rows):,} out"),
    ]
    if t.outcome is not None:
        o = t.outcome
        facts.append(("outcome", f"{o.reason}: {o.exception or o.text[:200]} (at {o.t:.3f}s virtual)"))
    if t.halt is not None:
        facts.append(("halted", f"at {t.halt.t:.3f}s: {t.halt.detail}"))
    facts += _lifecycle(t)
    ids = list(dict.fromkeys(v.invariant for v in violations))
    verdict = (
        f'<p class="verdict bad">{len(violations)} violation(s) of {_e(", ".join(ids))}</p>'
        if violations
        else '<p class="verdict good">every checked invariant holds</p>'
    )
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    title = f"<h1>simloop run <code>{_e(h.scenario)}</code></h1>"
    return f'<header>\n{title}\n{verdict}\n<dl class="facts">{items}</dl>\n</header>\n'


def _lifecycle(t: Transcript) -> list[tuple[str, str]]:
    """The run's user turns (with each turn's outcome), its Stop and its restarts, as facts (none when absent)."""
    facts = []
    # [turn, text, its outcome, what else happened in it], in the order taken (a restarted life takes them again)
    turns: list[list[Any]] = []
    for e in t.events:
        if isinstance(e, TurnStart):
            turns.append([e.turn, e.text, None, None])
        elif isinstance(e, AbortEvent) and turns:
            turns[-1][3] = "Stop pressed"
        elif isinstance(e, Restart) and turns and turns[-1][2] is None:
            turns[-1][2] = "the process died"
        elif isinstance(e, OutcomeEvent) and e.turn is not None:
            entry = next((x for x in reversed(turns) if x[0] == e.turn and x[2] is None), None)
            if entry is not None:
                entry[2] = e.reason
    if len(turns) > 1:
        said = [f"{n + 1}. {json.dumps(text[:80], ensure_ascii=False)} -> {end or note or '(no outcome)'}"
                + (f" ({note})" if end and note else "")
                for n, text, end, note in turns]
        facts.append((f"user turns ({len(turns)})", "; ".join(said)))
    for a in t.of(AbortEvent):
        facts.append(("Stop pressed", f"{a.trigger} (at {a.t:.3f}s virtual)" if a.trigger else f"at {a.t:.3f}s virtual"))
    for r in t.of(Restart):
        facts.append(("process died", f"at {r.t:.3f}s virtual: life {r.life} began, sim.store kept"
                      + (f" ({r.detail})" if r.detail else "")))
    return facts


def _violations(violations: Sequence[Any]) -> str:
    if not violations:
        return '<section id="violations" class="empty">\n<h2>Violations</h2>\n<p>None.</p>\n</section>\n'
    items = []
    for i, v in enumerate(violations, start=1):
        where = f' at <a href="#step-{v.step}">step {v.step}</a>' if v.step is not None else ""
        evidence = "".join(
            f"<dt>{_e(k)}</dt><dd><code>{_e(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False))}"
            "</code></dd>"
            for k, x in (v.evidence or {}).items()
        )
        items.append(
            f'<li class="violation" id="violation-{i}" data-invariant="{_e(v.invariant)}" '
            f'data-step="{_e("" if v.step is None else v.step)}"><span class="inv">{_e(v.invariant)}</span>{where}: '
            f"{_e(v.message)}" + (f'<dl class="evidence">{evidence}</dl>' if evidence else "") + "</li>\n"
        )
    return (
        f'<section id="violations">\n<h2>Violations ({len(violations)})</h2>\n<ol>\n{"".join(items)}</ol>\n</section>\n'
    )


def _chart(rows: list[Step]) -> str:
    width, height, left, right, top_m, bottom = 920, 240, 64, 12, 14, 30
    plot_w, plot_h = width - left - right, height - top_m - bottom
    svg = (
        f'<svg id="chart" role="img" viewBox="0 0 {width} {height}" width="100%" '
        'xmlns="http://www.w3.org/2000/svg"><title>input tokens per step</title>'
    )
    out = [svg]
    if not rows:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no model calls</text></svg>\n')
        return "".join(out)
    top = max(max(s.input_tokens for s in rows), 1)
    for frac in (0.0, 0.5, 1.0):
        y = top_m + plot_h * (1 - frac)
        out.append(
            f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{round(top * frac):,}</text>'
        )
    slot = plot_w / len(rows)
    bw = max(1.0, slot * 0.72)
    every = max(1, math.ceil(len(rows) / 20))
    for i, s in enumerate(rows):
        x = left + i * slot + (slot - bw) / 2
        bh = max(1.0 if s.input_tokens else 0.0, plot_h * s.input_tokens / top)
        cls = "bar" + (" violated" if s.violations else "") + ("" if s.kind else " noreply")
        tip = f"step {s.call}: {s.input_tokens:,} input tokens, {s.output_tokens:,} output; {s.kind or 'no reply'}"
        if s.violations:
            tip += "; violates " + ", ".join(dict.fromkeys(v.invariant for v in s.violations))
        out.append(
            f'<a href="#step-{s.call}"><rect class="{cls}" id="bar-{s.call}" data-step="{s.call}" '
            f'data-input-tokens="{s.input_tokens}" x="{x:.1f}" y="{top_m + plot_h - bh:.1f}" '
            f'width="{bw:.1f}" height="{bh:.1f}"><title>{_e(tip)}</title></rect></a>'
        )
        if i % every == 0 or i == len(rows) - 1:
            out.append(
                f'<text class="axis" x="{x + bw / 2:.1f}" y="{height - bottom + 16}" '
                f'text-anchor="middle">{s.call}</text>'
            )
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 2}" text-anchor="middle">step</text>')
    out.append("</svg>\n")
    return "".join(out)


def _timeline(rows: list[Step]) -> str:
    top = max((s.input_tokens for s in rows), default=0) or 1
    head = "".join(
        f"<th>{c}</th>" for c in ("step", "time", "input tokens", "out", "reply", "tools", "retries", "violations")
    )
    body = []
    prev: Request | None = None
    for s in rows:
        tools = "".join(
            f'<div class="tool {_e(r.outcome)}">{_e(_call(r, 40))} <b>{_e(r.outcome)}</b>'
            + (f" {r.took:.1f}s" if r.took >= 0.05 else "")
            + ("" if r.matched else " <i>(unasked)</i>")
            + "</div>"
            for r in s.runs
        )
        tools += "".join(f'<div class="event abort">{_e(a)}</div>' for a in s.aborts)
        tools += "".join(f'<div class="event restart">{_e(r)}</div>' for r in s.restarts)
        if s.turn is not None:
            body.append(
                f'<tr class="turn" id="turn-{s.turn + 1}"><td colspan="8">user turn {s.turn + 1}: '
                f"<q>{_e(_clip(s.turn_text))}</q></td></tr>\n"
            )
        retries = (f"{s.retries} " if s.retries else "") + (f"({_e(_errors(s))})" if s.attempts else "")
        marks = "".join(f'<span class="mark">{_e(m)}</span>' for m in dict.fromkeys(s.marks))
        kind = (
            f'<span class="kind {_e(s.kind)}">{_e(s.kind)}</span> {_e(_reply_summary(s))}'
            if s.kind
            else '<span class="kind none">no reply</span>'
        )
        pct = 100 * s.input_tokens / top
        body.append(
            f'<tr id="step-{s.call}" class="step{" violated" if s.marks else ""}" data-step="{s.call}">'
            f'<td>{s.call}</td><td>{s.t:.3f}s</td><td class="num">{s.input_tokens:,}'
            f'<div class="inbar" style="width:{pct:.1f}%"></div></td><td class="num">{s.output_tokens:,}</td>'
            f"<td>{kind}</td><td>{tools}</td><td class=\"retries\">{retries}</td><td>{marks}</td></tr>\n"
            f'<tr class="detail"><td colspan="8"><details class="exchange" id="detail-{s.call}">'
            f"<summary>request{'s' if len(s.requests) > 1 else ''} and repl{'ies' if len(s.requests) > 1 else 'y'}"
            f"{f' ({len(s.requests)} attempts)' if len(s.requests) > 1 else ''}"
            f"{f', {len(s.runs)} tool run(s)' if s.runs else ''}</summary>\n{_exchange(s, prev)}</details></td></tr>\n"
        )
        prev = s.requests[-1] if s.requests else prev
    return (
        '<section id="timeline-section">\n<h2>Timeline</h2>\n<p class="controls"><button type="button" '
        'id="expand-all">expand all</button> <button type="button" id="collapse-all">collapse all</button></p>\n'
        f'<table id="timeline"><thead><tr>{head}</tr></thead>\n<tbody>\n{"".join(body)}</tbody></table>\n</section>\n'
    )


def _exchange(s: Step, prev: Request | None) -> str:
    answers = {r.index: r for r in s.responses}
    out = []
    for req in s.requests:
        body, note = _shown_body(req, prev)
        out.append(
            f"<h4>request #{req.index} · attempt {req.attempt + 1} · t={req.t:.3f}s · "
            f"{'stream' if req.stream else 'json'} · {req.input_tokens:,} input tokens</h4>\n"
            + (f'<p class="note">{_e(note)}</p>' if note else "")
            + f'<pre class="json">{_json(body)}</pre>\n'
        )
        out.append(_response(answers.get(req.index)))
        prev = req
    if s.runs:
        rows = "".join(
            f'<tr class="{_e(r.outcome)}"><td>{r.exec}</td><td>{_e(r.tool)} ({_e(r.kind)})</td><td>{_e(r.outcome)}</td>'
            f"<td>{r.t:.3f}s</td><td><pre>{_json(r.input)}</pre></td>"
            f"<td><pre>{_e(_clip(r.error or r.result or ''))}</pre></td></tr>"
            for r in s.runs
        )
        out.append(
            '<h4>tool executions</h4>\n<table class="runs"><thead><tr><th>exec</th><th>tool</th><th>outcome</th>'
            f"<th>start</th><th>input</th><th>result / error</th></tr></thead><tbody>{rows}</tbody></table>\n"
        )
    return "".join(out)


def _shown_body(req: Request, prev: Request | None) -> tuple[Any, str]:
    """The request body with what the previous request already showed left out (the history is re-sent every call)."""
    body = req.body
    if not isinstance(body, dict):
        return body, ""
    shown = dict(body)
    notes = []
    prev_body = prev.body if prev is not None and isinstance(prev.body, dict) else {}
    msgs = body.get("messages")
    if isinstance(msgs, list) and isinstance(prev_body.get("messages"), list):
        old = prev_body["messages"]
        k = 0
        while k < min(len(msgs), len(old)) and msgs[k] == old[k]:
            k += 1
        if k:
            shown["messages"] = msgs[k:]
            notes.append(f"messages[{k}:] shown; messages[0:{k}] are as in request #{prev.index if prev else '?'}")
    if "tools" in body and prev_body.get("tools") == body["tools"]:
        shown["tools"] = f"({len(body['tools'])} tool definitions, as in request #{prev.index if prev else '?'})"
    return shown, "; ".join(notes)


def _response(r: Response | None) -> str:
    if r is None:
        return '<h4 class="reply none">no response recorded</h4>\n'
    label = f"reply · {r.status} {r.kind}" + (f" · {r.fault}" if r.fault else "") + f" · t={r.t:.3f}s"
    if r.latency:
        label += f" · took {r.latency:.3f}s"
    payload = r.message if r.message is not None else (r.rejection if r.rejection is not None else r.error)
    cls = "ok" if r.status == 200 else "bad"
    return f'<h4 class="reply {cls}">{_e(label)}</h4>\n<pre class="json">{_json(payload)}</pre>\n'


def _json(value: Any) -> str:
    return _e(json.dumps(_clipped(value), indent=2, ensure_ascii=False, default=str))


def _clipped(value: Any) -> Any:
    if isinstance(value, str):
        return _clip(value)
    if isinstance(value, dict):
        return {k: _clipped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clipped(v) for v in value]
    return value


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else f"{text[:_CLIP]}… [{len(text) - _CLIP:,} more characters]"


_CSS = """
:root{--fg:#1d2330;--muted:#5d6778;--bg:#fff;--panel:#f5f7fa;--line:#dde2ea;--bar:#3b82c4;--bad:#c8323c;--ok:#23864a;
--warn:#b7791f;--lost:#8e3aa8}
@media (prefers-color-scheme:dark){:root{--fg:#e4e8ee;--muted:#9aa4b4;--bg:#15181e;--panel:#1e232b;--line:#333b47;
--bar:#5aa2e0;--bad:#ef5b65;--ok:#48b872;--warn:#e0a84a;--lost:#c178de}}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;
max-width:1200px;padding:18px 24px 60px}
h1{font-size:22px;margin:0 0 6px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h4{font-size:13px;margin:12px 0 4px;color:var(--muted)}
code,pre{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;font-size:12px}
pre{background:var(--panel);border:1px solid var(--line);border-radius:4px;padding:8px;overflow:auto;max-height:420px;
margin:0;white-space:pre-wrap;word-break:break-word}
.verdict{font-weight:600;margin:4px 0 10px}.verdict.bad{color:var(--bad)}.verdict.good{color:var(--ok)}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
#violations ol{padding-left:22px}
.violation{margin:0 0 10px;border-left:3px solid var(--bad);padding:2px 0 2px 10px;list-style-position:outside}
.inv,.mark{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:700;color:var(--bad)}
.mark{margin-right:6px}
dl.evidence{display:grid;grid-template-columns:max-content 1fr;gap:1px 10px;margin:4px 0 0;font-size:12px}
dl.evidence dt{color:var(--muted)}dl.evidence dd{margin:0}
.hint{color:var(--muted);margin:0 0 6px}
#chart{background:var(--panel);border:1px solid var(--line);border-radius:4px;display:block}
#chart .bar{fill:var(--bar)}#chart .bar.noreply{fill:var(--muted)}#chart .bar.violated{fill:var(--bad)}
#chart a:hover .bar{opacity:.75}#chart .grid{stroke:var(--line)}#chart .axis{fill:var(--muted);font-size:11px}
table#timeline{border-collapse:collapse;width:100%}
#timeline th{white-space:nowrap;text-align:left;color:var(--muted);font-weight:600;border-bottom:2px solid var(--line);padding:4px 8px}
#timeline td{padding:4px 8px;vertical-align:top}
#timeline tr.step td{border-top:1px solid var(--line)}#timeline tr.step.violated{background:rgba(200,50,60,.08)}
#timeline tr.flash{outline:2px solid var(--bar)}
#timeline td.retries{white-space:nowrap}
#timeline td.num{text-align:right;white-space:nowrap;min-width:90px}
.inbar{height:4px;background:var(--bar);margin-top:2px;border-radius:2px;margin-left:auto}
tr.violated .inbar{background:var(--bad)}
tr.detail td{padding-top:0}details.exchange summary{cursor:pointer;color:var(--muted);font-size:12px}
.kind{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:600}
.kind.end_turn,.kind.stop_sequence{color:var(--ok)}.kind.tool_use{color:var(--bar)}.kind.max_tokens{color:var(--warn)}
.kind.refusal,.kind.pause_turn{color:var(--lost)}.kind.none{color:var(--bad)}
.tool b{font-weight:600}.tool.ok b{color:var(--ok)}.tool.slow b,.tool.huge b{color:var(--warn)}
.tool.raised b,.tool.timeout b,.tool.running b{color:var(--bad)}.tool.committed-then-lost b{color:var(--lost)}
.tool.cancelled b{color:var(--muted)}
.event{font-weight:600}.event.abort{color:var(--warn)}.event.restart{color:var(--lost)}
#timeline tr.turn td{background:var(--panel);font-weight:600;border-top:2px solid var(--line)}
.reply.bad{color:var(--bad)}.note{color:var(--muted);font-size:12px;margin:0 0 3px}
table.runs{border-collapse:collapse;width:100%;font-size:12px}table.runs td,table.runs th{border:1px solid var(--line);
padding:3px 6px;vertical-align:top;text-align:left}table.runs pre{max-height:160px;border:0;padding:0;background:none}
button{font:inherit;font-size:12px;padding:2px 10px;border:1px solid var(--line);border-radius:4px;
background:var(--panel);
color:var(--fg);cursor:pointer}
"""

_JS = """
(function () {
  function openStep(n) {
    var d = document.getElementById('detail-' + n);
    if (d) { d.open = true; }
    var row = document.getElementById('step-' + n);
    if (row) { row.classList.add('flash'); setTimeout(function () { row.classList.remove('flash'); }, 1500); }
  }
  document.addEventListener('click', function (ev) {
    var a = ev.target.closest ? ev.target.closest('a[href^="#step-"]') : null;
    if (a) { openStep(a.getAttribute('href').slice(6)); }
  });
  function all(open) {
    document.querySelectorAll('details.exchange').forEach(function (d) { d.open = open; });
  }
  document.getElementById('expand-all').addEventListener('click', function () { all(true); });
  document.getElementById('collapse-all').addEventListener('click', function () { all(false); });
  if (location.hash.indexOf('#step-') === 0) { openStep(location.hash.slice(6)); }
  document.documentElement.setAttribute('data-js', 'ready');
})();
"""
