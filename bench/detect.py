"""Does `simloop.verify` find every classic loop bug, fast, with the right id, and nothing in correct loops?

For each reference loop in ``examples/`` and each seed, run `verify` with the
default budget and record: the invariant it reports (or none), how many
examples it took to the first failure and how long, and the size of the
shrunk scenario.  Correct loops must never be flagged.  Also measures the share of generated tool inputs that
fit their tool's schema, full examples per second for a 10-step loop against the
bare SDK cost of the same calls, and peak memory of a long run against a short one.

Besides the reference loops, the correct rows include the loops of ``tests/loops/readme.py`` (rows
``readme.*``), written from the README alone as a user writes them: the false-alarm table; the defect rows
``readme_defect.*`` are broken loops written so (``tests/loops/gate_defects.py``).  The loops of
``examples/catalogue.py``'s ``CONTEXT`` are verified claiming context management (``context=True``) with a token
budget past the window: the defect that never trims, and the loop that does.

The rows ``openai_loop:*`` and ``openai_responses_loop:*`` are the same loops on the OpenAI wire (Chat Completions,
examples/openai_loop.py; the Responses API, examples/openai_responses_loop.py).

    python bench/detect.py [--seeds 10] [--max-examples 200] [--only no_step_cap,readme.plain,...] [--skip-memory]
    python bench/detect.py --throughput [--chunks 12] [--skip-memory]   # only the throughput (and memory) lines
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simloop

verify_module = importlib.import_module("simloop.verify")
from examples.catalogue import (
    ABORTS,
    APPROVALS,
    CONTEXT,
    CONTEXT_DECLARED,
    CORRECT,
    DECLARED,
    DEFECTS,
    OPENAI,
    OWN_TOOLS,
    POLICY_ROWS,
    RESTARTS,
    TURNS,
    VERIFY,
)
from simloop._runtime.realtime import REAL
from tests.loops import gate_defects
from tests.loops import readme as readme_loops

LIMITS = simloop.Limits.model_validate(DECLARED)  # what the example loops declare


@dataclass
class Row:
    name: str
    expected: frozenset[str] | None
    found: list[str] = field(default_factory=list)
    first_examples: list[int] = field(default_factory=list)
    first_seconds: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    examples: int = 0


class _Counter:
    """Counts examples and notes when the first failing one happened (wraps `Sim.check`)."""

    def __init__(self, after: Any = None) -> None:
        self.n = 0
        self.after = after  # called with each example's transcript
        self.first: tuple[int, float] | None = None
        self.start = REAL.perf_counter()
        self.orig = verify_module.Sim.check

    def __enter__(self) -> _Counter:  # noqa: PYI034
        counter = self

        def check(sim: Any, *a: Any, **k: Any) -> Any:
            report = counter.orig(sim, *a, **k)
            counter.n += 1
            if counter.after is not None:
                counter.after(sim.transcript)
            if not report.ok and counter.first is None:
                counter.first = (counter.n, REAL.perf_counter() - counter.start)
            return report

        verify_module.Sim.check = check
        return self

    def __exit__(self, *exc: object) -> None:
        verify_module.Sim.check = self.orig


#: The correct loops written from the README alone (``tests/loops/readme.py``), each verified with what it claims.
README_ROWS = {f"readme.{name}": loop for name, loop in readme_loops.LOOPS.items()}
#: Broken loops written from the README alone (``tests/loops/gate_defects.py``): row -> (drive, claims, the ids that
#: are a correct report of it).
README_DEFECT_ROWS = {f"readme_defect.{name}": loop for name, loop in gate_defects.LOOPS.items()}
#: The OpenAI wire (examples/openai_loop.py, Chat Completions; examples/openai_responses_loop.py, Responses): the
#: correct loops, and each twin with what catches it (catalogue.OPENAI).


def _row(name: str) -> tuple[Any, simloop.Limits, dict[str, Any]]:
    """A row's drive, declared limits and the verify options it claims (turns, abort, restarts, context)."""
    if name in README_ROWS or name in README_DEFECT_ROWS:
        drive, claims = README_ROWS[name] if name in README_ROWS else README_DEFECT_ROWS[name][:2]
        given = dict(claims)
        return drive, given.pop("limits", readme_loops.LIMITS), given
    if name in CONTEXT:  # the loops held to the context claim, with a budget past the window
        return importlib.import_module(f"examples.{name}").drive, simloop.Limits.model_validate(CONTEXT_DECLARED), {"context": True}
    if name in OPENAI:
        module, _, fn = name.partition(":")
        return getattr(importlib.import_module(f"examples.{module}"), fn), LIMITS, {}
    module, declared = POLICY_ROWS.get(name, (name, VERIFY[name][0] if name in VERIFY else DECLARED))
    loop = importlib.import_module(f"examples.{module}")
    options: dict[str, Any] = {
        "turns": TURNS.get(name, 1), "abort": name in ABORTS, "restarts": RESTARTS.get(name, 0),
        "approvals": name in APPROVALS,
    }
    if name in OWN_TOOLS:
        options = {"tools": loop.TOOLS}  # verified with its own tools (a delegate that runs a sub-agent), one turn
    return loop.drive, simloop.Limits.model_validate(declared), options


def run(name: str, expected: frozenset[str] | None, seeds: int, max_examples: int, out: Path) -> Row:
    drive, limits, claims = _row(name)
    row = Row(name, expected)
    for seed in range(seeds):
        with _Counter() as counter:
            try:
                simloop.verify(drive, limits=limits, max_examples=max_examples, seed=seed, out_dir=out, **claims)
                row.found.append("-")
            except simloop.InvariantViolation as e:
                row.found.append(",".join(sorted({v.invariant for v in e.violations})))
                row.sizes.append(len(e.scenario.model))
                if counter.first is not None:
                    row.first_examples.append(counter.first[0])
                    row.first_seconds.append(counter.first[1])
        row.examples += counter.n
    return row


@dataclass
class Throughput:
    """Full verify examples per second against bare runs of the same calls: medians over chunks."""

    verify_per_s: float
    bare_per_s: float
    ratio: float  # median of the chunks' ratios, by the wall clock
    cpu_ratio: float  # the same by CPU time
    chunks: int


def throughput_plan() -> Any:
    """The throughput example's plan: nine tool-calling replies and a final answer, without faults."""
    from simloop import strategies

    return strategies.plans(
        min_steps=9, max_steps=9, personas=(("finishes", 1),), faults=False, ending_kinds=("end_turn",),
        slow=((False, 1),), heavy=((False, 1),), ending_repeats=((1, 1),),
    )


def bare_loop(transcript: Any) -> Any:
    """The bare run of a `examples.correct_sync` example: a callable making the very requests it made (again
    at each call).

    The example's replies are served as they were sent and its tools return at once what they returned (a
    write asked for again answered as the drive's `durable_run_tool` answers it), with the tools the drive
    gives the loop; the SDK client's reference cycle is broken as the run ends, as `Sim.close` breaks the
    simulated side's, so that each side frees its own run.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    import overhead
    from pydantic_core import to_json

    from examples._common import NOT_RUN, _write_key, with_web_search
    from simloop import strategies
    from simloop._runtime.stack import on_fresh_stack
    from simloop._sim.clients import _drop_resources
    from simloop.transcript import ToolEnd

    loop = importlib.import_module("examples.correct_sync")
    # what the drive gives the loop: Sim.tool_schemas with the web search server tool, and the write tools' names
    schemas = with_web_search([t.schema_dict() for t in strategies.DEFAULT_TOOLS])
    writes = frozenset(t.name for t in strategies.DEFAULT_TOOLS if t.kind == "write")
    bodies = [to_json(r.message) for r in transcript.responses if r.message]
    results = [e.result for e in transcript.of(ToolEnd)]
    model = transcript.requests[0].body["model"]
    client = overhead.bare_client(bodies)  # (built here, outside the run's time; it serves the bodies in turn)

    def run() -> None:
        returned = iter(results)
        done: set[str] = set()

        def tool(name: str, input: Any, tool_use_id: str | None = None) -> Any:
            if name in writes:  # the drive's durable_run_tool: a write asked for again is answered, not run
                key = _write_key(name, input)
                if key in done:
                    return NOT_RUN
                done.add(key)
            return next(returned)

        # on stack space of its own, as the Sim runs the verified loop (see simloop._runtime.stack)
        on_fresh_stack(loop.run_agent, client, schemas, tool, verify_module.DEFAULT_TASK, LIMITS, model=model,
                       writes=writes)
        _drop_resources(client)  # as Sim.close does: the SDK client's cycle freed by its own run, not a collection

    return run


def throughput(chunks: int = 12, examples: int = 25) -> Throughput:
    """Full `verify` examples per second for a 10-call run vs the same loop making the same calls bare.

    A full example is all `verify` does for one: Hypothesis draws the plan and each reply as the loop
    asks, a fresh Sim runs `examples.correct_sync` (its tools included), the invariants are checked.  The
    plan is fixed to 9 tool-calling replies and a final answer, without faults.  The limit the SDK sets is
    the same loop making the same calls against `httpx2.MockTransport`: the example's replies served as
    they were sent and its tools returning at once what they returned (a write asked for again answered as the
    drive's `durable_run_tool` answers it), with the tools the drive gives it, so that each request is the same
    bytes; its SDK client's reference cycle is broken as the run ends, as `Sim.close` breaks the simulated
    side's, so that each side frees its own run.  That bare run follows each example inside the search, and is taken out of the search's time,
    so that the two alternate example by example and the machine's drifts hit both alike; the ratio is
    the median over chunks (after one to warm up imports and caches).
    """
    loop = importlib.import_module("examples.correct_sync")
    clocks = (REAL.perf_counter, time.process_time)  # the process: the Sim runs the loop on a worker thread
    bare = [0.0, 0.0]  # wall, CPU: the bare runs of this chunk
    aside = [0.0, 0.0]  # wall, CPU: everything done inside the search for the bare runs

    def bare_run(transcript: Any) -> None:
        begin = [c() for c in clocks]
        run = bare_loop(transcript)
        start = [c() for c in clocks]
        run()
        for i, c in enumerate(clocks):
            now = c()
            bare[i] += now - start[i]
            aside[i] += now - begin[i]

    ratios: list[tuple[float, float, float, float]] = []  # verify/s, bare/s, wall ratio, CPU ratio
    for chunk in range(chunks + 1):  # chunk 0 warms up
        bare[:] = aside[:] = [0.0, 0.0]
        begin = [c() for c in clocks]
        with _Counter(after=bare_run) as counter:
            simloop.verify(loop.drive, limits=LIMITS, plan=throughput_plan(), max_examples=examples, seed=chunk)
        search = [c() - b - a for c, b, a in zip(clocks, begin, aside)]
        if chunk:
            ratios.append((counter.n / search[0], counter.n / bare[0], bare[0] / search[0], bare[1] / search[1]))
    verify_per_s, bare_per_s, ratio, cpu_ratio = (statistics.median(r[i] for r in ratios) for i in range(4))
    return Throughput(verify_per_s, bare_per_s, ratio, cpu_ratio, chunks=len(ratios))


def schema_valid_share(max_examples: int = 200, seeds: int = 3) -> tuple[int, int]:
    """How many of the tool calls the generated model made fit the schema the request gave their tool.

    Counted over full `verify` runs of `examples.correct_sync` (the bundled tools, a read and a write) and
    `examples.correct_typed` (the same tools, typed: the schemas of its pydantic models), every tool_use block
    of every reply, the complete calls of cut replies included and the cut call itself left out.
    Returns ``(valid, calls)``.
    """
    from simloop._inputs import pool_for

    valid = calls = 0

    def count(transcript: Any) -> None:
        nonlocal valid, calls
        for request, response in zip(transcript.requests, transcript.responses):
            if not response.message:
                continue
            schemas = {t["name"]: t.get("input_schema", {}) for t in request.body.get("tools") or []}
            blocks = [b for b in response.message["content"] if b.get("type") == "tool_use"]
            if response.message.get("stop_reason") == "max_tokens":
                blocks = blocks[:-1]  # the cut one's input is a prefix by design
            for block in blocks:
                calls += 1
                valid += pool_for(schemas.get(block["name"], {})).is_valid(block["input"])

    for name in ("correct_sync", "correct_typed"):
        drive = importlib.import_module(f"examples.{name}").drive
        for seed in range(seeds):
            with _Counter(after=count):
                simloop.verify(drive, limits=LIMITS, max_examples=max_examples, seed=seed)
    return valid, calls


def peak_memory(max_examples: int) -> int:
    """Peak traced memory of one `verify` run of ``max_examples``, in a fresh process.

    In this process the figure would depend on what ran before: caches the detection runs already
    filled are not allocated again, which shrinks a short run's peak far more than a long one's.
    """
    out = subprocess.run(
        [sys.executable, __file__, "--peak-of", str(max_examples)], check=True, capture_output=True, text=True
    )
    return int(out.stdout.split()[-1])


def _peak_here(max_examples: int) -> int:
    drive = importlib.import_module("examples.correct_sync").drive
    gc.collect()
    tracemalloc.start()
    simloop.verify(drive, limits=LIMITS, max_examples=max_examples, seed=0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--max-examples", type=int, default=200)
    parser.add_argument(
        "--only", default="", help="comma-separated rows: example modules, or correct_sync+max_writes and the like"
    )
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-examples", type=int, default=10_000)
    parser.add_argument("--peak-of", type=int, help=argparse.SUPPRESS)  # one peak_memory measurement
    parser.add_argument(
        "--throughput", action="store_true", help="only the throughput line (and memory unless --skip-memory)"
    )
    parser.add_argument("--chunks", type=int, default=12, help="throughput chunks of 25 examples (after one warm-up)")
    args = parser.parse_args()
    if args.peak_of is not None:
        print(_peak_here(args.peak_of))
        return
    only = set(filter(None, args.only.split(",")))
    out = Path(".simloop") / "bench"
    targets: list[tuple[str, frozenset[str] | None]] = [
        *((n, VERIFY[n][1]) for n in DEFECTS), *((n, row[2]) for n, row in README_DEFECT_ROWS.items()),
        *CONTEXT.items(),
        *((n, None) for n in [*CORRECT, *POLICY_ROWS, *README_ROWS]), *OPENAI.items(),
    ]
    # measured first, in a process that has only imported what verify needs: after the detection runs its
    # heap holds every loop and search they made, and each full garbage collection costs more
    speed = throughput(args.chunks) if not only else None
    if args.throughput:
        targets, only = [], {"throughput"}
    rows = [run(n, e, args.seeds, args.max_examples, out) for n, e in targets if not only or n in only]

    print(f"\ndetection over {args.seeds} seeds, max_examples={args.max_examples}, limits={LIMITS!r}")
    print(f"{'loop':34} {'accepted ids':20} {'caught':>7} {'ids found':22} {'ex. to 1st (med/max)':>20} {'s to 1st (med/max)':>19} {'shrunk':>8}")
    ok = True
    for r in rows:
        if r.expected is None:
            hits = sum(f != "-" for f in r.found)
            good = hits == 0
            caught = f"{hits}/{len(r.found)}"
        else:
            hits = sum(f != "-" and set(f.split(",")) <= r.expected for f in r.found)
            good = hits == len(r.found)
            caught = f"{hits}/{len(r.found)}"
        ok &= good
        ids = ",".join(sorted({i for f in r.found if f != "-" for i in f.split(",")})) or "-"
        ex = f"{statistics.median(r.first_examples):.0f}/{max(r.first_examples)}" if r.first_examples else "-"
        secs = f"{statistics.median(r.first_seconds):.2f}/{max(r.first_seconds):.2f}" if r.first_seconds else "-"
        size = f"{statistics.median(r.sizes):.0f}/{max(r.sizes)}" if r.sizes else "-"
        label = ",".join(sorted(r.expected)) if r.expected else "(correct: none)"
        print(f"{r.name:34} {label:20} {caught:>7} {ids[:22]:22} {ex:>20} {secs:>19} {size:>8} {'' if good else '  <-- MISMATCH'}")
    correct = [r for r in rows if r.expected is None]
    if correct:
        total = sum(r.examples for r in correct)
        flagged = sum(f != "-" for r in correct for f in r.found)
        print(f"false positives: {flagged} over {total} examples of correct loops")
    if not only and not args.throughput:
        valid, calls = schema_valid_share(args.max_examples)
        print(f"schema-valid tool inputs: {valid}/{calls} = {valid / calls:.1%} of the generated calls of 3 seeds x "
              f"{args.max_examples} examples of correct_sync and correct_typed (target >= 90%; about 1 in 20 is "
              "invalid on purpose)")
    if speed is not None:
        t = speed
        print(f"throughput: {t.verify_per_s:.1f} full 10-call examples/s vs {t.bare_per_s:.1f}/s for the same loop "
              f"and calls bare: {t.ratio:.0%} of the limit the SDK sets by the wall clock, {t.cpu_ratio:.0%} by CPU "
              f"time (median of {t.chunks} chunks; target >= 75%, issue 44)")
    if not args.skip_memory:
        small = peak_memory(100)
        large = peak_memory(args.memory_examples)
        print(f"memory: peak {large / 1e6:.1f} MB for {args.memory_examples} examples vs {small / 1e6:.1f} MB for 100 "
              f"({large / small:.2f}x; target <= 1.5x)")
    print("RESULT:", "all defects caught with the right id, no false positives" if ok else "MISMATCHES (see above)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
