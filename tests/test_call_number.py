"""Which logical model call a request belongs to: an SDK retry joins the call whose body it repeats.

`simloop.wire.bodies.CallNumbers` (what `SimServer` numbers calls with) keeps a small body as itself and
a large one as its digest; both must number the same way: a retry (``x-stainless-retry-count`` > 0) of a
body joins its latest call, the same body sent again without the header is a new call (which later retries
then join), and a different body of the same length is never taken for it.
"""

from __future__ import annotations

import json

import pytest

from simloop import Outcome, Scenario, Sim


def _body(text: str, pad: int) -> bytes:
    messages = [{"role": "user", "content": text + " " + "x" * pad}]
    return json.dumps({"model": "claude-sonnet-5", "max_tokens": 64, "messages": messages}).encode()


def _send(sim: Sim, body: bytes, retry: int) -> None:
    headers = {"x-api-key": "k", "content-type": "application/json", "x-stainless-retry-count": str(retry)}
    response = sim.http_client.post("https://api.anthropic.com/v1/messages", content=body, headers=headers)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("pad", [10, 70_000], ids=["kept-as-itself", "kept-as-digest"])
def test_retries_join_the_call_whose_body_they_repeat(pad: int) -> None:
    scenario = Scenario.model_validate({"name": "t", "task": "t", "model": [{"end_turn": "ok", "repeat": 9}]})
    a, b = _body("first", pad), _body("other", pad)
    assert len(a) == len(b) and a != b  # the same length: only the contents tell them apart
    sends: list[tuple[bytes, int]] = [(a, 0), (a, 1), (b, 1), (a, 0), (a, 2), (b, 0), (b, 1), (a, 1)]
    with Sim(scenario, seed=3) as sim:

        def drive(sim: Sim) -> Outcome:
            for body, retry in sends:
                _send(sim, body, retry)
            return Outcome("final", "ok")

        sim.run(drive)
    calls = [r.call for r in sim.transcript.requests]
    # a; its retry; b (a retry of nothing sent: a new call); a again (a new call); its retry joins that one;
    # b again (new); its retry; a's retry joins a's latest call
    assert calls == [1, 1, 2, 3, 3, 4, 4, 3]
    assert sim.transcript.model_calls == 4
