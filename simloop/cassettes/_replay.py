"""Replaying a cassette as the model (`Recorded`), with drift reports (`request_diff`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from simloop.cassettes._convert import RecordedCall, Recording, Source, load_recording
from simloop.errors import UsageError
from simloop.models import ModelRequest, RecordedError, ScriptExhausted
from simloop.protocol.render import Turn
from simloop.protocol.validate import Rejection, thinking_signature
from simloop.scenario import Reply

# =========================================================================== replay as a model


@dataclass(frozen=True, slots=True)
class Drift:
    """How one request differed from the recorded one (a tolerant replay collects them)."""

    call: int
    interaction: int
    lines: tuple[str, ...]

    def __str__(self) -> str:
        return f"model call {self.call} (cassette interaction {self.interaction}):\n" + "\n".join(
            f"  {line}" for line in self.lines
        )


class RecordingDiverged(ScriptExhausted):
    """The loop sent a request that differs from the recorded one (strict replay).

    A `BaseException`, like `ScriptExhausted`: neither the SDK's retries nor the loop's own
    ``except Exception`` may turn it into an API error, and `Sim.run` reports it to the user.
    ``drift`` holds the call and the diff lines.
    """

    def __init__(self, message: str, drift: Drift) -> None:
        super().__init__(message)
        self.drift = drift


class RecordingExhausted(ScriptExhausted):
    """The loop asked for more model calls than the recording holds."""


class Recorded:
    """A model policy that answers with a cassette's recorded replies, in order.

    Each model call the loop sends (``POST /v1/messages``, ``/v1/chat/completions`` or ``/v1/responses``) is
    matched to the next recorded one (retries included; ``count_tokens`` is answered by the simulator); an OpenAI
    call is compared in the Messages form both wires are translated to (the diff's paths are that form's:
    ``messages[3].content[0]``), a ``previous_response_id`` standing for the conversation it names.  The recorded answer is served
    exactly (content, ids, usage), as JSON or as a stream, whichever the loop asks for.  When the
    request differs from the recorded one, ``strict`` (the default) stops the run with
    `RecordingDiverged`: which call, which message, which block, what changed; ``strict=False``
    serves by position and appends a `Drift` to ``drift``.  Fields that only steer the transport
    (`TRANSPORT_FIELDS`: ``stream``, and the ``thread`` current SDKs send and older recordings lack)
    are never part of the match; a drift report says when they differ too.  Top-level keys in
    ``ignore`` are not compared either.  Thinking blocks are re-signed with the simulator's
    signature, so the simulator still checks that the loop sends them back unchanged.

    A recorded error is served with its recorded status, headers and body.  When the simulator
    itself rejects the loop's request with the status the recording shows next (the loop sent the
    same invalid request), that recorded call is used up too, so the recovery is matched against
    the call that followed it.

    Example::

        with simloop.Sim(to_scenario(path), model=Recorded(path)) as sim:
            sim.run(drive)
    """

    def __init__(
        self,
        source: Source,
        *,
        strict: bool = True,
        ignore: Iterable[str] = (),
        resign_thinking: bool = True,
    ) -> None:
        if isinstance(source, (bytes, bytearray)) or not isinstance(source, (str, os.PathLike, Recording, Sequence)):
            raise UsageError(
                f"Recorded(source): give a cassette path, a list of Interaction or a Recording; got "
                f"{type(source).__name__}"
            )
        self.recording = load_recording(source)
        self.strict = strict
        self.ignore = frozenset(ignore) | TRANSPORT_FIELDS
        self.resign_thinking = resign_thinking
        self.drift: list[Drift] = []
        self.served = 0

    @property
    def calls(self) -> list[RecordedCall]:
        """The recorded model calls, in order."""
        return self.recording.calls

    def reply(self, request: ModelRequest) -> Reply | Turn | RecordedError:
        """The next recorded answer; raises `RecordingDiverged` / `RecordingExhausted` (BaseExceptions)."""
        calls = self.recording.calls
        if self.served >= len(calls):
            raise RecordingExhausted(
                f"the recording {self.recording.source} has {len(calls)} model call(s) and the loop asked for "
                f"another: model call {request.call} (attempt {request.attempt}). The loop now makes more calls "
                "than when it was recorded: re-record the cassette, or convert it (to_scenario) and add replies."
            )
        call = calls[self.served]
        self.served += 1
        self._compare(call, request)
        return self._serve(call.answer)

    def rejected(self, request: ModelRequest, rejection: Rejection) -> None:
        """The simulator refused ``request`` itself: use up the next recorded call if it is that error.

        The server calls this (instead of `reply`) for a request its validator rejects.  A recording
        whose next call is an error with the same status was answered the same way, so that call
        is consumed (and compared like any other); otherwise the recording is left where it is.
        """
        calls = self.recording.calls
        if self.served >= len(calls):
            return
        call = calls[self.served]
        if isinstance(call.answer, RecordedError) and call.answer.status == rejection.status:
            self.served += 1
            self._compare(call, request)

    def leftovers(self) -> list[str]:
        """The recorded calls the run never reached."""
        return [
            f"{self.recording.source}: interaction {c.interaction} (recorded model call {n}, {c.kind}) was never "
            "played back"
            for n, c in enumerate(self.recording.calls[self.served:], start=self.served + 1)
        ]

    def __repr__(self) -> str:
        return f"Recorded({self.recording.source!r}, strict={self.strict})"

    # -- internals ---------------------------------------------------------------------------

    def _compare(self, call: RecordedCall, request: ModelRequest) -> None:
        lines = request_diff(self._expected(call.request), self._sent(call.request, request))
        if not lines:
            return
        for name in sorted(TRANSPORT_FIELDS):
            recorded, sent = call.request.get(name, _ABSENT), request.body.get(name, _ABSENT)
            if recorded != sent:
                lines.append(
                    f"{name}: recorded {_shown(recorded)}, sent {_shown(sent)} (not compared: it only steers the "
                    "transport)"
                )
        drift = Drift(call=request.call, interaction=call.interaction, lines=tuple(lines))
        if self.strict:
            raise RecordingDiverged(self._explain(request, call, drift), drift)
        self.drift.append(drift)

    def _serve(self, answer: Turn | Reply | RecordedError) -> Turn | Reply | RecordedError:
        if not isinstance(answer, Turn) or not self.resign_thinking:
            return answer
        return _resigned(answer)

    def _expected(self, body: dict[str, Any]) -> dict[str, Any]:
        expected = {k: v for k, v in body.items() if k not in self.ignore}
        if self.resign_thinking and isinstance(expected.get("messages"), list):
            expected["messages"] = [_resign_message(m) for m in expected["messages"]]
        return expected

    def _sent(self, recorded: dict[str, Any], request: ModelRequest) -> dict[str, Any]:
        body = request.body
        thread = recorded.get("thread")
        if isinstance(thread, dict) and thread.get("type") == "continue":
            # The request stands for its whole thread: compare what the recording sent, the new messages.
            new = recorded.get("messages")
            tail = request.conversation[-len(new):] if isinstance(new, list) and new else []
            sent = {k: body[k] for k in recorded if k in body and k != "messages" and k not in self.ignore}
            sent["messages"] = tail
            return sent
        return {k: v for k, v in body.items() if k not in self.ignore}

    def _explain(self, request: ModelRequest, call: RecordedCall, drift: Drift) -> str:
        where = f"{self.recording.source}, interaction {call.interaction}"
        return "\n".join([
            f"the loop's request for model call {request.call} differs from the recording ({where}):",
            *(f"  {line}" for line in drift.lines),
            (
                "If the change is intended, re-record the cassette (record(path, mode='rewrite')); to replay anyway, "
                "serving the recorded replies by position and collecting the drift, use Recorded(path, strict=False)."
            ),
        ])


#: Request fields that only steer the transport (how the answer is delivered, whether the server keeps
#: the history): never part of a replay's match.
TRANSPORT_FIELDS = frozenset({"stream", "thread"})
_ABSENT = object()


def _shown(value: Any) -> str:
    return "nothing" if value is _ABSENT else _short(value)


def _resigned(turn: Turn) -> Turn:
    if not any(b.get("type") == "thinking" for b in turn.content):
        return turn
    content = [_resign_block(b) for b in turn.content]
    return Turn(
        content=content, stop_reason=turn.stop_reason, stop_sequence=turn.stop_sequence,
        stop_details=turn.stop_details, usage=turn.usage, id=turn.id, model=turn.model, extra=turn.extra,
    )


def _resign_block(block: Any) -> Any:
    if isinstance(block, dict) and block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
        return {**block, "signature": thinking_signature(block["thinking"])}
    return block


def _resign_message(message: Any) -> Any:
    if isinstance(message, dict) and message.get("role") == "assistant" and isinstance(message.get("content"), list):
        return {**message, "content": [_resign_block(b) for b in message["content"]]}
    return message


# --------------------------------------------------------------------------- the diff


def request_diff(recorded: Any, sent: Any, *, limit: int = 12) -> list[str]:
    """Where a request differs from the recorded one, one line each (empty when they are equal).

    Each line gives the path (``messages[2].content[0].content``), what it is (``user message,
    tool_result block for toolu_…``) and the change, e.g. ``recorded 'shipped', sent 'lost'``.
    """
    found: list[tuple[list[str | int], str]] = []
    _walk(recorded, sent, [], found)
    lines = [_line(path, what, recorded, sent) for path, what in found[:limit]]
    if len(found) > limit:
        lines.append(f"... and {len(found) - limit} more difference(s)")
    return lines


def _walk(a: Any, b: Any, path: list[str | int], out: list[tuple[list[str | int], str]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                out.append(([*path, key], f"only in the recording: {_short(a[key])}"))
            else:
                _walk(a[key], b[key], [*path, key], out)
        for key in b:
            if key not in a:
                out.append(([*path, key], f"only in the loop's request: {_short(b[key])}"))
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            what = "messages" if path == ["messages"] else "items"
            out.append((path, f"the recording has {len(a)} {what}, the loop's request {len(b)}"))
        for index, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, [*path, index], out)
        if len(b) > len(a):
            out.append(([*path, len(a)], f"only in the loop's request: {_short(b[len(a)])}"))
        elif len(a) > len(b):
            out.append(([*path, len(b)], f"only in the recording: {_short(a[len(b)])}"))
        return
    if a == b and type(a) is type(b):
        return
    if isinstance(a, str) and isinstance(b, str):
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        lo = max(0, at - 24)
        pre = "..." if lo else ""
        out.append((path, f"recorded {pre}{a[lo:at + 36]!r}, sent {pre}{b[lo:at + 36]!r} (they differ at character {at})"))
        return
    out.append((path, f"recorded {_short(a)}, sent {_short(b)}"))


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def _line(path: list[str | int], what: str, recorded: Any, sent: Any) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    context = _context(path, recorded, sent)
    return f"{text or 'the body'}{f' ({context})' if context else ''}: {what}"


def _context(path: list[str | int], recorded: Any, sent: Any) -> str:
    if len(path) < 2 or path[0] != "messages" or not isinstance(path[1], int):
        return ""
    index = path[1]
    message = _at(sent, ["messages", index]) or _at(recorded, ["messages", index])
    role = message.get("role") if isinstance(message, dict) else None
    parts = [f"message {index}" + (f", {role}" if role else "")]
    if len(path) >= 4 and path[2] == "content" and isinstance(path[3], int):
        block = _at(recorded, path[:4]) or _at(sent, path[:4])
        if isinstance(block, dict):
            kind = str(block.get("type"))
            ref = block.get("tool_use_id") or block.get("id")
            name = block.get("name")
            detail = f" {name}" if name else ""
            detail += f" {ref}" if ref else ""
            parts.append(f"block {path[3]}: {kind}{detail}")
        else:
            parts.append(f"block {path[3]}")
    return "; ".join(parts)


def _at(value: Any, path: Sequence[str | int]) -> Any:
    for part in path:
        found = (isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value)) or (
            isinstance(part, str) and isinstance(value, dict) and part in value
        )
        if not found:
            return None
        value = value[part]
    return value
