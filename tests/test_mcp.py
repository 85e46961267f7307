"""Tools over MCP (`simloop.mcp`): in a Sim, over stdio (`simloop mcp`) and over streamable HTTP (`serve --mcp`).

Every MCP tool call lands in the transcript as a `sim.run_tool` call does, matched to its tool_use by name and
input; a pydantic-ai agent with an MCP toolset is verified, and its twin that lets tool errors escape is caught.
Skipped cleanly without the official MCP SDK (``pip install 'simloop[mcp]'``).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.server", reason="the MCP SDK is not installed (pip install 'simloop[mcp]')")

from mcp import Client, StdioServerParameters

import simloop
from simloop import Scenario, Sim
from simloop.transcript import ToolEnd, ToolStart
from simloop.wire import loopback

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [
    {"name": "search", "kind": "read", "description": "Search the knowledge base.",
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    {"name": "send_email", "kind": "write", "description": "Send an email.",
     "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}},
]
SEARCH = {"tool_use": [{"name": "search", "input": {"q": "refund policy"}}]}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic-ai warns about models it does not know the prices of
        yield


def scenario(*model: dict[str, Any], **kw: Any) -> Scenario:
    return Scenario.model_validate({"name": "mcp", "task": "Refund order 1234.", "tools": TOOLS, "model": list(model), **kw})


async def mcp_loop(sim: Sim) -> simloop.Outcome:
    """A hand-written loop whose tools are MCP tools: the SDK for the model, an MCP client for the tools."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
    async with Client(sim.mcp_server()) as tools:
        listed = (await tools.list_tools()).tools
        schemas = [{"name": t.name, "description": t.description or "", "input_schema": t.input_schema} for t in listed]
        for _ in range(6):
            reply = await sim.async_client.messages.create(
                model=sim.model, max_tokens=512, messages=messages, tools=schemas  # type: ignore[arg-type]
            )
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            if reply.stop_reason != "tool_use":
                return simloop.Outcome("final", "".join(getattr(b, "text", "") for b in reply.content))
            results = []
            for block in reply.content:
                if block.type == "tool_use":
                    result = await tools.call_tool(block.name, dict(block.input))  # type: ignore[arg-type]
                    text = "".join(getattr(c, "text", "") for c in result.content)
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": text,
                                    "is_error": bool(result.is_error)})
            messages.append({"role": "user", "content": results})
    return simloop.Outcome("max_steps")


def test_an_mcp_tool_call_is_matched_to_its_tool_use_and_faults_reach_the_client() -> None:
    s = scenario(SEARCH, {"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]}, {"end_turn": "Done."},
                 faults=[{"tool": "send_email", "call": 1, "kind": "raise"}])
    with Sim(s) as sim:
        outcome = sim.run(mcp_loop)
    assert outcome == simloop.Outcome("final", "Done.")
    starts = [e for e in sim.transcript.events if isinstance(e, ToolStart)]
    issued = [b["id"] for r in sim.transcript.responses for b in r.tool_uses]
    assert [s.matched for s in starts] == issued  # no tool_use id over MCP: matched by name and input
    assert [s.tool_use_id for s in starts] == [None, None]
    ends = [e for e in sim.transcript.events if isinstance(e, ToolEnd)]
    assert [e.status for e in ends] == ["ok", "raised"]
    sent = sim.transcript.requests[2].conversation[-1]["content"][0]
    assert sent["is_error"] is True and sent["content"] == "ConnectionError: send_email: could not reach the backend"
    assert sim.check().ok


def test_the_server_lists_the_scenarios_tools_with_their_schemas() -> None:
    async def listing(sim: Sim) -> simloop.Outcome:
        async with Client(sim.mcp_server()) as client:
            tools = (await client.list_tools()).tools
        return simloop.Outcome("final", json.dumps({t.name: t.input_schema for t in tools}))

    with Sim(scenario({"end_turn": "x"})) as sim:
        outcome = sim.run(listing)
    assert json.loads(outcome.text) == {t["name"]: t["input_schema"] for t in TOOLS}


def test_an_mcp_call_nobody_asked_for_is_a_no_rerun_violation() -> None:
    async def eager(sim: Sim) -> simloop.Outcome:
        async with Client(sim.mcp_server()) as client:
            await client.call_tool("send_email", {"to": "a@example.com"})  # before the model asked
        await sim.async_client.messages.create(model=sim.model, max_tokens=64,
                                               messages=[{"role": "user", "content": sim.task}])
        return simloop.Outcome("final", "x")

    with Sim(scenario({"end_turn": "x"})) as sim:
        sim.run(eager)
    assert [v.invariant for v in sim.check().violations] == ["no_rerun"]


# -- pydantic-ai with an MCP toolset, under verify --------------------------------------------------------------------


def test_a_pydantic_ai_agent_with_an_mcp_toolset_passes_verify_and_its_defect_twin_is_caught(tmp_path: Path) -> None:
    pai = pytest.importorskip("simloop.adapters.pydantic_ai", reason="pydantic-ai is not installed")
    pytest.importorskip("fastmcp", reason="pydantic-ai's MCP client is not installed (pydantic-ai-slim[mcp])")
    limits = simloop.Limits(max_steps=8)
    report = simloop.verify(pai.drive_mcp, limits=limits, max_examples=12, seed=1, out_dir=tmp_path)
    assert report.ok and report.examples == 12
    leaky = pai.make_drive(tools_via="mcp", mcp_tool_errors="error")  # MCPToolset lets a tool error escape the run
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(leaky, limits=limits, max_examples=30, seed=1, out_dir=tmp_path)
    assert {v.invariant for v in caught.value.violations} == {"tool_errors"}
    assert caught.value.scenario.faults  # shrunk to a run with the tool fault that escaped


# -- over stdio and over streamable HTTP ------------------------------------------------------------------------------


def _scenario_file(tmp_path: Path, *model: dict[str, Any], **kw: Any) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(json.dumps({"task": "t", "tools": TOOLS, "model": list(model) or [{"end_turn": "x"}], **kw}))
    return path


def test_simloop_mcp_serves_the_tools_over_stdio_with_their_faults(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, faults=[{"tool": "search", "call": 2, "kind": "raise", "error": "TimeoutError"}])
    trace = tmp_path / "tools.jsonl"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "simloop.cli", "mcp", "--scenario", str(path), "--trace", str(trace)],
        env={**os.environ}, cwd=str(ROOT),
    )

    async def session() -> list[tuple[bool, str]]:
        out = []
        async with Client(params) as client:
            for _ in range(2):
                result = await client.call_tool("search", {"q": "policy"})
                out.append((bool(result.is_error), result.content[0].text))  # type: ignore[union-attr]
        return out

    import anyio

    assert anyio.run(session) == [(False, 'result 1 of search({"q":"policy"})'), (True, "TimeoutError: search: timed out")]
    ledger = [e for e in simloop.Transcript.read(trace).events if isinstance(e, ToolEnd)]
    assert [e.status for e in ledger] == ["ok", "raised"]


def test_serve_with_mcp_puts_the_api_and_the_tools_in_one_transcript(tmp_path: Path) -> None:
    import anthropic
    import anyio

    s = scenario({"tool_use": [{"name": "send_email", "input": {"to": "a@example.com"}}]}, {"end_turn": "Sent."})
    with loopback.serve(s, mcp=True) as server:
        assert server.mcp_url and server.mcp_url.startswith("http://127.0.0.1:") and server.mcp_url.endswith("/mcp")
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=server.base_url, max_retries=0)
        reply = client.messages.create(model="claude-sonnet-5", max_tokens=64, messages=[{"role": "user", "content": "go"}])
        block = reply.content[0]
        assert block.type == "tool_use"

        async def call() -> str:
            async with Client(str(server.mcp_url)) as tools:
                result = await tools.call_tool(block.name, dict(block.input))  # type: ignore[arg-type]
            return result.content[0].text  # type: ignore[union-attr]

        assert anyio.run(call) == 'send_email ok: {"to":"a@example.com"}'
        starts = [e for e in server.transcript.events if isinstance(e, ToolStart)]
        assert [(e.tool, e.matched) for e in starts] == [("send_email", block.id)]


def test_the_plain_json_tool_endpoint_answers_tool_errors_as_is_error(tmp_path: Path) -> None:
    import urllib.request

    s = scenario({"end_turn": "x"}, faults=[{"tool": "search", "kind": "raise"}])
    with loopback.serve(s, mcp=True) as server:
        request = urllib.request.Request(
            f"{server.base_url}/simloop/tools/search", data=b'{"q": "a"}', method="POST",
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # loopback only
            answer = json.loads(response.read())
    assert answer == {"content": "ConnectionError: search: could not reach the backend", "is_error": True}
