"""A cassette's model calls (`Recording`), and the v1 scenario they amount to."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal, Union
from urllib.parse import urlsplit

from simloop.cassettes._openai import OpenAIReader, openai_wire
from simloop.cassettes._read import _FIX, CassetteError, Interaction, _describe, endpoint_by_content, load_cassette
from simloop.cassettes._scrub import Scrubber
from simloop.errors import UsageError
from simloop.models import RecordedError
from simloop.protocol.render import Turn, turn_from_message, turn_from_sse
from simloop.scenario import (
    ERROR_REPLIES,
    SERVER_TOOLS,
    Fault,
    MaxTokensBody,
    PauseTurnBody,
    Reply,
    Scenario,
    ServerToolCall,
    ToolCall,
    ToolSpec,
    Usage,
)

# =========================================================================== the recording as calls


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One recorded model call (``POST /v1/messages``, ``/v1/chat/completions`` or ``/v1/responses``): the request
    body and what the API answered.  An OpenAI call's ``request`` is the Messages request it stands for (the shape
    the simulator's model reads, `simloop.models.ModelRequest`), its ``wire`` says which it was.

    ``answer`` is what a replay serves: the exact `Turn` for a 200, the recorded status, headers and
    body (`RecordedError`) for an error status, a `Reply` error for a stream that failed mid-way.
    ``reply`` is the same answer in the scenario format
    (None when v1 scenarios cannot script it: a 4xx other than 429).  ``latency`` comes from the
    recorded timing headers (``x-envoy-upstream-service-time``, ``server-timing``), 0.0 without them.
    """

    interaction: int
    request: dict[str, Any]
    answer: Turn | Reply | RecordedError
    reply: Reply | None
    latency: float = 0.0
    wire: str = "messages"  # or "chat" (Chat Completions), "responses"

    @property
    def kind(self) -> str:
        """The answer's kind: a stop reason, ``error <status>``, or ``cut``."""
        if isinstance(self.answer, Turn):
            return str(self.answer.stop_reason or "cut")
        if isinstance(self.answer, RecordedError):
            return f"error {self.answer.status}"
        return f"error {self.answer.error}"


@dataclass(slots=True)
class Recording:
    """A cassette's model calls, and the scenario it amounts to (see `load_recording`).

    ``notes`` lists what the scenario approximates (blocks v1 replies cannot express, dropped calls).
    """

    source: str
    calls: list[RecordedCall]
    scenario: Scenario
    notes: list[str] = field(default_factory=list)
    other: int = 0  # interactions that are not model calls (count_tokens, other hosts)
    #: The calls of the conversation the scenario was made from (all of ``calls`` when there is one).
    conversation: list[RecordedCall] = field(default_factory=list)
    conversations: int = 1  # how many independent conversations the cassette holds

    def with_kinds(self, kinds: Mapping[str, str]) -> Recording:
        """The same recording, its tools' kinds set from ``kinds`` (name -> ``read``/``write``)."""
        tools = [t.model_copy(update={"kind": kinds.get(t.name, t.kind)}) for t in self.scenario.tools]
        scenario = Scenario.model_validate({**self.scenario.model_dump(), "tools": tools})
        return Recording(self.source, self.calls, scenario, list(self.notes), self.other, self.conversation,
                         self.conversations)

    def __repr__(self) -> str:
        return f"Recording({self.source!r}, {len(self.calls)} model calls)"


Source = Union[str, "os.PathLike[str]", Sequence[Interaction], Recording]

# A tool whose name starts with one of these verbs is taken for a write (``send_email``, ``issueRefund``).
_WRITE_VERBS = frozenset({
    "send", "write", "create", "delete", "remove", "update", "post", "pay", "refund", "charge", "transfer", "book",
    "cancel", "submit", "email", "insert", "upload", "publish", "deploy", "issue", "purchase", "save", "set", "put",
    "patch", "move", "rename", "approve", "reply", "add", "edit", "execute", "place", "schedule", "notify",
})


def guess_kind(name: str) -> str:
    """``write`` when the tool's name starts with a verb that changes the world (``send_email``), else ``read``."""
    first = re.split(r"[_\-\s.]|(?<=[a-z0-9])(?=[A-Z])", name, maxsplit=1)[0].lower()
    return "write" if first in _WRITE_VERBS else "read"


def load_recording(
    source: Source, *, kinds: Mapping[str, str] | None = None, name: str | None = None, conversation: int = 0
) -> Recording:
    """Read a cassette's model calls and derive its scenario.

    ``source`` is a cassette path, a list of `Interaction`, or a `Recording` (returned as is).
    ``kinds`` maps tool names to ``read``/``write`` (the oracle treats writes specially); tools not
    named are guessed from their names (``send_email``, ``issue_refund`` are writes).

    A cassette may hold several independent conversations (calls whose histories start with different first
    messages, as a test file that runs several agents records them): ``conversation`` picks one (0-based, in
    the order they begin), and the notes say how many there are.  Within it, the user's messages after a
    finished turn become the scenario's ``followups``.

    Raises:
        CassetteError: the file cannot be read, or a 200 answer is not a Message.
    """
    bad = {k: v for k, v in (kinds or {}).items() if v not in ("read", "write")}
    if bad:
        raise UsageError(f"kinds={bad!r}: a tool's kind is 'read' or 'write' (a completed write must never run twice)")
    if isinstance(source, Recording):
        return source.with_kinds(kinds) if kinds else source
    if isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        interactions = load_cassette(source)
    else:
        interactions = list(source)
        label = "<interactions>"
    calls: list[RecordedCall] = []
    notes: list[str] = []
    openai = OpenAIReader()
    for item in interactions:
        if item.is_model_call or openai_wire(item) is not None:
            calls.append(_call(label, item, notes, openai))
    other = len(interactions) - len(calls)
    if not calls:
        notes.append(_why_empty(interactions))
    groups = _conversations(calls)
    if not 0 <= conversation < max(len(groups), 1):
        raise UsageError(
            f"{label}: conversation={conversation}, but the cassette holds {len(groups)} conversation(s); pick one "
            f"from 0 to {len(groups) - 1}"
        )
    taken = groups[conversation] if groups else calls
    if len(groups) > 1:
        notes.append(
            f"the cassette holds {len(groups)} independent conversations (their first messages differ); this "
            f"scenario is conversation {conversation} (interactions {', '.join(str(c.interaction) for c in taken)}); "
            "convert the others with --conversation N (a replay with Recorded serves them all, in order)"
        )
    scenario = _scenario(label, taken, notes, kinds=kinds or {}, name=name)
    return Recording(source=label, calls=calls, scenario=scenario, notes=notes, other=other, conversation=taken,
                     conversations=max(len(groups), 1))


def _why_empty(interactions: Sequence[Interaction]) -> str:
    """Why a cassette yields no model call, by what its interactions are."""
    if not interactions:
        return "the cassette holds no interaction at all, so the scenario has no reply"
    kinds: dict[str, int] = {}
    for item in interactions:
        endpoint = endpoint_by_content(item) if item.uri_hidden else None
        if endpoint == "/v1/complete" or (not item.uri_hidden and item.request.path.rstrip("/") == "/v1/complete"):
            what = "legacy Text Completions call(s) (POST /v1/complete), which simloop does not simulate"
        elif endpoint is not None or item.request.path.rstrip("/") == "/v1/messages/count_tokens":
            what = "count_tokens call(s) (no model reply)"
        elif item.uri_hidden:
            what = "call(s) with a redacted URI whose body and response are not a Messages API call"
        else:
            parts = urlsplit(item.request.uri)
            what = f"{item.request.method.upper()} {parts.hostname or ''}{parts.path} call(s) (not a model call)"
        kinds[what] = kinds.get(what, 0) + 1
    found = "; ".join(f"{n} {what}" for what, n in kinds.items())
    return f"no model call ({_MODEL_CALLS}) in the cassette, so the scenario has no reply: it holds {found}"


_MODEL_CALLS = "POST /v1/messages, /v1/chat/completions or /v1/responses"


def unconvertible(recording: Recording) -> str | None:
    """Why ``recording`` converts to no scenario worth writing (one with no reply), or None when it converts."""
    if not recording.calls:
        return recording.notes[-1] if recording.notes else "the cassette holds no model call"
    calls = recording.conversation or recording.calls
    for n in _loop_turns(calls):
        return (f"interaction {calls[n].interaction} calls the model again after a final answer with no new user "
                "message (the loop went on by itself, e.g. after adding tools); a scenario's turns each begin with a "
                "user message, so replay the cassette with Recorded(path) instead")
    if recording.scenario.model:
        return None
    kinds = ", ".join(sorted({c.kind for c in recording.conversation or recording.calls}))
    return (f"the conversation's {len(recording.conversation or recording.calls)} model call(s) are all answers a "
            f"v1 scenario cannot script ({kinds}: a 4xx other than 429 is the simulator's own to give); replay the "
            "cassette with Recorded(path) instead")


def _call(label: str, item: Interaction, notes: list[str], openai: OpenAIReader) -> RecordedCall:
    where = f"{label}: interaction {item.index}"
    sent = item.request.json()
    wire = None if item.is_model_call else openai_wire(item)
    request = sent if isinstance(sent, dict) else {}
    if wire is not None:
        request = openai.request(f"interaction {item.index}", wire, sent, notes)
    response = item.response
    latency = _latency(response.headers)
    answer: Turn | Reply
    if response.status != 200:
        reply = _error_reply(response.status, response.headers, latency)
        if reply is None:
            notes.append(
                f"interaction {item.index}: the recorded {response.status} is not a v1 scenario reply "
                "(the simulator answers a malformed request with the real 400 itself); left out"
            )
        headers = tuple((k, v) for k, values in response.headers.items() for v in values)
        recorded = RecordedError(response.status, headers, response.body, latency)
        return RecordedCall(item.index, request, recorded, reply, latency, wire or "messages")
    if wire is not None:
        found = openai.answer(where, wire, response, sent, notes)
        if isinstance(found, Reply):
            return RecordedCall(item.index, request, found.model_copy(update={"latency": latency}),
                                found.model_copy(update={"latency": latency}), latency, wire)
        reply = reply_of_turn(found, latency=latency, notes=notes, where=f"interaction {item.index}")
        return RecordedCall(item.index, request, found, reply, latency, wire)
    if response.is_sse:
        if re.search(rb"^event:\s*error\s*$", response.body, re.MULTILINE):
            answer = Reply(error="stream_error", latency=latency)
            return RecordedCall(item.index, request, answer, answer, latency)
        try:
            turn = turn_from_sse(response.body)
        except (ValueError, KeyError, IndexError) as exc:
            raise CassetteError(f"{where}: the recorded stream is not a Messages stream ({exc}).{_FIX}") from exc
    else:
        message = response.json()
        if not isinstance(message, dict) or message.get("type") != "message":
            raise CassetteError(
                f"{where}: a 200 answer to POST /v1/messages must be a Message JSON object, found "
                f"{_describe(message)}.{_FIX}"
            )
        turn = turn_from_message(message)
    reply = reply_of_turn(turn, latency=latency, notes=notes, where=f"interaction {item.index}")
    return RecordedCall(item.index, request, turn, reply, latency)


def _latency(headers: Mapping[str, list[str]]) -> float:
    for value in (*headers.get("x-envoy-upstream-service-time", ()), *headers.get("openai-processing-ms", ())):
        with contextlib.suppress(ValueError):
            return round(max(0.0, float(value)) / 1000.0, 3)
    for value in headers.get("server-timing", ()):
        found = re.search(r"dur=([0-9.]+)", value)
        if found:
            return round(float(found.group(1)) / 1000.0, 3)
    return 0.0


def _error_reply(status: int, headers: Mapping[str, list[str]], latency: float) -> Reply | None:
    """A recorded error status as a v1 scenario reply (None for the 4xx scenarios cannot script)."""
    scripted = [code for code in ERROR_REPLIES if isinstance(code, int)]
    if status in scripted:
        retry_after: float | None = None
        if status == 429:
            for value in headers.get("retry-after", ()):
                with contextlib.suppress(ValueError):
                    retry_after = float(value) if float(value) > 0 else None
        return Reply(error=status, latency=latency, retry_after=retry_after)  # type: ignore[arg-type]
    if status >= 500:
        return Reply(error=500, latency=latency)
    return None


_SERVER_BLOCK_HINT = "v1 replies carry text, client tool calls and web search, fetch and code execution calls only"


def reply_of_turn(
    turn: Turn, *, latency: float = 0.0, notes: list[str] | None = None, where: str = "a reply"
) -> Reply:
    """A recorded `Turn` as a v1 scenario reply (kinds, text, tool calls, thinking, usage, latency).

    Text blocks are joined with a blank line; server tool calls with their results become
    ``server_tools`` (before the text), a paused server call the ``pause_turn``'s
    ``server_tool_use``; a result answering a call of an earlier reply is left to the replay (the
    simulator answers a paused call first); MCP, compaction and other blocks v1 replies cannot
    express are left out (noted in ``notes``).
    """
    content = _Content()
    for block in turn.content:
        content.take(block)
    paused = None
    if content.server_uses and turn.stop_reason == "pause_turn":  # the call the turn paused in
        name, args = content.server_uses.pop(list(content.server_uses)[-1])
        paused = ServerToolCall.model_validate({"name": name, "input": args if isinstance(args, dict) else {}})
    dropped = content.dropped + ["server_tool_use" for _ in content.server_uses]
    if dropped and notes is not None:
        notes.append(f"{where}: {', '.join(sorted(set(dropped)))} block(s) left out ({_SERVER_BLOCK_HINT})")
    text = "\n\n".join(t for t in content.texts if t)
    usage = _usage(turn.usage)
    common: dict[str, Any] = {"latency": latency, "usage": usage, "thinking": content.thinking or None}
    if content.server_calls and turn.stop_reason in ("end_turn", "tool_use", "pause_turn"):
        common["server_tools"] = content.server_calls
    elif content.server_calls and notes is not None:
        notes.append(f"{where}: server tool calls left out (a {turn.stop_reason} reply has none in v1)")
    if paused is not None:
        return Reply(pause_turn=PauseTurnBody(text=text.rstrip(), server_tool_use=paused), **common)
    return _reply_for_stop(turn, text, content.calls, common, notes=notes, where=where)


@dataclass(slots=True)
class _Content:
    """A recorded turn's blocks sorted for a v1 reply: its text, tool calls, thinking, server tool calls (with
    their results; ``server_uses``: those still without one, by id) and the blocks a v1 reply cannot carry."""

    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    dropped: list[str] = field(default_factory=list)
    server_uses: dict[str, tuple[str, Any]] = field(default_factory=dict)
    server_calls: list[ServerToolCall] = field(default_factory=list)

    def take(self, block: dict[str, Any]) -> None:
        """One content block, in the order of the turn."""
        kind = block.get("type")
        if kind == "server_tool_use" and block.get("name") in SERVER_TOOLS:
            self.server_uses[str(block.get("id"))] = (str(block.get("name")), block.get("input"))
            return
        server_result = isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result"
        if server_result and self._server_result(str(kind), block):
            return
        if kind == "text":
            self.texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            value = block.get("input")
            if "partial_json" in block:
                value = _partial(block["partial_json"])
            self.calls.append(ToolCall(name=str(block.get("name")), input=value if isinstance(value, dict) else {}))
        elif kind == "thinking":
            if self.thinking is None:
                self.thinking = str(block.get("thinking") or "")
        else:
            self.dropped.append(str(kind))

    def _server_result(self, kind: str, block: dict[str, Any]) -> bool:
        """A server tool's result block: True when taken (with the call it answers, or left to the replay: the
        continuation's answer to an earlier reply's paused call); False for one to be left out."""
        use = self.server_uses.pop(str(block.get("tool_use_id")), None)
        if use is not None and kind == f"{use[0]}_tool_result":
            args = use[1] if isinstance(use[1], dict) else {}
            self.server_calls.append(
                ServerToolCall.model_validate({"name": use[0], "input": args, "result": _without_none(block.get("content"))})
            )
            return True
        return use is None and block.get("tool_use_id") is not None


def _reply_for_stop(
    turn: Turn, text: str, calls: list[ToolCall], common: dict[str, Any], *, notes: list[str] | None, where: str
) -> Reply:
    """The v1 reply kind the turn's ``stop_reason`` maps to (a stream cut before one: ``stream_cut``)."""
    stop = turn.stop_reason
    if stop is None:
        return Reply(error="stream_cut", latency=common["latency"])
    if stop == "tool_use" and calls:
        return Reply(tool_use=calls, text=text or None, **common)
    if stop == "max_tokens":
        body: str | MaxTokensBody = MaxTokensBody(text=text, tool_use=calls) if calls else text
        return Reply(max_tokens=body, **common)
    if stop == "model_context_window_exceeded":  # cut by the window: written as what it is
        return Reply(max_tokens=MaxTokensBody(text=text, tool_use=calls, stop_reason="model_context_window_exceeded"),
                     **common)
    if stop == "stop_sequence":
        return Reply(stop_sequence=text, sequence=turn.stop_sequence, **common)
    if stop == "refusal":
        return Reply(refusal=text, **common)
    if stop == "pause_turn":
        return Reply(pause_turn=text.rstrip(), **common)
    if stop not in ("end_turn", "tool_use") and notes is not None:
        notes.append(f"{where}: stop_reason {stop!r} has no v1 reply kind; written as end_turn")
    return Reply(end_turn=text, **common)


def _without_none(value: Any) -> Any:
    """A result without its null fields (they carry nothing, and a parse and dump adds them)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _partial(text: str) -> Any:
    import jiter

    try:
        return jiter.from_json(text.encode(), partial_mode=True) if text else {}
    except ValueError:
        return {}


def _usage(usage: Mapping[str, Any] | None) -> Usage | None:
    if not usage:
        return None
    inp, out = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(inp, int) and not isinstance(out, int):
        return None
    return Usage(input_tokens=inp if isinstance(inp, int) else None, output_tokens=out if isinstance(out, int) else None)


# --------------------------------------------------------------------------- the scenario


def _scenario(
    label: str, calls: list[RecordedCall], notes: list[str], *, kinds: Mapping[str, str], name: str | None
) -> Scenario:
    first = calls[0].request if calls else {}
    task = _task(first, notes)
    followups = _followups(calls)
    system = _system(first.get("system"))
    tools = _tools(first.get("tools"), calls, notes, kinds)
    names = {t.name for t in tools}
    faults = [f for f in _tool_faults(calls) if f.tool in names]
    replies = [c.reply for c in calls if c.reply is not None]
    stem = _stem(label)
    return Scenario(
        name=name or stem, task=task, followups=followups, system=system, tools=tools, model=replies,
        then=_then(calls, notes), faults=faults,
    )


def _then(calls: list[RecordedCall], notes: list[str]) -> Literal["end_turn", "fail"]:
    """``fail``, unless the recording stops before its loop's turn did: its last answer asks for tools no later
    request answers (the loop stopped there: an output tool, a test cut short) or is a 4xx a scenario cannot
    script; then ``end_turn``, so a loop that goes on gets a final answer rather than an exhausted script."""
    last = calls[-1] if calls else None
    if last is None or (last.reply is not None and last.reply.kind != "tool_use"):
        return "fail"
    what = "asks for tool calls no later request answers" if last.reply is not None else f"is a recorded {last.kind}"
    notes.append(f"the recording's last answer (interaction {last.interaction}) {what}: its loop stopped there; "
                 "`then: end_turn` answers a loop that goes on")
    return "end_turn"


#: Block fields that only steer caching or transport: they never decide which conversation a request belongs to.
_STEERING = frozenset({"cache_control"})


def _first_message(call: RecordedCall) -> str:
    """The request's first message as a key of its conversation, without what only steers caching: a client that
    moves its ``cache_control`` breakpoint to the newest block each turn (Anthropic's documented pattern) sends
    the same first message with and without one, and a string content is the one text block it stands for."""
    messages = call.request.get("messages")
    head = messages[0] if isinstance(messages, list) and messages else None
    if isinstance(head, dict):
        content = head.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if isinstance(content, list):
            content = [{k: v for k, v in b.items() if k not in _STEERING} if isinstance(b, dict) else b for b in content]
        head = {**{k: v for k, v in head.items() if k not in _STEERING}, "content": content}
    return json.dumps(head, sort_keys=True, default=str)


def _conversations(calls: list[RecordedCall]) -> list[list[RecordedCall]]:
    """The calls grouped by conversation, in the order the conversations begin: a conversation's every request
    starts with the same first message (its history grows behind it)."""
    groups: dict[str, list[RecordedCall]] = {}
    for call in calls:
        groups.setdefault(_first_message(call), []).append(call)
    return list(groups.values())


def _followups(calls: list[RecordedCall]) -> list[str]:
    """The user's messages after each finished turn: the text a request adds after the answer of a call that
    ended its turn (not ``tool_use`` or ``pause_turn``, whose next request carries results or a continuation)."""
    return [text for _, text in _turn_starts(calls)]


def _turn_starts(calls: list[RecordedCall]) -> list[tuple[int, str]]:
    """Where each later user turn begins: (the index in ``calls`` of its first call, the user's text)."""
    out: list[tuple[int, str]] = []
    for i, (before, call) in enumerate(pairwise(calls), start=1):
        finished = isinstance(before.answer, Turn) and before.answer.stop_reason not in ("tool_use", "pause_turn")
        messages = call.request.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else None
        if not finished or not isinstance(last, dict) or last.get("role") != "user":
            continue
        text = _text_of(last.get("content"))
        if text:
            out.append((i, text))
    return out


def _loop_turns(calls: list[RecordedCall]) -> list[int]:
    """The calls (indices in ``calls``) that follow a final answer (``end_turn``, ``stop_sequence``, ``refusal``)
    without a new user message: the loop called again by itself.  (After ``max_tokens`` a loop may go on to
    continue the cut reply, which a scenario replays as it is.)"""
    starts = {i for i, _ in _turn_starts(calls)}
    final = ("end_turn", "stop_sequence", "refusal")
    return [i for i, (before, _) in enumerate(pairwise(calls), start=1)
            if i not in starts and isinstance(before.answer, Turn) and before.answer.stop_reason in final]


def replies_by_turn(recording: Recording) -> list[list[Reply]]:
    """The recorded replies of the scenario's conversation, one list per user turn (the task's, then each
    follow-up's, as `Scenario.followups` lists them): what `verify(recorded=...)` serves each turn."""
    calls = recording.conversation or recording.calls
    starts = [0, *(i for i, _ in _turn_starts(calls)), len(calls)]
    return [[c.reply for c in calls[a:b] if c.reply is not None] for a, b in pairwise(starts)]


def _stem(path: str | os.PathLike[str]) -> str:
    """``test_x[claude-4.5]`` for ``…/test_x[claude-4.5].yaml.gz``."""
    return Path(path).name.removesuffix(".gz").removesuffix(".yaml").removesuffix(".yml") or "recording"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(str(b.get("text")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _task(request: Mapping[str, Any], notes: list[str]) -> str:
    messages = request.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        first = messages[0]
        text = _text_of(first.get("content")) if first.get("role") == "user" else ""
        if text:
            return text
    if request:
        notes.append("the first request does not start with a user text message; the task is a placeholder")
    return "Do the task."


def _system(system: Any) -> str | None:
    text = _text_of(system)
    return text or None


def _tools(
    raw: Any, calls: list[RecordedCall], notes: list[str], kinds: Mapping[str, str]
) -> list[ToolSpec]:
    results = _tool_results(calls)
    specs: list[ToolSpec] = []
    skipped: list[str] = []
    for tool in raw if isinstance(raw, list) else []:
        if not isinstance(tool, dict):
            continue
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not isinstance(schema, dict) or schema.get("type") != "object":
            skipped.append(str(tool.get("name") or tool.get("type")))
            continue
        kind = kinds.get(name) or guess_kind(name)
        try:
            specs.append(ToolSpec(
                name=name, kind=kind,  # type: ignore[arg-type]
                description=str(tool.get("description") or ""), input_schema=schema,
                results=results.get(name) or None,
            ))
        except ValueError:
            skipped.append(name)
    if skipped:
        notes.append(f"tools without an input schema left out: {', '.join(skipped)} (server tools, built-in client tools)")
    return specs


def _executions(calls: list[RecordedCall]) -> list[tuple[str, str | None, bool]]:
    """Every client tool call the recording answers, in order: (tool, output, is_error)."""
    results: dict[str, tuple[str | None, bool]] = {}
    for call in calls:
        for message in call.request.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    raw = block.get("content")
                    text = raw if isinstance(raw, str) else (_text_of(raw) if isinstance(raw, list) else None)
                    results[str(block.get("tool_use_id"))] = (text, bool(block.get("is_error")))
    out: list[tuple[str, str | None, bool]] = []
    for call in calls:
        if isinstance(call.answer, Turn) and call.answer.stop_reason == "tool_use":
            for block in call.answer.content:
                if block.get("type") == "tool_use" and str(block.get("id")) in results:
                    text, is_error = results[str(block.get("id"))]
                    out.append((str(block.get("name")), text, is_error))
    return out


def _tool_results(calls: list[RecordedCall]) -> dict[str, list[str]]:
    by_tool: dict[str, list[str]] = {}
    for tool, text, _ in _executions(calls):
        by_tool.setdefault(tool, []).append(text or "")
    return by_tool


def _tool_faults(calls: list[RecordedCall]) -> list[Fault]:
    faults: list[Fault] = []
    nth: dict[str, int] = {}
    for tool, _, is_error in _executions(calls):
        nth[tool] = nth.get(tool, 0) + 1
        if is_error:
            faults.append(Fault(tool=tool, kind="raise", call=nth[tool]))
    return faults


def to_scenario(
    source: Source, *, kinds: Mapping[str, str] | None = None, name: str | None = None, conversation: int = 0
) -> Scenario:
    """A recording as a v1 scenario that reproduces its replies (see `load_recording`).

    The task is the first user message, the follow-ups the user's later turns, the tools come from the first
    request (with the outputs the recording shows, and a ``raise`` fault where a result was an error), the
    replies are the recorded answers in order with their latencies, usage and thinking, ``then: fail``.

    Example::

        scenario = simloop.cassettes.to_scenario("tests/cassettes/test_agent/test_refund.yaml")
        with simloop.Sim(scenario) as sim: ...

    A cassette with no reply to script gives a scenario with none (`convert` refuses to write it; `unconvertible`
    says why), still the scenario a `Recorded` replay of the cassette runs in.
    """
    return load_recording(source, kinds=kinds, name=name, conversation=conversation).scenario


def _refuse_empty(recording: Recording) -> None:
    why = unconvertible(recording)
    if why is not None:
        raise CassetteError(f"{recording.source}: cannot convert: {why}")


def convert(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    kinds: Mapping[str, str] | None = None,
    secrets: Iterable[str] = (),
    conversation: int = 0,
) -> Path:
    """Write a cassette's scenario as a YAML file (default: next to it, ``.scenario.yaml``); returns the path.

    The file starts with a comment naming the cassette and what the scenario approximates.  What it
    copies from the cassette is scrubbed as a recording is (`scrubbed_scenario`): a cassette recorded
    by another tool may hold keys, and the scenario is a file you commit.  A cassette that converts to no reply
    (no model call, or only recorded errors a scenario cannot script) is refused with a `CassetteError` saying why.
    """
    recording = load_recording(source, kinds=kinds, conversation=conversation)
    _refuse_empty(recording)
    scrubber = Scrubber(secrets)
    src = Path(source)
    target = Path(out) if out is not None else src.with_name(_stem(src) + ".scenario.yaml")
    header = [f"# Converted by simloop from the cassette {src.name} ({len(recording.calls)} model calls)."]
    header += [f"#   note: {scrubber.text(line)}" for line in recording.notes]
    header.append("# Replay it with simloop.replay(drive, this_file), or edit it into the test you want.")
    target.parent.mkdir(parents=True, exist_ok=True)
    text = scrubbed_scenario(recording.scenario, scrubber).to_yaml()
    target.write_text("\n".join(header) + "\n" + text, encoding="utf-8")
    return target


def scrubbed_scenario(scenario: Scenario, scrubber: Scrubber | None = None) -> Scenario:
    """``scenario`` with every string in it (texts, tool inputs and outputs, keys) scrubbed of secrets.

    ``scrubber`` defaults to ``Scrubber()``: key-shaped strings and the values of the API key variables.
    """
    scrub = scrubber if scrubber is not None else Scrubber()

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return scrub.text(value)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return Scenario.model_validate(clean(scenario.model_dump()))
