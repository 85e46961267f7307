"""A fingerprint of seeded searches: the sha256 of every run's transcript, per loop.

A change that must not change behaviour (a refactor, a fast path) prints the same fingerprints before and
after it.  Each line runs ``simloop.verify`` on one reference loop with a fixed seed and budget, shrinking
included, and hashes the JSONL transcript of every run it made, in order::

    python bench/fingerprint.py                 # all loops
    python bench/fingerprint.py --only correct  # the loops whose name holds "correct"
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simloop import InvariantViolation, verify
from simloop.sim import Sim

# (name, module of examples/, verify's options): the three wires, sync, async and streamed, turns, Stop,
# restarts, approvals, and defect loops whose failures shrink.
LOOPS: list[tuple[str, str, dict[str, Any]]] = [
    ("correct_sync", "correct_sync", {}),
    ("correct_async", "correct_async", {}),
    ("correct_stream", "correct_stream", {}),
    ("correct_sync+turns", "correct_sync", {"turns": 2, "abort": True}),
    ("correct_sync+restarts", "correct_sync", {"restarts": 1}),
    ("openai_loop", "openai_loop", {}),
    ("openai_responses_loop", "openai_responses_loop", {}),
    ("results_split", "results_split", {}),
    ("rerun_after_api_error", "rerun_after_api_error", {}),
    ("tools_from_max_tokens", "tools_from_max_tokens", {}),
]


@contextmanager
def transcripts() -> Iterator[list[str]]:
    """Collect the JSONL transcript of every `Sim.run` made inside the block."""
    seen: list[str] = []
    run: Callable[..., Any] = Sim.run

    def recording(self: Sim, drive: Any) -> Any:
        try:
            return run(self, drive)
        finally:
            seen.append(self.transcript.to_jsonl())

    Sim.run = recording  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Sim.run = run  # type: ignore[method-assign]


def fingerprint(module: str, options: dict[str, Any], *, examples: int, seed: int) -> tuple[str, int, str]:
    """(sha256 of the runs' transcripts, how many runs, what verify said) for one loop."""
    drive = importlib.import_module(f"examples.{module}").drive
    with tempfile.TemporaryDirectory() as out, transcripts() as seen:
        try:
            verify(drive, max_examples=examples, seed=seed, out_dir=out, **options)
            said = "passed"
        except InvariantViolation as e:
            said = f"failed: {e.violations[0].invariant}" if getattr(e, "violations", None) else "failed"
    digest = hashlib.sha256("\n".join(seen).encode()).hexdigest()[:16]
    return digest, len(seen), said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="only the loops whose name holds this")
    args = parser.parse_args()
    total = hashlib.sha256()
    for name, module, options in LOOPS:
        if args.only not in name:
            continue
        digest, runs, said = fingerprint(module, options, examples=args.examples, seed=args.seed)
        total.update(digest.encode())
        print(f"{name:28} {digest}  {runs:5} runs  {said}", flush=True)
    print(f"{'all':28} {total.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
