"""The corpus of real recorded Anthropic traffic, shared by the fidelity tests.

The cassettes are third-party recordings kept next to the project (``../shared/data/cassettes``,
see its MANIFEST.md), never inside it and never edited: simloop does not ship them.  Tests that
need them mark themselves with `requires_corpus` and are skipped cleanly where they are absent.
``SIMLOOP_CORPUS=<folder>`` points them at any folder of VCR.py cassettes instead (your own recordings).
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
from simloop.wire.render import Turn

DEFAULT_CASSETTES: Path = Path(__file__).resolve().parents[2] / "shared" / "data" / "cassettes"
CASSETTES: Path = Path(os.environ["SIMLOOP_CORPUS"]).resolve() if os.environ.get("SIMLOOP_CORPUS") else DEFAULT_CASSETTES

requires_corpus = pytest.mark.skipif(
    not CASSETTES.is_dir(),
    reason=(f"no recorded corpus at {CASSETTES} (third-party recordings are not shipped with simloop); "
            "set SIMLOOP_CORPUS=<folder of VCR.py cassettes> to run the fidelity tests on your own recordings"),
)


def cassette_paths() -> list[Path]:
    """Every ``*.yaml`` cassette under the corpus, sorted (empty when the corpus is absent)."""
    if not CASSETTES.is_dir():
        return []
    return sorted(CASSETTES.rglob("*.yaml"))


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
    """``folder/file.yaml#3``: how a report names one recorded interaction."""
    try:
        name = path.relative_to(CASSETTES).as_posix()
    except ValueError:
        name = str(path)
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
