"""The Stop button with tools over MCP: each ``tools/call`` records when its request arrived (`simloop._arrivals`).

A client that sends a reply's calls together (pydantic-ai's ``MCPToolset``) had sent the second before Stop fired in
the first, even when the calls take no time and the server starts the second after the Stop: ``abort`` forgives it.
A loop that runs the calls one after another and ignores Stop sends the second after it: ``abort`` still catches
that, in memory and over HTTP.  "Arrived" means the client had sent it, however late the server reads it: shown on
the in-memory pipe itself and on a raw HTTP request whose bytes are on their way when Stop fires.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("mcp.server", reason="the MCP SDK is not installed (pip install 'simloop[mcp]')")

import anyio
from mcp import Client
from mcp.shared.memory import create_client_server_memory_streams

import simloop
from simloop import Outcome, Scenario, Sim
from simloop._arrivals import ARRIVED, Arrivals
from simloop.transcript import AbortEvent, ToolStart, Transcript

DURING_TOOL = Path(__file__).resolve().parents[1] / "scenarios" / "stop-button-during-tool.yaml"
# what a Stop wiring can break (the frameworks' known findings on other invariants stay out: docs/findings.md)
STOP_INVARIANTS = ["abort", "pairing", "request_valid", "results_sent", "results_together", "results_real", "no_rerun",
                   "honest_outcome", "crash", "no_work_after_return"]


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic-ai warns about models it does not know the prices of
        yield


def zero_time(*, turns: bool = True) -> Scenario:
    """Search and email asked for in one reply, Stop while the search runs, and no tool taking any time."""
    s = Scenario.from_yaml(DURING_TOOL.read_text())
    return s.model_copy(update={"faults": [], **({} if turns else {"followups": []})})


def after_stop(sim: Sim) -> list[ToolStart]:
    """The tool executions that began after the Stop, with the Stop's place in the transcript."""
    at = next(i for i, e in enumerate(sim.transcript.events) if isinstance(e, AbortEvent))
    return [e for e in sim.transcript.events[at + 1:] if isinstance(e, ToolStart)]


def abort_at(sim: Sim) -> int:
    return next(i for i, e in enumerate(sim.transcript.events) if isinstance(e, AbortEvent))


# -- the loops ---------------------------------------------------------------------------------------------------------


def pai_mcp(*, over_http: bool, read_timeout: float | None = None) -> Any:
    """The README's lines: pydantic-ai with ``MCPToolset(sim.mcp_server())`` (or ``MCPToolset(sim.mcp_url)``), each
    turn run with ``run_until_stop``; ``read_timeout``: the MCP client's, for a loop whose tools may take longer than
    its default (300 s over HTTP)."""
    pytest.importorskip("simloop.adapters.pydantic_ai", reason="pydantic-ai is not installed")
    pytest.importorskip("fastmcp", reason="pydantic-ai's MCP client is not installed (pydantic-ai-slim[mcp])")

    async def pai_mcp_stop(sim: Sim) -> list[Outcome]:
        from pydantic_ai import Agent
        from pydantic_ai.mcp import MCPToolset

        from simloop.adapters import pydantic_ai as pai

        kwargs = {} if read_timeout is None else {"read_timeout": read_timeout}
        agent = Agent(pai.model(sim), toolsets=[MCPToolset(sim.mcp_url if over_http else sim.mcp_server(), **kwargs)])
        history: list[Any] = []
        outcomes = []
        for text in sim.user_turns:
            outcome, history = await pai.run_until_stop(agent, text, history, stop=sim.abort.is_set)
            outcomes.append(outcome)
        return outcomes

    pai_mcp_stop.__name__ = pai_mcp_stop.__qualname__ = f"pai_mcp_{'http' if over_http else 'memory'}"
    return pai_mcp_stop


def one_by_one(*, over_http: bool, check_each: bool) -> Any:
    """A loop running the reply's MCP calls one after another: ``check_each`` looks at Stop before each call (correct);
    without it, Stop is looked at only before the next model call, so the email goes out after Stop (the defect)."""

    async def loop(sim: Sim) -> Outcome:
        messages: list[dict[str, Any]] = [{"role": "user", "content": sim.task}]
        async with Client(sim.mcp_url if over_http else sim.mcp_server()) as tools:
            listed = (await tools.list_tools()).tools
            schemas = [{"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
                       for t in listed]
            for _ in range(6):
                if sim.abort.is_set():
                    return Outcome("aborted")
                reply = await sim.async_client.messages.create(
                    model=sim.model, max_tokens=512, messages=messages, tools=schemas  # type: ignore[arg-type]
                )
                messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
                if reply.stop_reason != "tool_use":
                    return Outcome("final", "".join(getattr(b, "text", "") for b in reply.content))
                results = []
                for block in reply.content:
                    if block.type != "tool_use":
                        continue
                    if check_each and sim.abort.is_set():
                        results.append({"type": "tool_result", "tool_use_id": block.id, "content": "not run",
                                        "is_error": True})
                        continue
                    result = await tools.call_tool(block.name, dict(block.input))  # type: ignore[arg-type]
                    text = "".join(getattr(c, "text", "") for c in result.content)
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": text,
                                    "is_error": bool(result.is_error)})
                messages.append({"role": "user", "content": results})
        return Outcome("max_steps")

    loop.__name__ = loop.__qualname__ = f"one_by_one_{'http' if over_http else 'memory'}_{'checked' if check_each else 'ignored'}"
    return loop


# -- a reply's calls sent together: forgiven ---------------------------------------------------------------------------


@pytest.mark.parametrize("over_http", [False, True], ids=["memory", "http"])
def test_pydantic_ai_over_mcp_stopped_in_the_first_of_two_zero_time_calls_passes_abort(over_http: bool) -> None:
    # over HTTP the client opens a second connection for the email's call; the search (zero time) starts only once
    # that request has reached the server (`VirtualTimeEventLoop.settled`), as in production.  Without that wait
    # the email's request arrived after the Stop in 12 of 20 runs, so a few runs are enough to see it come back.
    loop = pai_mcp(over_http=over_http)
    for _ in range(8 if over_http else 1):
        with Sim(zero_time()) as sim:
            sim.run(loop)
        report = sim.check()
        assert report.ok, [v.message for v in report.violations]
        assert [o.reason for o in sim.outcomes] == ["aborted", "final"]
        # both requests had arrived before the Stop ...
        sent = sim.transcript.of(ToolStart)[:2]
        assert [e.tool for e in sent] == ["search", "send_email"]
        assert all(e.arrived is not None and e.arrived <= abort_at(sim) for e in sent)
        # ... in memory the server starts the email after the Stop, and that is what was forgiven; over HTTP the two
        # calls run together, as they do in production
        assert [e.tool for e in after_stop(sim)] == ([] if over_http else ["send_email"])


def test_pydantic_ai_over_mcp_http_holds_a_stop_anywhere_under_verify(tmp_path: Path) -> None:
    # (the read timeout raised past the slowest fault: at the default 300 s the client gives up on a slow tool and
    # the turn ends with the tool still running on the server, Stop or not; a finding of its own, not this one's)
    report = simloop.verify(pai_mcp(over_http=True, read_timeout=3600), abort=True, turns=2, max_examples=20, seed=31,
                            out_dir=tmp_path, invariants=STOP_INVARIANTS)
    assert report.ok and report.examples == 20


def test_the_ready_mcp_drive_holds_a_zero_time_stop_scripted_and_under_verify(tmp_path: Path) -> None:
    pai = pytest.importorskip("simloop.adapters.pydantic_ai", reason="pydantic-ai is not installed")
    pytest.importorskip("fastmcp", reason="pydantic-ai's MCP client is not installed (pydantic-ai-slim[mcp])")
    with Sim(zero_time()) as sim:
        sim.run(pai.drive_mcp)
    assert sim.check().ok and [o.reason for o in sim.outcomes] == ["aborted", "final"]
    assert [e.tool for e in after_stop(sim)] == ["send_email"]
    report = simloop.verify(pai.drive_mcp, abort=True, turns=2, max_examples=30, seed=31, out_dir=tmp_path,
                            invariants=STOP_INVARIANTS)
    assert report.ok and report.examples == 30


# -- a call started after Stop: caught ---------------------------------------------------------------------------------


@pytest.mark.parametrize("over_http", [False, True], ids=["memory", "http"])
def test_a_loop_that_starts_the_next_mcp_call_after_stop_is_caught(over_http: bool) -> None:
    with Sim(zero_time(turns=False)) as sim:
        outcome = sim.run(one_by_one(over_http=over_http, check_each=False))
    assert outcome.reason == "aborted"
    report = sim.check()
    assert [v.invariant for v in report.violations] == ["abort"]
    assert "ran send_email (exec 2) (its MCP request arrived after Stop)" in report.violations[0].message
    late = after_stop(sim)
    assert [e.tool for e in late] == ["send_email"] and late[0].arrived is not None
    assert late[0].arrived > abort_at(sim)


@pytest.mark.parametrize("over_http", [False, True], ids=["memory", "http"])
def test_the_same_loop_checking_stop_before_each_call_passes(over_http: bool) -> None:
    with Sim(zero_time(turns=False)) as sim:
        outcome = sim.run(one_by_one(over_http=over_http, check_each=True))
    assert outcome.reason == "aborted"
    assert sim.check().ok and after_stop(sim) == []


@pytest.mark.parametrize("over_http", [False, True], ids=["memory", "http"])
def test_verify_catches_an_mcp_loop_that_ignores_stop_between_calls(tmp_path: Path, over_http: bool) -> None:
    # (over HTTP each call waits for the loop to settle before it starts: the email's request, sent only once the
    # search has answered, still arrives after the Stop)
    defect = one_by_one(over_http=over_http, check_each=False)
    with pytest.raises(simloop.InvariantViolation) as caught:
        simloop.verify(defect, abort=True, max_examples=60, seed=3, out_dir=tmp_path, invariants=["abort"])
    assert {v.invariant for v in caught.value.violations} == {"abort"}
    assert any("its MCP request arrived after Stop" in v.message for v in caught.value.violations)


# -- "arrived" is when the client sent it, however late the server reads it ------------------------------------------


def test_a_stop_stamps_what_waits_in_the_in_memory_pipe_as_arrived_before_it() -> None:
    position = [0]
    arrivals = Arrivals(lambda: position[0])

    async def main() -> list[tuple[str, int | None]]:
        async with create_client_server_memory_streams() as ((_, client_write), (server_read, _)):
            reader = arrivals.reader(server_read)
            got: list[tuple[str, int | None]] = []

            async def serve(n: int) -> None:
                for _ in range(n):
                    item = await reader.receive()
                    assert reader.last_context is not None
                    got.append((item, reader.last_context.run(ARRIVED.get)))

            async with anyio.create_task_group() as tg:
                # 1. handed to a read the server has pending, which has not resumed yet when Stop fires
                tg.start_soon(serve, 1)
                await anyio.wait_all_tasks_blocked()
                position[0] = 3
                await client_write.send("handed")
                with arrivals.stop():
                    position[0] += 1  # the Stop's event, at 3
                position[0] = 6
            async with anyio.create_task_group() as tg:
                # 2. one in the pipe's buffer and one whose sender is blocked, nobody reading: Stop at 8
                position[0] = 7
                await client_write.send("buffered")
                tg.start_soon(client_write.send, "blocked")
                await anyio.wait_all_tasks_blocked()
                position[0] = 8
                with arrivals.stop():
                    position[0] += 1
                # 3. sent after the Stop
                position[0] = 12
                tg.start_soon(client_write.send, "after")
                await anyio.wait_all_tasks_blocked()
                position[0] = 20  # the server reads all three only now
                await serve(3)
            return got

    assert anyio.run(main) == [("handed", 3), ("buffered", 8), ("blocked", 8), ("after", 20)]


def test_a_message_withdrawn_after_the_stop_lends_its_stamp_to_no_later_one() -> None:
    # a sender blocked at the Stop, then cancelled (its message never arrives): the next message, sent after the
    # Stop, is stamped when it arrives, not as the withdrawn one would have been
    position = [0]
    arrivals = Arrivals(lambda: position[0])

    async def main() -> list[tuple[str, int | None]]:
        async with create_client_server_memory_streams() as ((_, client_write), (server_read, _)):
            reader = arrivals.reader(server_read)
            await client_write.send("first")
            with anyio.CancelScope() as blocked:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client_write.send, "withdrawn")
                    await anyio.wait_all_tasks_blocked()
                    position[0] = 4
                    with arrivals.stop():
                        position[0] += 1
                    blocked.cancel()
            got = []
            for item in ("first", "later"):
                if item == "later":
                    position[0] = 9
                    await client_write.send("later")
                got.append((await reader.receive(), reader.last_context.run(ARRIVED.get)))  # type: ignore[union-attr]
            return got

    assert anyio.run(main) == [("first", 4), ("later", 9)]


def _post(host: str, port: int, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


def test_over_http_a_request_on_its_way_when_stop_fires_arrived_before_it() -> None:
    # the request's bytes are written, then Stop is pressed at once on the loop's thread, before the server's thread
    # has read them: the Stop waits for the server to take them in, so the call counts as sent before the Stop
    async def drive(sim: Sim) -> Outcome:
        await sim.async_client.messages.create(model=sim.model, max_tokens=64,
                                               messages=[{"role": "user", "content": sim.task}])
        url = urlsplit(sim.mcp_url)
        assert url.hostname is not None and url.port is not None
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(_post(url.hostname, url.port, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                    "params": {"name": "search", "arguments": {"q": "refund policy"}}}))
        sim.abort.set()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        answer = json.loads(await reader.readexactly(length))
        writer.close()
        return Outcome("aborted", answer["result"]["content"][0]["text"])

    s = zero_time(turns=False).model_copy(update={"abort": None})
    for _ in range(3):  # (the race it guards against is real time: without the wait it is lost every time)
        with Sim(s) as sim:
            outcome = sim.run(drive)
        assert outcome.text.startswith("Refunds within 30 days")
        late = after_stop(sim)
        assert [e.tool for e in late] == ["search"] and late[0].arrived == abort_at(sim)
        assert sim.check(invariants=["abort"]).ok


# -- direct run_tool calls keep the rule they had ---------------------------------------------------------------------


def test_run_tool_records_no_arrival_and_a_call_after_stop_is_still_caught(tmp_path: Path) -> None:
    def drive(sim: Sim) -> Outcome:
        sim.client.messages.create(model=sim.model, max_tokens=64, messages=[{"role": "user", "content": sim.task}])
        sim.run_tool("search", {"q": "refund policy"})
        sim.run_tool("send_email", {"to": "ann@example.com", "body": "Our refund policy is attached."})  # Stop ignored
        return Outcome("aborted")

    with Sim(zero_time(turns=False)) as sim:
        sim.run(drive)
    assert [e.arrived for e in sim.transcript.of(ToolStart)] == [None, None]
    assert [v.invariant for v in sim.check().violations] == ["abort"]
    assert '"arrived"' not in sim.transcript.to_jsonl()  # a call that did not come over MCP is written as before


def test_the_arrival_is_written_and_read_back(tmp_path: Path) -> None:
    with Sim(zero_time(turns=False)) as sim:
        sim.run(one_by_one(over_http=False, check_each=True))
    path = sim.transcript.write(tmp_path / "t.jsonl")
    again = Transcript.read(path)
    assert [e.arrived for e in again.of(ToolStart)] == [e.arrived for e in sim.transcript.of(ToolStart)] == [2]


def test_the_stop_keeps_its_place_when_a_sub_run_is_split_out_before_it() -> None:
    """The invariants check a sub-agent run apart, which moves the parent's events; the Stop counts in the same
    numbers as `ToolStart.arrived` (`AbortEvent.at`), so a call sent before it is still forgiven."""
    import dataclasses

    from simloop.invariants import check
    from simloop.transcript import Request, Response, SubagentEnd, SubagentStart, Transcript

    with Sim(zero_time()) as sim:
        sim.run(pai_mcp(over_http=False))
    stop = sim.transcript.events[abort_at(sim)]
    assert stop.at == abort_at(sim)  # recorded with MCP tools in the run
    sub = [SubagentStart(t=0.0, run=1, task="look", parent=0),
           Request(t=0.0, index=900, call=900, attempt=0, path="/v1/messages", stream=False,
                   body={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "look"}]}, subrun=1),
           Response(t=0.0, index=900, call=900, status=500, kind="error"), SubagentEnd(t=0.0, run=1, reason="error")]
    moved = [dataclasses.replace(e, arrived=e.arrived + len(sub)) if isinstance(e, ToolStart) and e.arrived is not None
             else dataclasses.replace(e, at=e.at + len(sub)) if isinstance(e, AbortEvent) and e.at is not None else e
             for e in sim.transcript.events]
    split = Transcript(header=sim.transcript.header, events=[*sub, *moved])
    assert [v.message for v in check(split, invariants=["abort"]).violations] == []


@pytest.mark.usefixtures("_quiet")
def test_a_turn_that_fails_after_stop_is_aborted() -> None:
    """pydantic-ai gives up on a tool out of retries (UnexpectedModelBehavior) after the user pressed Stop: the
    ready drive's `run_until_stop` returns ``aborted`` (it returned ``error``, an `abort` violation), and the
    next turn goes on from the history with what ran."""
    pytest.importorskip("simloop.adapters.pydantic_ai", reason="pydantic-ai is not installed")
    from simloop.adapters import pydantic_ai as pai

    tools = [{"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    scenario = Scenario.model_validate({
        "task": "Find it.", "tools": tools, "followups": ["And?"], "abort": {"tool_call": 2}, "strict": False,
        "model": [{"tool_use": [{"name": "search", "input": {"q": "a"}}]},
                  {"tool_use": [{"name": "search", "input": {"q": "b"}}]}, {"end_turn": "done"}],
        "faults": [{"tool": "search", "kind": "raise", "call": 1}, {"tool": "search", "kind": "raise", "call": 2}],
    })
    with Sim(scenario) as sim:
        sim.run(pai.drive_mcp)
    assert [o.reason for o in sim.outcomes] == ["aborted", "final"]
    assert sim.check(invariants=["abort", "pairing", "request_valid"]).violations == []
