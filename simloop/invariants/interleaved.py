"""Several conversations in one run: a loop that runs independent tool loops at once (threads, asyncio tasks), each
with its own history, on one Sim.  `split_conversations` tells them apart, so `check` holds each to the rules of a
run of its own (docs/design.md, Conversations, "Several conversations at once").

A chain is model calls each carrying the one before: its messages start with the earlier call's, followed by that
call's reply (or, after a call that got no reply, the same messages sent again).  A call that carries on no chain
begins one.  Chains that overlap (in the order of events or in virtual time) are conversations of their own; a
chain that begins after another ended, on the same thread (`Request.thread`), goes on its conversation when it
extends it or opens with the same first message (a loop that started over, retried a refused or cut request).  A
run whose every call extends the one before, each answered before the next, is one conversation, found at no cost;
so is a run whose calls all came from the drive's own thread, its chains each begun after the ones before ended
(one loop that started over).
Each tool execution belongs to the conversation whose reply asked for it (its binding).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from simloop.invariants._base import MODEL_PATHS, _is_reply, _View, _view
from simloop.invariants.subagents import _renumbered
from simloop.transcript import Event, OutcomeEvent, Request, Response, ToolEnd, ToolStart, Transcript

__all__ = ["Conversation", "split_conversations"]


@dataclass(frozen=True, slots=True)
class Conversation:
    """One of a run's conversations as a transcript of its own: its model calls (numbered from 1) and replies, the tool
    executions its replies asked for, and the run's shared events (turns, Stop, restarts, halts; not the outcome, which
    is the run's).  ``calls`` maps its call numbers back to the run's; ``number`` is 1-based, in the order they begin;
    ``opening`` is its first user message's text (for the report)."""

    number: int
    opening: str
    calls: dict[int, int]
    transcript: Transcript


@dataclass
class _Chain:
    """Model calls that each carry the one before: the last call's messages, and its reply as the loop read it."""

    first: int  # event position of its first request
    head: list[Any]  # its first request's messages
    thread: int  # the thread that made its first call (`Request.thread`, 0 for the drive's own)
    start: float  # the virtual time of its first call
    last: int = -1  # event position of its last event (`_stretch`)
    end: float = 0.0  # the virtual time of its last event: a reply arrives after its latency
    messages: list[Any] = field(default_factory=list)
    reply: Response | None = None
    calls: list[int] = field(default_factory=list)


def split_conversations(t: Transcript) -> list[Conversation] | None:
    """The run's conversations when it holds several at once, else None (check it as one run).

    Cheap for a loop of one conversation: every request extending the one before (the walk the views make anyway),
    each answered before the next, answers None without looking further."""
    v = _view(t)
    if not v.forks and not _overlapping(t, v):
        return None
    chains, chain_of_call = _chains(v)
    _stretch(v, chains, chain_of_call)
    if not _several_threads(v) and _one_after_another(chains):
        return None
    groups = _sequential(chains)
    if len(groups) < 2:
        return None
    group_of_chain = {id(ch): g for g, members in enumerate(groups) for ch in members}
    return _assemble(t, v, groups, {call: group_of_chain[id(ch)] for call, ch in chain_of_call.items()})


def _several_threads(v: _View) -> bool:
    """Whether model calls came from a thread other than the drive's own (`Request.thread`): the loop's threads."""
    return any(r.thread for _, r in v.model_requests)


def _one_after_another(chains: list[_Chain]) -> bool:
    """Whether each chain began after every chain before it had ended (its replies read, its tools done).  On the
    drive's own thread that is one loop, whatever its histories: one that starts over with another first message (a
    summary in place of its task) keeps its step cap and every rule across the restart, as it always did."""
    last, end = -1, 0.0
    for chain in sorted(chains, key=lambda c: c.first):
        if chain.first < last or chain.start < end:
            return False
        last, end = max(last, chain.last), max(end, chain.end)
    return True


def _overlapping(t: Transcript, v: _View) -> bool:
    """Whether a model request was sent before the one before it was answered (in the order of events, or in virtual
    time: a reply arrives after its latency): two calls in flight at once."""
    answered: dict[int, Response] = {}
    where: dict[int, int] = {}
    for pos, e in enumerate(t.events):
        if isinstance(e, Response) and e.index not in answered:
            answered[e.index], where[e.index] = e, pos
    previous: Request | None = None
    for pos, r in v.model_requests:
        if previous is not None and previous.call != r.call:
            reply = answered.get(previous.index)
            if reply is None or where[previous.index] > pos or reply.t > r.t:
                return True
        previous = r
    return False


def _chains(v: _View) -> tuple[list[_Chain], dict[int, _Chain]]:
    """The model calls linked into chains (each carrying the one before), and call -> its chain."""
    replies: dict[int, Response] = {r.index: r for _, r in v.replies}
    chains: list[_Chain] = []
    of_call: dict[int, _Chain] = {}
    for pos, r in v.model_requests:
        chain = of_call.get(r.call)
        if chain is None:  # a new logical call (an SDK retry is the call it retries)
            chain = _carried_on(chains, r.conversation)
            if chain is None:
                chain = _Chain(first=pos, head=r.conversation, thread=r.thread or 0, start=r.t)
                chains.append(chain)
            chain.calls.append(r.call)
            of_call[r.call] = chain
        chain.last, chain.messages = pos, r.conversation
        reply = replies.get(r.index)
        chain.reply = reply if reply is not None and _is_reply(reply) else None
    return chains, of_call


def _stretch(v: _View, chains: list[_Chain], of_call: dict[int, _Chain]) -> None:
    """Each chain's span to its last event: its replies, and the tool executions they asked for (a loop that runs
    its tools and stops is still at work until they end)."""
    for pos, reply in v.replies:
        chain = of_call.get(reply.call)
        if chain is not None:
            chain.last, chain.end = max(chain.last, pos), max(chain.end, reply.t)
    for pos, s in v.starts:
        uid = v.bound(s)
        issued = v.issued.get(uid) if uid is not None else None
        chain = of_call.get(issued[1].call) if issued is not None else None
        if chain is not None:
            end = v.ends.get(s.exec)
            chain.last = max(chain.last, pos, end[0] if end is not None else pos)
            chain.end = max(chain.end, s.t, end[1].t if end is not None else s.t)


def _carried_on(chains: list[_Chain], messages: list[Any]) -> _Chain | None:
    """The chain ``messages`` carry on (the longest history, the latest on a tie), or None."""
    best: _Chain | None = None
    for chain in chains:
        n = len(chain.messages)
        if len(messages) < n or messages[:n] != chain.messages:
            continue
        if chain.reply is not None and (len(messages) == n or not _carries(messages[n], chain.reply)):
            continue  # its reply was read, and these messages do not go on from it
        if best is None or n > len(best.messages) or (n == len(best.messages) and chain.last > best.last):
            best = chain
    return best


def _carries(message: Any, reply: Response) -> bool:
    """Whether ``message`` is the assistant turn of ``reply`` as a loop sends it back (its calls' ids, or its text)."""
    if not isinstance(message, dict) or message.get("role") != "assistant" or not reply.message:
        return False
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    ids = {b.get("id") for b in reply.message.get("content", []) if isinstance(b, dict) and b.get("id")}
    if ids:
        return ids <= {_field(b, "id") for b in blocks}
    said = "".join(str(b.get("text", "")) for b in reply.message.get("content", []) if isinstance(b, dict))
    sent = "".join(str(_field(b, "text") or "") for b in blocks)
    return said.strip() == sent.strip()


def _field(block: Any, key: str) -> Any:
    return block.get(key) if isinstance(block, dict) else getattr(block, key, None)


def _sequential(chains: list[_Chain]) -> list[list[_Chain]]:
    """The chains as conversations.  Chains that overlap (in the order of events, or in virtual time: a reply arrives
    after its latency, while another task may call) are conversations of their own.  A chain that begins
    after another ended (a loop that started its history over, or retried a request without its reply) goes on that
    one's conversation when it extends it (its first messages start with the other's last) or opens with the same
    first message, and the two were made on one thread; the one that ended last when several may.  Otherwise it is
    a new conversation (another loop's, begun on a thread the first one left)."""
    groups: list[list[_Chain]] = []
    for chain in sorted(chains, key=lambda c: c.first):
        ended = [g for g in groups
                 if g[-1].last < chain.first and g[-1].end <= chain.start and g[0].thread == chain.thread]
        extends = [g for g in ended if chain.head[: len(g[-1].messages)] == g[-1].messages]
        opening = chain.head[:1]
        akin = extends or [g for g in ended if g[0].head[:1] == opening]
        if akin:
            max(akin, key=lambda g: g[-1].last).append(chain)
        else:
            groups.append([chain])
    return groups


def _assemble(t: Transcript, v: _View, groups: list[list[_Chain]], group_of: dict[int, int]) -> list[Conversation]:
    """Each conversation's events (``group_of``: call -> its conversation's index): its calls and replies, the
    executions bound to its calls' tool_uses, the run's shared events."""
    of_request = {r.index: group_of[r.call] for _, r in v.model_requests}
    of_exec: dict[int, int] = {}
    current = 0  # the conversation of the latest model call: what an event with no better place belongs to
    events: list[list[Event]] = [[] for _ in groups]
    for e in t.events:
        where: int | None = None
        if isinstance(e, Request):
            where = current = of_request.get(e.index, current)
        elif isinstance(e, Response):
            where = of_request.get(e.index, current)
        elif isinstance(e, ToolStart):
            uid = v.bound(e)
            issued = v.issued.get(uid) if uid is not None else None
            where = of_exec[e.exec] = of_request.get(issued[1].index, current) if issued is not None else current
            e = dataclasses.replace(e, matched=uid) if uid != e.matched else e
        elif isinstance(e, ToolEnd):
            where = of_exec.get(e.exec, current)
        elif isinstance(e, OutcomeEvent):
            continue  # the run's: held to the run (honest_outcome), not to each conversation
        if where is None:
            for own in events:
                own.append(e)
        else:
            events[where].append(e)
    return [_conversation(t, n, own) for n, own in enumerate(events, start=1)]


def _conversation(t: Transcript, number: int, events: list[Event]) -> Conversation:
    """One conversation's events as a transcript with its calls numbered 1, 2, ... and its times counted from its
    first call (its loop's deadline is its own), and the map back to the run's calls."""
    first = next((e for e in events if isinstance(e, Request) and e.path in MODEL_PATHS), None)
    own, calls = _renumbered(events, first.t if first is not None else 0.0)
    opening = _opening(first.conversation) if first is not None else ""
    return Conversation(number, opening, calls, Transcript(header=t.header, events=own))


def _opening(messages: list[Any]) -> str:
    """The text of the first user message (a string, or its text blocks)."""
    first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
    content = first.get("content") if first is not None else None
    if isinstance(content, list):
        content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return str(content or "")
