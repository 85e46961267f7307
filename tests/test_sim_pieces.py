"""The Sim's pieces (`simloop._sim`), each on its own: the facade hands them the parts of the world they need, and
each does its one job with those parts alone (docs/design.md, Architecture)."""

from __future__ import annotations

from typing import Any

import pytest

from simloop import Limits, Outcome, Sim
from simloop._runtime.halt import LoopHalted
from simloop._sim.assemble import configured, virtual_bound
from simloop._sim.clients import Clients
from simloop._sim.guard import Guard, default_budget
from simloop._sim.leftbehind import forks_seen
from simloop._sim.lives import MAX_LIVES, Lives
from simloop._sim.mcptools import McpTools
from simloop._sim.record import Recorder
from simloop._sim.turns import UserTurns
from simloop.errors import SimulatedCrash, UsageError
from simloop.transcript import Halt, OutcomeEvent, Restart, TurnStart

SCENARIO: dict[str, Any] = {
    "name": "pieces", "task": "Find it.", "followups": ["And then?"], "tools": [{"name": "search"}],
    "model": [{"end_turn": "done"}],
}


def _sim() -> Sim:
    return Sim(SCENARIO, seed=3)


def test_configured_applies_the_sims_overrides_and_says_who_declared_the_limits() -> None:
    scenario, by = configured(SCENARIO, allow_functions=False, tools=None, limits=Limits(max_steps=4), abort=None,
                              approvals=True)
    assert (scenario.limits.max_steps, by, scenario.approval_policy) == (4, "loop", True)
    assert configured(SCENARIO, allow_functions=False, tools=None, limits=None, abort=None, approvals=None)[1] == \
        "scenario"
    with pytest.raises(UsageError, match=r"'fetch' is not a tool of scenario 'pieces' \(its tools: search\)"):
        configured(SCENARIO, allow_functions=False, tools={"fetch": print}, limits=None, abort=None, approvals=None)
    assert virtual_bound(Limits(deadline_s=3600), None) == 36000.0
    assert virtual_bound(Limits(), None) == 6 * 3600.0 and virtual_bound(Limits(), 5.0) == 5.0


def test_the_runaway_budget_grows_with_the_declared_step_cap() -> None:
    assert default_budget(Limits()).model_calls == 51
    assert (default_budget(Limits(max_steps=40)).model_calls, default_budget(Limits(max_steps=40)).requests) == \
        (85, 348)


def test_user_turns_are_taken_in_order_each_recorded_once() -> None:
    sim = _sim()
    turns = UserTurns(["one", "two"], transcript=sim.transcript, clock=sim.clock, guard=sim._guard,
                      server=sim.server, abort=sim.abort)
    with pytest.raises(UsageError, match=r"sim.user_turns\[1\] taken before turn 0"):
        turns[1]
    assert (turns[0], turns[0], list(turns)) == ("one", "one", ["one", "two"])
    assert [(e.turn, e.text) for e in sim.transcript.of(TurnStart)] == [(0, "one"), (1, "two")]
    assert turns.started == 2


def test_a_restart_begins_a_new_life_and_the_last_life_halts() -> None:
    sim = _sim()
    lives = Lives(sim.transcript, sim.clock, sim._turns, sim.abort)
    sim._turns[0]
    sim.abort.set()
    lives.restart(SimulatedCrash("the tool crashed"))
    assert (lives.count, lives.began, sim._turns.started, sim.abort.is_set()) == (2, len(sim.transcript.events), 0,
                                                                                  False)
    assert [(e.life, e.detail) for e in sim.transcript.of(Restart)] == [(2, "the tool crashed")]
    lives.count = MAX_LIVES
    with pytest.raises(LoopHalted, match="the process died 10 times; simloop stops a run after 10 lives"):
        lives.restart(SimulatedCrash("again"))


def test_the_sync_lives_run_the_drive_again_after_a_crash() -> None:
    sim = _sim()
    lives = Lives(sim.transcript, sim.clock, sim._turns, sim.abort)
    seen: list[int] = []

    def drive(given: Sim) -> str:
        seen.append(lives.count)
        assert given is sim
        if len(seen) < 3:
            raise SimulatedCrash("crash")
        return "returned"

    assert lives.sync(drive, sim) == "returned" and seen == [1, 2, 3]


def test_the_recorder_records_the_outcome_once_and_holds_a_list_to_the_turns_taken() -> None:
    sim = _sim()
    record = Recorder(sim.transcript, sim.clock, sim._guard, sim._turns)
    with pytest.raises(UsageError, match=r"ran 1 user turn\(s\) .* but returned 2 outcome\(s\)"):
        record.returned([Outcome("final", "a"), Outcome("final", "b")])
    assert record.returned(("final", "done")) == [Outcome("final", "done")]
    error = record.error(RuntimeError("late"))
    assert (error.reason, error.text) == ("error", "RuntimeError: late")
    assert [(e.reason, e.text) for e in sim.transcript.of(OutcomeEvent)] == [("final", "done")]  # the first stays


def test_the_clients_are_built_once_and_closing_forgets_them() -> None:
    sim = _sim()
    clients = Clients(sim.server, Guard(sim.clock, sim.watchdog, default_budget(sim.limits), 60.0), sim.watchdog)
    first = clients.anthropic(False)
    assert clients.anthropic(False) is first and first._client is clients.http()
    assert clients.anthropic(True) is not first
    clients.close()
    assert first._client.is_closed and clients.anthropic(False) is not first


def test_mcp_url_is_served_only_while_a_run_lasts() -> None:
    sim = _sim()
    mcp = McpTools(sim.tools, sim.clock, sim.watchdog, sim._mcp._arrivals)
    with pytest.raises(UsageError, match="sim.mcp_url serves the tools while the run lasts: read it inside the drive"):
        mcp.url(sim.tool_schemas)
    mcp.run_ended()
    assert (mcp.proc, mcp.http) == (None, None)


def test_no_fork_reports_without_a_run() -> None:
    sim = _sim()
    forks_seen(None, sim.clock, sim.transcript)
    assert sim.transcript.of(Halt) == []


def test_the_sims_forwarded_attributes_are_its_pieces_own() -> None:
    sim = _sim()
    budget = default_budget(Limits(max_steps=3))
    sim.budget = budget
    sim.max_virtual_s = 60.0
    assert sim._guard.budget is budget and sim.budget is budget
    assert sim._guard.max_virtual_s == 60.0 == sim.max_virtual_s
    assert sim.lives == sim._lives.count == 1


def test_the_async_clients_send_the_platform_a_bare_client_sends_without_looking_it_up_per_run() -> None:
    """The SDK's async client looks its platform up on a worker thread at its first request (some 1 ms a run):
    a Sim's clients have it already, and send the very header a bare client does."""
    import asyncio

    import anthropic
    import httpx2

    seen: list[str] = []

    def bare(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers["x-stainless-os"])
        return httpx2.Response(500)

    async def first_call() -> None:
        client = anthropic.AsyncAnthropic(api_key="k", max_retries=0,
                                          http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(bare)))
        with pytest.raises(anthropic.APIStatusError):
            await client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])

    asyncio.run(first_call())
    with _sim() as sim:
        assert sim.async_client._platform is not None and str(sim.async_client._platform) == seen[0]
        assert str(sim.async_openai_client._platform) == seen[0]
