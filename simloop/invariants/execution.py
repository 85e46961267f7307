"""Tool execution: `no_rerun` (each tool_use runs once, a committed write never again), `tool_errors` (a tool's
exception becomes an is_error observation), `results_sent` (every result of the tools that ran reaches the
model), `results_together` (a turn's results go back in one message) and `results_real` (a result reporting
a success comes from an execution)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

from simloop.invariants._base import MESSAGES_PATH, Violation, _canon, _is_write, _View, _view, result_text
from simloop.protocol.render import CUT_STOPS
from simloop.transcript import Request, Response, Restart, ToolStart, Transcript

__all__ = ["no_rerun", "results_real", "results_sent", "results_together", "tool_errors"]

# -- no_rerun ---------------------------------------------------------------------------------------------------


def no_rerun(t: Transcript) -> list[Violation]:
    """Each execution answers a tool_use not executed before; a committed write never runs again.

    A second execution that answers a *different* tool_use the model issued (two
    identical calls in one reply, or the model asking again) is the model's
    decision, not a rerun; the loop reruns when an execution answers a tool_use
    already executed, or none at all.  Across lives, what died with the process is
    forgiven: a resumed loop runs again an execution that never returned before the
    crash (no end, or it ended ``crashed``/``cancelled`` without committing), and a
    read whose result never reached the model; a write that committed stays a rerun.
    """
    v = _view(t)
    out: list[Violation] = []
    restarts = v.restarts
    by_tool_use: dict[str, tuple[int, ToolStart]] = {}
    # the writes that committed, by tool and input: (position of the ToolEnd, the write), in execution order
    committed: dict[tuple[str, str], list[tuple[int, ToolStart]]] = {}
    written: set[str] = set()  # the tools among them (an input is made canonical only when it may matter)
    for pos, s in v.starts:
        same = committed.get((s.tool, v.input_of(s)), []) if s.tool in written else []
        found = _rerun_of_commit(v, pos, s, same, restarts) or _unrequested_or_repeated(
            v, pos, s, by_tool_use, restarts)
        if found is not None:
            out.append(found)
        if s.matched is not None and (s.matched not in by_tool_use or found is None):
            by_tool_use[s.matched] = (pos, s)  # the latest run that stands (a forgiven one replaces what died)
        end = v.ends.get(s.exec)
        if end is not None and end[1].committed and _is_write(t, s):
            committed.setdefault((s.tool, v.input_of(s)), []).append((end[0], s))
            written.add(s.tool)
    return out


def _rerun_of_commit(
    v: _View, pos: int, s: ToolStart, same: list[tuple[int, ToolStart]], restarts: Sequence[int] = ()
) -> Violation | None:
    """A rerun of one of ``same``: the committed writes of the same tool with the same input."""
    for end_pos, prior in same:
        if end_pos > pos:
            continue
        died = next((r for r in restarts if end_pos < r < pos), None)
        if died is not None:
            # the process died after the write committed: the model never saw its result, so it asks again, as a
            # real model does; only the loop's own record (an idempotency key in sim.store) can tell
            why = (" after the process died and restarted (the write had committed before the crash; a durable "
                   "loop records an idempotency key in its store before the write and checks it after a restart)")
        elif s.matched is not None and s.matched != prior.matched:
            answered = v.result_sent.get(s.matched)
            if answered is None or answered > pos:
                continue  # the model asked for it in its own tool_use: its call, not the loop's
            why = f" for tool_use {s.matched}, whose result the loop had already sent to the model"
        elif s.matched is not None:
            why = f" for the same tool_use {s.matched}"
        else:
            why = " without a tool_use asking for it"
        message = (
            f"{s.tool} ran again with the same input (exec {s.exec}) after exec {prior.exec} had committed{why}; "
            "a correct loop never re-executes a completed write: it reports the first result (or error) to the "
            "model and lets the model decide, with an idempotency key if it must retry"
        )
        evidence = {"exec": s.exec, "first_exec": prior.exec, "tool": s.tool, "tool_use_id": s.matched}
        return Violation("no_rerun", message, v.step_at(pos), evidence)
    return None


def _unrequested_or_repeated(
    v: _View, pos: int, s: ToolStart, by_tool_use: dict[str, tuple[int, ToolStart]], restarts: Sequence[int] = ()
) -> Violation | None:
    if s.matched is None:
        given = f" (the loop passed id {s.tool_use_id}, which matches none)" if s.tool_use_id else ""
        evidence: dict[str, Any] = {"exec": s.exec, "tool": s.tool, "tool_use_id": s.tool_use_id}
        same = next((p for _, p in v.starts if p.exec < s.exec and p.tool == s.tool and v.input_of(p) == v.input_of(s)),
                    None)
        if same is not None:
            given += f"; it repeats exec {same.exec} with the same input"
            evidence = {"exec": s.exec, "first_exec": same.exec, "tool": s.tool, "tool_use_id": s.tool_use_id}
        message = (
            f"{s.tool} was executed (exec {s.exec}) but no tool_use asked for it{given}; a correct loop only runs "
            "tools the model asked for, once per tool_use block"
        )
        return Violation("no_rerun", message, v.step_at(pos), evidence)
    if s.matched in by_tool_use:
        prior_pos, prior = by_tool_use[s.matched]
        if _died_with_its_process(v, prior_pos, prior, pos, restarts):
            return None
        message = (
            f"{s.tool} ran twice for tool_use {s.matched} (exec {prior.exec} and exec {s.exec}); a correct loop runs "
            "each tool_use once and reports a failure as an is_error tool_result instead of retrying"
        )
        evidence = {"exec": s.exec, "first_exec": prior.exec, "tool": s.tool, "tool_use_id": s.matched}
        return Violation("no_rerun", message, v.step_at(pos), evidence)
    return None


def _died_with_its_process(v: _View, prior_pos: int, prior: ToolStart, pos: int, restarts: Sequence[int]) -> bool:
    """Did ``prior`` die with the process before ``pos``, so that a resumed loop may run it again?

    Yes when a restart lies between them and ``prior`` never returned before it (no end, or an end ``crashed`` or
    ``cancelled`` that committed nothing), or it was a read whose result never reached the model before it (or
    only in the model call the process died in, whose reply the loop never read).  A write whose effect committed
    never died with the process: running it again is a rerun.
    """
    died = next((r for r in restarts if prior_pos < r < pos), None)
    if died is None:
        return False
    ended = v.ends.get(prior.exec)
    if ended is None or ended[0] > died:
        return True  # still in flight when the process died
    end = ended[1]
    if end.committed:
        return False
    if end.status in ("crashed", "cancelled"):
        return True
    sent = v.result_sent.get(str(prior.matched))
    return not _is_write(v.t, prior) and (sent is None or sent > died or _lost(v, sent))


def _lost(v: _View, pos: int) -> bool:
    """Is the request at ``pos`` a model call the process died in (its reply never read: see Reply.crash)?"""
    request = v.t.events[pos]
    if not isinstance(request, Request):
        return False
    return any(isinstance(e, Response) and e.index == request.index and e.fault == "crash" for e in v.t.events[pos:])


# -- tool_errors ------------------------------------------------------------------------------------------------


_EXC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::\s*(.*)|\((.*)\))?\s*$", re.DOTALL)


def _same_exception(error: str | None, escaped: str | None) -> bool:
    """Does the escaped exception's text name the tool's exception (type and message)?"""
    if not error or not escaped or not error.strip():
        return False
    if error.strip() in escaped:
        return True
    lines = [ln for ln in escaped.strip().splitlines() if ln.strip()]  # a traceback ends with the exception
    a, b = _EXC.match(error.strip()), _EXC.match(lines[-1]) if lines else None
    return a is not None and b is not None and _exc_parts(a) == _exc_parts(b)


def _exc_parts(m: re.Match[str]) -> tuple[str, str]:
    """(short type name, message) from ``Type: message`` or ``Type('message')``."""
    return m.group(1).rsplit(".", 1)[-1], (m.group(2) or m.group(3) or "").strip().strip("'\"")


def _says_error(block: dict[str, Any], error: str | None) -> bool:
    """A tool message or function_call_output of an OpenAI wire (which has no ``is_error``) that reports the
    failure: its text holds the exception's message or the word "error"."""
    text = result_text(block)
    message = (error or "").split(": ", 1)[-1].strip()[:200]
    return bool(message and message in text) or "error" in text.lower()


def tool_errors(t: Transcript) -> list[Violation]:
    """A tool's exception becomes an is_error tool_result; it does not escape the loop.

    On the OpenAI wires, which have no ``is_error``, the tool message or function_call_output reports the failure
    in its text (the exception's message, or the word "error").

    After a `Halt` the exception that ended the run is simloop's own unwinding, not a tool's.
    """
    v = _view(t)
    out: list[Violation] = []
    outcome = v.outcome if t.halt is None else None
    raised = [(v.ends[s.exec], s) for _, s in v.starts if s.exec in v.ends and v.ends[s.exec][1].status == "raised"]
    escaped = next(
        (s.exec for (_, end), s in reversed(raised) if outcome and _same_exception(end.error, outcome.exception)), None
    )
    for (pos, end), s in raised:
        uid = s.matched or s.tool_use_id
        ev = {"exec": s.exec, "tool": s.tool, "tool_use_id": uid, "error": end.error, "kind": "escaped"}
        if s.exec == escaped:
            message = (
                f"{s.tool} raised ({end.error}) and the exception escaped the loop; a correct loop catches a tool's "
                "exception and sends it back as a tool_result with is_error: true"
            )
            out.append(Violation("tool_errors", message, v.step_at(pos), ev))
            continue
        later = [r for p, r in v.model_requests if p > pos]
        if uid is None or not later:
            continue
        results = [
            (r, b) for r in later for m in r.conversation if isinstance(m, dict) and isinstance(m.get("content"), list)
            for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == uid
        ]
        if any(b.get("is_error") is True or (r.path != MESSAGES_PATH and _says_error(b, end.error)) for r, b in results):
            continue
        if not results and any(isinstance(e, Restart) for e in t.events[pos:]):
            continue  # the process died before the loop could report it: gone with what it held in memory
        how = "was reported as a success (no is_error)" if results else "was never reported to the model"
        ev["kind"] = "not_is_error" if results else "unreported"
        message = (
            f"{s.tool} raised ({end.error}) and the error {how}; a correct loop makes the error an observation: "
            "a tool_result with is_error: true"
        )
        out.append(Violation("tool_errors", message, v.step_at(pos), ev))
    return out



# -- results_sent -----------------------------------------------------------------------------------------------


def results_sent(t: Transcript) -> list[Violation]:
    """When the loop calls the model again after running tools, that request carries every one of their results.

    An execution that ended before the next model call and answers a tool_use must have its tool_result in
    that request (or an earlier one), whether the tool succeeded or failed.  Stopping right after running
    the tools is fine (no request follows); executions the loop cancelled, or that answer no tool_use
    (`no_rerun`'s case), are not this invariant's.  One violation per request, naming the first dropped result.
    """
    v = _view(t)
    if not v.starts:
        return []
    positions = [pos for pos, _ in v.model_requests]
    restarts = v.restarts
    dropped: dict[int, list[ToolStart]] = {}  # index into model_requests -> the executions it should answer
    seen: set[str] = set()
    for pos, s in v.starts:
        uid = s.matched
        end = v.ends.get(s.exec)
        if uid is None or uid in seen or end is None or end[1].status in ("cancelled", "crashed"):
            continue
        k = bisect.bisect_right(positions, end[0])
        if k == len(positions):
            continue  # no model call after it: the loop stopped after running its tools
        if any(end[0] < r < positions[k] for r in restarts):
            continue  # the process died before the next call: what it held in memory is gone (no_rerun's care)
        seen.add(uid)
        sent = v.result_sent.get(uid)
        if sent is None or sent > positions[k]:
            dropped.setdefault(k, []).append(s)
    out: list[Violation] = []
    for k, execs in sorted(dropped.items()):
        request = v.model_requests[k][1]
        s = execs[0]
        ended = v.ends[s.exec][1]
        how = f"raised ({ended.error})" if ended.status == "raised" else (
            "committed its write" if ended.committed else "succeeded")
        more = f" ({len(execs) - 1} more result(s) of tools that ran are missing too)" if len(execs) > 1 else ""
        message = (
            f"{s.tool} ran (exec {s.exec}, for tool_use {s.matched}) and {how}, but the next request (step "
            f"{request.call}) carries no tool_result for it: its result never reached the model{more}; a correct "
            "loop sends back the assistant turn and a tool_result for every tool it ran before calling the model "
            "again (a note from the user goes in the same user message, after the results)"
        )
        evidence = {"request": request.index, "exec": s.exec, "tool": s.tool, "tool_use_id": s.matched,
                    "status": ended.status, "dropped": [x.matched for x in execs]}
        out.append(Violation("results_sent", message, request.call, evidence))
    return out


# -- results_together -------------------------------------------------------------------------------------------


def results_together(t: Transcript) -> list[Violation]:
    """All tool_results answering one assistant turn go back in a single user message.

    The API merges consecutive user messages, so a request that splits them is accepted (and `pairing`
    holds); but the model then learns from its history that parallel calls come back one by one.  Each
    split turn is reported once, at the first request that shows it.

    A Messages-API rule only: on the Chat Completions wire each tool result is a message of its own by design
    (recorded as one user message each), so its requests are not read here (docs/design.md, The OpenAI wire).
    """
    out: list[Violation] = []
    for split in _view(t).split_results:
        if split.request.path != MESSAGES_PATH:
            continue
        places = ", ".join(f"messages[{j}]" for j in split.carrying)
        message = (
            f"the results of the {len(split.uses)} tool call(s) of the assistant turn at messages[{split.index}] went "
            f"back in {len(split.carrying)} separate user messages ({places}); the API merges them, so the request "
            "is accepted, but a correct loop sends all the tool_results of a turn in ONE user message (split "
            "results teach the model to stop making parallel calls)"
        )
        evidence = {"request": split.request.index, "path": f"messages[{split.carrying[1]}]",
                    "tool_use_id": split.uses[0], "messages": list(split.carrying)}
        out.append(Violation("results_together", message, split.request.call, evidence))
    return out


# -- results_real -----------------------------------------------------------------------------------------------

# A result that says its call did not run (or was refused): honest for a call no execution answers.  Each entry is
# a regex piece that starts with a plain letter.
_NOT_RUN_WORDS = (
    "not run", "n[o']t been run", "was not run", "wasn't run", "never ran", "never run", "did not run", "didn't run",
    "not executed", "not been executed", "interrupted", "cancell?ed", "skipped", "aborted", "stopped", "denied",
    "not allowed", "not permitted", "refused", "declined", "rejected", "unauthori[sz]ed", "forbidden",
    "not available", "unavailable", "not used", "unknown tool", "no such tool",
)


def _word_alternation(words: tuple[str, ...]) -> re.Pattern[str]:
    """``\\b(word|word|...)\\b`` (case-insensitive), written to be searched fast: the words grouped by their first
    letter behind a look-ahead for those letters, so the engine tries a few branches at a word start, not all of
    them (a committed write's result is searched whole, a huge output too).  It matches where the plain
    alternation matches."""
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault(word[0], []).append(word[1:])
    branches = "|".join(first + "(?:" + "|".join(rests) + ")" for first, rests in groups.items())
    return re.compile(r"\b(?=[" + "".join(groups) + r"])(?:" + branches + r")\b", re.IGNORECASE)


_NOT_RUN = _word_alternation(_NOT_RUN_WORDS)
# ... unless it hedges: the effect may have happened (what a durable loop says of a write it does not repeat).
_HEDGED = re.compile(r"may have|might have|attempted|taken effect|already|not repeated|not run again", re.IGNORECASE)


def results_real(t: Transcript) -> list[Violation]:
    """Every tool_result that reports a success comes from an execution; none denies a write that committed.

    A tool_result answering a tool_use of a declared tool, not ``is_error``, is fabricated when no execution
    produced it: none is bound to that tool_use, none of the same tool ran with the same input before the
    result was sent (a cached or idempotent answer reuses a real one), and its text carries no output of
    that tool.  Exempt: a result saying the call was not run, refused or denied (its text says so), and the
    calls of a reply cut at max_tokens or refused, which a correct loop never runs.  Also a violation: a
    result saying "not run", "interrupted" or "cancelled" for an execution whose write had committed and
    returned its result to the loop.  One violation per request, naming the first such result.
    """
    v = _view(t)
    declared = t.header.tools
    if not declared:
        return []  # a run that declares no tools (a recording replayed as is): nothing to hold results to
    out: list[Violation] = []
    for sent, items in sorted(_unreal_results(v, declared).items()):
        request = t.events[sent]
        assert isinstance(request, Request)
        out.append(_unreal_result(v, request, items))
    return out


def _unreal_results(v: _View, declared: dict[str, str]) -> dict[int, list[tuple[str, str, str]]]:
    """The results of ``declared`` tools (name -> kind) that are not real, by the position of the request that sent them.

    Each is ``(tool_use id, kind, detail)``: ``denied_commit`` (said not run, of a write that had committed;
    the detail names its execution) or ``fabricated`` (a success no execution produced; the detail is its text).
    """
    bound: dict[str, list[tuple[int, ToolStart]]] = {}
    for pos, s in v.starts:
        if s.matched is not None:
            bound.setdefault(s.matched, []).append((pos, s))
    found: dict[int, list[tuple[str, str, str]]] = {}  # request position -> (tool_use id, kind, detail)
    issued_at, sent_at, use_block, starts_of = v.issued, v.result_sent, v.use_block, v.starts_of  # (looked up once)
    for uid, block in v.result_block.items():
        issued = issued_at.get(uid)
        sent = sent_at.get(uid)
        if issued is None or sent is None:
            continue  # a result for no tool_use: pairing's
        use = use_block[uid]
        name = str(use.get("name"))
        if name not in declared:
            continue
        text = result_text(block)
        done = bound.get(uid)
        if done is not None and done[0][0] < sent:  # an execution answered it (`bound` is in event order)
            committed = _first_committed(v, done, sent)  # only a denied commit is wrong: the text searched then
            if committed is not None and _NOT_RUN.search(text) and not _HEDGED.search(text):
                found.setdefault(sent, []).append((uid, "denied_commit", f"exec {committed.exec}"))
            continue
        if block.get("is_error") is True:
            continue
        if issued[1].stop_reason in _UNRUN_STOPS:
            continue  # a call the loop rightly never ran; how it settles the history is pairing's
        if _ran_alike(v, starts_of.get(name, ()), sent, use, text):
            continue
        if _NOT_RUN.search(text):  # (last: the search reads the whole text, a huge output's too)
            continue
        found.setdefault(sent, []).append((uid, "fabricated", text))
    return found


#: The replies whose calls a correct loop never runs: cut at max_tokens (or a stop), or refused.
_UNRUN_STOPS = frozenset({*CUT_STOPS, "refusal"})


def _first_committed(v: _View, done: list[tuple[int, ToolStart]], sent: int) -> ToolStart | None:
    """The first of the executions ``done`` (in event order) begun before ``sent`` whose write committed and
    returned before it (`_committed_before`), or None."""
    for pos, s in done:
        if pos >= sent:
            return None
        if _committed_before(v, s, sent):
            return s
    return None


def _ran_alike(v: _View, starts: Sequence[tuple[int, ToolStart]], sent: int, use: dict[str, Any], text: str) -> bool:
    """Whether an execution of the tool (``starts``, in event order) begun before ``sent`` gave ``text`` its
    output (the text first: a substring test), or ran with ``use``'s input (compared as canonical JSON)."""
    ran = [s for p, s in starts if p < sent]
    for s in ran:
        probe = v.probe(s.exec)
        if probe and probe in text:
            return True
    canon = _canon(use.get("input"))
    return any(v.input_of(s) == canon for s in ran)


def _unreal_result(v: _View, request: Request, items: list[tuple[str, str, str]]) -> Violation:
    """The violation of ``request``, which sent the results ``items`` that are not real: it names the first."""
    uid, kind, detail = items[0]
    name = str(v.use_block[uid].get("name"))
    path = _result_path(request, uid)
    more = f" ({len(items) - 1} more such result(s) in this request)" if len(items) > 1 else ""
    result, call, failed = _RESULT_WORDS.get(request.path, _RESULT_WORDS[MESSAGES_PATH])
    if kind == "denied_commit":
        message = (
            f"the {result} for {name} ({call} {uid}) tells the model it was not run or was interrupted, but "
            f"{detail} had committed its write before that result was sent{more}; a correct loop reports what "
            "ran: the tool's result (or its error), so the model does not ask for the write again"
        )
    else:
        shown = detail if len(detail) <= 60 else detail[:57] + "..."
        unrouted = "" if v.starts else (
            "; not one tool execution reached simloop's ledger in this run: the loop's tools are not routed "
            "through sim.run_tool (or sim.arun_tool, the tools endpoint, MCP), so its own tools ran or none did")
        message = (
            f"the {result} for {name} ({call} {uid}) reports a success ({shown!r}) but no execution of "
            f"{name} produced it{more}{unrouted}; a correct loop runs each tool call through sim.run_tool and "
            f"sends back what it returned, or says it did not run it ({failed})"
        )
    evidence = {"request": request.index, "path": path, "tool_use_id": uid, "tool": name, "kind": kind}
    return Violation("results_real", message, request.call, evidence)


#: How each wire names a tool's result, its call, and a result saying the call failed or did not run (reports use
#: the words of the wire the loop speaks: the OpenAI wires have no ``is_error``).
_RESULT_WORDS = {
    MESSAGES_PATH: ("tool_result", "tool_use", "an is_error tool_result"),
    "/v1/chat/completions": ("tool message", "tool call", "a tool message saying so"),
    "/v1/responses": ("function_call_output", "function_call", "a function_call_output saying so"),
}


def _committed_before(v: _View, s: ToolStart, pos: int) -> bool:
    """Did write ``s`` commit and return its result to the loop before ``pos`` (so the loop could record it)?

    A write that raised after committing, or that died with the process, never told the loop it had happened.
    """
    end = v.ends.get(s.exec)
    return end is not None and end[0] < pos and end[1].committed and end[1].status == "ok" and _is_write(v.t, s)


def _result_path(request: Request, uid: str) -> str | None:
    for i, m in enumerate(request.conversation):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for j, b in enumerate(content):
                if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == uid:
                    return f"messages[{i}].content[{j}]"
    return None
