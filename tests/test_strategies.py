"""The codecs behind the per-reply strategies: one bytes choice, read byte by byte, zero the simplest."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import find, given
from hypothesis import strategies as st

import simloop
from simloop import strategies
from simloop.generated import _slow, _tool_reply
from simloop.scenario import Fault, Reply, ToolCall
from simloop.strategies import Codec, Digits

NAMES = ("search", "send_email")
CODECS: dict[str, Codec[Any]] = {
    "latency": strategies.latency_codec(),
    "short latency": strategies.latency_codec(3.0),
    "slow latency": strategies.slow_latency_codec(300.0),
    "usage": strategies.usage_codec(),
    "calls": strategies.calls_codec(NAMES),
    "api fault": strategies.api_fault_codec(),
    "tool fault": strategies.tool_fault_codec("send_email", "write"),
}


@pytest.mark.parametrize("name", CODECS)
@given(data=st.data())
def test_a_codec_reads_exactly_its_size(name: str, data: st.DataObject) -> None:
    codec = CODECS[name]
    digits = Digits(data.draw(st.binary(min_size=codec.size, max_size=codec.size)))
    codec.decode(digits)
    assert digits.at == codec.size


def test_zero_bytes_are_the_simplest_values() -> None:
    def zero(codec: Codec[Any]) -> Any:
        return codec.decode(Digits(bytes(codec.size)))

    assert zero(CODECS["latency"]) == 0.0
    assert zero(CODECS["slow latency"]) == 0.0
    assert zero(CODECS["usage"]) is None
    assert zero(CODECS["calls"]) == [ToolCall(name="search", input={"q": "refund"})]
    reply = zero(CODECS["api fault"])
    assert (reply.error, reply.repeat, reply.latency, reply.retry_after) == (429, 1, 0.0, 1.0)
    assert zero(CODECS["tool fault"]) == Fault(tool="send_email", kind="raise", error="ConnectionError")


def test_a_byte_picks_in_proportion_to_the_weights() -> None:
    distinct = b"".join(bytes([0x10 * i, 0, 0]) for i in range(8))  # eight calls that differ, each valid
    shapes = Counter(
        (len(calls), calls[-1] == calls[0] and len(calls) > 1)
        for calls in (CODECS["calls"].decode(Digits(bytes([b]) + distinct)) for b in range(256))
    )
    # weights (of 34): one call 16, two 5, three 3, four 2, five to eight 1 each; a call and its duplicate 2,
    # two calls and a duplicate 1, three and a duplicate 1
    expected = {(1, False): 16, (2, False): 5, (3, False): 3, (4, False): 2, (5, False): 1, (6, False): 1,
                (7, False): 1, (8, False): 1, (2, True): 2, (3, True): 1, (4, True): 1}
    assert shapes == pytest.approx({k: 256 * w / 34 for k, w in expected.items()}, abs=1)
    assert Digits(b"\xff").pick("abc") == "c"
    assert Digits(b"\xff\xff").below(7) == 6


def test_two_bytes_spread_a_number_evenly() -> None:
    seen = {Digits(bytes([hi, lo])).below(1600) for hi in range(256) for lo in range(0, 256, 8)}
    assert seen == set(range(1600))


def test_a_long_latency_shrinks_to_just_past_the_threshold() -> None:
    assert 100 < find(strategies.latencies(), lambda s: s > 100) <= 100.01


def test_generated_parts_shrink_to_their_simplest() -> None:
    reply = find(_tool_reply(NAMES, True, 300.0, True).strategy(), lambda r: r.latency > 60 and r.usage is not None)
    assert reply.tool_use == [ToolCall(name="search", input={"q": "refund"})]
    assert reply.usage is not None and (reply.usage.input_tokens, reply.usage.output_tokens) == (1, 1)
    assert find(strategies.api_faults(), lambda r: r.error == "timeout").repeat == 1
    assert find(strategies.faults(), lambda f: any(x.kind == "commit_then_raise" for x in f)) == [
        Fault(tool="send_email", kind="commit_then_raise")
    ]
    assert find(_slow(300.0, "search").strategy(), lambda f: f is not None) == Fault(tool="search", kind="slow", latency=0.05)


def test_two_identical_calls_in_one_reply_are_found() -> None:
    calls = find(strategies.tool_calls(NAMES), lambda c: len(c) == 2 and c[0] == c[1])
    assert calls == [ToolCall(name="search", input={"q": "refund"})] * 2


def test_weights_a_byte_cannot_pick_from_are_refused_with_the_fix() -> None:
    assert strategies.table([("a", 20), ("b", 10)]) == ("a", "a", "b")  # divided by their gcd
    with pytest.raises(simloop.UsageError, match="sum to at most 256; scale them down"):
        strategies.table([("finishes", 300), ("stuck", 1)])
    assert len(strategies.table([("a", 300), ("b", 1)], most=None)) == 301  # weighted() has no such bound


def test_a_replys_tool_faults_are_drawn_in_its_order_whatever_order_its_calls_run_in() -> None:
    # A loop that runs a reply's calls at once (on threads) starts them in any order: the faults must
    # still come from the same draws, each to its own call, or Hypothesis sees a different run each time.
    from simloop.generated import GeneratedFaults
    from simloop.strategies import DEFAULT_TOOLS, Plan
    from simloop.transcript import Response, Transcript

    search, email = DEFAULT_TOOLS
    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": {}} for i, n in enumerate(["search", "send_email", "search"])]
    plan = Plan(persona="finishes", steps=1, ending=Reply(end_turn="x"), fault_rate=0, tool_fault_rate=3)

    def faults(order: list[int]) -> dict[str, Fault | None]:
        # per call: the gate (a chance in ten), then the fault's bytes (kind, error, latency) when it fires
        tape = iter([9, bytes([0, 0, 0]), 0, 9, bytes([255, 0, 0])])
        source = GeneratedFaults(lambda strategy: next(tape), plan, DEFAULT_TOOLS)
        source.transcript = Transcript(header=None)  # type: ignore[arg-type]
        source.transcript.append(Response(t=0.0, index=0, call=1, status=200, kind="tool_use", message={"content": calls}))
        spec = {"search": search, "send_email": email}
        return {calls[i]["id"]: source(spec[calls[i]["name"]], 1, calls[i]["id"]) for i in order}

    forward, backward = faults([0, 1, 2]), faults([2, 1, 0])
    assert forward == backward
    assert forward == {
        "toolu_0": Fault(tool="search", kind="raise", error="ConnectionError", call=1),
        "toolu_1": None,
        "toolu_2": Fault(tool="search", kind="huge_output", call=1),
    }


def test_a_plan_with_nothing_left_to_choose_makes_no_choice() -> None:
    # each choice costs Hypothesis's bookkeeping in every example: a stage that fixes every field makes none
    from hypothesis.errors import StopTest
    from hypothesis.internal.conjecture.data import ConjectureData

    fixed: dict[str, Any] = {"min_steps": 9, "personas": (("finishes", 1),), "faults": False,
                             "ending_kinds": ("end_turn",), "slow": ((False, 1),), "heavy": ((False, 1),),
                             "ending_repeats": ((1, 1),)}
    plan = ConjectureData.for_choices([]).draw(strategies.plans(max_steps=9, **fixed))  # no choice to replay
    assert (plan.persona, plan.steps, plan.ending.kind, plan.outage) == ("finishes", 9, "end_turn", None)
    with pytest.raises(StopTest):  # one field left to choose: the empty choice sequence runs out
        ConjectureData.for_choices([]).draw(strategies.plans(max_steps=10, **fixed))
