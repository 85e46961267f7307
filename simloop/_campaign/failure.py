"""The failure a campaign reports: the minimal run written as a scenario file, its timeline, the replay line.

Also what a campaign says when its runs prove nothing (`not_wired`, `not_routed`), and the names by which
a drive is known in scenario files, database keys and messages (`drive_name`, `replay_line`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simloop._claims import claim_flags
from simloop.errors import InvariantViolation
from simloop.generated import GeneratedFaults, to_scenario
from simloop.invariants import Report, Violation
from simloop.scenario import Scenario
from simloop.sim import Drive, Sim
from simloop.timeline import render_timeline
from simloop.transcript import AbortEvent

__all__ = ["Failure", "drive_name", "not_routed", "not_wired", "replay_line"]

#: Why a failure that did not fail again when Hypothesis replayed it is still reported, and how to fix the cause.
FLAKY_NOTE = (
    "note: this run broke the invariants once, and its replay did not (Hypothesis: {kind}); the loop's behaviour "
    "depends on more than the run's draws, e.g. identical tool calls run concurrently whose results simloop could "
    "not tell apart; pass each call's tool_use id (sim.run_tool(name, input, tool_use_id=block.id), the "
    "x-simloop-tool-use-id header, or _meta.tool_use_id over MCP) so that every execution is bound exactly"
)


@dataclass(frozen=True)
class Failure:
    """A run that broke the invariants, as the campaign kept it: its report, its Sim, its model and faults.

    ``first`` is the number of the first failing example of the search (shrinking runs more after it);
    ``script`` the scenario a reduction replayed it as (`simloop._campaign.reduce`), which ``sim`` then ran.
    """

    report: Report
    sim: Sim
    model: Any  # the run's GeneratedModel or FaultedRecording: what it served is the minimal script
    faults: GeneratedFaults
    first: int | None = None
    script: Scenario | None = None

    def raised(self, drive: Drive, *, out_dir: Path, seed: int | None, examples: int) -> InvariantViolation:
        """The `InvariantViolation` to raise: the minimal scenario written under ``out_dir``, then reported."""
        scenario = self.scenario(drive)
        path = out_dir / f"{_slug(scenario.name)}-{_short_hash(scenario)}.yaml"
        functions = any(t.function is not None for t in scenario.tools)  # named by import path: replay opts in
        path.parent.mkdir(parents=True, exist_ok=True)
        header = _file_header(self.report.violations, functions=functions)
        path.write_text(header + scenario.to_yaml(), encoding="utf-8")
        timeline = render_timeline(self.sim.transcript, self.report.violations)
        replay = replay_line(drive, str(path), self.sim.seed, allow_functions=functions, scenario=scenario)
        search = getattr(drive, "simloop_search", None)  # a --command loop: the CLI line, not a Python call
        search = f"{search} --seed {seed}" if isinstance(search, str) else f"simloop.verify(..., seed={seed})"
        message = self._message(scenario, path, timeline, replay, search=search if seed is not None else None)
        return InvariantViolation(
            message, violations=self.report.violations, scenario=scenario, scenario_path=str(path),
            timeline=timeline, replay=replay, transcript=self.sim.transcript, examples=examples,
            examples_before_failure=self.first - 1 if self.first is not None else None,
        )

    def raised_flaky(
        self, drive: Drive, kind: str, *, out_dir: Path, seed: int | None, examples: int
    ) -> InvariantViolation:
        """The report of a failure Hypothesis could not reproduce (``kind``: its Flaky error): why, and what to do."""
        error = self.raised(drive, out_dir=out_dir, seed=seed, examples=examples)
        return InvariantViolation(
            f"{error}\n\n{FLAKY_NOTE.format(kind=kind)}",
            violations=error.violations, scenario=error.scenario, scenario_path=error.scenario_path,
            timeline=error.timeline, replay=error.replay, transcript=error.transcript,
            examples=examples, examples_before_failure=error.examples_before_failure,
        )

    def scenario(self, drive: Drive) -> Scenario:
        """The failing run written down as a scenario: what the model served, the faults that fired, the turns."""
        if self.script is not None:
            return self.script
        sim = self.sim
        return to_scenario(
            name=f"{drive_name(drive)}-{self.report.violations[0].invariant}",
            task=sim.task,
            tools=sim.scenario.tools,
            limits=sim.limits,
            served=self.model.served,
            faults=self.faults.fired,
            halted=sim.transcript.halt is not None,
            followups=sim.scenario.followups[: max(sim.user_turns.started - 1, 0)],
            abort=sim.scenario.abort if sim.transcript.of(AbortEvent) else None,
            approvals=sim.scenario.approvals,
            requires=["context"] if "context" in sim.scenario.requires else [],
            prices=sim.scenario.prices,
        )

    def _message(self, scenario: Scenario, path: Path, timeline: str, replay: str, *, search: str | None) -> str:
        violations = self.report.violations
        n = len(scenario.model)
        shape = f"{n} repl{'y' if n == 1 else 'ies'}"
        if scenario.then == "repeat_last":
            shape += ", then repeat_last"
        if scenario.faults:
            shape += f", {len(scenario.faults)} tool fault(s)"
        found_at = (
            f"first failing run: example {self.first} of the search ({self.first - 1} passed before it); "
            "then shrunk to the run below"
            if self.first is not None else None
        )
        lines = [
            f"simloop found {len(violations)} violation(s) of the loop's invariants:",
            *(f"  {v}" for v in violations),
            *([found_at] if found_at else []),
            "",
            f"minimal scenario ({shape}), written to {path}:",
            *("  " + line for line in scenario.to_yaml().rstrip().splitlines()),
            "",
            "timeline of the failing run:",
            *("  " + line for line in timeline.splitlines()),
            "",
            f"replay it: {replay}",
        ]
        if search is not None:
            lines.append(f"or re-run the search: {search}")
        return "\n".join(lines)


def replay_line(
    drive: Drive, path: str, seed: int = 0, *, allow_functions: bool = False, scenario: Scenario | None = None
) -> str:
    """The command that replays ``path``; with the opt-in when its tools name functions (docs/security.md), and
    the claims the file needs (``--abort``, ``--claims max_steps``...: `simloop run` skips it without them)."""
    claims = claim_flags(scenario) if scenario is not None else ""
    hint = getattr(drive, "simloop_replay", None)
    if isinstance(hint, str):  # a drive that is not a Python function (simloop.command): it says how
        return hint.replace("{path}", path, 1) + (f" --seed {seed}" if seed else "") + claims
    module = getattr(drive, "__module__", None)
    qual = getattr(drive, "__qualname__", None)
    if module and qual and "<" not in qual and module != "__main__":
        return (
            f"simloop run {path} --drive {module}:{qual}"
            + (f" --seed {seed}" if seed else "")
            + (" --allow-functions" if allow_functions else "")
            + claims
        )
    return f"simloop.replay(drive, {path!r}" + (f", seed={seed}" if seed else "") + (
        ", allow_functions=True)" if allow_functions else ")"
    )


def drive_name(drive: Any) -> str:
    """How a drive is named in scenario files, database keys and messages: ``module`` or ``module.qualname``."""
    module = getattr(drive, "__module__", "") or ""
    name = module.rsplit(".", 1)[-1] if module not in ("", "__main__") else ""
    qual = getattr(drive, "__qualname__", "drive")
    return name if name and qual == "drive" else (f"{name}.{qual}" if name else str(qual))


def not_wired(what: str) -> str:
    """The message for runs that never reached the simulated API (``what`` says which): how to wire a loop."""
    return (
        f"{what}: the drive is probably not wired to the Sim, so nothing was tested. Build the loop's client from "
        "the Sim: sim.client (anthropic.Anthropic), sim.async_client (anthropic.AsyncAnthropic), or sim.http_client / "
        "sim.async_http_client for a framework that takes an httpx client; run the tools through sim.run_tool / "
        "sim.arun_tool. A client the loop builds itself (anthropic.Anthropic()) talks to the real API, not to simloop."
    )


def not_routed(what: str) -> str:
    """The message for runs whose model asked for tools that never ran through simloop (``what`` says which)."""
    return (
        f"{what}: the loop's tools are not routed through sim.run_tool, so nothing about them was tested (and the "
        "loop's own tools, real ones, may have run instead). Pass sim.run_tool (or await sim.arun_tool) to the loop "
        "as the function that runs a tool call, or point a loop in another language or process at the tools "
        "endpoint (POST $SIMLOOP_TOOLS_URL/NAME) or the MCP server (sim.mcp_server(), sim.mcp_url, $SIMLOOP_MCP_URL)."
    )


def undeclared(what: str, ran: Sequence[str], declared: Sequence[str]) -> str:
    """The message for runs whose every tool execution named a tool the world does not declare: how to declare them."""
    return (
        f"{what}: every tool the loop ran ({', '.join(ran)}) is one verify does not declare (it declares "
        f"{', '.join(declared)}), so each run_tool answered UnknownToolError and not one of the loop's tool calls "
        "was tested (a failure found this way blames the declaration, not the loop). Declare the loop's own tools: "
        "verify(drive, tools=[...]) (or tools=simloop.scenario.load_tools('tools.yaml')), "
        "simloop verify --tools tools.yaml, --simloop-tools=tools.yaml or simloop_config's 'tools'; a tools file "
        "lists them as a scenario's tools: does (name, kind: read|write, description, input_schema, results), or "
        "is a scenario file whose tools: is taken"
    )


def _file_header(violations: Sequence[Violation], *, functions: bool = False) -> str:
    out = ["# Found by simloop.verify: the minimal run that breaks the loop's invariants."]
    out += [f"#   {str(v)[:200]}" for v in violations]
    how = "simloop.replay(drive, this_file, allow_functions=True)" if functions else "simloop.replay(drive, this_file)"
    out.append("# After these replies the model ends the run (then:), and expect: says the invariants hold, so the")
    out.append(f"# fixed loop replays it cleanly: {how}; commit it as a regression test.")
    return "\n".join(out) + "\n"


def _short_hash(scenario: Scenario) -> str:
    """Eight hex digits of the scenario's content: distinct failures of one invariant keep distinct files."""
    return hashlib.sha256(scenario.to_yaml().encode("utf-8")).hexdigest()[:8]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "failure"
