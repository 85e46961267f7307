"""The generated world stays inside what the real API can send for the request it answers.

Server tool blocks and ``pause_turn`` only for a request that declares a server tool (of that tool's kind);
``stop_sequence`` only with ``stop_sequences`` set (the field one of them, the text stopped where the first one
would stop it); ``tool_use`` only of the request's own custom tools (none without tools or with ``tool_choice:
none``, one at most with ``disable_parallel_tool_use``, always one with ``tool_choice`` ``any``/``tool``);
thinking blocks only with thinking enabled.  A world that breaks these blames correct loops for replies they
can never get (issue 25, cause 3).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import simloop
from examples import correct_sync
from examples._common import converse, durable_run_tool, with_web_search, writes_of
from simloop import strategies
from simloop._offer import offer_of, stopped_at
from simloop.generated import GeneratedModel
from simloop.models import Ids, ModelRequest, turn_from_reply
from simloop.sim import Sim
from simloop.strategies import DEFAULT_TOOLS

CUSTOM = [t.schema_dict() for t in DEFAULT_TOOLS]
#: Anthropic-defined tools by type -> the server_tool_use name the model writes for it (None: a client tool,
#: or a server tool whose blocks the generated model does not write: never called, never paused in).
DEFINED: dict[str, tuple[str, str | None]] = {
    "web_search_20250305": ("web_search", "web_search"),
    "web_fetch_20250910": ("web_fetch", "web_fetch"),
    "code_execution_20250522": ("code_execution", "code_execution"),
    "code_execution_20250825": ("code_execution", "bash_code_execution"),
    "bash_20250124": ("bash", None),
    "tool_search_tool_regex_20251119": ("tool_search_tool_regex", None),
}
STOPS = ("###", "END", "e", "refund was", "\n\nHuman:")
TASK = [{"role": "user", "content": "Refund order 1234."}]


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A request the real API accepts, with or without each feature: custom tools, server tools (one kind or
    several), ``tool_choice`` of every type, ``disable_parallel_tool_use``, ``stop_sequences``, thinking."""
    custom = draw(st.lists(st.sampled_from(CUSTOM), unique_by=lambda t: t["name"], max_size=2))
    defined = draw(st.lists(st.sampled_from(sorted(DEFINED)), unique_by=lambda t: DEFINED[t][0], max_size=2))
    tools = [*custom, *({"type": kind, "name": DEFINED[kind][0]} for kind in defined)]
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "messages": TASK}
    if tools:
        body["tools"] = tools
        names = [t["name"] for t in tools]
        kinds = [{"type": "auto"}, {"type": "any"}, {"type": "none"}, *({"type": "tool", "name": n} for n in names)]
        choice = draw(st.none() | st.sampled_from(kinds))
        if choice is not None:
            if choice["type"] != "none" and draw(st.booleans()):
                choice = {**choice, "disable_parallel_tool_use": True}
            body["tool_choice"] = choice
    if draw(st.booleans()):
        body["stop_sequences"] = draw(st.lists(st.sampled_from(STOPS), min_size=1, max_size=3, unique=True))
    forced = body.get("tool_choice", {}).get("type") in ("any", "tool")
    if not forced and draw(st.booleans()):  # (the API refuses a forced tool_choice with thinking)
        body["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    return body


def breaches(body: dict[str, Any], turn: Any) -> list[str]:
    """What in the rendered reply ``turn`` the real API could not send for ``body`` (empty: nothing)."""
    out: list[str] = []
    tools = body.get("tools") or []
    choice = body.get("tool_choice") or {}
    custom = {t["name"] for t in tools if "type" not in t}
    if choice.get("type") == "none":
        custom = set()
    elif choice.get("type") == "tool":
        custom &= {choice["name"]}
    server = {DEFINED[t["type"]][1] for t in tools if "type" in t} - {None}
    stops = body.get("stop_sequences") or []
    content, reason = turn.content, turn.stop_reason
    kinds = [b["type"] for b in content]
    calls = [b["name"] for b in content if b["type"] == "tool_use"]
    if not set(calls) <= custom:
        out.append(f"tool_use of {sorted(set(calls) - custom)}; the request offers {sorted(custom)}")
    if choice.get("disable_parallel_tool_use") and len(calls) > 1:
        out.append(f"{len(calls)} tool_use blocks with disable_parallel_tool_use")
    if choice.get("type") in ("any", "tool") and custom and reason not in ("tool_use", "max_tokens", "refusal"):
        out.append(f"stop_reason {reason} with tool_choice {choice['type']}")
    if choice.get("type") in ("any", "tool") and reason == "tool_use" and "text" in kinds:
        out.append("text before a forced tool call")
    used = {b["name"] for b in content if b["type"] == "server_tool_use"}
    results = {b["type"].removesuffix("_tool_result") for b in content
               if b["type"].endswith("_tool_result") and b["type"] != "tool_result"}
    if not (used | results) <= server:
        out.append(f"server tool blocks of {sorted(used | results)}; the request declares {sorted(server)}")
    if reason == "pause_turn" and not server:
        out.append("pause_turn for a request that declares no server tool")
    if reason == "stop_sequence":
        text = "".join(b["text"] for b in content if b["type"] == "text")
        if turn.stop_sequence not in stops:
            out.append(f"stop_sequence {turn.stop_sequence!r}; the request sets {stops}")
        elif any(s in text for s in stops) or stopped_at(text, stops, turn.stop_sequence) != (text, turn.stop_sequence):
            out.append(f"text {text!r} runs past where {stops} stop it")
    if "thinking" in kinds and not body.get("thinking"):
        out.append("a thinking block without thinking enabled")
    return out


@st.composite
def _replies_seen(draw: st.DrawFn) -> Counter[str]:
    """Up to 8 generated replies to requests a loop may vary, each checked against what its request allows; the
    endings and block types they showed."""
    seen: Counter[str] = Counter()
    plan = draw(strategies.plans())
    model = GeneratedModel(draw, plan)
    sent = draw(st.lists(bodies(), min_size=1, max_size=3))  # a loop may vary its requests
    ids = Ids(random.Random(0))
    for call in range(1, 9):
        body = sent[draw(st.integers(0, len(sent) - 1))] if len(sent) > 1 else sent[0]
        request = ModelRequest(call=call, attempt=0, body=body, conversation=TASK, stream=False)
        reply = model.reply(request)
        if reply.kind == "error":
            continue
        turn = turn_from_reply(reply, request, ids)
        assert breaches(body, turn) == [], (body, reply)
        seen[str(turn.stop_reason)] += 1
        seen.update(f"block {b['type']}" for b in turn.content)
    return seen


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(_replies_seen())
def test_every_generated_reply_is_one_the_real_api_can_send_for_its_request(seen: Counter[str]) -> None:
    """`_replies_seen` asserts it of every reply it draws (``breaches``), as it draws them."""


@pytest.mark.parametrize("kind", ["tool_use", "end_turn", "max_tokens", "refusal", "pause_turn", "stop_sequence",
                                  "block server_tool_use", "block web_search_tool_result", "block thinking"])
def test_the_world_keeps_its_width_where_the_request_allows_it(kind: str) -> None:
    """Every ending and block still comes where a request allows it: searched for (``find``), so the test does not
    depend on which examples one Hypothesis release happens to draw first."""
    found = find(_replies_seen(), lambda seen: seen[kind] > 0,
                 settings=settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck)))
    assert found[kind] > 0


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_the_offer_follows_each_request_when_it_shares_the_last_ones_tools(data: st.DataObject) -> None:
    """The model works out what a request offers again only when its tools, tool_choice or stop_sequences are other
    objects than the last request's (the simulator's parse shares them); a request with the same tools and a new
    tool_choice is answered for that tool_choice.  The defect: an offer cached by the tools alone."""
    model = GeneratedModel(data.draw, data.draw(strategies.plans(min_steps=3, max_steps=3, personas=(("finishes", 1),),
                                                                  faults=False)))
    first: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 4096, "messages": TASK, "tools": CUSTOM}
    ids = Ids(random.Random(0))
    for call, body in enumerate([first, {**first, "tool_choice": {"type": "none"}}, first], start=1):
        request = ModelRequest(call=call, attempt=0, body=body, conversation=TASK, stream=False)
        reply = model.reply(request)
        assert breaches(body, turn_from_reply(reply, request, ids)) == [], (call, body, reply)
        if call == 1:
            assert reply.kind == "tool_use"  # the plan's first step asks for a tool the request offers
        if call == 2:
            assert not reply.tool_use  # tool_choice none: no tool_use, though the tools are the same objects

def test_a_stop_sequence_ends_the_text_where_the_first_one_completes() -> None:
    assert stopped_at("Here is the summary", ["###"], "###") == ("Here is the summary", "###")
    assert stopped_at("Here is the summary", ["###", "e"], "###") == ("H", "e")
    assert stopped_at("The refund was sent", ["refund was", "###"], "###") == ("The ", "refund was")
    assert stopped_at("ab", ["b#", "#"], "#") == ("a", "b#")  # (a tie on the end: the longer, earlier start)
    assert stopped_at("a", ["ab", "b"], "b") == ("", "ab")


def test_the_offer_reads_custom_and_server_tools_apart() -> None:
    body = {"tools": [*CUSTOM, {"type": "web_search_20250305", "name": "web_search"},
                      {"type": "bash_20250124", "name": "bash"}], "tool_choice": {"type": "tool", "name": "send_email"}}
    offer = offer_of(body)
    assert offer.names == {"send_email"} and offer.forced and offer.server == ("web_search",)
    assert offer_of({"tools": CUSTOM, "tool_choice": {"type": "none"}}).tools == ()
    assert offer_of({"tools": [{"type": "web_search_20250305", "name": "web_search"}],
                     "tool_choice": {"type": "any"}}).forced is False  # only a server tool: no custom call to force
    assert offer_of({"stop_sequences": ["###", ""]}).stop_sequences == ("###",)


def _plain(sim: Sim) -> list[simloop.Outcome]:
    """The reference loop declaring the scenario's tools only: no server tool, no stop_sequences."""
    run_tool = durable_run_tool(sim)
    return converse(sim.user_turns, lambda text, history: correct_sync.run_agent(
        sim.client, sim.tool_schemas, run_tool, text, sim.limits, model=sim.model, system=sim.system,  # type: ignore[arg-type]
        writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))


def _searching(sim: Sim) -> list[simloop.Outcome]:
    """The same loop declaring the API's web search as well."""
    run_tool = durable_run_tool(sim)
    return converse(sim.user_turns, lambda text, history: correct_sync.run_agent(
        sim.client, with_web_search(sim.tool_schemas), run_tool, text, sim.limits, model=sim.model,
        system=sim.system, writes=writes_of(sim), history=history, stop=sim.abort.is_set,
    ))


@pytest.mark.parametrize(("drive", "pauses"), [(_plain, False), (_searching, True)])
def test_a_loop_declaring_no_server_tool_and_no_stop_sequences_never_meets_them(drive: Any, pauses: bool) -> None:
    replies: Counter[str] = Counter()

    def recorded(sim: Sim) -> Any:
        out = drive(sim)
        for response in sim.transcript.responses:
            message = response.message or {}
            replies[str(message.get("stop_reason"))] += 1
            replies.update(b.get("type") for b in message.get("content") or [])
        return out

    report = simloop.verify(recorded, limits={"max_steps": 10, "deadline_s": 300}, max_examples=120, seed=0,
                            turns=2, abort=True)
    assert report.ok
    assert replies["tool_use"] > 0 and replies["refusal"] > 0
    assert replies["stop_sequence"] == 0  # neither loop sets stop_sequences
    assert (replies["pause_turn"] > 0) == pauses and (replies["server_tool_use"] > 0) == pauses


# -- verify(server_tools=...): on, off, or as the request declares (issue 31 item 3) ---------------------------------


def _counted(drive: Any, replies: Counter[str]) -> Any:
    """``drive``, counting the stop reasons and block types of every reply its runs got."""

    def counted(sim: Sim) -> Any:
        out = drive(sim)
        for response in sim.transcript.responses:
            message = response.message or {}
            replies[str(message.get("stop_reason"))] += 1
            replies.update(b.get("type") for b in message.get("content") or [])
        return out

    return counted


def _pause_final_plain(sim: Sim) -> simloop.Outcome:
    """The pause-as-final defect, declaring the scenario's tools only (no server tool)."""
    from examples import pause_turn_final

    return pause_turn_final.run_agent(sim.client, sim.tool_schemas, sim.run_tool, sim.task, sim.limits,  # type: ignore[arg-type]
                                      model=sim.model, system=sim.system)


LIMITS = {"max_steps": 10, "deadline_s": 300}


def test_server_tools_off_never_pauses_a_loop_that_declares_web_search() -> None:
    replies: Counter[str] = Counter()
    report = simloop.verify(_counted(_searching, replies), limits=LIMITS, max_examples=60, seed=0, server_tools="off")
    assert report.ok and replies["tool_use"] > 0
    assert replies["pause_turn"] == 0 and replies["server_tool_use"] == 0 and replies["web_search_tool_result"] == 0
    # the defect that returns a pause as its answer is never shown one, so off passes it (by request it fails)
    from examples import pause_turn_final

    assert simloop.verify(pause_turn_final.drive, limits=LIMITS, max_examples=60, seed=0, server_tools="off").ok
    with pytest.raises(simloop.InvariantViolation, match="honest_outcome"):
        simloop.verify(pause_turn_final.drive, limits=LIMITS, max_examples=60, seed=0)


def test_server_tools_on_pauses_a_loop_that_declares_none() -> None:
    replies: Counter[str] = Counter()
    report = simloop.verify(_counted(_plain, replies), limits=LIMITS, max_examples=60, seed=0, server_tools="on")
    assert report.ok  # the correct loop sends the paused turn back, declared or not
    assert replies["pause_turn"] > 0 and replies["server_tool_use"] > 0 and replies["web_search_tool_result"] > 0
    # the defect declaring no server tool: by request it never pauses (passes), on it is caught
    assert simloop.verify(_pause_final_plain, limits=LIMITS, max_examples=60, seed=0).ok
    with pytest.raises(simloop.InvariantViolation, match="honest_outcome"):
        simloop.verify(_pause_final_plain, limits=LIMITS, max_examples=60, seed=0, server_tools="on")


def test_server_tools_on_runs_the_kind_the_request_declares() -> None:
    body = {"tools": [*CUSTOM, {"type": "web_fetch_20250910", "name": "web_fetch"}]}
    from simloop._offer import with_server_tools

    offer = offer_of(body)
    assert with_server_tools(offer, "on").server == ("web_fetch",) == with_server_tools(offer, "request").server
    assert with_server_tools(offer, "off").server == ()
    assert with_server_tools(offer_of({"tools": CUSTOM}), "on").server == ("web_search",)


def test_server_tools_takes_request_on_or_off() -> None:
    with pytest.raises(simloop.UsageError, match=r"'request' .* 'on' .* 'off' .*; got 'yes'"):
        simloop.verify(_plain, server_tools="yes", max_examples=1)  # type: ignore[arg-type]
