"""A model and tool faults drawn by Hypothesis as the loop runs, and the scenario that replays them.

`GeneratedModel` answers each request with a reply decoded *then*, from the
run's `Plan` and what the request shows, out of bytes Hypothesis draws a few
replies at a time; every reply stays within what the real API can send for that
request (see `simloop._offer`: the tools it defines and ``tool_choice``, its
server tools, its ``stop_sequences``); `GeneratedFaults` draws the faults
of a reply's tool calls when the first of them starts.  Both record what they
served, so `to_scenario` can write the exact run down as a v1 scenario file:
the replies in the order served (identical neighbours folded into ``repeat``;
a stuck tail into ``then: repeat_last``) and the faults by tool and execution
number.  Replaying that file with `simloop.replay` reproduces the run.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import Frozen, StopTest

from simloop._inputs import POOL, pool_for
from simloop._offer import Offer, ServerTools, fit_pause, offer_of, server_block, stopped_at, with_server_tools
from simloop.models import ModelRequest
from simloop.protocol.validate import context_window
from simloop.scenario import (
    Abort,
    Approval,
    Expect,
    Fault,
    Limits,
    MaxTokensBody,
    Reply,
    Scenario,
    ToolCall,
    ToolSpec,
    Usage,
)
from simloop.strategies import (
    CUT_COUNTS,
    LONG_OUTPUT_SHARE,
    Codec,
    Digits,
    Plan,
    api_fault_codec,
    calls_codec,
    fixed_bytes,
    joined,
    latency_codec,
    slow_latency_codec,
    tool_fault_codec,
    usage_codec,
)
from simloop.transcript import Request, Response, Transcript

__all__ = ["EMPTY_ANSWERS", "GeneratedFaults", "GeneratedModel", "to_scenario"]

Draw = Callable[[st.SearchStrategy[Any]], Any]

_TAPE = 10  # tool-calling replies drawn at once: a ten-call run's in one draw
# Whether a request or a tool execution fails is a small integer choice of its own, and the fault's bytes are
# drawn only when it does: the shrinker then drops a fault by lowering one number, and deletes the choices of
# the steps a failure does not need (a bytes value holding both shrinks far less well).
_GATE = st.integers(0, 9)
#: Whether a conversation's turn ends with empty answers (no text), in three turns of ten; 0, the simplest, is no.
EMPTY_ANSWERS = st.integers(0, 9).map(lambda n: n >= 7)
_NONE: Codec[None] = Codec(0, lambda d: None)
_SHORT = latency_codec(max_s=3.0)
_HEAVY = usage_codec(chance=5)
_TOOL_REPLY = Reply(tool_use=[ToolCall(name="search")])
_DONE = Reply(end_turn="Done.")
_ANSWER = Reply(end_turn="The refund was processed and the customer was told.")  # the plan's plain final answer
_CUT_TEXT = "Sending it now."
ToolKey = tuple[tuple[str, str], ...]
_EMPTY_END = Reply(end_turn="")  # a final answer with no text: what a model may end a turn with after tools


class GeneratedModel:
    """The simulated model of one generated run (a `simloop.models.ModelPolicy`).

    In a conversation (``turns`` given: each user turn's plan and whether its final answers are empty, all
    drawn before the run, see `simloop._campaign.world.World.draw`), each user turn the loop takes (``turn()``,
    the number of turns begun) plays its own plan from its first request on, and a turn's final answer is
    sometimes empty (no text: a model may end a turn that way after tools).  Nothing a turn plays is drawn as
    the turn goes, save its replies' and faults' bytes: a shrink of an earlier turn leaves the later turns'
    choices where they were.  ``server_tools`` says which server tools its replies may run
    (`simloop._offer.with_server_tools`).
    """

    def __init__(
        self,
        draw: Draw,
        plan: Plan,
        *,
        turns: Sequence[tuple[Plan, bool]] | None = None,
        turn: Callable[[], int] | None = None,
        server_tools: ServerTools = "request",
        words: tuple[str, ...] | None = None,
    ) -> None:
        self.draw = draw
        self.server_tools = server_tools
        self.words = words  # what its tool inputs' free text is made of (the task's words; None: the refund story's)
        self.plan = plan
        self.turns = tuple(turns) if turns else None
        self._empty = bool(turns and turns[0][1])  # this turn ends with an empty answer (see _done)
        self.turn = turn
        self._turn = 1
        self.lives: Callable[[], int] | None = None  # the Sim's lives (a restart after a crash), when crashes are drawn
        self._life = 1
        self.crash_calls: frozenset[int] = frozenset()  # the model calls (logical, 1-based) the process dies during
        self._crashed: set[int] = set()  # those that died (once each: the call sent again after the restart is new)
        self._last_calls: Reply | None = None
        self.served: list[Reply] = []
        self._burst: list[Reply] = []
        self._tool_steps = 0
        self._stuck: Reply | None = None
        self._ended = False
        self._endings = 0  # how many times the ending was served (see Plan.ending_repeats)
        # the plan's ending as each kind of request lets the model send it (its cut calls drawn for the request's tools)
        self._endings_for: dict[Offer, Reply] = {}
        self._asked: list[dict[str, Any]] = []  # a wandering model's inputs so far
        # the last request's tools, tool_choice and stop_sequences (the very objects) and what they offer: the
        # simulator's parse of a request shares what is unchanged with the last one's and never changes it
        self._offered: tuple[Any, Any, Any, Offer] | None = None
        self._filled = False  # a `Plan.fills` run's window-filled reply was sent
        self._fills = False  # this request's history is past half the window: its reply fills it (see `reply`)
        self._tape = b""  # the bytes of the next replies' draws (see _draw_reply)
        self._at = 0

    def reply(self, request: ModelRequest) -> Reply:
        offer = self._offer(request.body)
        if self.plan.fills and not self._filled:
            self._fills = _results_sent(request.conversation) >= WINDOW_RESULTS
        try:
            reply = self._fit(self._next(offer), offer)
        except Frozen:  # Hypothesis stopped the example in a tool task the loop left running: wind down
            reply = Reply(end_turn="Done.")
        if request.call in self.crash_calls and request.call not in self._crashed and reply.kind != "error":
            self._crashed.add(request.call)  # the process dies while this reply is on its way (see Reply.crash)
            reply = reply.model_copy(update={"crash": True})
        self.served.append(reply)
        return reply

    def _offer(self, body: dict[str, Any]) -> Offer:
        """What the request lets the model send (`simloop._offer.offer_of`), worked out again only when its tools,
        tool_choice or stop_sequences are other objects than the last request's (which is rare: see __init__)."""
        tools, choice, stops = body.get("tools"), body.get("tool_choice"), body.get("stop_sequences")
        last = self._offered
        if last is not None and last[0] is tools and last[1] is choice and last[2] is stops:
            return last[3]
        offer = offer_of(body)
        if self.server_tools != "request":
            offer = with_server_tools(offer, self.server_tools)
        self._offered = (tools, choice, stops, offer)
        return offer

    def leftovers(self) -> list[str]:
        return []

    def _new_turn(self) -> None:
        """A new user turn began: its own plan, and the model starts over (nothing owed from the last turn)."""
        assert self.turn is not None and self.turns is not None
        self._turn = self.turn()
        self.plan, self._empty = self.turns[min(self._turn, len(self.turns)) - 1]
        self._burst, self._tool_steps, self._stuck = [], 0, None
        self._ended, self._endings, self._endings_for, self._filled = False, 0, {}, False

    def _done(self) -> Reply:
        """The plain final answer; in a conversation, in three turns of ten an empty one."""
        return _EMPTY_END if self._empty else _DONE

    def _next(self, offer: Offer) -> Reply:
        if self.lives is not None and self.lives() > self._life:
            self._life = self.lives()
            died_in_call = bool(self.served) and self.served[-1].crash  # the request had the results: no need to ask
            if not died_in_call and self._last_calls is not None and _offered(self._last_calls, offer):
                # the process died before the model saw those calls' results: it asks for them again, as a real
                # model does when its conversation resumes from before them
                return self._last_calls
        if self.turn is not None and self.turn() > self._turn:
            self._new_turn()
        if self._burst:
            return self._burst.pop()
        if self.plan.outage is not None and self._tool_steps >= self.plan.steps:
            return self.plan.outage
        if self.plan.fault_rate:
            fault = api_fault_codec().draw(self.draw) if self.draw(_GATE) >= 10 - self.plan.fault_rate else None
            if fault is not None:
                one: Reply = fault.model_copy(update={"repeat": 1})
                self._burst = [one] * (int(fault.repeat) - 1)
                return one
        if self._ended or (self.plan.persona == "finishes" and self._tool_steps >= self.plan.steps):
            return self._end(offer)
        if self._fills:  # the long history fills the window as the model writes: a cut reply, once
            self._filled, self._fills = True, False
            ending = self.plan.ending
            return _filled(self._cut(ending if ending.kind == "max_tokens" else _WINDOW_CUT, offer))
        if not offer.tools:  # the request lets the model call no tool: it answers (the plan's ending)
            return self._end(offer)
        self._tool_steps += 1
        if self.plan.persona == "stuck" and self._stuck is not None and _offered(self._stuck, offer):
            return self._stuck  # the same reply forever: nothing new to draw (and to shrink)
        reply = self._calls(offer)
        if self.plan.persona == "wanders":
            reply = reply.model_copy(update={"tool_use": self._wander(reply.tool_use or [], offer.tools)})
        if self.plan.persona == "stuck":
            self._stuck = reply
        self._last_calls = reply
        return reply

    def _calls(self, offer: Offer) -> Reply:
        """A tool-calling reply drawn for the request's tools (see `_fit` for ``disable_parallel_tool_use``)."""
        return self._draw_reply(_tool_reply(offer.tools, self.plan.slow, self.plan.deadline_s, self.plan.heavy,
                                            words=self.words))

    def _fit(self, reply: Reply, offer: Offer) -> Reply:
        """``reply`` as the request lets the model send it: one call at most with ``disable_parallel_tool_use``;
        a tool call (drawn for the request's tools) in place of a text answer when ``tool_choice`` forces one."""
        kind = reply.kind
        if kind == "tool_use" and offer.one_call and len(reply.tool_use or ()) > 1:
            return reply.model_copy(update={"tool_use": (reply.tool_use or [])[:1]})
        if offer.forced and kind in ("end_turn", "stop_sequence", "pause_turn"):
            return self._fit(self._calls(offer), offer)
        return reply

    def _draw_reply(self, codec: Codec[Reply]) -> Reply:
        """The next tool-calling reply, read from a tape of `_TAPE` replies' bytes drawn at once.

        Hypothesis's bookkeeping is paid per draw (some 80 µs, far more than a few more bytes cost), and the
        replies of a run are most of its draws: one tape holds a ten-call run's.  The tape's size is fixed
        (it depends on the plan's slow and heavy, not on its steps), so a shrink of the steps leaves the
        tape's bytes where they were, the next replies' included.
        """
        if self._at + codec.size > len(self._tape):
            self._tape, self._at = self.draw(fixed_bytes(codec.size * _TAPE)), 0
        digits = Digits(self._tape, self._at)
        reply = codec.decode(digits)
        self._at = digits.at
        return reply

    def _wander(self, calls: list[ToolCall], key: ToolKey) -> list[ToolCall]:
        """New calls forever: each step asks, of the same tools, inputs it never asked (valid for each schema,
        far out in its pool; a tool whose schema allows nothing new gets an ``attempt`` field when it may)."""
        schemas = dict(key)
        out = []
        for i, call in enumerate(calls):
            schema = json.loads(schemas.get(call.name) or "{}")
            value = dict(pool_for(schema, *(self.words,) if self.words else ()).valid(POOL + 16 * self._tool_steps + i))
            if value in self._asked and schema.get("additionalProperties", True) is not False:
                value["attempt"] = self._tool_steps
            self._asked.append(value)
            out.append(call.model_copy(update={"input": value}))
        return out

    def _end(self, offer: Offer) -> Reply:
        """The plan's ending, ``ending_repeats`` times in a row (a pause continued, a cut-off retried with more
        room, a refusal asked again all meet it again), then plain answers (in a conversation, sometimes empty)."""
        if self._ended:
            return self._done()
        ending = self._endings_for.get(offer)
        if ending is None:
            ending = self._endings_for[offer] = self._materialise(self.plan.ending, offer)
        self._endings += 1
        if self._endings >= self.plan.ending_repeats:
            self._ended = True
        if ending.kind == "end_turn" and self._done() is _EMPTY_END:
            return _EMPTY_END
        return ending

    def _materialise(self, ending: Reply, offer: Offer) -> Reply:
        """The plan's ending as the request lets the model send it (see `simloop._offer`).

        A cut tool-call ending gets its calls drawn for the request's tools (the complete calls the reply made,
        then the cut one, its input cut mid-way; see `simloop.models.turn_from_reply`), a cut text when the
        request offers no tool; a stop-sequence ending stops on one of the request's ``stop_sequences`` (a plain
        answer when it sets none); a paused ending pauses in a server tool the request declares (a plain answer
        when it declares none).  The plan is drawn as before whatever the request, so shrinking is unchanged.
        """
        kind = ending.kind
        if kind == "max_tokens" and self.plan.long:
            return _filled(self._cut(ending, offer))
        if kind == "stop_sequence":
            return self._stop_sequence(ending, offer)
        if kind == "pause_turn":
            name = server_block(offer)
            if name is None:
                return _ANSWER
            return fit_pause(ending, name)
        return self._cut(ending, offer)

    def _cut(self, ending: Reply, offer: Offer) -> Reply:
        """A cut ending as the request lets the model send it (its cut calls drawn for the request's tools)."""
        body = ending.max_tokens
        if not isinstance(body, MaxTokensBody) or not body.tool_use:
            return ending
        if not offer.tools:
            return ending.model_copy(update={"max_tokens": body.text or _CUT_TEXT})
        drawn = self._draw_reply(_tool_reply(offer.tools, self.plan.slow, self.plan.deadline_s, self.plan.heavy, cut=True,
                                             words=self.words))
        calls = list(drawn.tool_use or [])
        cut = MaxTokensBody(text=body.text, tool_use=calls[-1:] if offer.one_call else calls)
        return ending.model_copy(update={"max_tokens": cut, "latency": drawn.latency, "usage": drawn.usage})

    def _stop_sequence(self, ending: Reply, offer: Offer) -> Reply:
        """Stopped on one of the request's stop sequences (drawn when it sets several), the text ending where
        the first sequence the model wrote stopped it; without ``stop_sequences``, the text as a plain answer."""
        text = ending.stop_sequence or ""
        sequences = offer.stop_sequences
        if not sequences:
            return ending.model_copy(update={"stop_sequence": None, "sequence": None, "end_turn": text or _ANSWER.end_turn})
        chosen = sequences[self.draw(_index(len(sequences)))] if len(sequences) > 1 else sequences[0]
        text, sequence = stopped_at(text, sequences, chosen)
        return ending.model_copy(update={"stop_sequence": text, "sequence": sequence})


def _offered(reply: Reply, offer: Offer) -> bool:
    """Whether every call of ``reply`` is of a tool the request offers."""
    return bool(offer.tools) and all(call.name in offer.names for call in reply.tool_use or ())


@functools.cache
def _index(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


class GeneratedFaults:
    """Each tool execution's fault (a `simloop.tools.FaultSource`), drawn with its reply's other calls.

    A loop may run a reply's calls at once, on threads, and so start them in any order; were each
    fault drawn as its execution starts, the draws would follow that order and Hypothesis would see a
    different run each time.  So the first execution that answers a reply's tool_use draws the faults
    of all of that reply's calls, in the reply's order, and each execution takes its call's.  An
    execution that answers no tool_use, or one already answered (a re-run), draws its own.
    """

    def __init__(self, draw: Draw, plan: Plan, tools: Sequence[ToolSpec] = ()) -> None:
        self.draw = draw
        self.plan = plan
        self.fired: list[Fault] = []
        # Hypothesis stopped the example in a tool execution (it grew too large): kept here rather than
        # raised, since the execution may be a task the loop never awaits; `verify` raises it after the run
        self.stopped: StopTest | None = None
        self.transcript: Transcript | None = None  # the run's (set once the Sim exists): the replies' calls
        self._specs = {t.name: t for t in reversed(tools)}  # the first of a name wins, as in the ToolBox
        self.crash_at: frozenset[int] = frozenset()  # the write executions (1-based, in the run) where the process dies
        self._writes = 0
        self._ready: dict[str, Fault | None] = {}  # tool_use id -> its fault, drawn, not yet taken
        self._drawn: set[str] = set()

    def __call__(self, spec: ToolSpec, nth: int, tool_use_id: str | None = None) -> Fault | None:
        if self.crash_at and spec.kind == "write":
            self._writes += 1
            if self._writes in self.crash_at:
                crash = Fault(tool=spec.name, kind="crash", call=nth)
                self.fired.append(crash)
                return crash
        if self.plan.long:  # a long history: every output a large share of the window (drawing nothing)
            fault = Fault(tool=spec.name, kind="huge_output", size=self._long_size(), call=nth)
            self.fired.append(fault)
            return fault
        if not self.plan.tool_fault_rate and not self.plan.slow:
            return None
        try:
            if tool_use_id is not None and tool_use_id not in self._drawn:
                self._draw_reply(tool_use_id, spec)
            drawn = self._ready.pop(tool_use_id) if tool_use_id in self._ready else self._draw(spec)
        except StopTest as stop:
            self.stopped = self.stopped or stop
            return None
        except Frozen:  # stopped before: the run winds down without faults (the model ends it, see reply)
            return None
        if drawn is None:
            return None
        fault = drawn.model_copy(update={"call": nth})
        self.fired.append(fault)
        return fault

    def _long_size(self) -> int:
        """A long run's output size in characters: `LONG_OUTPUT_SHARE` of the window of the model the loop last asked
        for (the default window when none is known)."""
        model: Any = None
        for event in reversed(self.transcript.events if self.transcript is not None else []):
            if isinstance(event, Request) and isinstance(event.body, dict):
                model = event.body.get("model")
                break
        return int(LONG_OUTPUT_SHARE * context_window(model))

    def _draw(self, spec: ToolSpec) -> Fault | None:
        """In ``tool_fault_rate`` chances of ten a fault of the tool's kind; otherwise, in a slow run, a latency
        (a deadline passing while a tool runs, one of a parallel turn's say, is what deadline bugs need)."""
        plan = self.plan
        if plan.tool_fault_rate and self.draw(_GATE) >= 10 - plan.tool_fault_rate:
            return tool_fault_codec(spec.name, spec.kind).draw(self.draw)
        return _slow(plan.deadline_s, spec.name).draw(self.draw) if plan.slow else None

    def _draw_reply(self, tool_use_id: str, spec: ToolSpec) -> None:
        """Draw the faults of the calls of the reply that asked for ``tool_use_id``, in their order
        (a call of a tool not given to this source draws its own when it runs)."""
        for block in self._calls_with(tool_use_id):
            tid = block.get("id")
            known = spec if tid == tool_use_id else self._specs.get(str(block.get("name")))
            if isinstance(tid, str) and tid not in self._drawn and known is not None:
                self._drawn.add(tid)
                self._ready[tid] = self._draw(known)
        self._drawn.add(tool_use_id)

    def _calls_with(self, tool_use_id: str) -> list[dict[str, Any]]:
        events = self.transcript.events if self.transcript is not None else []
        for event in reversed(events):
            if isinstance(event, Response):
                calls = event.tool_uses
                if any(block.get("id") == tool_use_id for block in calls):
                    return calls
        return []


#: In a long run that fills the window (`Plan.fills`; every tool output a quarter of the model's window), the tool
#: results a request sends (its history past half the window) after which the model's reply fills it: a cut reply (the
#: plan's
#: ending when it is a cut, else a cut text) stopped with ``model_context_window_exceeded`` (Anthropic: the response
#: filled the context window; treat it as truncated).  A cut ending of a long run is the window's too.
WINDOW_RESULTS = 2
_WINDOW_CUT = Reply(max_tokens="Here is what the logs show so far: the first failures began when")


def _results_sent(conversation: Sequence[Any]) -> int:
    """How many tool_result blocks a request's history holds."""
    count = 0
    for message in conversation:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return count


def _filled(reply: Reply) -> Reply:
    """A cut reply as one that filled the model's context window (``stop_reason: model_context_window_exceeded``)."""
    body = reply.max_tokens
    text, calls = (body.text, body.tool_use) if isinstance(body, MaxTokensBody) else (body or _CUT_TEXT, [])
    cut = MaxTokensBody(text=text, tool_use=list(calls), stop_reason="model_context_window_exceeded")
    return reply.model_copy(update={"max_tokens": cut})


# What a run decodes its replies and faults from (see `simloop.strategies.Codec`), built once per key.


@functools.lru_cache(maxsize=256)
def _tool_reply(tools: ToolKey, slow: bool, deadline_s: float | None, heavy: bool, cut: bool = False,
                words: tuple[str, ...] | None = None) -> Codec[Reply]:
    """A reply asking for ``tools`` (inputs from their schemas), with its latency (and budget-breaking usage
    when heavy); ``cut``: the calls of a reply cut off in its last one (`simloop.strategies.CUT_COUNTS`)."""
    latency = slow_latency_codec(deadline_s) if slow else _SHORT
    usage = _HEAVY if heavy else _NONE
    # a copy of a valid reply with the drawn fields (a validation costs more than drawing the reply, and
    # even `model_construct` fills every field): the codecs give valid fields
    return joined(_tool_reply_of, latency, usage, calls_codec(tools, counts=CUT_COUNTS if cut else None, words=words))


_TOOL_FIELDS = dict(_TOOL_REPLY.__dict__)
_TOOL_SET = frozenset(_TOOL_REPLY.__pydantic_fields_set__ | {"tool_use", "latency", "usage"})
_set_attr = object.__setattr__


def _tool_reply_of(latency: float, usage: Usage | None, calls: list[ToolCall]) -> Reply:
    """``_TOOL_REPLY.model_copy(update={"tool_use": calls, "latency": latency, "usage": usage})``, built directly.

    What pydantic's `model_copy` makes of a frozen model without extras or private attributes (a copy of its
    ``__dict__`` with the update, its fields set with the updated names), without its generic `copy.copy` of each
    part: a drawn reply is built on every tool-calling reply of every run.  (`tests/test_generated_codec.py`
    pins it to `model_copy`.)
    """
    reply = Reply.__new__(Reply)
    fields = _TOOL_FIELDS.copy()
    fields["tool_use"], fields["latency"], fields["usage"] = calls, latency, usage
    _set_attr(reply, "__dict__", fields)
    _set_attr(reply, "__pydantic_extra__", None)
    _set_attr(reply, "__pydantic_fields_set__", set(_TOOL_SET))
    _set_attr(reply, "__pydantic_private__", None)
    return reply


@functools.lru_cache(maxsize=256)
def _slow(deadline_s: float | None, name: str) -> Codec[Fault | None]:
    """A slow run's tool latency: minutes too, not only the replies' (0.0, no fault, is the simplest)."""
    latency = slow_latency_codec(deadline_s)
    return Codec(latency.size, lambda d: Fault(tool=name, kind="slow", latency=v) if (v := latency.decode(d)) else None)


def to_scenario(
    *,
    name: str,
    task: str,
    tools: Sequence[ToolSpec],
    limits: Limits,
    served: Sequence[Reply],
    faults: Sequence[Fault],
    halted: bool,
    followups: Sequence[str] = (),
    abort: Abort | None = None,
    approvals: Sequence[Approval] | None = None,
    requires: Sequence[str] = (),
    prices: Mapping[str, Any] | None = None,
) -> Scenario:
    """The run written down as a script that replays it, and that a correct loop replays cleanly.

    After the served replies the model ends the run as a model would (``then: end_turn``, a short final
    answer to every further request), so a loop that stops later than the one that failed (a fixed loop,
    or one that retries more) is answered instead of running out of script; a runaway's stuck tail is
    ``then: repeat_last``.  ``expect`` states the invariants to hold (no violations), not how the
    failing run ended, so the file is a regression test that passes once the loop is fixed; it is
    ``strict: false``, since a fixed loop may leave part of the failing run's script unused.  A conversation
    keeps the user's ``followups`` (the turns it took after the task), its replies served in order across them,
    a run at the permission gate the person's ``approvals``, and ``requires`` what the run held the loop to
    beyond the rest of the file (``context``: see Claims).
    """
    replies = list(served)
    then = "end_turn"
    if halted and len(replies) >= 2 and replies[-1] == replies[-2]:
        while len(replies) >= 2 and replies[-1] == replies[-2]:
            replies.pop()
        then = "repeat_last"
    return Scenario(
        name=name,
        task=task,
        followups=list(followups),
        tools=list(tools),
        model=_fold(replies),
        then=then,  # type: ignore[arg-type]
        faults=list(faults),
        limits=limits,
        abort=abort,
        approvals=list(approvals) if approvals is not None else None,
        requires=list(requires),  # type: ignore[arg-type]
        prices=dict(prices or {}),  # the prices the loop was held to: the replay prices its replies the same
        expect=Expect(violations=[]),
        strict=False,  # the fixed loop may stop before the failing run's script is used up: that is the point
    )


def _fold(replies: list[Reply]) -> list[Reply]:
    """Identical neighbours as one reply with ``repeat``."""
    out: list[Reply] = []
    for r in replies:
        if out and out[-1].model_copy(update={"repeat": 1}) == r and r.repeat == 1:
            prev = out[-1]
            out[-1] = prev.model_copy(update={"repeat": int(prev.repeat) + 1})
        else:
            out.append(r)
    return out
