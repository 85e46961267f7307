"""Sub-agents: each sub-run checked as a run of its own (`split_runs`), and `subagent_honest` (the parent is not
told a sub-run did what it did not).

A sub-agent run is bracketed in the transcript by `SubagentStart` / `SubagentEnd` (``sim.subagent``).  `check`
runs the catalogue over the parent's run with the sub-runs' model calls and tool executions taken out, and over
each sub-run with its own limits and the outcome its loop gave: pairing, truncation, honest_outcome, limits, ...
hold inside a sub-agent as in any loop, and each of its requests is validated.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from simloop.invariants._base import MODEL_PATHS, Violation, _own_from, _View, _view, result_text
from simloop.transcript import (
    Event,
    OutcomeEvent,
    Request,
    Response,
    SubagentEnd,
    SubagentStart,
    ToolEnd,
    ToolStart,
    Transcript,
)

__all__ = ["HONEST_WORDS", "SubRun", "split_runs", "subagent_honest"]

# What a sub-run's events are: everything else (turns, Stop, halts, restarts, the outcome) is the whole run's.
_OWN = (Request, Response, ToolStart, ToolEnd, SubagentStart, SubagentEnd)
#: Words that tell the parent a sub-run stopped short, besides its reason's own name (``truncated``, ...).
HONEST_WORDS = ("incomplete", "partial", "unfinished", "not finish", "did not complete", "not complete", "stopped",
                "cut off", "gave up", "failed", "could not")


@dataclass(frozen=True, slots=True)
class SubRun:
    """One top-level sub-agent run as a transcript of its own: calls numbered from 1, times from its start, its
    limits in the header and its loop's outcome last.  ``calls`` maps its call numbers back to the run's."""

    start: SubagentStart
    end: SubagentEnd | None
    calls: dict[int, int]
    transcript: Transcript


def split_runs(t: Transcript) -> tuple[Transcript, dict[int, int], list[SubRun]]:
    """The parent's run without its sub-runs' calls and executions (call numbers made consecutive again: ``calls``
    maps them back), and each top-level sub-run (a nested one stays inside its parent sub-run, split in turn).

    Each call and execution names the sub-run it was made in (``subrun``), so sub-runs that overlap in time (a
    loop running two delegate calls on threads at once, beside a plain tool) are told apart; a transcript written
    before those tags is split by the order of its events."""
    starts = {e.run: e for e in t.events if isinstance(e, SubagentStart)}
    if any(s.parent is None for s in starts.values()):
        return _assemble(t, *_by_order(t))
    parent_of = {run: s.parent or 0 for run, s in starts.items()}
    root = min(set(parent_of.values()) - set(parent_of), default=0)  # the run this transcript is

    def top(run: int) -> int | None:
        """The sub-run directly under ``root`` that ``run`` is, or is nested in; None for root's own."""
        while run != root and run in parent_of:
            if parent_of[run] == root:
                return run
            run = parent_of[run]
        return None

    main: list[Event] = []
    runs: dict[int, tuple[SubagentStart, list[Event], SubagentEnd | None]] = {}
    of_request: dict[int, int | None] = {}
    of_exec: dict[int, int | None] = {}
    for e in t.events:
        where: int | None
        if isinstance(e, Request):
            where = of_request[e.index] = top(e.subrun or 0)
        elif isinstance(e, Response):
            where = of_request.get(e.index)
        elif isinstance(e, ToolStart):
            where = of_exec[e.exec] = top(e.subrun or 0)
        elif isinstance(e, ToolEnd):
            where = of_exec.get(e.exec)
        elif isinstance(e, SubagentStart):
            where = top(parent_of[e.run])
            if where is None:
                runs[e.run] = (e, [], None)
        elif isinstance(e, SubagentEnd):
            where = top(parent_of.get(e.run, root))
            if where is None and e.run in runs:
                start, events, _ = runs[e.run]
                runs[e.run] = (start, events, e)
        else:
            where = None
        (main if where is None else runs[where][1]).append(e)
    return _assemble(t, main, list(runs.values()))


def _by_order(t: Transcript) -> tuple[list[Event], list[tuple[SubagentStart, list[Event], SubagentEnd | None]]]:
    """The split of a transcript with no ``subrun`` tags: what happens between a sub-run's start and end is its."""
    main: list[Event] = []
    runs: list[tuple[SubagentStart, list[Event], SubagentEnd | None]] = []
    depth = 0
    for e in t.events:
        if depth == 0:
            if isinstance(e, SubagentStart):
                main.append(e)
                runs.append((e, [], None))
                depth = 1
            else:
                main.append(e)
            continue
        if isinstance(e, SubagentStart):
            depth += 1
        elif isinstance(e, SubagentEnd):
            depth -= 1
            if depth == 0:
                start, events, _ = runs[-1]
                runs[-1] = (start, events, e)
                main.append(e)
                continue
        if isinstance(e, _OWN):
            runs[-1][1].append(e)
        else:
            main.append(e)
    return main, runs


def _assemble(
    t: Transcript, main: list[Event], runs: list[tuple[SubagentStart, list[Event], SubagentEnd | None]]
) -> tuple[Transcript, dict[int, int], list[SubRun]]:
    parent, back = _renumbered(main, 0.0)
    subs: list[SubRun] = []
    for start, events, end in runs:
        if end is not None and end.reason is not None:
            events = [*events, OutcomeEvent(t=end.t, reason=end.reason, text=end.text, exception=end.exception)]
        own, calls = _renumbered(events, start.t)
        header = dataclasses.replace(t.header, limits=dict(start.limits), limits_from=dict.fromkeys(start.limits, "loop"))
        subs.append(SubRun(start, end, calls, Transcript(header=header, events=own)))
    return Transcript(header=t.header, events=parent), back, subs


def _renumbered(events: list[Event], t0: float) -> tuple[list[Event], dict[int, int]]:
    """``events`` with their model calls numbered 1, 2, ... in order and times from ``t0``; and new -> old call."""
    new: dict[int, int] = {}
    for e in events:
        if isinstance(e, Request) and e.path in MODEL_PATHS and e.call not in new:
            new[e.call] = len(new) + 1
    out: list[Event] = []
    for e in events:
        if isinstance(e, (Request, Response)):
            e = dataclasses.replace(e, t=e.t - t0, call=new.get(e.call, e.call), **_own_from(e, t0))
        elif t0 and hasattr(e, "t"):
            e = dataclasses.replace(e, t=e.t - t0, **_own_from(e, t0))
        out.append(e)
    return out, {n: old for old, n in new.items()}


def subagent_honest(t: Transcript) -> list[Violation]:
    """The parent is not told that a sub-agent run did what it did not: the tool_result answering the delegate
    call a sub-run ran in, when that run stopped short of a final answer (``max_steps``, ``truncated``, ``error``,
    any reason but ``final``), is ``is_error`` or says so (names the reason, or "incomplete", "partial", ...), or
    the tool raised and the result opens as its error ("Error: ...": the OpenAI wires have no ``is_error``)."""
    starts = {e.run: e for e in t.events if isinstance(e, SubagentStart)}
    if not starts:
        return []
    v = _view(t)
    out: list[Violation] = []
    for end in (e for e in t.events if isinstance(e, SubagentEnd)):
        start = starts.get(end.run)
        if start is None or start.exec is None or end.reason in (None, "final"):
            continue
        execution = next((s for _, s in v.starts if s.exec == start.exec), None)
        tool_use = v.bound(execution) if execution is not None else None
        block = v.result_block.get(tool_use) if tool_use else None
        if block is None or block.get("is_error"):
            continue  # not sent (pairing's), or sent as an error: the parent knows
        text = result_text(block)
        if _says_short(text, end.reason) or _told_it_raised(v, start.exec, text):
            continue
        pos = v.result_sent.get(str(tool_use), len(t.events))
        step = v.step_at(pos)
        message = (
            f"sub-agent run {end.run} ({start.task[:60]!r}, in {start.tool} exec {start.exec}) stopped with reason "
            f"{end.reason!r}, but the tool_result the parent sent for it reads as a complete result "
            f"({text[:80]!r}); the parent cannot tell a confident partial answer from a finished one: a correct "
            "delegate tool reports a sub-run that did not finish as an error (is_error), or says in its result "
            f"that it stopped early ({end.reason})"
        )
        evidence = {"subagent": end.run, "reason": end.reason, "exec": start.exec, "tool_use_id": tool_use,
                    "result": text[:200]}
        out.append(Violation("subagent_honest", message, step, evidence))
    return out


#: A tool_result's text that opens as an error report ("Error: ...", "RuntimeError: ...", ``{"error": ...}``).
_ERROR_OPENING = re.compile(r"^\W*(?:\w*error|exception)\b", re.IGNORECASE)


def _told_it_raised(v: _View, exec_: int | None, text: str) -> bool:
    """The delegate tool raised and its tool_result opens as an error report: how a loop on a wire with no
    ``is_error`` flag (Chat Completions, Responses) tells the model a tool failed, as the README's loops do."""
    end = v.ends.get(exec_) if exec_ is not None else None
    return end is not None and end[1].status == "raised" and _ERROR_OPENING.match(text) is not None


def _says_short(text: str, reason: str) -> bool:
    low = text.lower()
    words = (reason, reason.replace("_", " "), *HONEST_WORDS)
    return any(re.search(r"\b" + re.escape(w) + r"\b", low) for w in words)
