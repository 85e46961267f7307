"""Fidelity of the OpenAI wires against recorded traffic of others (docs/design.md, The OpenAI wire).

The corpus is ``../shared/data/openai`` (pydantic-ai's VCR cassettes, MIT; read in place, never copied into the
project: see its MANIFEST.md), found as the Anthropic corpus is (`tests.corpus`); ``SIMLOOP_OPENAI_CORPUS`` names
other folders instead, and ``SIMLOOP_CORPUS``'s folders are read too.  Skipped, saying so, only without a corpus.

* Chat Completions: every request to ``api.openai.com/v1/chat/completions`` the real API accepted passes
  `validate_chat` and translates; every recorded ``chat.completion`` has no field the simulator does not render.
* Responses: every accepted ``POST /v1/responses`` passes `validate_responses` (its ``previous_response_id`` chain
  rebuilt from the same cassette's recorded responses) and translates; every recorded ``response`` and streamed
  event has no field the simulator does not render.
* Every recorded 400 of a rule simloop models is reproduced with its text, ``param`` and ``code``.
* Every recorded answer simloop can express (text, function calls, a refusal, a cut), JSON or streamed, rendered
  by simloop, parses under the ``openai`` SDK's strict validation (``validate_type``, what
  ``_strict_response_validation=True`` runs) and reads the same: text, refusal, calls, how it ended.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest
import yaml

from simloop.protocol import openai_chat, openai_responses
from simloop.protocol.render import Turn
from tests.corpus import OPENAI_CASSETTES, OPENAI_CORPORA

openai = pytest.importorskip("openai", reason="the strict parse needs the openai SDK: pip install 'simloop[openai]'")
from openai._models import validate_type
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

pytestmark = pytest.mark.skipif(
    not OPENAI_CORPORA,
    reason=f"no OpenAI corpus: {OPENAI_CASSETTES} is not present and SIMLOOP_OPENAI_CORPUS names no folder "
    "(third-party recordings are not shipped with simloop)",
)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _body(part: dict[str, Any]) -> Any:
    """A recorded body: pydantic-ai's ``parsed_body``, or the JSON of ``body.string``, else its text (a stream)."""
    if "parsed_body" in part:
        return part["parsed_body"]
    body = part.get("body")
    text = body.get("string") if isinstance(body, dict) else body
    try:
        return json.loads(text) if text else None
    except (TypeError, ValueError):
        return text


@functools.cache
def _all() -> tuple[tuple[str, str, Any, int, Any], ...]:
    """Every recorded ``POST`` to the two wires: (cassette#k, endpoint, request body, status, response body)."""
    out = []
    for root in OPENAI_CORPORA:
        for path in sorted(root.rglob("*.yaml")):
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}
            for k, it in enumerate(data.get("interactions") or []):
                request, response = it.get("request") or {}, it.get("response") or {}
                uri = str(request.get("uri", "")).split("?", 1)[0]
                endpoint = uri.removeprefix("https://api.openai.com/v1/")
                if endpoint not in ("chat/completions", "responses") or request.get("method", "POST") != "POST":
                    continue
                name = f"{path.relative_to(root).as_posix()}#{k}"
                out.append((name, endpoint, _body(request), int((response.get("status") or {}).get("code", 0)),
                            _body(response)))
    return tuple(out)


def _interactions(endpoint: str) -> list[tuple[str, Any, int, Any]]:
    return [(name, body, status, answer) for name, e, body, status, answer in _all() if e == endpoint]


def _responses_checked() -> list[tuple[str, Any, int, Any, list[Any] | None, Any]]:
    """Each Responses interaction with its conversation (`expand` over the cassette's recorded responses before
    it) and simloop's verdict; the conversation is None when its chain is not recorded (or is a ``conversation``)."""
    stored: dict[str, list[Any]] = {}
    out = []
    for name, body, status, answer in _interactions("responses"):
        if not isinstance(body, dict):
            continue
        items, missing = openai_responses.expand(body, stored)
        if missing is not None or body.get("conversation") is not None:
            out.append((name, body, status, answer, None, None))
            continue
        verdict = openai_responses.validate_responses(body, items)
        out.append((name, body, status, answer, items, verdict))
        final = _final_response(answer)
        if status == 200 and final is not None:
            stored[str(final["id"])] = [*items, *final.get("output", [])]
    return out


# -- accepted requests ----------------------------------------------------------------------------------------------


def test_every_accepted_chat_request_passes_and_translates() -> None:
    accepted = [(name, body) for name, body, status, _ in _interactions("chat/completions")
                if status == 200 and isinstance(body, dict)]
    if not accepted:
        pytest.skip("the corpus holds no accepted Chat Completions request")
    refused = {name: openai_chat.validate_chat(body) for name, body in accepted}
    assert {name: r.message for name, r in refused.items() if r is not None} == {}
    for _, body in accepted:
        internal = openai_chat.to_internal(body)
        assert len(internal["messages"]) == sum(m["role"] not in ("system", "developer") for m in body["messages"])
    print(f"\n{len(accepted)} accepted Chat Completions requests: 0 refused")


def test_every_accepted_responses_request_passes_and_translates() -> None:
    """Each accepted request, its ``previous_response_id`` chain rebuilt from what its cassette recorded before it.
    A chain the cassette does not hold (a response made in another recording, or a server-side ``conversation``)
    cannot be rebuilt: counted apart, not checked."""
    checked = [row for row in _responses_checked() if row[2] == 200]
    if not checked:
        pytest.skip("the corpus holds no accepted Responses request")
    unchained = sum(items is None for *_, items, _ in checked)
    refused = {name: verdict.message for name, *_, items, verdict in checked if items is not None and verdict}
    assert refused == {}
    for _, body, _, _, items, _ in checked:
        if items is not None:
            assert openai_responses.to_internal(body, items)["model"] == openai_responses.model_of(body)
    print(f"\n{len(checked) - unchained} accepted Responses requests: 0 refused ({unchained} chained to a "
          "response not recorded)")


# -- recorded 400s --------------------------------------------------------------------------------------------------

#: The 400s simloop models, by their text: a recorded 400 with one of these texts must be reproduced exactly.
_MODELLED_TEXTS = (
    r"^Missing required parameter", r"^Invalid type for", r"^Invalid 'temperature'", r"^Invalid 'max_\w*tokens'",
    r"^Unsupported parameter: 'stop'", r"^Unsupported value: '\w+' is not supported with the 'o",
    r"^Invalid schema for function", r"string does not match pattern",
    r"Content blocks are expected to be either text or image_url type", r"^No tool output found",
    r"^No tool call found", r"^Previous response with id", r"^Duplicate item found",
    r"^An assistant message with 'tool_calls'", r"^Invalid parameter: messages with role 'tool'",
    r"^Invalid parameter: 'tool_call_id'", r"maximum context length", r"exceeds the context window",
)
MODELLED = re.compile("|".join(_MODELLED_TEXTS))


def _recorded_400s() -> list[tuple[str, dict[str, Any], Any]]:
    """(cassette#k, the recorded error, simloop's rejection) for every recorded 400 simloop can judge."""
    out: list[tuple[str, dict[str, Any], Any]] = []
    for name, body, status, answer in _interactions("chat/completions"):
        if status == 400 and isinstance(body, dict) and isinstance(answer, dict):
            out.append((name, answer.get("error") or {}, openai_chat.validate_chat(body)))
    for name, _, status, answer, items, verdict in _responses_checked():
        if status == 400 and items is not None and isinstance(answer, dict):
            out.append((name, answer.get("error") or {}, verdict))
    return out


def test_every_recorded_400_of_a_modelled_rule_is_reproduced_with_its_text() -> None:
    recorded = _recorded_400s()
    if not recorded:
        pytest.skip("the corpus holds no recorded 400")
    wrong: dict[str, tuple[Any, Any]] = {}
    modelled = 0
    for name, error, ours in recorded:
        theirs = (error.get("message"), error.get("param"), error.get("code"))
        mine = (ours.message, (ours.details or {}).get("param"), (ours.details or {}).get("code")) if ours else None
        if MODELLED.search(str(theirs[0])):
            modelled += 1
            if mine != theirs:
                wrong[name] = (theirs, mine)
        elif mine is not None and mine != theirs:  # refused, but not as the API words it
            wrong[name] = (theirs, mine)
    assert wrong == {}
    print(f"\n{len(recorded)} recorded 400s: {modelled} of modelled rules, all reproduced with their text; "
          f"{len(recorded) - modelled} of rules not modelled (per-model capabilities, files, unknown models)")


# -- recorded answers, rendered by simloop, parsed strictly ---------------------------------------------------------


def _sse(text: Any) -> list[dict[str, Any]]:
    if not isinstance(text, str):
        return []
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line[6:] != "[DONE]"]


def _chat_answer(answer: Any) -> dict[str, Any] | None:
    """A recorded completion as (text, refusal, calls, finish_reason), from its JSON or its chunks."""
    if isinstance(answer, dict) and answer.get("object") == "chat.completion":
        if len(answer.get("choices") or []) != 1:
            return None
        choice = answer["choices"][0]
        m = choice["message"]
        calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []
                 if c.get("type", "function") == "function"]
        return {"text": m.get("content") or "", "refusal": m.get("refusal"), "calls": calls,
                "finish": choice.get("finish_reason"), "model": answer["model"], "usage": answer.get("usage"),
                "extra": bool(m.get("audio")) or len(calls) != len(m.get("tool_calls") or [])}
    chunks = [c for c in _sse(answer) if c.get("object") == "chat.completion.chunk"]
    if not chunks:
        return None
    text, refusal, finish, calls = "", "", None, {}
    for c in chunks:
        for ch in c.get("choices") or []:
            d = ch.get("delta") or {}
            text += d.get("content") or ""
            refusal += d.get("refusal") or ""
            finish = ch.get("finish_reason") or finish
            for tc in d.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], ["", "", ""])
                fn = tc.get("function") or {}
                call[0] = tc.get("id") or call[0]
                call[1] += fn.get("name") or ""
                call[2] += fn.get("arguments") or ""
    usage = next((c["usage"] for c in chunks if c.get("usage")), None)
    return {"text": text, "refusal": refusal or None, "calls": [tuple(calls[k]) for k in sorted(calls)],
            "finish": finish, "model": chunks[0]["model"], "usage": usage, "extra": False}


_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _turn(text: str, refusal: str | None, calls: list[tuple[str, str, str]], stop: str) -> Turn:
    if refusal:
        return Turn([{"type": "text", "text": refusal}], "refusal")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for cid, name, args in calls:
        try:
            blocks.append({"type": "tool_use", "id": cid, "name": name, "input": json.loads(args)})
        except ValueError:
            blocks.append({"type": "tool_use", "id": cid, "name": name, "input": {}, "partial_json": args})
    return Turn(blocks, stop)


def _message(usage: Any, prompt: str, completion: str) -> dict[str, Any]:
    u = usage or {}
    details = u.get(f"{prompt}_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    return {"id": "msg_01recorded", "usage": {"input_tokens": int(u.get(prompt) or 0) - cached,
                                              "cache_read_input_tokens": cached,
                                              "output_tokens": int(u.get(completion) or 0)}}


def _args(calls: Any) -> list[tuple[str, str, Any]]:
    out = []
    for cid, name, args in calls:
        try:
            out.append((cid, name, json.loads(args)))
        except ValueError:
            out.append((cid, name, args))
    return out


def test_recorded_chat_answers_rendered_by_simloop_parse_strictly_and_read_the_same() -> None:
    checked, skipped = 0, 0
    for name, _, status, answer in _interactions("chat/completions"):
        got = _chat_answer(answer) if status == 200 else None
        if got is None or got["extra"] or got["finish"] not in _STOP:
            skipped += status == 200
            continue
        checked += 1
        stop = "refusal" if got["refusal"] else _STOP[got["finish"]]
        turn = _turn(got["text"], got["refusal"], got["calls"], stop)
        message = _message(got["usage"], "prompt_tokens", "completion_tokens")
        rendered = openai_chat.render_completion(turn, message, model=got["model"], created=0)
        parsed = validate_type(type_=ChatCompletion, value=rendered)
        choice = parsed.choices[0]
        reads = {"text": choice.message.content or "", "refusal": choice.message.refusal,
                 "calls": _args((c.id, c.function.name, c.function.arguments)  # type: ignore[union-attr]
                                for c in choice.message.tool_calls or []), "finish": choice.finish_reason}
        assert reads == {"text": got["text"] if not got["refusal"] else "", "refusal": got["refusal"],
                         "calls": _args(got["calls"]), "finish": got["finish"]}, name
        for raw in openai_chat.render_chunks(turn, message, model=got["model"], created=0, include_usage=True):
            if raw != b"data: [DONE]\n\n":
                validate_type(type_=ChatCompletionChunk, value=json.loads(raw[6:]))
    if not checked:
        pytest.skip("the corpus holds no recorded chat.completion simloop can express")
    print(f"\n{checked} recorded completions (JSON and streamed) rendered by simloop: every one parses strictly and "
          f"reads the same ({skipped} of features simloop does not offer: audio, n > 1, custom tools)")


def _final_response(answer: Any) -> dict[str, Any] | None:
    """The recorded ``response``: the JSON one, or the one a stream's last ``response.completed`` carries."""
    if isinstance(answer, dict) and answer.get("object") == "response":
        return answer
    done = [e["response"] for e in _sse(answer) if e.get("type") in ("response.completed", "response.incomplete")]
    return done[-1] if done else None


def _responses_answer(final: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded response as text, refusal, calls and status; None when it holds items simloop never makes."""
    text, refusal, calls = "", None, []
    for item in final.get("output") or []:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "refusal":
                    refusal = part.get("refusal")
                text += part.get("text") or ""
        elif item.get("type") == "function_call":
            calls.append((item["call_id"], item["name"], item["arguments"]))
        elif item.get("type") != "reasoning":
            return None
    reason = (final.get("incomplete_details") or {}).get("reason")
    if final.get("status") not in ("completed", "incomplete") or reason not in (None, "max_output_tokens"):
        return None
    return {"text": text, "refusal": refusal, "calls": calls, "status": final["status"]}


def test_recorded_responses_rendered_by_simloop_parse_strictly_and_read_the_same() -> None:
    checked, skipped = 0, 0
    for name, body, status, answer in _interactions("responses"):
        final = _final_response(answer) if status == 200 else None
        got = _responses_answer(final) if final is not None else None
        if got is None or final is None:
            skipped += status == 200
            continue
        checked += 1
        stop = "max_tokens" if got["status"] == "incomplete" else "tool_use" if got["calls"] else "end_turn"
        turn = _turn(got["text"], got["refusal"], got["calls"], "refusal" if got["refusal"] else stop)
        message = _message(final.get("usage"), "input_tokens", "output_tokens")
        sent = body if isinstance(body, dict) else {}
        rendered = openai_responses.render_response(turn, message, sent, model=final["model"], created=0)
        parsed = validate_type(type_=Response, value=rendered)
        refusals = [p.refusal for i in parsed.output if i.type == "message" for p in i.content if p.type == "refusal"]
        reads = {"text": parsed.output_text, "refusal": refusals[0] if refusals else None, "status": parsed.status,
                 "calls": _args((i.call_id, i.name, i.arguments) for i in parsed.output if i.type == "function_call")}
        assert reads == {"text": got["text"] if not got["refusal"] else "", "refusal": got["refusal"],
                         "status": got["status"], "calls": _args(got["calls"])}, name
        for raw in openai_responses.render_events(turn, message, sent, model=final["model"], created=0):
            validate_type(type_=ResponseStreamEvent, value=json.loads(raw.split(b"data: ", 1)[1]))  # type: ignore[arg-type]
    if not checked:
        pytest.skip("the corpus holds no recorded response simloop can express")
    print(f"\n{checked} recorded responses (JSON and streamed) rendered by simloop: every one parses strictly and "
          f"reads the same ({skipped} holding items of features simloop does not offer: built-in tools, images)")


# -- the fields of recorded answers ---------------------------------------------------------------------------------

#: Fields a completion carries only when its request asked for them (audio output, a moderation, the legacy
#: ``functions``): features of the model the simulator does not offer.
ASKED_FOR = frozenset({"audio", "function_call", "moderation"})


def test_recorded_completions_hold_no_field_the_simulator_lacks() -> None:
    ours = openai_chat.render_completion(
        Turn([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}], "tool_use"),
        {"id": "msg_01x", "usage": {"input_tokens": 1, "output_tokens": 1}}, model="m", created=0)
    top, message = set(ours), set(ours["choices"][0]["message"])
    seen = 0
    missing: dict[str, set[str]] = {}
    for name, _, status, body in _interactions("chat/completions"):
        if status != 200 or not isinstance(body, dict) or body.get("object") != "chat.completion":
            continue
        seen += 1
        extra = set(body) - top - ASKED_FOR
        for choice in body["choices"]:
            extra |= set(choice["message"]) - message - ASKED_FOR
        if extra:
            missing[name] = extra
    if not seen:
        pytest.skip("the corpus holds no recorded chat.completion")
    assert missing == {}
    print(f"\n{seen} recorded completions: every field rendered")


#: Fields a recorded ``response`` carries that the simulator does not render, each for a feature it does not offer:
#: built-in tools' usage (``tool_usage``), the Conversations API (``conversation``), a moderation, prompt caching's
#: diagnostics, a function's tool-search ``namespace``, and the fields of newer models (``phase`` of a message; ``status_details``, ``tool_calls`` and
#: ``total_tokens`` at the top, null or a copy of ``usage``).
NOT_OFFERED = frozenset({"tool_usage", "conversation", "moderation", "phase", "status_details", "tool_calls",
                         "total_tokens", "prompt_cache_options", "prompt_cache_diagnostics", "namespace"})


def test_recorded_responses_hold_no_field_the_simulator_lacks() -> None:
    turn = Turn([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}], "tool_use")
    ours = openai_responses.render_response(turn, {"id": "msg_01x", "usage": {}}, {}, model="m", created=0)
    fields = {item["type"]: set(item) for item in ours["output"]}
    part = set(ours["output"][0]["content"][0])
    refusal = set(openai_responses.render_response(Turn([{"type": "text", "text": "no"}], "refusal"),
                                                   {"id": "msg_01y", "usage": {}}, {}, model="m",
                                                   created=0)["output"][0]["content"][0])
    seen, items = 0, 0
    missing: dict[str, set[str]] = {}
    for name, _, status, body in _interactions("responses"):
        if status != 200 or not isinstance(body, dict) or body.get("object") != "response":
            continue
        seen += 1
        extra = set(body) - set(ours) - NOT_OFFERED
        for item in body.get("output") or []:
            if item.get("type") not in fields:  # reasoning, built-in tool calls: items the simulator never makes
                continue
            items += 1
            extra |= set(item) - fields[item["type"]] - NOT_OFFERED
            for p in item.get("content") or []:
                extra |= set(p) - (refusal if p.get("type") == "refusal" else part)
        if extra:
            missing[name] = extra
    if not seen:
        pytest.skip("the corpus holds no recorded response")
    assert missing == {}
    print(f"\n{seen} recorded responses ({items} message and function_call items): every field rendered")


def test_recorded_event_streams_hold_no_field_the_simulator_lacks() -> None:
    """Each recorded streamed event of a kind the simulator sends (``response.created`` ... ``response.completed``)
    has no field the simulator's event of that kind lacks; the kinds of features it does not offer (reasoning
    summaries, built-in tool calls, annotations, ``response.queued`` of background mode) are counted apart."""
    ours: dict[str, set[str]] = {}
    for turn in (Turn([{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}],
                      "tool_use"), Turn([{"type": "text", "text": "no"}], "refusal")):
        for raw in openai_responses.render_events(turn, {"id": "msg_01x", "usage": {}}, {}, model="m", created=0):
            event = json.loads(raw.split(b"data: ", 1)[1])
            ours.setdefault(event["type"], set()).update(event)
    streams, checked, other = 0, 0, 0
    missing: dict[str, set[str]] = {}
    for name, _, _, answer in _interactions("responses"):
        if not isinstance(answer, str) or "event: response." not in answer:
            continue
        streams += 1
        for event in _sse(answer):
            if event.get("type") not in ours:
                other += 1
                continue
            checked += 1
            extra = set(event) - ours[event["type"]]
            if extra:
                missing.setdefault(name, set()).update(f"{event['type']}.{f}" for f in extra)
    if not streams:
        pytest.skip("the corpus holds no recorded Responses event stream")
    assert missing == {}
    print(f"\n{streams} recorded streams: {checked} events of the kinds the simulator sends, every field rendered "
          f"({other} events of features it does not offer)")

