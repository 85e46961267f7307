"""The OpenAI API's 400s for settings and schemas, shared by both OpenAI wires (docs/design.md, The OpenAI wire).

`simloop.protocol.openai_chat` and `simloop.protocol.openai_responses` check a request's shape and its tool-call pairing;
this module holds the rules about its settings, each with the real text, ``param`` and ``code``, and where the
text was read:

* a ``temperature`` out of [0, 2] ("Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but
  got -1 instead.", recorded: pydantic-ai ``test_openai_responses/test_openai_responses_model_http_error.yaml``);
* a token cap below 1 ("Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0
  instead.", ``code: integer_below_min_value``: it-at-m/mucgpt#608, YSocialTwin/YClient#6);
* a value of the wrong JSON type ("Invalid type for 'stream': expected a boolean, but got a string instead.",
  ``code: invalid_type``; "Invalid type for 'model': expected a string, but got an integer instead.");
* ``stop`` sent to a reasoning model ("Unsupported parameter: 'stop' is not supported with this model.",
  ``param: stop``, ``code: unsupported_parameter``: huggingface/smolagents#1893, crewAIInc/crewAI#2738 on o3,
  langgenius/dify#18971 on o4-mini, BittnerPierre/AI-Agent-Casebook#133 on gpt-5; o3-mini takes it:
  huggingface/smolagents#1211);
* a reasoning effort the model does not offer ("Unsupported value: 'minimal' is not supported with the 'o4-mini'
  model. Supported values are: 'low', 'medium', and 'high'.", ``param: reasoning.effort``, ``code:
  unsupported_value``: anomalyco/opencode#4451 for gpt-5.1, and the o4-mini text as measured by issue 42);
* a strict function whose schema is not a strict one ("Invalid schema for function 'NAME': In context=(),
  'additionalProperties' is required to be supplied and to be false.", ``param: tools[0].function.parameters``
  (Chat Completions) or ``tools[0].parameters`` (Responses), ``code: invalid_function_parameters``:
  xemantic/xemantic-ai-tool-schema#37, lastmile-ai/openai-agents-mcp#2; and "'required' is required to be supplied
  and to be an array including every key in properties. Missing 'x'.", as users quote it);
* a function name outside ``^[a-zA-Z0-9_-]+$`` ("Invalid 'tools[0].function.name': string does not match pattern.
  Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", ``code: invalid_value``: brekkylab/ailoy#109,
  Vortiago/mcp-azure-devops#30; ``messages[9].tool_calls[0].function.name`` in mcp-use/mcp-use#90).
"""

from __future__ import annotations

import re
from typing import Any

from simloop.protocol.validate import Rejection

__all__ = [
    "FUNCTION_NAME",
    "Refuse",
    "bad_type",
    "check_effort",
    "check_name",
    "check_stop",
    "check_strict_schema",
    "check_temperature",
    "check_token_cap",
    "missing",
]

_INVALID = "invalid_request_error"
#: The pattern a function's name must match, as the API states it in its 400.
FUNCTION_NAME = "^[a-zA-Z0-9_-]+$"
_NAME_RE = re.compile(r"[a-zA-Z0-9_-]+")
#: Reasoning models that refuse ``stop``: o1, o3 (not o3-mini), o4-mini and the gpt-5 family (not its ``-chat``
#: models, which do not reason), snapshots included.
_NO_STOP = re.compile(r"(o1|o3(?!-mini)|o4-mini|gpt-5(?![\w.-]*-chat))([-.]|$)")
#: The reasoning efforts of the o-series (no ``minimal``, no ``none``).
_O_SERIES = re.compile(r"o[134](-mini)?([-.]|$)")
_O_EFFORTS = ("low", "medium", "high")


class Refuse(Exception):
    """A request the real API refuses: its 400 as a `Rejection` (``param`` and ``code`` in ``details``)."""

    def __init__(self, message: str, param: str | None, code: str | None = None) -> None:
        super().__init__(message)
        self.rejection = Rejection(400, _INVALID, message, {"param": param, "code": code}, param)


def missing(param: str) -> Refuse:
    return Refuse(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


_TYPE_NAMES: dict[type, str] = {str: "a string", bool: "a boolean", int: "an integer", float: "a decimal",
                                list: "an array", dict: "an object", type(None): "null"}


def bad_type(param: str, expected: str, value: Any) -> Refuse:
    got = _TYPE_NAMES.get(type(value), "a value")
    return Refuse(f"Invalid type for '{param}': expected {expected}, but got {got} instead.", param, "invalid_type")


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, int) or float(value).is_integer() else repr(float(value))


def check_temperature(body: dict[str, Any]) -> None:
    value = body.get("temperature")
    if value is None or isinstance(value, bool):
        return
    if not isinstance(value, (int, float)):
        raise bad_type("temperature", "a decimal", value)
    if value < 0:
        raise Refuse("Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got "
                     f"{_number(value)} instead.", "temperature", "decimal_below_min_value")
    if value > 2:
        raise Refuse("Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got "
                     f"{_number(value)} instead.", "temperature", "decimal_above_max_value")


def check_token_cap(body: dict[str, Any], name: str) -> None:
    """``max_tokens``, ``max_completion_tokens`` or ``max_output_tokens``: an integer of at least 1."""
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_type(name, "an integer", value)
    if value < 1:
        raise Refuse(f"Invalid '{name}': integer below minimum value. Expected a value >= 1, but got {value} "
                     "instead.", name, "integer_below_min_value")


def check_stop(body: dict[str, Any]) -> None:
    """Reasoning models take no ``stop`` (Chat Completions; the Responses API has no such setting)."""
    model = body.get("model")
    if body.get("stop") is not None and isinstance(model, str) and _NO_STOP.match(model):
        raise Refuse("Unsupported parameter: 'stop' is not supported with this model.", "stop",
                     "unsupported_parameter")


def check_effort(model: Any, effort: Any, param: str) -> None:
    """The o-series offers ``low``, ``medium`` and ``high`` only (``minimal`` and ``none`` are the gpt-5 family's)."""
    if not isinstance(model, str) or not isinstance(effort, str) or not _O_SERIES.match(model):
        return
    if effort not in _O_EFFORTS:
        raise Refuse(f"Unsupported value: '{effort}' is not supported with the '{model}' model. Supported values "
                     "are: 'low', 'medium', and 'high'.", param, "unsupported_value")


def check_name(name: Any, param: str) -> None:
    if isinstance(name, str) and not _NAME_RE.fullmatch(name):
        raise Refuse(f"Invalid '{param}': string does not match pattern. Expected a string that matches the "
                     f"pattern '{FUNCTION_NAME}'.", param, "invalid_value")


def check_strict_schema(name: str, schema: Any, param: str) -> None:
    """A strict function's ``parameters``: every object closes itself (``additionalProperties: false``) and lists
    every property in ``required``, down through ``properties``, ``items``, ``anyOf`` and ``$defs``."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        context, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") == "object" or "properties" in node:
            _check_object(name, context, node, param)
        for key in ("properties", "$defs", "definitions"):
            children = node.get(key)
            if isinstance(children, dict):
                stack.extend(((*context, key, str(k)), v) for k, v in reversed(children.items()))
        if isinstance(node.get("items"), dict):
            stack.append(((*context, "items"), node["items"]))
        for key in ("anyOf", "allOf"):
            if isinstance(node.get(key), list):
                stack.extend(((*context, key, str(k)), v) for k, v in reversed(list(enumerate(node[key]))))


def _check_object(name: str, context: tuple[str, ...], node: dict[str, Any], param: str) -> None:
    where = f"Invalid schema for function '{name}': In context={context!r}, "
    if node.get("additionalProperties") is not False:
        raise Refuse(where + "'additionalProperties' is required to be supplied and to be false.", param,
                     "invalid_function_parameters")
    given, listed = node.get("properties"), node.get("required")
    properties: dict[str, Any] = given if isinstance(given, dict) else {}
    required: list[Any] = listed if isinstance(listed, list) else []
    lacking = [k for k in properties if k not in required]
    if lacking:
        raise Refuse(where + "'required' is required to be supplied and to be an array including every key in "
                     f"properties. Missing '{lacking[0]}'.", param, "invalid_function_parameters")
    extra = [k for k in required if type(k) is not str or k not in properties]  # a list or object is no key either
    if extra:
        raise Refuse(where + "'required' is required to be supplied and to be an array including every key in "
                     f"properties. Extra required key '{extra[0]}' supplied.", param, "invalid_function_parameters")
