"""The plain-Python half of the pytest plugin: option layering, per-test seeds, the fixture object, reports.

The plugin (``pytest_plugin/plugin.py``) stays a thin adapter: it reads the
marker, the command line, the ini file and the ``simloop_config`` fixture,
hands them to `resolve_options`, and yields a `SimloopFixture`.  Everything
that does not need pytest lives here, where it is tested like any library
code and where the plugin can import it lazily (loading the plugin must not
import simloop: every xdist worker would pay for the SDK import).

Layering, most specific first: the arguments of the call
(``simloop.verify(drive, max_examples=10)``) > ``@pytest.mark.simloop(...)`` >
the command line > the ini file > the ``simloop_config`` fixture > the
profile > simloop's defaults.

Seeds follow pytest-randomly: one session seed (``--simloop-seed``, random by
default and printed in the header), and each test's seed derived from it and
the test's node id, so a test's seed does not depend on which other tests run
or on which xdist worker runs it.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simloop._claims import Claims, claimed_names, limit_names, skip_reason
from simloop._offer import SERVER_TOOLS
from simloop._sim.assemble import ScenarioLike
from simloop.errors import InvariantViolation, UsageError
from simloop.invariants import CATALOGUE
from simloop.scenario import LIMIT_NAMES, Scenario, load_scenario, load_tools
from simloop.sim import Drive, Sim, off_loop
from simloop.verify import replay as _replay
from simloop.verify import verify as _verify

if TYPE_CHECKING:
    from hypothesis import settings as Settings

    from simloop.invariants import Report

__all__ = [
    "OPTION_KEYS",
    "PROFILES",
    "SimloopFixture",
    "TestOptions",
    "derive_seed",
    "display_path",
    "leftovers_message",
    "load_drive",
    "looks_like_scenario",
    "profile_settings",
    "render_failure",
    "replay_file",
    "rerun_hint",
    "resolve_options",
    "short_violation",
    "unclaimed",
]


#: The keys ``@pytest.mark.simloop(...)`` and ``simloop_config`` accept.
OPTION_KEYS = (
    "scenario", "seed", "max_examples", "profile", "drive", "strict", "limits", "tools", "invariants", "task",
    "out_dir", "turns", "workers", "database", "abort", "restarts", "context", "claims", "server_tools", "prices",
)
#: The keys passed through to `simloop.verify` as defaults.
_VERIFY_DEFAULTS = ("limits", "tools", "invariants", "task", "workers", "database", "server_tools", "prices")

#: ``--simloop-profile`` names -> (the Hypothesis profile they start from, their example budget).
#: Registered as Hypothesis profiles ``simloop-<name>`` on first use, unless the user registered one first.
PROFILES: dict[str, tuple[str | None, int]] = {
    "dev": (None, 50),  # quick local iteration; the local example database replays past failures first
    "ci": ("ci", 200),  # Hypothesis's ci profile: no database, derandomized, print_blob
    "nightly": (None, 5000),  # long fuzzing runs
}
_SEED_MASK = 0xFFFFFFFF


# -- seeds and profiles ------------------------------------------------------------------------------------


def derive_seed(session_seed: int, nodeid: str) -> int:
    """A test's seed: the session seed shifted by the CRC32 of its node id (as pytest-randomly derives its seeds).

    Stable across processes (no ``hash()`` randomisation), so xdist workers and a serial run agree.
    """
    return (session_seed + zlib.crc32(nodeid.encode("utf-8"))) & _SEED_MASK


def profile_settings(name: str) -> Settings:
    """The Hypothesis settings of ``--simloop-profile=name`` (registered as ``simloop-<name>`` on first use)."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    if name not in PROFILES:
        raise UsageError(f"unknown simloop profile {name!r}; the profiles are: {', '.join(PROFILES)}")
    full = f"simloop-{name}"
    try:
        return settings.get_profile(full)  # the user's own registration wins
    except InvalidArgument:
        pass
    parent_name, budget = PROFILES[name]
    parent = settings.get_profile(parent_name) if parent_name else settings.get_profile("default")
    settings.register_profile(full, parent=parent, max_examples=budget, deadline=None)
    return settings.get_profile(full)


# -- options -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestOptions:
    """Everything one test's simloop fixture (or one scenario-file item) runs with, after layering."""

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    seed: int
    seed_origin: str  # "session" (derived), "marker" or "config" (exact)
    session_seed: int
    max_examples: int | None = None
    turns: int | None = None
    abort: bool | None = None  # the loop has a Stop button (verify presses it; files with abort: run)
    restarts: int | None = None  # the loop survives crashes (verify kills it; files with a crash fault run)
    context: bool | None = None  # the loop keeps its requests inside the window (files requiring context run)
    claims: tuple[str, ...] = ()  # the stop policies it honours from sim.limits (files declaring them run)
    profile: str | None = None
    drive: Any = None  # a callable, a "pkg.module:function" spec, or None
    strict: bool = True
    scenario: Any = None
    verify_defaults: dict[str, Any] = field(default_factory=dict)
    out_dir: Path = Path(".simloop") / "failures"
    search: tuple[Path, ...] = ()  # where relative scenario paths are looked up, in order


def resolve_options(
    *,
    nodeid: str,
    session_seed: int,
    session_seed_explicit: bool,
    marker: Mapping[str, Any],
    cli: Mapping[str, Any],
    ini: Mapping[str, Any],
    config: Mapping[str, Any],
    search: Iterable[Path] = (),
    out_dir: Path | None = None,
) -> TestOptions:
    """Layer one test's options: marker > command line > ini > ``simloop_config``.

    ``cli`` and ``ini`` hold the session options given (``max_examples``, ``profile``, ``drive``); the
    session seed is passed separately.  A ``seed`` in the marker or the config is the test's exact seed;
    the session seed is derived per test, and an explicit ``--simloop-seed`` overrides a config seed.

    Raises `simloop.UsageError` for an unknown key or a value of the wrong type, naming where it came from.
    """
    m = _checked(marker, "@pytest.mark.simloop(...)")
    c = _checked(config, "the simloop_config fixture")
    layers = (m, dict(cli), dict(ini), c)

    def pick(key: str) -> Any:
        return next((layer[key] for layer in layers if layer.get(key) is not None), None)

    if m.get("seed") is not None:
        seed, origin = int(m["seed"]), "marker"
    elif c.get("seed") is not None and not session_seed_explicit:
        seed, origin = int(c["seed"]), "config"
    else:
        seed, origin = derive_seed(session_seed, nodeid), "session"
    strict = pick("strict")
    chosen_out = pick("out_dir")
    return TestOptions(
        nodeid=nodeid,
        seed=seed,
        seed_origin=origin,
        session_seed=session_seed,
        max_examples=pick("max_examples"),
        turns=pick("turns"),
        abort=pick("abort"),
        restarts=pick("restarts"),
        context=pick("context"),
        claims=claimed_names(pick("claims"), where="claims (--simloop-claims, simloop_claims, simloop_config)"),
        profile=pick("profile"),
        drive=pick("drive"),
        strict=True if strict is None else bool(strict),
        scenario=pick("scenario"),
        verify_defaults={k: v for k in _VERIFY_DEFAULTS if (v := pick(k)) is not None},
        out_dir=Path(chosen_out) if chosen_out is not None else (out_dir or TestOptions.out_dir),
        search=tuple(search),
    )


def _checked(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        raise UsageError(f"{where} must be a dict of simloop options, got {type(values).__name__}")
    out = dict(values)
    for key, value in out.items():
        if key not in OPTION_KEYS:
            close = difflib.get_close_matches(str(key), OPTION_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{where}: unknown option {key!r}{hint}; the options are: {', '.join(OPTION_KEYS)}")
        if value is None:
            continue
        if key == "seed" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise UsageError(f"{where}: seed must be a non-negative int, got {value!r}")
        if key in ("max_examples", "turns", "workers") and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{where}: {key} must be a positive int, got {value!r}")
        if key in ("strict", "abort", "context") and not isinstance(value, bool):
            raise UsageError(f"{where}: {key} must be True or False, got {value!r}")
        if key == "restarts" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise UsageError(f"{where}: restarts must be an int >= 0, got {value!r}")
        if key == "claims":
            out[key] = claimed_names(value, where=f"{where}: claims")
        if key == "server_tools" and value not in SERVER_TOOLS:
            raise UsageError(f"{where}: server_tools must be one of {', '.join(SERVER_TOOLS)}, got {value!r}")
        if key == "prices" and not isinstance(value, Mapping):
            raise UsageError(f"{where}: prices maps model names (or prefixes, or '*') to prices, got {value!r}")
        if key == "tools" and isinstance(value, (bytes, Mapping)):
            raise UsageError(f"{where}: tools is a list of tools or a tools file's path, got {value!r}")
        if key == "profile" and value not in PROFILES:
            raise UsageError(f"{where}: profile must be one of {', '.join(PROFILES)}, got {value!r}")
        if key == "drive" and not (callable(value) or isinstance(value, str)):
            raise UsageError(f"{where}: drive must be a function or 'package.module:function', got {value!r}")
    return out


# -- drives and scenario files ----------------------------------------------------------------------------------


def load_drive(spec: Any, *, search: Iterable[Path] = ()) -> Drive:
    """A drive from a callable or a ``"package.module:function"`` spec.

    When the module is not importable as is, the ``search`` folders (the rootdir, the invocation
    folder) are tried too, the way ``python -m`` finds the current folder's packages.
    """
    if callable(spec):
        return getattr(spec, "simloop_drive", spec)  # type: ignore[no-any-return]
    if not isinstance(spec, str):
        raise UsageError(f"a drive is a function or 'package.module:function', got {spec!r}")
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise UsageError(f"a drive spec is 'package.module:function' or 'path/to/file.py:function', got {spec!r}")
    try:
        target: Any = _import(module_name, search)
        for part in attr.split("."):
            target = getattr(target, part)
    except ImportError as e:
        raise UsageError(
            f"cannot import {module_name!r} for the drive {spec!r}: {e}. Make the package importable "
            "(pip install -e ., or `pythonpath = .` in the pytest ini file)"
        ) from None
    except AttributeError:
        raise UsageError(f"module {module_name!r} has no {attr!r} (from the drive {spec!r})") from None
    if not callable(target):
        raise UsageError(f"the drive {spec!r} is not a function")
    return getattr(target, "simloop_drive", target)  # type: ignore[no-any-return]  # a simloop.property test: its drive


def _import(module_name: str, search: Iterable[Path]) -> Any:
    from simloop._library import import_drive_module

    try:
        return import_drive_module(module_name)  # examples.* falls back to the installed simloop.examples
    except ModuleNotFoundError as e:
        top = module_name.split(".")[0]
        if e.name != top:
            raise
        for folder in search:
            if (folder / top).is_dir() or (folder / f"{top}.py").is_file():
                if str(folder) not in sys.path:
                    sys.path.append(str(folder))  # appended: never shadows an installed package
                return importlib.import_module(module_name)
        raise


_TOP_KEY = re.compile(r"""^(["']?)([A-Za-z_][\w-]*)\1[ \t]*:(?:[ \t]|$)""", re.MULTILINE)


def looks_like_scenario(text: str) -> bool:
    """Whether a YAML file means to be a v1 scenario: a top-level ``model:`` or ``task:`` key.

    A file that only shares ``version``/``name`` with the format (a cassette, a CI config) is not one.  A
    scenario with a misspelt key still is, so `load_scenario` reports the misspelling with its line.
    """
    keys = {m.group(2) for m in _TOP_KEY.finditer(text)}
    return bool(keys & {"model", "task"}) and not ("interactions" in keys and "model" not in keys)


def unclaimed(path: Path, options: TestOptions) -> str | None:
    """Why the scenario file at ``path`` is skipped (it needs what the test's options do not claim), or None.

    The claims: ``abort``, ``restarts`` (>= 1), ``turns`` (>= 2), ``context``, the names in ``claims`` (any of them, the
    stop policies included), and the stop policies declared in ``limits`` (a loop that declares a limit to `simloop.verify` honours it from sim.limits).
    """
    scenario = load_scenario(path)
    named = set(options.claims)
    limits = named & set(LIMIT_NAMES) | limit_names(options.verify_defaults.get("limits"), where="limits")
    claims = Claims(
        abort=bool(options.abort) or "abort" in named,
        restarts=max(options.restarts or 0, 1 if "restarts" in named else 0),
        turns=max(options.turns or 1, 2 if "turns" in named else 1),
        context=bool(options.context) or "context" in named,
        limits=frozenset(limits),
        approvals="approvals" in named,
    )
    missing = claims.missing(scenario, path)
    return skip_reason(scenario, missing, surface="plugin") if missing else None


def replay_file(drive: Drive, path: Path, *, seed: int) -> Report:
    """`simloop.replay` one scenario file (its ``expect:`` block, reason included, is checked there)."""
    return _replay(drive, path, seed=seed)


# -- the fixture object -------------------------------------------------------------------------------------------


class SimloopFixture:
    """What the ``simloop`` fixture yields: Sims, `verify` and `replay` with the test's seed and options.

    Example::

        def test_loop(simloop):
            simloop.verify(drive, limits=Limits(max_steps=10))

        @pytest.mark.simloop(scenario="scenarios/happy-path.yaml")
        def test_happy(simloop):
            sim = simloop.sim()
            sim.check(sim.run(drive)).raise_for_violations()

    Sims made here are closed after the test, and (``strict``, the default) the test fails when one of
    them left scripted replies unserved or faults unfired.
    """

    def __init__(self, options: TestOptions, *, rerun: str = "") -> None:
        self.options = options
        self.seed = options.seed
        self.examples = 0
        self.replays = 0
        self.checked: set[str] = set()
        self._rerun = rerun
        self._sims: list[Sim] = []

    @property
    def drive(self) -> Drive:
        """The configured drive (marker, ``--simloop-drive``, ini ``simloop_drive`` or ``simloop_config``)."""
        return self._drive(None)

    def sim(self, scenario: ScenarioLike | None = None, *, seed: int | None = None, **kwargs: Any) -> Sim:
        """A `Sim` of ``scenario`` (default: the marker's ``scenario=``) on the test's seed.

        Relative paths are looked up next to the test file, then in the rootdir and the scenarios folder.
        Other keywords go to `Sim` (``model=``, ``limits=``...).
        """
        __tracebackhide__ = True
        chosen = scenario if scenario is not None else self.options.scenario
        if chosen is None:
            raise UsageError(
                "simloop.sim() needs a scenario: pass one (a path, a dict or a simloop.Scenario), or name it "
                "with @pytest.mark.simloop(scenario='scenarios/x.yaml')"
            )
        sim = Sim(self._locate(chosen), seed=self.seed if seed is None else seed, **kwargs)
        self._sims.append(sim)
        return sim

    def verify(self, drive: Drive | str | None = None, **kwargs: Any) -> Report:
        """`simloop.verify` with the test's seed, example budget, profile and defaults; keywords win.

        Raises `simloop.InvariantViolation` with a one-line message; the plugin adds the violations,
        the timeline, the minimal scenario and the replay command to the test's report.
        """
        __tracebackhide__ = True
        fn = self._drive(drive)
        kw: dict[str, Any] = {**self.options.verify_defaults, "seed": self.seed, "out_dir": self._out_dir()}
        if self.options.profile is not None:
            base = profile_settings(self.options.profile)
            kw["settings"] = base
            kw["max_examples"] = base.max_examples
        if self.options.max_examples is not None:
            kw["max_examples"] = self.options.max_examples
        if self.options.turns is not None:
            kw["turns"] = self.options.turns
        if self.options.abort is not None:
            kw["abort"] = self.options.abort
        if self.options.restarts is not None:
            kw["restarts"] = self.options.restarts
        if self.options.context is not None:
            kw["context"] = self.options.context
        kw.update(kwargs)
        if isinstance(kw.get("tools"), (str, Path)):  # --simloop-tools=FILE, or a path in simloop_config/the marker
            kw["tools"] = self._tools_file(kw["tools"])
        if kw.get("database") is not None and "seed" not in kwargs:
            # a seeded search leaves the example database out (as any seeded Hypothesis run): a test given a
            # shared database searches on Hypothesis's randomness, to replay and add to what others found
            kw["seed"] = None
        try:
            report = off_loop(lambda: _verify(fn, **kw))
        except InvariantViolation as e:
            self.examples += e.examples or 0  # the failing test's runs count in the summary line too
            self.checked.update(kw.get("invariants") or CATALOGUE)
            raise self._short(e, seed=int(kw["seed"] if kw["seed"] is not None else self.seed), shown="verify") from None
        self.examples += report.examples or 0
        self.checked.update(report.checked)
        return report

    def replay(
        self, drive: Drive | str | None = None, path: str | Path | None = None, *, seed: int | None = None,
        invariants: Iterable[str] | None = None, **claims: Any,
    ) -> Report:
        """`simloop.replay` a scenario file (default: the marker's ``scenario=``) on the test's seed.

        What the loop claims (``abort``, ``restarts``, ``turns``, ``limits``: `simloop.replay`'s keywords) comes
        from the test's options where they state it (``abort``, ``restarts``, ``turns``, ``claims``, ``limits``);
        keywords win.  A file that needs what is not claimed skips the test, with the reason.
        """
        __tracebackhide__ = True
        unknown = sorted(set(claims) - {"abort", "restarts", "turns", "context", "limits", "approvals"})
        if unknown:
            raise UsageError(
                f"simloop.replay() got an unexpected keyword {unknown[0]!r}; it takes seed, invariants, abort, "
                "restarts, turns, context, limits and approvals"
            )
        claims = {**self._claims(), **claims}
        fn = self._drive(drive)
        chosen = path if path is not None else self.options.scenario
        if chosen is None:
            raise UsageError("simloop.replay(drive, path) needs a path, or @pytest.mark.simloop(scenario=...)")
        located = self._locate(chosen)
        if not isinstance(located, Path):
            raise UsageError(f"simloop.replay() replays a scenario file; got {type(located).__name__}")
        run_seed = self.seed if seed is None else seed
        try:
            report = off_loop(
                lambda: _replay(fn, display_path(located), seed=run_seed, invariants=invariants, **claims)
            )
        except InvariantViolation as e:
            self.replays += 1
            self.checked.update(invariants or CATALOGUE)
            raise self._short(e, seed=run_seed, shown="replay") from None
        if report.skipped is not None:
            import pytest

            pytest.skip(f"{display_path(located)} {report.skipped}")
        self.replays += 1
        self.checked.update(report.checked)
        return report

    def _claims(self) -> dict[str, Any]:
        """`simloop.replay`'s claim keywords, from the options that state them (unstated: the file's need is met)."""
        o = self.options
        out: dict[str, Any] = {}
        named = set(o.claims)
        if o.abort is not None or "abort" in named:
            out["abort"] = bool(o.abort) or "abort" in named
        if o.restarts is not None or "restarts" in named:
            out["restarts"] = max(o.restarts or 0, 1 if "restarts" in named else 0)
        if o.turns is not None or "turns" in named:
            out["turns"] = max(o.turns or 1, 2 if "turns" in named else 1)
        if o.context is not None or "context" in named:
            out["context"] = bool(o.context) or "context" in named
        if "approvals" in named:
            out["approvals"] = True
        declared = limit_names(o.verify_defaults.get("limits"), where="limits")
        if declared or named & set(LIMIT_NAMES):
            out["limits"] = sorted(declared | (named & set(LIMIT_NAMES)))
        return out

    def leftovers(self) -> list[str]:
        """What this test's Sims scripted and never used (what strict mode fails on)."""
        return [f"{sim!r}: {item}" for sim in self._sims for item in sim.leftovers()]

    def close(self) -> None:
        """Close every Sim made for this test."""
        for sim in self._sims:
            sim.close()

    def stats(self) -> dict[str, Any]:
        """What the plugin reports for this test (it travels on the report, also across xdist)."""
        return {"seed": self.seed, "examples": self.examples, "replays": self.replays,
                "invariants": sorted(self.checked)}

    def __repr__(self) -> str:
        return f"<simloop fixture for {self.options.nodeid} seed={self.seed}>"

    # -- helpers ---------------------------------------------------------------------------------------------

    def _drive(self, drive: Drive | str | None) -> Drive:
        chosen = drive if drive is not None else self.options.drive
        if chosen is None:
            raise UsageError(
                "no drive: pass one (simloop.verify(drive)), or configure a default with "
                "@pytest.mark.simloop(drive=...), --simloop-drive=package.module:drive, the ini key "
                "simloop_drive, or simloop_config() returning {'drive': ...}"
            )
        return load_drive(chosen, search=self.options.search)

    def _locate(self, scenario: ScenarioLike) -> ScenarioLike:
        if not isinstance(scenario, (str, Path)):
            return scenario
        p = Path(scenario)
        if p.is_absolute() or p.exists():
            return p
        for folder in self.options.search:
            if (folder / p).exists():
                return folder / p
        looked = ", ".join(str(f) for f in self.options.search) or "the current folder"
        raise UsageError(f"scenario file {str(scenario)!r} not found; looked in: {looked}")

    def _tools_file(self, path: str | Path) -> list[Any]:
        """The tools a tools file lists (looked up as scenario paths are); a missing or bad file is a `UsageError`."""
        p = Path(path)
        located = p if p.is_absolute() or p.is_file() else next(
            (f / p for f in self.options.search if (f / p).is_file()), p
        )
        if not located.is_file():
            looked = ", ".join(str(f) for f in self.options.search) or "the current folder"
            raise UsageError(f"tools file {str(path)!r} not found; looked in: {looked}")
        return list(load_tools(located))

    def _out_dir(self) -> Path:
        return display_path(self.options.out_dir)

    def _short(self, e: InvariantViolation, *, seed: int, shown: str) -> InvariantViolation:
        derived = self.options.seed_origin == "session" and seed == self.options.seed
        report = render_failure(
            e, seed=seed, rerun=self._rerun, show_scenario=shown == "verify",
            session_seed=self.options.session_seed if derived else None,
        )
        return short_violation(e, report)


def short_violation(e: InvariantViolation, report: str) -> InvariantViolation:
    """A copy of ``e`` with a one-line message; the full ``report`` rides along for the plugin's section."""
    first = str(e.violations[0]) if e.violations else str(e).splitlines()[0]
    more = f" (+{len(e.violations) - 1} more)" if len(e.violations) > 1 else ""
    short = InvariantViolation(
        f"simloop: {first}{more} -- see the 'simloop' section of this report",
        violations=e.violations, scenario=e.scenario, scenario_path=e.scenario_path, timeline=e.timeline,
        replay=e.replay, transcript=e.transcript, examples=e.examples,
    )
    short.simloop_report = report  # type: ignore[attr-defined]
    return short


def display_path(path: Path) -> Path:
    """``path`` relative to the current folder when it is below it: shorter in reports and replay commands."""
    try:
        rel = Path(os.path.relpath(path))
    except ValueError:  # another drive on Windows
        return path
    return rel if not str(rel).startswith("..") else path


# -- reports -------------------------------------------------------------------------------------------------------


def rerun_hint(options: TestOptions, *, test_id: str | None = None) -> str:
    """How to re-run this one test with the same seed, as a command line or a note.

    ``test_id`` is the node id as typed from the invocation folder (the node id is relative to the rootdir).
    """
    quoted = (test_id or options.nodeid).replace("'", "'\\''")
    if options.seed_origin == "marker":
        return f"pytest '{quoted}'  (its seed {options.seed} is set by @pytest.mark.simloop(seed=...))"
    if options.seed_origin == "config":
        return f"pytest '{quoted}'  (its seed {options.seed} is set by the simloop_config fixture)"
    return f"pytest '{quoted}' --simloop-seed={options.session_seed}"


def render_failure(
    e: InvariantViolation, *, seed: int, rerun: str = "", show_scenario: bool = True, session_seed: int | None = None
) -> str:
    """The report section of a failure: violations, timeline, the (minimal) scenario, how to replay it.

    ``session_seed``: the session seed the test's ``seed`` was derived from, when it was; the report then
    says why the replay line and the re-run line show two different seeds.
    """
    lines: list[str] = []
    found = [str(v) for v in e.violations]
    head = str(e).split("\n\n", 1)[0].splitlines()
    other = [ln.strip() for ln in head[1:] if ln.strip() and ln.strip() not in found]
    if found:
        lines.append(f"violations ({len(found)}):")
        lines += [f"  {v}" for v in found]
    if other:
        lines += ["and:" if found else "what went wrong:", *(f"  {ln}" for ln in other)]
    if e.timeline:
        lines += ["", "timeline of the failing run:", *(f"  {ln}" for ln in e.timeline.splitlines())]
    if e.scenario is not None and show_scenario and isinstance(e.scenario, Scenario):
        n = len(e.scenario.model)
        where = f", written to {e.scenario_path}" if e.scenario_path else ""
        lines += ["", f"minimal scenario ({n} repl{'y' if n == 1 else 'ies'}){where}:"]
        lines += [f"  {ln}" for ln in e.scenario.to_yaml().rstrip().splitlines()]
        if e.scenario_path:
            lines.append("  (commit it under the scenarios folder and it runs as a regression test with --simloop-drive)")
    elif e.scenario_path:
        lines += ["", f"scenario: {e.scenario_path}"]
    replay = e.replay or ""
    if replay.startswith("simloop run ") and "--seed" not in replay and seed != 0:
        replay += f" --seed {seed}"  # the run used this seed; the command line defaults to 0
    lines.append("")
    if replay:
        lines.append(f"replay it:       {replay}")
    if rerun:
        lines.append(f"re-run the test: {rerun}")
    if session_seed is not None and session_seed != seed and (replay or rerun):
        lines.append(
            f"(two seeds: {seed} is this test's own, derived from the session seed {session_seed} and the test's "
            "id; the replay takes the test's, --simloop-seed the session's)"
        )
    return "\n".join(lines)


def leftovers_message(leftovers: list[str], *, nodeid: str) -> str:
    """The strict-mode failure: what was scripted and never used, and the two ways out."""
    return "\n".join([
        f"simloop (strict): {nodeid} left scripted behaviour unused:",
        *(f"  {item}" for item in leftovers),
        "The loop stopped before the scenario expected, or the scenario scripts more than this test needs.",
        ("Trim the scenario, or opt out for this test with @pytest.mark.simloop(strict=False) "
         "(or {'strict': False} in simloop_config)."),
    ])
