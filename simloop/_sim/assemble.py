"""The world a Sim is assembled from: the scenario (loaded, its tools bound, the Sim's overrides applied), the
transcript's header, the bound on virtual time, and the user's Stop and the person at the gate wired to the run."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from simloop._abort import AbortSignal, _AbortTrigger
from simloop._approvals import Gate
from simloop._runtime.clock import VirtualClock
from simloop._sim.guard import Guard
from simloop.errors import UsageError
from simloop.scenario import Abort, Approval, Limits, Scenario, load_scenario
from simloop.tools import ToolBox
from simloop.transcript import Header, Transcript
from simloop.wire.server import SimServer

__all__ = ["ScenarioLike", "configured", "gate", "header", "stop_button", "virtual_bound"]

ScenarioLike = Scenario | str | Path | dict[str, Any]


def as_scenario(scenario: ScenarioLike, *, allow_functions: bool = False) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario, allow_functions=allow_functions)
    if isinstance(scenario, dict):
        return Scenario._from_data(scenario, path=None, allow_functions=allow_functions)
    raise UsageError(
        f"Sim(scenario) takes a simloop.Scenario, a path to a scenario file or a dict; got {type(scenario).__name__}"
    )


def bind_tools(scenario: Scenario, tools: Mapping[str, Callable[..., Any]]) -> Scenario:
    """The scenario with ``tools``' callables as its tools' functions (`Sim`'s ``tools=``)."""
    if not isinstance(tools, Mapping):
        raise UsageError(f"Sim(tools=...) takes a mapping of tool name to callable, got {type(tools).__name__}")
    names = [t.name for t in scenario.tools]
    for name, fn in tools.items():
        if name not in names:
            raise UsageError(
                f"Sim(tools=...): {name!r} is not a tool of scenario {scenario.name!r} "
                f"(its tools: {', '.join(names) or 'none'})"
            )
        if not callable(fn):
            raise UsageError(f"Sim(tools=...): the implementation of {name!r} must be callable, got {fn!r}")
    bound = [t.model_copy(update={"function": tools[t.name]}) if t.name in tools else t for t in scenario.tools]
    return scenario.model_copy(update={"tools": bound})


def configured(
    scenario: ScenarioLike, *, allow_functions: bool, tools: Mapping[str, Callable[..., Any]] | None,
    limits: Limits | None, abort: Abort | None, approvals: bool | Sequence[Approval] | None,
) -> tuple[Scenario, str]:
    """The run's scenario, with the Sim's overrides; and who declared its limits, for the reports (``"scenario"``,
    its ``limits:``, or ``"loop"``, the Sim's ``limits=``)."""
    world = as_scenario(scenario, allow_functions=allow_functions)
    if tools is not None:
        world = bind_tools(world, tools)
    declared_by = "scenario"
    if limits is not None:
        limits = limits if isinstance(limits, Limits) else Limits.model_validate(limits)
        world = world.model_copy(update={"limits": limits})
        declared_by = "loop"
    if abort is not None:
        world = world.model_copy(update={"abort": abort})
    if approvals is not None and approvals is not False:
        answers = list(world.approvals or ()) if approvals is True else list(approvals)
        world = world.model_copy(update={"approvals": answers})
    return world, declared_by


def virtual_bound(limits: Limits, max_virtual_s: float | None) -> float:
    """Virtual seconds after which the run unwinds the loop: the Sim's, else 6 hours or ten deadlines."""
    deadline = limits.deadline_s
    return max_virtual_s or max(6 * 3600.0, 10 * deadline if deadline else 0.0)


def header(scenario: Scenario, seed: int, declared_by: str) -> Header:
    """The transcript's header: what the run is made of."""
    limits_set = scenario.limits.model_dump(exclude_none=True)
    return Header(
        scenario=scenario.name,
        seed=seed,
        limits=limits_set,
        limits_from=dict.fromkeys(limits_set, declared_by),
        tools={t.name: t.kind for t in scenario.tools},
        approval=list(scenario.gated_tools) if scenario.approval_policy else None,
        context="context" in scenario.requires,
        prices={name: p.model_dump() for name, p in scenario.prices.items()},
    )


def stop_button(scenario: Scenario, abort: AbortSignal, clock: VirtualClock, server: SimServer, tools: ToolBox,
                guard: Guard) -> None:
    """Wire the scenario's ``abort`` (when the user presses Stop) to the run: after a delivery, a tool, or a time."""
    if scenario.abort is None:
        return
    trigger = _AbortTrigger(scenario.abort, abort, clock.now)
    server.on_deliver = trigger.on_deliver
    tools.on_end = trigger.on_tool_end
    guard.on_time = trigger.on_time
    guard.abort_at = scenario.abort.at


def gate(scenario: Scenario, transcript: Transcript, clock: VirtualClock, tools: ToolBox, guard: Guard) -> Gate:
    """The person at the permission gate, on the run's clock and budgets."""
    person = Gate(
        scenario, transcript, now=clock.now, sleep=guard.sleep,
        turn_start=functools.partial(getattr, guard, "t_before"),
        forever=guard.forever,
    )
    if person.on:  # the answers reach the thread that asked; the others once they wait on it (`heard`)
        person.mark, tools.heard = clock.mark, clock.heard
    return person
