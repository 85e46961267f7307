"""Typed tools for the example loops: each tool's input is validated against a pydantic model before it runs.

This is how tools are usually written (the SDK's ``@beta_tool`` functions and pydantic-ai's typed tools do
the same through the function signature): the API's ``tools`` parameter carries the models' JSON schemas,
and an input that does not fit is rejected before the tool runs (a `pydantic.ValidationError`, which a
loop reports to the model like any other tool error).  Against simloop's generated model, whose inputs
follow each tool's schema, the writes really run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from anthropic.types import ToolParam
from pydantic import BaseModel, ConfigDict

from ._common import RunTool

__all__ = ["TYPED", "typed", "typed_tool_params"]


class Search(BaseModel):
    """Search the knowledge base."""

    model_config = ConfigDict(extra="forbid")
    q: str


class SendEmail(BaseModel):
    """Send an email to a customer."""

    model_config = ConfigDict(extra="forbid")
    to: str
    body: str = ""


#: The default tools of `simloop.verify` (a read ``search``, a write ``send_email``), typed.
TYPED: dict[str, type[BaseModel]] = {"search": Search, "send_email": SendEmail}


def typed_tool_params(tools: Sequence[Mapping[str, Any]]) -> list[ToolParam]:
    """``tools`` (the API's ``tools`` parameter) with each typed tool's schema taken from its model."""
    out: list[ToolParam] = []
    for tool in tools:
        model = TYPED.get(tool["name"])
        if model is None:
            out.append(cast(ToolParam, dict(tool)))
        else:
            out.append({"name": tool["name"], "description": model.__doc__ or "", "input_schema": model.model_json_schema()})
    return out


def typed(run_tool: RunTool) -> RunTool:
    """``run_tool`` behind validation: an input its tool's model rejects raises before the tool runs."""

    def run(name: str, input: object, *, tool_use_id: str | None = None) -> str:
        model: Any = TYPED.get(name)
        if model is not None:
            model.model_validate(input)  # raises pydantic.ValidationError (an Exception) on a bad input
        return run_tool(name, input, tool_use_id=tool_use_id)

    return run
