"""What a loop claims to have, and which scenario files it can therefore be held to (docs/design.md, Claims).

A scenario file may need something of the loop under test (`simloop.scenario.Scenario.needs`): a Stop
button, a durable store that survives a crash, follow-up user turns, or a stop policy it honours as the
run declares it.  A run states what the loop has with the names of `simloop.verify`'s arguments
(``abort``, ``restarts``, ``turns``, ``context``, ``limits``); a file that needs something not claimed is skipped with
its reason, never failed.  Claimed and missing, it fails as any broken invariant does.  A file of the user's own is
skipped only by what its ``requires:`` names (`judged_needs`); a run whose every file was skipped tested nothing and
says so (`nothing_tested`): it does not pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from simloop.errors import UsageError
from simloop.scenario import CAPABILITIES, LIMIT_NAMES, Limits

if TYPE_CHECKING:
    from simloop.scenario import Scenario

__all__ = ["Claims", "Surface", "claim_flags", "claimed_names", "in_library", "judged_needs", "limit_names",
           "nothing_tested", "other_wire", "skip_reason"]

#: Where the claims were stated, so that a skip says what to pass there.
Surface = Literal["cli", "plugin", "python"]

_WHAT = {
    "abort": "a Stop button (abort:)",
    "restarts": "a durable store that survives a crash (a crash fault)",
    "turns": "follow-up user turns (followups:)",
    "context": "a loop that keeps its requests inside the context window (trims, summarizes or compacts)",
    "approvals": "a permission gate wired to sim.approve (approvals:)",
    "max_steps": "a step cap",
    "deadline_s": "a deadline",
    "max_total_tokens": "a token budget",
    "max_tool_errors": "an error budget",
    "max_writes": "a write budget",
    "max_repeats": "repetition detection",
    "max_cost_usd": "a cost budget",
}


@dataclass(frozen=True, slots=True)
class Claims:
    """What the loop under test has: a Stop button, restarts, follow-up turns, context management, the limits
    it honours.

    ``restarts`` and ``turns`` count as `simloop.verify`'s do: ``restarts >= 1`` claims a loop that resumes
    from ``sim.store`` after a crash, ``turns >= 2`` one that takes follow-up turns.  ``context``: the loop
    never sends a request beyond the model's context window (it trims, summarizes or compacts its history).
    ``limits`` names the stop policies the loop honours as the run declares them (``sim.limits``).
    """

    abort: bool = False
    restarts: int = 0
    turns: int = 1
    context: bool = False
    limits: frozenset[str] = field(default_factory=frozenset)
    approvals: bool = False

    def has(self, capability: str) -> bool:
        """Whether the loop claims ``capability`` (one of `simloop.scenario.CAPABILITIES`)."""
        if capability == "abort":
            return self.abort
        if capability == "restarts":
            return self.restarts >= 1
        if capability == "turns":
            return self.turns >= 2
        if capability == "context":
            return self.context
        if capability == "approvals":
            return self.approvals
        return capability in self.limits

    def missing(self, scenario: Scenario, path: str | Path | None = None) -> tuple[str, ...]:
        """What ``scenario`` (read from ``path``) needs that the loop does not claim (see `judged_needs`)."""
        return tuple(c for c in judged_needs(scenario, path) if not self.has(c))

    def names(self) -> tuple[str, ...]:
        """The claimed capabilities by name, in `CAPABILITIES` order."""
        return tuple(c for c in CAPABILITIES if self.has(c))


def judged_needs(scenario: Scenario, path: str | Path | None) -> tuple[str, ...]:
    """The needs that may skip ``scenario``: all of a file of the shipped library (or of one read from no path), only
    its ``requires:`` for a file of the user's own.

    Why: a file the user wrote and chose is a test of their loop; what it declares (``limits:``, ``followups:``,
    ``abort:``) is the run's declaration, not a reason to test nothing (a CI run whose files all declared
    ``limits:`` was all skipped and passed).  A file says ``requires:`` to be skipped where the loop lacks it.
    """
    if path is None or in_library(path):
        return scenario.needs
    return tuple(c for c in CAPABILITIES if c in scenario.requires)


def in_library(path: str | Path) -> bool:
    """Whether ``path`` is a file of the curated library that ships with simloop."""
    from simloop._library import scenarios_dir

    try:
        library = scenarios_dir()
    except UsageError:
        return False
    return Path(path).resolve().is_relative_to(library.resolve())


def nothing_tested(skipped: int) -> str:
    """What a run says when every file it selected was skipped: it tested nothing, and that is not a pass."""
    files = "the 1 file" if skipped == 1 else f"all {skipped} files"
    return (f"nothing was tested: {files} selected {'was' if skipped == 1 else 'were'} skipped (see the reasons above); "
            "claim what your loop has, or choose files it can run")


def limit_names(limits: Limits | Mapping[str, Any] | Iterable[str] | None, *, where: str) -> frozenset[str]:
    """The stop policies named by ``limits``: a `Limits` or a mapping (its declared keys), or names."""
    if limits is None:
        return frozenset()
    if isinstance(limits, Limits):
        names = [k for k in LIMIT_NAMES if getattr(limits, k) is not None]
    elif isinstance(limits, Mapping):
        names = [str(k) for k, v in limits.items() if v is not None]
    elif isinstance(limits, str):
        names = [n.strip() for n in limits.split(",") if n.strip()]
    else:
        names = [str(n) for n in limits]
    unknown = [n for n in names if n not in LIMIT_NAMES]
    if unknown:
        raise UsageError(
            f"{where}: {unknown[0]!r} is not a limit; the limits a loop may claim are {', '.join(LIMIT_NAMES)}"
        )
    return frozenset(names)


def claimed_names(values: str | Iterable[str] | None, *, where: str) -> tuple[str, ...]:
    """Capability names, each of `CAPABILITIES` (``"max_steps,deadline_s"`` or a list); a `UsageError` otherwise."""
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else list(values)
    names = [n.strip() for text in items for n in str(text).split(",") if n.strip()]
    unknown = [n for n in names if n not in CAPABILITIES]
    if unknown:
        raise UsageError(
            f"{where}: {unknown[0]!r} is not something a loop can claim; give any of {', '.join(CAPABILITIES)} "
            "(e.g. max_steps,deadline_s)"
        )
    return tuple(names)


def skip_reason(scenario: Scenario, missing: Iterable[str], *, surface: Surface) -> str:
    """Why a file is skipped, and what to pass when the loop does have what it needs.

    ``needs a Stop button (abort:): pass --abort if your loop has one``.
    """
    missing = tuple(missing)
    turns = 1 + len(scenario.followups)
    limits = [c for c in missing if c in LIMIT_NAMES]
    whats = [_WHAT[c] if c not in LIMIT_NAMES else f"{_WHAT[c]} ({_declared(scenario, c)})" for c in missing]
    flags: list[str] = []
    if surface == "python":
        flags += ["abort=True"] if "abort" in missing else []
        flags += ["restarts=1"] if "restarts" in missing else []
        flags += [f"turns={turns}"] if "turns" in missing else []
        flags += ["context=True"] if "context" in missing else []
        flags += ["approvals=True"] if "approvals" in missing else []
        flags += [f"limits={limits!r}"] if limits else []
        how = f"replay(..., {', '.join(flags)})"
    else:
        prefix = "--simloop-" if surface == "plugin" else "--"
        sep = "=" if surface == "plugin" else " "
        flags += [f"{prefix}abort"] if "abort" in missing else []
        flags += [f"{prefix}restarts{sep}1"] if "restarts" in missing else []
        flags += [f"{prefix}turns{sep}{turns}"] if "turns" in missing else []
        flags += [f"{prefix}context"] if "context" in missing else []
        gates = ["approvals"] if "approvals" in missing else []
        flags += [f"{prefix}claims{sep}{','.join([*gates, *limits])}"] if gates or limits else []
        how = " ".join(flags)
    what = whats[0] if len(whats) == 1 else ", ".join(whats[:-1]) + " and " + whats[-1]
    them = "them" if len(missing) > 1 or missing == ("turns",) else "one"
    return f"needs {what}: pass {how} if your loop has {them}"


def other_wire(scenario: Scenario, requests: Iterable[Any]) -> str | None:
    """Why a file that scripts a ``pause_turn`` proves nothing about the loop that ran it: None when it applies.

    A ``pause_turn`` (the API paused a long server-tool turn: send it back to continue) is sent only on the Messages
    API, and only to a request that declares a server tool (web search, web fetch, code execution): on the OpenAI
    wires it arrives as a plain finish, and a loop whose requests declare no server tool never meets one (nor does
    it in `simloop.verify`).  A correct loop there reports ``final`` and never sends it back, so the file's
    ``expect:`` and the rest of its script cannot hold.  ``requests``: the run's requests (``path``, ``body``).
    """
    if not any(r.pause_turn is not None for r in scenario.model):
        return None
    requests = list(requests)
    paths = [r.path for r in requests]
    others = sorted({p for p in paths if p.startswith("/v1/") and p != "/v1/messages" and "count_tokens" not in p})
    if others:
        return (
            f"scripts a pause_turn, which only the Messages API has: the loop called {others[0]}, where it is a plain "
            "finish (the file is for loops on the anthropic SDK)"
        )
    from simloop._offer import offer_of

    messages = [r for r in requests if r.path == "/v1/messages" and isinstance(r.body, dict)]
    if messages and not any(offer_of(r.body).server for r in messages):
        return (
            "scripts a pause_turn, which the API sends only to a request that declares a server tool (web_search, "
            "web_fetch, code_execution): the loop's requests declared none (the file is for loops that give the "
            "model a server tool)"
        )
    return None


def _declared(scenario: Scenario, name: str) -> str:
    """``max_writes: 1`` as the file declares it, or the bare name when only ``requires:`` names it."""
    value = getattr(scenario.limits, name)
    if value is None:
        return name
    return f"{name}: {value:g}" if isinstance(value, float) else f"{name}: {value}"


def claim_flags(scenario: Scenario) -> str:
    """The `simloop run` flags that claim everything ``scenario`` needs (`` --abort --claims max_steps``)."""
    needs = scenario.needs
    flags = [" --abort"] if "abort" in needs else []
    flags += [" --restarts 1"] if "restarts" in needs else []
    flags += [f" --turns {1 + len(scenario.followups)}"] if "turns" in needs else []
    flags += [" --context"] if "context" in needs else []
    limits = [c for c in needs if c in LIMIT_NAMES or c == "approvals"]
    flags += [f" --claims {','.join(limits)}"] if limits else []
    return "".join(flags)
