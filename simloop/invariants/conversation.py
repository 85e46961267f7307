"""The requests the loop builds: `pairing` (tool_use/tool_result pairing, with its resumable walk) and
`request_valid` (every other rule the real API enforces with a 400)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from simloop.invariants._base import MESSAGES_PATH, MODEL_PATHS, RESPONSES_PATH, Violation, too_large
from simloop.transcript import Request, Response, Restart, Transcript, TurnStart

__all__ = ["pairing", "request_valid"]

# -- pairing ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Offence:
    kind: str  # missing_result | result_not_first | orphan_result | duplicate_result | duplicate_tool_use
    order: tuple[int, int]
    path: str
    tool_use_id: str
    tool: str | None
    what: str


_PAIRING_FIX = {
    "missing_result": "a correct loop answers every tool_use with a tool_result at the start of the very next "
    "user message, also when the tool failed (is_error: true) or was not run",
    "result_not_first": "a correct loop puts the tool_result blocks first in the user message, any text after them",
    "orphan_result": "a correct loop sends each tool_result right after the assistant message that asked for it "
    "and keeps that assistant message in the history",
    "duplicate_result": "a correct loop sends exactly one tool_result per tool_use",
    "duplicate_tool_use": "a correct loop appends each assistant reply to the history once, as received",
}


#: The same offences as the Chat Completions wire words them (docs/design.md, The OpenAI wire): tool calls and
#: tool messages.
_PAIRING_CHAT = {
    "missing_result": ("the tool call {uid} ({tool}) has no tool message answering it before the next request",
                       ("a correct loop answers every tool call of a reply with a tool message (its tool_call_id) "
                       "right after the assistant message, also when the tool failed or was not run")),
    "result_not_first": ("the tool message for {uid} comes after other content",
                         "a correct loop sends the tool messages right after the assistant message"),
    "orphan_result": ("a tool message answers {uid}, which is not a tool call of the previous assistant message",
                      ("a correct loop sends each tool message right after the assistant message that asked for it "
                      "and keeps that assistant message in the history")),
    "duplicate_result": ("a second tool message for {uid}", "a correct loop sends exactly one tool message per tool call"),
    "duplicate_tool_use": ("the tool call id {uid} appears twice",
                           "a correct loop appends each assistant reply to the history once, as received"),
}


#: The same offences as the Responses API words them: function_call items and their function_call_output items
#: (over the whole conversation, a ``previous_response_id`` chain included).
_PAIRING_RESPONSES = {
    "missing_result": (("the function_call {uid} ({tool}) has no function_call_output answering it before the next "
                       "request"),
                       ("a correct loop appends a function_call_output (its call_id) for every function_call of a "
                        "response before it calls the model again, also when the tool failed or was not run")),
    "result_not_first": ("the function_call_output for {uid} comes after other input",
                         "a correct loop appends the function_call_output items right after the response's output"),
    "orphan_result": ("a function_call_output answers {uid}, which is not a function_call of the previous response",
                      ("a correct loop keeps the response's output (its function_call items) in the input, or chains "
                       "it with previous_response_id, and answers only the calls it holds")),
    "duplicate_result": ("a second function_call_output for {uid}",
                         "a correct loop sends exactly one function_call_output per function_call"),
    "duplicate_tool_use": ("the call_id {uid} appears twice",
                           ("a correct loop appends each response's output once, and does not both append it and "
                            "chain it with previous_response_id")),
}

Block = tuple[tuple[int, int], dict[str, Any]]  # (message index, block index or -1 for string content), block


def _path(order: tuple[int, int]) -> str:
    i, j = order
    return f"messages[{i}].content" if j < 0 else f"messages[{i}].content[{j}]"


def _turns(conversation: list[Any], start: int = 0) -> list[tuple[str, list[Block]]]:
    """Messages (from ``start``) with consecutive same-role messages merged (as the API merges them); blocks
    keep their place (made a path by `_path` only for an offence: every request re-sends the whole history)."""
    turns: list[tuple[str, list[Block]]] = []
    for i in range(start, len(conversation)):
        msg = conversation[i]
        if not isinstance(msg, dict):
            continue
        role, content = str(msg.get("role")), msg.get("content")
        if isinstance(content, str):
            blocks: list[Block] = [((i, -1), {"type": "text", "text": content})]
        elif isinstance(content, list):
            blocks = [((i, j), b) for j, b in enumerate(content) if isinstance(b, dict)]
        else:
            blocks = []
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return turns


@dataclass(slots=True)
class _Walk:
    """The pairing walk's state after the closed turns of a conversation: ``found`` so far, the ids seen."""

    messages: list[Any]  # the conversation walked
    found: list[_Offence] = field(default_factory=list)
    uses_seen: dict[str, tuple[tuple[int, int], str]] = field(default_factory=dict)  # id -> (place, tool name)
    results_seen: dict[str, tuple[int, int]] = field(default_factory=dict)

    def offence(self, kind: str, order: tuple[int, int], uid: str, tool: str | None, what: str) -> None:
        """One pairing offence, at ``order``'s place."""
        self.found.append(_Offence(kind, order, _path(order), uid, tool, what))

    def asked(self, blocks: list[Block], *, last: bool) -> dict[str, tuple[tuple[int, int], str]]:
        """An assistant turn's tool_use blocks: those the next turn must answer (a reused id is an offence; so is a
        call in a final assistant message, a prefill, which nothing can answer)."""
        pending: dict[str, tuple[tuple[int, int], str]] = {}
        for order, b in blocks:
            if b.get("type") != "tool_use":
                continue
            uid, name = str(b.get("id")), str(b.get("name"))
            if uid in self.uses_seen:
                self.offence("duplicate_tool_use", order, uid, name,
                             f"the tool_use id {uid} appears twice (first at {_path(self.uses_seen[uid][0])})")
                continue
            self.uses_seen[uid] = (order, name)
            pending[uid] = (order, name)
        if last:  # a final assistant message is a prefill: fine unless it asks for tools
            for uid, (order, name) in pending.items():
                self.offence("missing_result", order, uid, name,
                             f"the tool_use {uid} ({name}) ends the conversation with no tool_result after it")
        return pending

    def answered(self, blocks: list[Block], pending: dict[str, tuple[tuple[int, int], str]]) -> None:
        """A user turn's tool_result blocks against the calls ``pending`` from the assistant turn before it."""
        answered: set[str] = set()
        leading = True
        for order, b in blocks:
            if b.get("type") != "tool_result":
                leading = False
                continue
            uid = str(b.get("tool_use_id"))
            tool = self.uses_seen[uid][1] if uid in self.uses_seen else None
            if uid in self.results_seen:
                self.offence("duplicate_result", order, uid, tool,
                             f"a second tool_result for {uid} (the first is at {_path(self.results_seen[uid])})")
            elif uid not in pending:
                where = (f"it was asked for at {_path(self.uses_seen[uid][0])}" if uid in self.uses_seen
                         else "no tool_use has that id")
                self.offence("orphan_result", order, uid, tool,
                             f"a tool_result answers {uid}, which is not a tool_use of the previous assistant message "
                             f"({where})")
            else:
                answered.add(uid)
                if not leading:
                    self.offence("result_not_first", order, uid, tool,
                                 f"the tool_result for {uid} comes after other content in its message")
            self.results_seen.setdefault(uid, order)
        for uid, (order, name) in pending.items():
            if uid not in answered:
                self.offence("missing_result", order, uid, name,
                             f"the tool_use {uid} ({name}) has no tool_result at the start of the next message")


def _pairing_offences(conversation: list[Any]) -> list[_Offence]:
    """Every tool_use/tool_result pairing problem of one conversation, in message order."""
    return _walk(conversation).found


def _walk(conversation: list[Any], resume: _Walk | None = None) -> _Walk:
    """Walk ``conversation`` for pairing offences, from where ``resume`` stopped if this conversation extends it.

    A loop resends its history with each request, so the next conversation is usually the last one plus
    an assistant message and a user message.  When the last one ended with a closed (non-assistant) turn
    and the next starts its new part with an assistant message, the turns of the history are unchanged and
    the walk resumes after them; otherwise it walks the whole conversation.  (A walk that ended with an
    assistant turn, whose prefill rule depends on its being last, is never resumed.)
    """
    start = 0
    walk = _Walk(conversation)
    if resume is not None and _extends(conversation, resume.messages):
        start = len(resume.messages)
        walk.found = resume.found[:]
        walk.uses_seen = dict(resume.uses_seen)
        walk.results_seen = dict(resume.results_seen)
    pending: dict[str, tuple[tuple[int, int], str]] = {}  # tool_uses of the previous assistant message
    turns = _turns(conversation, start)
    for k, (role, blocks) in enumerate(turns):
        if role == "assistant":
            pending = walk.asked(blocks, last=k == len(turns) - 1)
        else:
            walk.answered(blocks, pending)
            pending = {}
    walk.found.sort(key=lambda o: o.order)
    return walk


def _extends(conversation: list[Any], walked: list[Any]) -> bool:
    """``conversation`` is ``walked`` (ending with a closed turn) plus messages that start with an assistant one."""
    n = len(walked)
    if len(conversation) <= n or not n:
        return False
    last, following = walked[-1], conversation[n]
    return (
        type(last) is dict and last.get("role") != "assistant"
        and type(following) is dict and following.get("role") == "assistant"
        and conversation[:n] == walked  # the very same objects, as the simulator's parser shares them: quick
    )


def pairing(t: Transcript) -> list[Violation]:
    """Every tool_use is answered by exactly one tool_result at the start of the next message; no strays, no dups.

    The first new offence of each request is reported; an offence re-sent in
    later requests (the same broken history, every step) is reported once.
    """
    out: list[Violation] = []
    seen: set[tuple[str, str]] = set()
    walk: _Walk | None = None
    doubled = _doubled(t)
    for r in t.requests:
        if r.index in doubled:
            continue  # its items were sent twice (chained and replayed): request_valid tells that story
        walk = _walk(r.conversation, walk)
        offences = walk.found
        if not offences:
            continue
        new = [o for o in offences if (o.kind, o.tool_use_id) not in seen]
        seen.update((o.kind, o.tool_use_id) for o in offences)
        if not new:
            continue
        o = new[0]
        more = f" ({len(new) - 1} more pairing problem(s) in this request)" if len(new) > 1 else ""
        evidence: dict[str, Any] = {"request": r.index, "path": o.path, "kind": o.kind, "tool_use_id": o.tool_use_id}
        if o.tool:
            evidence["tool"] = o.tool
        if r.path == MESSAGES_PATH:
            text = f"{o.what}{more}; {_PAIRING_FIX[o.kind]}"
        else:  # an OpenAI wire: the same offence, in its words
            what, fix = (_PAIRING_RESPONSES if r.path == RESPONSES_PATH else _PAIRING_CHAT)[o.kind]
            text = f"{what.format(uid=o.tool_use_id, tool=o.tool)}{more}; {fix}"
        out.append(Violation("pairing", text, r.call, evidence))
    return out


# -- request_valid ----------------------------------------------------------------------------------------------


#: The Responses API's 400 for an item sent twice (`simloop.protocol.openai_responses.DUPLICATE_ITEM`).
_DUPLICATE = "Duplicate item found with id "
#: What a loop that got it did, and what to do instead.
_DUPLICATE_FIX = (
    "; the loop chained its request to an earlier response with previous_response_id and also sent that "
    "response's output items again in input, so the API holds them twice: a correct loop sends either "
    "previous_response_id and only the new items (its function_call_outputs, a new user message), or the whole "
    "history as input without previous_response_id"
)


def _doubled(t: Transcript) -> set[int]:
    """The requests the Responses API refused for an item they hold twice (their conversations are not what the
    loop meant to send: pairing does not read them)."""
    return {resp.index for resp in t.responses if resp.kind == "rejected"
            and str((resp.rejection or {}).get("message", "")).startswith(_DUPLICATE)}


def _api_path(path: Any) -> str | None:
    """``messages.4.content.0`` (the API's form) -> ``messages[4].content[0]``."""
    if not path:
        return None
    return re.sub(r"\.(\d+)", r"[\1]", str(path))


def request_valid(t: Transcript) -> list[Violation]:
    """No request is rejected by the API for a reason other than pairing (its own invariant) or size.

    The same rejection coming back for later requests is reported once, with the count.  A request refused for
    its size (the context window, a 413) is the API's honest answer to a history that outgrew the window: a
    loop may stop there (reason ``error``), but not send the refused prompt again unchanged, and a loop that
    claims it manages its context (the transcript's ``context``) never sends one at all (`_size_refusals`).
    """
    requests = {r.index: r for r in t.requests}
    groups: dict[tuple[str, str, str | None], list[Response]] = {}
    for resp in t.responses:
        if resp.kind != "rejected":
            continue
        rej = resp.rejection or _error_of(resp)
        text = str(rej.get("message", ""))
        if too_large(resp):
            continue  # answered as the real API does; not a malformed request (see _size_refusals)
        req = requests.get(resp.index)
        if req is not None and not text.startswith(_DUPLICATE) and _pairing_offences(req.conversation):
            continue  # reported (once) by `pairing`
        groups.setdefault((str(rej.get("type")), text, _api_path(rej.get("path"))), []).append(resp)
    out: list[Violation] = []
    for (kind, text, path), resps in groups.items():
        resp = resps[0]
        req = requests.get(resp.index)
        status = int((resp.rejection or {}).get("status") or resp.status)
        kind = kind if kind != "None" else "error"
        again = f" (the same rejection came back {len(resps) - 1} more time(s))" if len(resps) > 1 else ""
        message = (
            f'the API rejected the request with {status} {kind}: "{text}"{again}'
            + (_DUPLICATE_FIX if text.startswith(_DUPLICATE) else "; a correct loop builds requests the API accepts "
               "(fix the part the API names) and does not resend one the API rejected")
        )
        evidence = {"request": resp.index, "path": path, "status": status, "type": kind, "api_message": text}
        out.append(Violation("request_valid", message, req.call if req else resp.call, evidence))
    return out + _size_refusals(t, requests)


def _error_of(resp: Response) -> dict[str, Any]:
    """The rejection as the error body the API sent, for a request rejected before it was read as one (a body that
    is not JSON: "There was an error parsing the body of your request."), which has no ``rejection`` of its own."""
    body: dict[str, Any] = resp.error if isinstance(resp.error, dict) else {}
    inner = body.get("error")
    error: dict[str, Any] = inner if isinstance(inner, dict) else body
    return {"type": error.get("type"), "message": error.get("message", "")}


#: What a correct loop does about a history that outgrows the model's context window.
CONTEXT_FIX = "trim old tool results, summarize the history, or use compaction"


def _prompt(req: Request) -> tuple[Any, Any, Any]:
    """What a request asks the model to read: its messages, system prompt and tools (the settings left out)."""
    body = req.body if isinstance(req.body, dict) else {}
    return req.conversation, body.get("system"), body.get("tools")


def _size_refusals(t: Transcript, requests: dict[int, Request]) -> list[Violation]:
    """The requests refused for their size that a loop should not have sent.

    With the ``context`` claim, the first one (and how many followed): the loop said it keeps every request
    inside the window.  Without it, a refused prompt sent again unchanged within the same user turn and life
    (it can only be refused again): the first resend, with the count.  The prompts are compared as the
    transcript holds them (equal lists and strings), never serialised again.
    """
    refused = [resp for resp in t.responses if resp.kind == "rejected" and too_large(resp)]
    if not refused:
        return []
    if t.header.context:
        first = refused[0]
        req = requests.get(first.index)
        text = str((first.rejection or {}).get("message", ""))
        more = f" ({len(refused) - 1} more request(s) refused so)" if len(refused) > 1 else ""
        message = (
            f'the API refused the request as too long ("{text}"){more}, and the loop claims it manages its context '
            f"(context=True, requires: [context]); a correct loop keeps every request inside the model's window: "
            f"{CONTEXT_FIX}"
        )
        evidence = {"request": first.index, "status": first.status, "api_message": text, "claim": "context"}
        return [Violation("request_valid", message, req.call if req else first.call, evidence)]
    refused_at = {resp.index for resp in refused}
    seen: list[tuple[Request, tuple[Any, Any, Any], str]] = []  # this turn's refused prompts
    resends: list[tuple[Request, Request, str]] = []
    responses = {resp.index: resp for resp in refused}
    for event in t.events:
        if isinstance(event, (TurnStart, Restart)):
            seen.clear()
        elif isinstance(event, Request) and event.path in MODEL_PATHS:
            prompt = _prompt(event)
            for earlier, sent, text in seen:
                if sent == prompt:
                    resends.append((earlier, event, text))
                    break
            if event.index in refused_at:
                text = str((responses[event.index].rejection or {}).get("message", ""))
                seen.append((event, prompt, text))
    if not resends:
        return []
    earlier, again, text = resends[0]
    more = f"; {len(resends) - 1} more resend(s)" if len(resends) > 1 else ""
    message = (
        f'the API refused the request as too long ("{text}") and the loop sent the same prompt again at model call '
        f"{again.call}{more}: it can only be refused again; a correct loop stops (reason error) or makes the prompt "
        f"fit: {CONTEXT_FIX}"
    )
    evidence = {"request": again.index, "refused": earlier.index, "api_message": text}
    return [Violation("request_valid", message, again.call, evidence)]

