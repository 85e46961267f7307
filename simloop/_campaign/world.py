"""`World`: what each run of a campaign is made of (the world's options), and how one run's world is drawn.

The options travel together in one frozen value: the tools, the task, the limits the loop declares, the plans
(or a recording to fault), the most user turns, the Stop button, the most process deaths.  Each option is a
field and a step of `World.draw`, in a fixed order: the order of the draws is what Hypothesis shrinks and what
the example database replays, so a new option draws after the others.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st
from pydantic import ValidationError

from simloop._campaign.failure import drive_name
from simloop._campaign.schedule import Stage, split
from simloop._inputs import topic_words
from simloop._offer import SERVER_TOOLS, ServerTools
from simloop.errors import UsageError
from simloop.generated import EMPTY_ANSWERS, Draw, GeneratedFaults, GeneratedModel
from simloop.pricing import Price
from simloop.scenario import Abort, Approval, Limits, PriceSpec, Scenario, ToolSpec
from simloop.sim import Drive, Sim
from simloop.strategies import DEFAULT_TOOLS, Plan, stages

if TYPE_CHECKING:
    from simloop.cassettes import FaultedRecording, Recording

__all__ = ["ABORT_POINTS", "ANY_FOLLOWUPS", "APPROVAL_ANSWERS", "DEFAULT_TASK", "FOLLOWUPS", "Run", "World", "followups"]

DEFAULT_TASK = "The customer asks for a refund of order 1234. Check the policy, then email them the outcome."
#: The user's follow-up messages of a generated conversation (`verify(turns=N)`), in order.
FOLLOWUPS = (
    "Thanks. Did the customer get the email?",
    "Also check the shipping status of order 1234.",
    "Please summarise what you did for the ticket.",
    "One more thing: is the refund policy the same for gift cards?",
)
#: The follow-ups of a conversation whose task is the user's own (`followups`): nothing of the refund story.
ANY_FOLLOWUPS = (
    "Thanks. Is that all done?",
    "Please double-check what you just did.",
    "Please summarise what you did.",
    "One more thing: is there anything else I should know?",
)
#: Where `verify(abort=True)` presses Stop: after the n-th model call, while the n-th tool execution runs, or at a
#: virtual time (a model call or a tool in flight, often); the first of each is the simplest.
ABORT_POINTS = st.one_of(
    st.integers(1, 4).map(lambda n: Abort(after_call=n)),
    st.integers(1, 3).map(lambda n: Abort(tool_call=n)),
    st.sampled_from((0.5, 2.0, 10.0, 60.0)).map(lambda t: Abort(at=t)),
)


#: What the person at the permission gate does under `verify(approvals=True)`: up to three requests answered
#: otherwise than a prompt yes (the n-th request of the run: a no, a late answer, no answer at all); every other
#: request is approved at once.  Shrinks to no entry: a person who says yes to everything.
_LATE = (0.0, 5.0, 60.0, 3600.0)


def approval_answers(*, away: bool) -> st.SearchStrategy[list[Approval]]:
    """The person's answers a run draws; ``away`` (no answer ever) only for a loop that declares a deadline,
    which bounds its wait (without one, a wait for nobody is a runaway whatever the loop)."""
    answers = ("deny", "approve", "away") if away else ("deny", "approve")
    entry = st.builds(
        Approval, call=st.integers(1, 3), answer=st.sampled_from(answers), after=st.sampled_from(_LATE),
    )
    return st.lists(entry, max_size=3, unique_by=lambda a: a.call)


APPROVAL_ANSWERS = approval_answers(away=True)
_WRITE_POINTS = 3  # crash points 1..3 are write executions; the next ones model calls 2, 3, 4 (see World._crash_points)


@dataclass
class Run:
    """One run's world, drawn: the scenario it plays, the model that answers the loop, the tools' faults."""

    scenario: Scenario
    model: GeneratedModel | FaultedRecording
    faults: GeneratedFaults


@dataclass(frozen=True)
class World:
    """The world's options of a campaign, checked, and how each run's world is drawn from them.

    ``scenario`` is what every run starts from (the task, tools and limits; a recording's own, with the
    declared limits, when ``recording`` is given); ``name`` is the drive's; ``task`` is the task as given
    (part of the database key, also when a recording brings its own).
    """

    name: str
    task: str
    tools: tuple[ToolSpec, ...]
    limits: Limits
    scenario: Scenario
    plan: st.SearchStrategy[Plan] | None = None
    recording: Recording | None = None
    turns: int = 1
    abort: bool = False
    restarts: int = 0
    server_tools: ServerTools = "request"
    approvals: bool = False
    context: bool = False

    @classmethod
    def of(
        cls, drive: Drive, *, tools: Sequence[ToolSpec | dict[str, Any]] | None, limits: Limits | dict[str, Any] | None,
        task: str, plan: st.SearchStrategy[Plan] | None, recorded: Any, turns: int, abort: bool, restarts: int,
        server_tools: ServerTools = "request",
        approvals: bool = False,
        context: bool = False,
        prices: Mapping[str, Any] | None = None,
    ) -> World:
        """`verify`'s world arguments as a `World`; a wrong one is a `UsageError` saying what to give."""
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise UsageError(f"verify(turns=...) is the most user turns of a conversation, an int >= 1; got {turns!r}")
        if turns > 1 and recorded is not None:
            raise UsageError("verify(turns=...) generates conversations; a recording has its own turns: leave turns=1")
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
            raise UsageError(
                f"verify(restarts=...) is the most simulated process deaths a run, an int >= 0; got {restarts!r}"
            )
        if server_tools not in SERVER_TOOLS:
            raise UsageError(
                f"verify(server_tools=...) is 'request' (server tool blocks and pauses only when the request declares "
                f"a server tool: the default), 'on' (whatever it declares) or 'off' (never); got {server_tools!r}"
            )
        if server_tools != "request" and recorded is not None:
            raise UsageError(
                "verify(server_tools=...) shapes generated replies; a recording plays its own: leave server_tools out"
            )
        specs = _tools(tools)
        declared = limits if isinstance(limits, Limits) else Limits.model_validate(limits or {})
        name = drive_name(drive)
        base = Scenario(name=name, task=task, tools=specs, limits=declared)
        recording = None
        if recorded is not None:
            from simloop.cassettes import load_recording  # (only for a recording: import simloop leaves it alone)

            kinds = {t.name: t.kind for t in specs} if tools is not None else None
            recording = load_recording(recorded, kinds=kinds)
            base = recording.scenario.model_copy(update={"name": name, "limits": declared, "expect": None})
            specs = list(base.tools)
        if prices:  # the loop's own prices (verify(prices=...)), over the scenario's and the table's
            base = base.model_copy(update={"prices": {**base.prices, **_prices(prices)}})
        if context:  # the loop claims it keeps its requests inside the window: each run, and its saved failure, says so
            base = base.model_copy(update={"requires": sorted({*base.requires, "context"})})
        return cls(
            name=name, task=task, tools=tuple(specs), limits=declared, scenario=base, plan=plan, recording=recording,
            turns=turns, abort=bool(abort), restarts=restarts, server_tools=server_tools, approvals=bool(approvals),
            context=bool(context),
        )

    def stages(self, max_examples: int) -> list[Stage]:
        """The budget as stages: the plan's, the recording's faults, or by default `simloop.strategies.stages`,
        each making one kind of run certain."""
        return split(max_examples, self._parts())

    def strategy(self) -> st.SearchStrategy[Any]:
        """Every stage's plans as one strategy, for a campaign run as one plain Hypothesis test: which stage is
        the run's first draw (a small choice Hypothesis soon tries every value of), shrinking to the first."""
        parts = [strategy for _, strategy, _ in self._parts()]
        return parts[0] if len(parts) == 1 else st.one_of(parts)

    def _parts(self) -> list[tuple[str, st.SearchStrategy[Any], int]]:
        """The stages as ``(name, plans, share)``: the plan's, the recording's faults, or simloop's."""
        if self.plan is not None:
            return [("plan", self.plan, 1)]
        if self.recording is not None:
            from simloop.cassettes import fault_plans

            return [("recording", fault_plans(), 1)]
        return stages()

    def key(self, stage: str, invariants: Sequence[str]) -> bytes:
        """The example database's key of a stage: the same loop, world and stage find their failures again."""
        source = self.recording.source if self.recording is not None else None
        return repr(
            (self.name, list(self.tools), self.limits, list(invariants), self.task, source, stage)
            + ((self.turns,) if self.turns > 1 else ())
            + (("abort",) if self.abort else ())
            + ((self.restarts,) if self.restarts else ())
            + ((f"server_tools={self.server_tools}",) if self.server_tools != "request" else ())
            + (("approvals",) if self.approvals else ())
            + (("context",) if self.context else ())
        ).encode()

    def draw(self, draw: Draw, strategy: st.SearchStrategy[Any]) -> Run:
        """One run's world: its turns, its Stop, its plans (the model and tool faults), its crash points, then the
        person's answers at the permission gate.

        In a conversation the number of follow-ups comes first (an integer that shrinks towards none), then every
        turn's plan, before the run: lowering the count and deleting one plan is a step Hypothesis's shrinker takes
        (a size, then that many items), so a failure found in a later turn moves to the first and the turns it
        does not need go.  (With each later turn's plan drawn as the turn began, far after the count, a one-turn
        failure found in turn 2 stayed at two turns.)
        """
        scenario = self.scenario
        count = 0
        if self.turns > 1:
            count = draw(self._followup_counts)
            scenario = scenario.model_copy(update={"followups": followups(count, self.scenario.task)})
        if self.abort:
            scenario = scenario.model_copy(update={"abort": draw(ABORT_POINTS)})
        turns: list[tuple[Plan, bool]] | None = None
        if self.turns > 1:
            turns = [draw(self._turn_of(strategy)) for _ in range(count + 1)]
            chosen = turns[0][0]
        else:
            chosen = draw(strategy)
        run = Run(scenario, *self._policies(draw, chosen, turns))
        if self.restarts:
            points = draw(self._crash_points)
            run.faults.crash_at = frozenset(n for n in points if n <= _WRITE_POINTS)
            if isinstance(run.model, GeneratedModel):
                run.model.crash_calls = frozenset(n - _WRITE_POINTS + 1 for n in points if n > _WRITE_POINTS)
        if self.approvals:
            run.scenario = run.scenario.model_copy(update={"approvals": draw(self._answers)})
        return run

    def attach(self, run: Run, sim: Sim) -> None:
        """Let the run's model and faults see the Sim they play in: its transcript, its lives and turns."""
        run.faults.transcript = sim.transcript
        if self.restarts and isinstance(run.model, GeneratedModel):
            run.model.lives = functools.partial(getattr, sim, "lives")
        if self.turns > 1 and isinstance(run.model, GeneratedModel):
            run.model.turn = functools.partial(getattr, sim.user_turns, "started")
        if self.recording is not None and not isinstance(run.model, GeneratedModel) and run.scenario.followups:
            run.model.turn = functools.partial(getattr, sim.user_turns, "started")  # a recorded conversation

    def _policies(
        self, draw: Draw, chosen: Any, turns: list[tuple[Plan, bool]] | None
    ) -> tuple[GeneratedModel | FaultedRecording, GeneratedFaults]:
        """The run's model and tool faults for the plan drawn (a recording's fault plan, when faulting one); in a
        conversation every turn's (the tool faults follow the first turn's)."""
        if self.recording is not None:
            from simloop.cassettes import FaultedRecording

            return FaultedRecording(self.recording, draw, chosen), GeneratedFaults(draw, chosen.tool_plan, self.tools)
        model = GeneratedModel(draw, chosen, turns=turns, server_tools=self.server_tools, words=self._words)
        return model, GeneratedFaults(draw, chosen, self.tools)

    @functools.cached_property
    def _words(self) -> tuple[str, ...] | None:
        """What generated tool inputs' free text is made of: the task's own words (None: the default task's story)."""
        task = self.scenario.task
        return None if task == DEFAULT_TASK else topic_words(task)

    @functools.cached_property
    def _followup_counts(self) -> st.SearchStrategy[int]:
        return st.integers(0, self.turns - 1)

    def _turn_of(self, strategy: st.SearchStrategy[Plan]) -> st.SearchStrategy[tuple[Plan, bool]]:
        """One user turn: its plan and whether its final answers are empty, drawn as one span (one deletion)."""
        cached = self._turns_of.get(id(strategy))
        if cached is None or cached[0] is not strategy:
            cached = self._turns_of[id(strategy)] = (strategy, st.tuples(strategy, EMPTY_ANSWERS))
        return cached[1]

    @functools.cached_property
    def _turns_of(self) -> dict[int, tuple[st.SearchStrategy[Plan], st.SearchStrategy[tuple[Plan, bool]]]]:
        return {}

    @functools.cached_property
    def _answers(self) -> st.SearchStrategy[list[Approval]]:
        return approval_answers(away=self.limits.deadline_s is not None)

    @functools.cached_property
    def _crash_points(self) -> st.SearchStrategy[frozenset[int]]:
        """Where the process dies, at most ``restarts`` times: 1 to 3 are the write executions (the 1st to 3rd, its
        effect committed), 4 to 6 the model calls 2 to 4 (in flight: the request answered, the reply never read;
        the calls that carry tool results).  The writes first: the shrinker goes to a write's crash."""
        return st.frozensets(st.integers(1, _WRITE_POINTS + 3), min_size=1, max_size=self.restarts)


def followups(n: int, task: str = DEFAULT_TASK) -> list[str]:
    """The first ``n`` follow-up messages of a generated conversation: the refund story's for the default task, words
    that fit any task for another (a user asking about flights is not asked about order 1234)."""
    said = FOLLOWUPS if task == DEFAULT_TASK else ANY_FOLLOWUPS
    return [said[i % len(said)] + (f" ({i // len(said) + 1})" if i >= len(said) else "") for i in range(n)]


def _tools(tools: Sequence[ToolSpec | dict[str, Any]] | None) -> list[ToolSpec]:
    """The loop's tools as `ToolSpec` s: the defaults (a read ``search``, a write ``send_email``) when not given."""
    if tools is None:
        return list(DEFAULT_TOOLS)
    out = [t if isinstance(t, ToolSpec) else ToolSpec.model_validate(t) for t in tools]
    if not out:
        raise UsageError("verify(tools=[]): give the loop at least one tool, or leave tools out for the defaults")
    return out


def _prices(prices: Mapping[str, Any]) -> dict[str, PriceSpec]:
    """``verify(prices=...)`` as a scenario's ``prices:`` (model name, prefix or ``"*"`` -> a `Price` or a mapping
    of ``input``, ``output``, ``cache_write``, ``cache_read``); a wrong one is a `UsageError` saying what to give."""
    if not isinstance(prices, Mapping):
        raise UsageError(f"verify(prices=...) maps model names (or prefixes, or '*') to prices, got {prices!r}")
    out: dict[str, PriceSpec] = {}
    for name, price in prices.items():
        given = price._asdict() if isinstance(price, Price) else price
        try:
            out[str(name)] = PriceSpec.model_validate(given)
        except ValidationError as e:
            raise UsageError(
                f"verify(prices=...): the price of {name!r} is {{input, output, cache_write, cache_read}} in US "
                f"dollars per million tokens (or a simloop.pricing.Price); got {price!r} "
                f"({e.errors()[0]['msg']})"
            ) from None
    return out
