"""Every OpenAI cassette of the shared corpus converts and replays, or is refused with a reason (issue 42, item 6).

For each cassette of ``../shared/data/openai`` (pydantic-ai's, MIT; see its MANIFEST.md) or the folders
``SIMLOOP_OPENAI_CORPUS`` names, each recorded conversation is converted (`simloop.cassettes.convert`, as
``simloop convert`` does) and the scenario file replayed (`simloop.replay`) through a plain ``openai`` SDK loop
like the one that made the recording: Chat Completions or Responses (a Messages conversation in the same file:
the README's ``anthropic`` loop with its follow-up turns), streamed when the recording streamed,
chained with ``previous_response_id`` when the recording chained, one user turn per recorded one.  The replay
must pass (no violation, every scripted reply served).  A cassette that does not convert must be refused with a
`CassetteError` naming what it lacks.  The counts are printed.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from corpus import OPENAI_CORPORA, cassette_paths, requires_openai_corpus
from loops import readme
from loops.openai_plain import loop

import simloop
from simloop.cassettes import CassetteError, Interaction, RecordedCall, convert, load_cassette, load_recording

pytestmark = [requires_openai_corpus, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _loop_for(interactions: list[Interaction], calls: list[RecordedCall]) -> tuple[str, bool, bool]:
    """The wire, streaming and chaining of the loop that made ``calls``."""
    by_index = {i.index: i for i in interactions}
    made = [by_index[c.interaction] for c in calls]
    wire = calls[0].wire
    stream = any(i.response.is_sse for i in made)
    bodies = [i.request.json() for i in made]
    chained = any(isinstance(b, dict) and b.get("previous_response_id") for b in bodies)
    return wire, stream, chained


def _reason(exc: CassetteError) -> str:
    """The refusal's reason without the file and interaction numbers (for the counts)."""
    text = str(exc).split(": cannot convert: ", 1)[-1]
    return re.sub(r"\b\d+\b", "N", text.split(" (", 1)[0].split(": ", 1)[-1])[:110]


def test_every_openai_cassette_converts_and_replays_or_is_refused_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    counts: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    failures: list[str] = []
    for root in OPENAI_CORPORA:
        for path in cassette_paths(root):
            counts["files"] += 1
            name = path.relative_to(root).as_posix()
            interactions = load_cassette(path)
            try:
                recording = load_recording(interactions, name=path.stem)
            except CassetteError as exc:
                assert "interaction" in str(exc) or "cassette" in str(exc), exc
                refused[_reason(exc)] += 1
                continue
            for k in range(recording.conversations):
                one = load_recording(interactions, name=path.stem, conversation=k)
                counts["conversations"] += 1
                out = tmp_path / f"{counts['conversations']}.yaml"
                try:
                    convert(path, out, conversation=k)
                except CassetteError as exc:
                    assert "cannot convert: " in str(exc), exc
                    refused[_reason(exc)] += 1
                    continue
                wire, stream, chained = _loop_for(interactions, one.conversation)
                counts[f"{wire}{' SSE' if stream else ''}{' chained' if chained else ''}"] += 1
                counts["replies"] += len(one.scenario.model)
                counts["turns"] += 1 + len(one.scenario.followups)
                drive = readme.conversation if wire == "messages" else loop(wire, stream=stream, chained=chained)
                try:
                    simloop.replay(drive, out)
                except (AssertionError, simloop.InvariantViolation, simloop.UsageError) as exc:
                    failures.append(f"{name} conversation {k} ({wire}, stream={stream}, chained={chained}): "
                                    f"{str(exc)[:600]}")
                    continue
                counts["replayed"] += 1
    summary = (f"OpenAI cassettes [{', '.join(map(str, OPENAI_CORPORA))}]: {counts['files']} files, "
               f"{counts['conversations']} conversations; {counts['replayed']} converted and replayed "
               f"({counts['replies']} replies, {counts['turns']} user turns; "
               + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k.startswith(("chat", "responses", "messages")))
               + f"); {sum(refused.values())} refused: "
               + "; ".join(f"{n} x {why}" for why, n in refused.most_common()))
    with capsys.disabled():
        print(f"\n{summary}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
    assert counts["replayed"] >= 300  # the shared corpus: 330 of 340 conversations (the 10 others refused)
