"""`bench/overhead.py --pydantic-ai`: the 10-call tool loop as a pydantic-ai ``Agent`` with ``AnthropicModel``.

Both sides build the same agent per run (``AnthropicModel`` on an ``AsyncAnthropic`` client, one ``search``
tool from the scenario's schema) and ``await agent.run(task)`` on a fresh event loop: the bare side on
`httpx2.MockTransport` streaming the ten pre-rendered replies (``AnthropicModel`` streams every request) (its tool returns ``"result"``), the simulated side
in a fresh `Sim` (its tool awaits ``sim.arun_tool``; the drive runs on the Sim's virtual-time loop).  Needs
``pip install simloop[pydantic-ai]``.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import anthropic
import overhead
from pydantic_ai import Agent, Tool
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

import simloop

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
TASK = "Find the refund policy."


def _agent(client: anthropic.AsyncAnthropic, search: Callable[..., Any]) -> Agent[None, str]:
    model = AnthropicModel("claude-sonnet-5", provider=AnthropicProvider(anthropic_client=client))
    return Agent(model, tools=[Tool.from_schema(search, name="search", description=None, json_schema=SCHEMA)])


def sides() -> tuple[Callable[[], int], Callable[[], int]]:
    """The bare run and the simulated run, each returning the model calls it made."""
    warnings.simplefilter("ignore")  # pydantic-ai warns about models it does not know the prices of
    client = overhead.bare_async_stream_client()  # (AnthropicModel streams every request)

    async def search(**_input: Any) -> str:
        return "result"

    def bare() -> int:
        result = asyncio.run(_agent(client, search).run(TASK))
        return len(result.all_messages()) // 2

    def simulated() -> int:
        with simloop.Sim(overhead.SCENARIO) as sim:
            out: dict[str, int] = {}

            async def drive(sim: simloop.Sim) -> tuple[str, str]:
                async def search(**input: Any) -> str:
                    return await sim.arun_tool("search", input)

                result = await _agent(sim.async_client, search).run(TASK)
                out["calls"] = len(result.all_messages()) // 2
                return ("final", "")

            outcome = sim.run(drive)
        assert outcome.reason == "final", outcome
        return out["calls"]

    return bare, simulated
