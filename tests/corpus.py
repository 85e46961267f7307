"""The corpora of real recorded Anthropic traffic, shared by the fidelity tests.

The shared corpus is third-party recordings kept next to the project (``shared/data/cassettes`` in a
parent folder of the checkout, see its MANIFEST.md), never inside it and never edited: simloop does
not ship them.  ``SIMLOOP_CORPUS`` names more folders of cassettes (``os.pathsep``-separated, e.g. a
user's own recordings); every layout `simloop.cassettes.load_cassette` reads is taken (``*.yaml``,
``*.yml``, ``*.yaml.gz``).  Tests that need a corpus mark themselves with `requires_corpus` and are
skipped cleanly when there is none.
"""

from __future__ import annotations

import functools
import os
import typing
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from anthropic.types import ContentBlock, StopReason

from simloop.cassettes import Interaction, load_cassette
from simloop.protocol.render import Turn


def _shared_corpus(name: str = "cassettes") -> Path:
    """``shared/data/NAME`` in the nearest parent folder that has one (main checkout or a worktree)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data" / name
        if candidate.is_dir():
            return candidate
    return here.parents[2] / "shared" / "data" / name


CASSETTES: Path = _shared_corpus()
#: The recorded OpenAI traffic (``shared/data/openai``, pydantic-ai's cassettes, MIT; see its MANIFEST.md), read in
#: place by default; ``SIMLOOP_OPENAI_CORPUS`` (``os.pathsep``-separated folders) replaces it, and the folders
#: ``SIMLOOP_CORPUS`` names are read too (their OpenAI interactions).
OPENAI_CASSETTES: Path = _shared_corpus("openai")
_OPENAI_GIVEN = [Path(x) for x in os.environ.get("SIMLOOP_OPENAI_CORPUS", "").split(os.pathsep) if x]
OPENAI_CORPORA: tuple[Path, ...] = tuple(
    dict.fromkeys(
        p.resolve()
        for p in [
            *(_OPENAI_GIVEN or [OPENAI_CASSETTES]),
            *(Path(x) for x in os.environ.get("SIMLOOP_CORPUS", "").split(os.pathsep) if x),
        ]
        if p.is_dir()
    )
)
#: Every corpus folder given: the shared one (when present), then those ``SIMLOOP_CORPUS`` names.
CORPORA: tuple[Path, ...] = tuple(
    dict.fromkeys(
        p.resolve()
        for p in [CASSETTES, *(Path(x) for x in os.environ.get("SIMLOOP_CORPUS", "").split(os.pathsep) if x)]
        if p.is_dir()
    )
)
_PATTERNS = ("*.yaml", "*.yml", "*.yaml.gz")

requires_corpus = pytest.mark.skipif(
    not CORPORA,
    reason="no corpus: ../shared/data/cassettes is not present and SIMLOOP_CORPUS names no folder "
    "(third-party recordings are not shipped with simloop)",
)


requires_openai_corpus = pytest.mark.skipif(
    not OPENAI_CORPORA,
    reason="no OpenAI corpus: ../shared/data/openai is not present and SIMLOOP_OPENAI_CORPUS names no folder "
    "(third-party recordings are not shipped with simloop)",
)


def corpus_of(path: Path) -> Path:
    """The corpus folder a cassette belongs to."""
    return next((root for root in CORPORA if path.is_relative_to(root)), path.parent)


def cassette_paths(root: Path | None = None) -> list[Path]:
    """Every cassette under every corpus (or under ``root``), sorted; empty when there is none."""
    roots = [root] if root is not None else list(CORPORA)
    return sorted({p.resolve() for r in roots if r.is_dir() for pattern in _PATTERNS for p in r.rglob(pattern)})


@functools.cache
def _load_all() -> tuple[tuple[Path, tuple[Interaction, ...]], ...]:
    # Parsing 3.7 MB of YAML takes a while; every fidelity test shares one read.
    return tuple((path, tuple(load_cassette(path))) for path in cassette_paths())


def all_interactions() -> list[tuple[Path, Interaction]]:
    """Every recorded interaction of every cassette, with the file it came from."""
    return [(path, interaction) for path, interactions in _load_all() for interaction in interactions]


def messages_interactions() -> list[tuple[Path, Interaction]]:
    """The recorded ``POST api.anthropic.com/v1/messages`` and ``…/count_tokens`` interactions."""
    return [(path, i) for path, i in all_interactions() if i.is_anthropic_messages]


def describe(path: Path, interaction: Interaction) -> str:
    """``folder/file.yaml#3``: how a report names one recorded interaction (relative to its corpus)."""
    root = corpus_of(path)
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if root != CASSETTES.resolve() and root in CORPORA:
        name = f"{root}:{name}"
    return f"{name}#{interaction.index}"


def _literal_types(union: Any) -> frozenset[str]:
    members = typing.get_args(union)
    if members and not hasattr(members[0], "model_fields"):  # Annotated[Union[...], PropertyInfo]
        members = typing.get_args(members[0])
    return frozenset(typing.get_args(m.model_fields["type"].annotation)[0] for m in members)


NON_BETA_BLOCKS = _literal_types(ContentBlock)
NON_BETA_STOP_REASONS = frozenset(typing.get_args(StopReason))


def is_beta(interaction: Interaction, turn: object) -> bool:
    """Beta traffic is parsed with client.beta (BetaMessage knows blocks the plain models do not)."""
    if "true" in parse_qs(urlsplit(interaction.request.uri).query).get("beta", []):
        return True
    if not isinstance(turn, Turn):
        return False
    if turn.stop_reason is not None and turn.stop_reason not in NON_BETA_STOP_REASONS:
        return True
    return any(block.get("type") not in NON_BETA_BLOCKS for block in turn.content)
