"""simloop: test and simulate LLM agent loops.

A simulated Anthropic Messages API that the official SDK talks to unmodified,
fault-injecting tools and a virtual clock, so that a loop's invariants (it
stops, it keeps tool_use/tool_result pairing valid, it never re-runs a
completed write, it says honestly why it stopped) can be checked on scripted
scenarios and property-tested with Hypothesis.

    import simloop

    with simloop.Sim("scenarios/stuck-search.yaml", seed=0) as sim:
        outcome = sim.run(drive)
    sim.check(outcome).raise_for_violations()
"""

import importlib as _importlib

from simloop import strategies
from simloop.errors import InvariantViolation, ScenarioError, SimloopInternalError, UsageError
from simloop.invariants import Report, Violation
from simloop.models import FunctionModel, ModelRequest, Script
from simloop.outcome import Outcome
from simloop.scenario import Fault, Limits, Reply, Scenario, ToolCall, ToolSpec, load_scenario
from simloop.sim import ScriptExhaustedError, Sim
from simloop.transcript import Transcript
from simloop.verify import property, replay, verify

__version__ = "0.1.0"

# Modules reached as attributes but imported on first use: `import simloop` stays free of vcrpy and of the
# adapters' harnesses (each adapter needs its extra installed; see simloop.adapters).
_LAZY = ("adapters", "cassettes")


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return _importlib.import_module(f"simloop.{name}")
    raise AttributeError(f"module 'simloop' has no attribute {name!r}")

__all__ = [
    "Fault",
    "FunctionModel",
    "InvariantViolation",
    "Limits",
    "ModelRequest",
    "Outcome",
    "Reply",
    "Report",
    "Scenario",
    "ScenarioError",
    "Script",
    "ScriptExhaustedError",
    "Sim",
    "SimloopInternalError",
    "ToolCall",
    "ToolSpec",
    "Transcript",
    "UsageError",
    "Violation",
    "load_scenario",
    "property",
    "replay",
    "strategies",
    "verify",
]
