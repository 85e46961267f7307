"""Ready-made drives for agent loops people actually run, on simloop's simulated API.

Each submodule bridges one harness and is imported on its own, because each
needs its harness installed (``import simloop`` never imports them):

* `simloop.adapters.tool_runner`: the SDK's ``client.beta.messages.tool_runner``
  (needs only ``anthropic``, which simloop already depends on);
* `simloop.adapters.pydantic_ai`: a pydantic-ai ``Agent`` with ``AnthropicModel``
  (``pip install simloop[pydantic-ai]``);
* `simloop.adapters.langgraph`: LangGraph's prebuilt ReAct agent with
  langchain-anthropic's ``ChatAnthropic`` (``pip install simloop[langgraph]``).

and on the OpenAI wire (``sim.openai_client``, Chat Completions):

* `simloop.adapters.openai_agents`: the OpenAI Agents SDK's ``Runner`` with
  ``OpenAIChatCompletionsModel`` (``pip install simloop[openai-agents]``);
* `simloop.adapters.litellm`: an agent loop on ``litellm.completion`` /
  ``acompletion`` (``pip install simloop[litellm]``).

A drive runs the harness unmodified against ``sim.client``/``sim.async_client`` (or the OpenAI clients)
with the scenario's tools bridged to ``sim.run_tool``/``sim.arun_tool``, maps the
declared `simloop.Limits` onto the harness's own limits, and maps the way the
harness ends (a stop reason, a limit error, an exception) onto a
`simloop.Outcome`::

    from simloop.adapters import tool_runner

    simloop.verify(tool_runner.drive, limits=simloop.Limits(max_steps=10), max_examples=50)

What running simloop against these harnesses found is in ``docs/findings.md``.
"""

from __future__ import annotations

__all__: list[str] = []
