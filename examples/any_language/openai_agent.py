"""A small agent loop on the official ``openai`` Python SDK, as a process of its own, verified by

    simloop verify --command "python examples/any_language/openai_agent.py"

It knows nothing of simloop: ``openai.OpenAI()`` finds the simulated API in OPENAI_BASE_URL and
OPENAI_API_KEY (the Chat Completions wire); the tools, the task and the declared limits come from
SIMLOOP_TOOLS, SIMLOOP_TASK and SIMLOOP_LIMITS, and each tool runs at POST $SIMLOOP_TOOLS_URL/NAME. It
prints how it stopped as its last line: {"reason", "text"}.

``--answer-first-only`` is its one-bug twin: of a reply's parallel tool calls it answers only the first
(the real API then refuses the next request with a 400; the pairing invariant catches it).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
import urllib.request
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

ANSWER_FIRST_ONLY = "--answer-first-only" in sys.argv


def stop(reason: str, text: str = "") -> None:
    print(json.dumps({"reason": reason, "text": text}))


def run_tool(name: str, arguments: Any, call_id: str) -> str:
    """Run one call at the tools endpoint; a failure is told to the model in the text (this wire has no is_error)."""
    request = urllib.request.Request(
        f"{os.environ['SIMLOOP_TOOLS_URL']}/{urllib.parse.quote(name, safe='')}", data=json.dumps(arguments).encode(),
        headers={"content-type": "application/json", "x-simloop-tool-use-id": call_id}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # loopback: simloop's tools endpoint
        answer = json.load(response)
    return f"Error: {answer['content']}" if answer["is_error"] else str(answer["content"])


def main() -> None:
    client = openai.OpenAI()
    tools: list[ChatCompletionToolParam] = [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t["input_schema"]}}
        for t in json.loads(os.environ.get("SIMLOOP_TOOLS", "[]"))
    ]
    max_steps = int(json.loads(os.environ.get("SIMLOOP_LIMITS", "{}")).get("max_steps", 10))
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": os.environ.get("SIMLOOP_TASK", "")}]
    for _ in range(max_steps):
        try:
            reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        except openai.APIError as exc:  # the SDK has retried what is worth retrying
            return stop("error", str(exc))
        choice = reply.choices[0]
        messages.append(choice.message.model_dump(exclude_none=True))  # type: ignore[arg-type]
        if choice.finish_reason == "length":  # cut off: a cut call's arguments may be partial, so run nothing
            return stop("truncated", choice.message.content or "")
        if choice.finish_reason == "content_filter" or choice.message.refusal:
            return stop("refusal", choice.message.refusal or choice.message.content or "")
        if choice.finish_reason != "tool_calls":
            return stop("final", choice.message.content or "")
        calls = [c for c in choice.message.tool_calls or [] if c.type == "function"]
        for call in calls[:1] if ANSWER_FIRST_ONLY else calls:  # the twin's bug: the other calls go unanswered
            output = run_tool(call.function.name, json.loads(call.function.arguments or "{}"), call.id)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return stop("max_steps")


if __name__ == "__main__":
    main()
