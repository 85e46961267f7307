"""The simulator's incremental body parser (`simloop.wire.bodies._BodyParser`) always gives what a full parse gives.

A loop resends its history plus a turn on every call; the parser parses only the added bytes when the new
body is the previous one with messages appended.  Every other body (a retry, a changed prefix or tail, a
body that is not JSON) must get exactly ``from_json(body)`` (or its ValueError) all the same.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import from_json

from simloop.wire.bodies import _BodyParser, _settings_bytes, request_tokens

_texts = st.text(alphabet="ab ]\",[{}", max_size=6)
_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": _texts}),
                     min_size=1, max_size=3)


def _body(messages: list[Any], model: str) -> bytes:
    return json.dumps({"max_tokens": 64, "messages": messages, "model": model}, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None)
@given(first=_messages, steps=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans(), _messages),
                                       max_size=6))
def test_every_body_parses_as_a_full_parse_would(
    first: list[Any], steps: list[tuple[bool, bool, bool, bool, list[Any]]]
) -> None:
    parser = _BodyParser()
    messages, model = list(first), "m"
    bodies = [_body(messages, model)]
    for append, other_model, edit, junk, more in steps:
        if append:  # the loop's next call: its history plus new turns (else a retry: the same body again)
            messages = messages + more
        if other_model:  # a different tail, the same length
            model = "n" if model == "m" else "m"
        if edit:  # an earlier message changed in place, the same length
            text = messages[0]["content"]
            messages = [{**messages[0], "content": text[:-1] + ("a" if text[-1:] != "a" else "b")}, *messages[1:]]
        body = _body(messages, model)
        bodies.append(body[:-1] + b"," if junk else body)  # junk: not JSON
    for body in bodies:
        try:
            expected = from_json(body)
        except ValueError:
            with pytest.raises(ValueError):
                parser.parse(body)
            continue
        doc = parser.parse(body)
        assert doc == expected
        assert parser.last is doc
        # the settings' byte count kept by the parser is always this body's (the server's input tokens use it)
        if parser.settings_bytes >= 0:
            assert parser.settings_bytes == _settings_bytes(expected)
        parser.settings_bytes = _settings_bytes(doc)


def test_an_appended_turn_shares_the_history_and_parses_only_what_was_added() -> None:
    parser = _BodyParser()
    history = [{"role": "user", "content": "hi"}]
    first = parser.parse(_body(history, "m"))
    second = parser.parse(_body([*history, {"role": "assistant", "content": "ok"}], "m"))
    assert second["messages"][0] is first["messages"][0]  # shared: not parsed again
    assert second == from_json(_body([*history, {"role": "assistant", "content": "ok"}], "m"))


def test_input_tokens_follow_changed_settings_through_the_parser() -> None:
    """A changed setting (another length) means a full parse: the kept settings count is not reused."""
    from simloop import Outcome, Scenario, Sim

    history: list[Any] = [{"role": "user", "content": "hi"}]
    bodies = [
        json.dumps({"max_tokens": 64, "messages": history, "model": "m"}, separators=(",", ":")).encode(),
        json.dumps({"max_tokens": 64, "messages": [*history, {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "more"}], "model": "m"}, separators=(",", ":")).encode(),
        json.dumps({"max_tokens": 640000, "messages": history, "model": "m", "temperature": 0.5},
                   separators=(",", ":")).encode(),
    ]
    scenario = Scenario.model_validate({"name": "t", "task": "t", "model": [{"end_turn": "ok", "repeat": 3}]})
    with Sim(scenario, seed=1) as sim:

        def drive(sim: Sim) -> Outcome:
            for body in bodies:
                response = sim.http_client.post("https://api.anthropic.com/v1/messages", content=body,
                                                headers={"x-api-key": "k", "content-type": "application/json"})
                assert response.status_code == 200, response.text
            return Outcome("final", "ok")

        sim.run(drive)
    counted = [r.input_tokens for r in sim.transcript.requests]
    assert counted == [request_tokens(from_json(body), len(body)) for body in bodies]
    assert counted[2] < counted[1]  # fewer messages, though more settings bytes
