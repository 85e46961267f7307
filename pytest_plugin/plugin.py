"""The pytest plugin entry point (``pytest11: simloop``): options, the seed, fixtures, scenario files as tests.

A thin adapter over simloop, in the manner of respx's, pytest-recording's and
Hypothesis's plugins: it reads ``@pytest.mark.simloop`` > the command line >
the ini file > the ``simloop_config`` fixture, builds the library objects
(`simloop._pytest_support`), and turns failures into readable reports.

Loading it imports neither simloop nor the anthropic SDK (every xdist worker
would pay ~1 s): they are imported when a test asks for the ``simloop``
fixture or a scenario file is collected.  So the session-level work that runs
in every process (the session seed, the summary line) is done here with the
standard library only.
"""

from __future__ import annotations

import os
import random
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from simloop._pytest_support import SimloopFixture, TestOptions

PROFILE_CHOICES = ("ci", "dev", "nightly")
SERVER_TOOLS_CHOICES = ("request", "on", "off")  # simloop._offer.SERVER_TOOLS (a test checks that they agree)
CACHE_KEY = "simloop/seed"
_OPTIONS = (
    # (name, metavar, help)
    ("seed", "N|last", ("the session seed: tests derive their seeds from it and their node ids (default: random, "
                        "printed in the header); 'last' reuses the previous run's")),
    ("max_examples", "N", "how many runs simloop.verify tries per test"),
    ("turns", "N", ("the most user turns of the conversations simloop.verify generates (default 1: one turn); "
                    "2 or more also claims follow-ups, so scenario files with followups: run")),
    ("abort", None, ("your loop has a Stop button wired to sim.abort: simloop.verify presses it, and scenario files "
                     "with abort: run (without it they are skipped)")),
    ("restarts", "N", ("your loop resumes from sim.store after a crash: simloop.verify kills it up to N times a run, "
                       "and scenario files with a crash fault run")),
    ("tools", "FILE", ("your loop's own tools, for simloop.verify: a YAML or JSON file listing them in the scenario's "
                       "tools: format, or a scenario file whose tools: is taken (default: a read search and a write "
                       "send_email)")),
    ("server_tools", "|".join(SERVER_TOOLS_CHOICES), (
        "whether simloop.verify's model runs server tools (server_tool_use blocks, pause_turn): when the request "
        "declares one (request, the default), whatever it declares (on), or never (off)")),
    ("context", None, ("your loop keeps every request inside the model's context window (it trims, summarizes or "
                       "compacts): simloop.verify holds it to that, and scenario files with requires: [context] run")),
    ("claims", "NAMES", ("the stop policies your loop honours as sim.limits declares them, comma-separated "
                         "(max_steps, deadline_s, max_total_tokens, max_tool_errors, max_writes, max_repeats, "
                         "max_cost_usd): "
                         "scenario files that declare them run (the simloop_config limits count too)")),
    ("profile", "|".join(PROFILE_CHOICES), ("Hypothesis settings for simloop.verify: dev (50 runs a test), ci "
                                            "(200, no example database), nightly (5000, long fuzzing)")),
    ("drive", "pkg.module:drive", "the default adapter; also turns the scenario files into tests"),
    ("scenarios", "DIR", ("the folder whose *.yaml scenario files become tests when a drive is set "
                          "(default: scenarios, relative to the rootdir)")),
    ("workers", "N", "processes each simloop.verify searches with (sharing its budget and example database)"),
    ("database", "DIR|URL", ("Hypothesis's example database for simloop.verify: a directory or a redis:// URL "
                             "shared by several machines (then searches are not seeded: they replay what others found)")),
)


# -- session state (standard library only: it runs in every process) ------------------------------------------------


@dataclass
class _Session:
    seed: int
    seed_explicit: bool  # given on the command line or in the ini file (then it overrides simloop_config's)
    cli: dict[str, Any]
    ini: dict[str, Any]
    drive: str | None
    scenarios: Path
    header_shown: bool = False
    worker: bool = False  # an xdist worker: the controller, which gets every report, judges the session
    tests: int = 0
    failed: int = 0
    examples: int = 0
    replays: int = 0
    invariants: set[str] = field(default_factory=set)
    files_run: int = 0  # scenario files replayed (passed or failed)
    files_skipped: int = 0  # scenario files skipped (by claims, or the wire)

    def add(self, stats: dict[str, Any], *, failed: bool) -> None:
        self.tests += 1
        self.failed += failed
        self.examples += int(stats.get("examples", 0))
        self.replays += int(stats.get("replays", 0))
        self.invariants.update(stats.get("invariants", ()))

    def summary(self) -> str:
        # every run of the loop counts, a failing test's shrinking runs too (more than its max_examples, then)
        runs = f"{self.examples} generated run{'s' if self.examples != 1 else ''}"
        if self.failed:
            runs += " (shrinking included)"
        if self.replays:
            runs += f" and {self.replays} scenario replay{'s' if self.replays != 1 else ''}"
        line = f"simloop: {runs} in {self.tests} test{'s' if self.tests != 1 else ''}, " \
               f"{len(self.invariants)} invariants checked"
        if self.failed:
            return f"{line}; {self.failed} failed: reproduce with --simloop-seed={self.seed}"
        return f"{line}, seed={self.seed}"


_SESSION = pytest.StashKey[_Session]()
_FIXTURE = pytest.StashKey["SimloopFixture"]()
_STATS = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simloop", "simloop: test LLM agent loops against a simulated API")
    for name, metavar, help_ in _OPTIONS:
        flag = "--simloop-" + name.replace("_", "-")
        choices = {"profile": PROFILE_CHOICES, "server_tools": SERVER_TOOLS_CHOICES}.get(name)
        if metavar is None:  # a flag: "true" when given
            group.addoption(flag, dest=f"simloop_{name}", default=None, action="store_const", const="true", help=help_)
        else:
            group.addoption(flag, dest=f"simloop_{name}", default=None, metavar=metavar, choices=choices, help=help_)
        parser.addini(f"simloop_{name}", f"default for {flag}: {help_}", default="")


def _given(config: pytest.Config, name: str) -> tuple[str | None, str | None]:
    """(command line value, ini value) of an option, None when not given."""
    cli = config.getoption(f"simloop_{name}")
    ini = str(config.getini(f"simloop_{name}") or "").strip()
    return (None if cli is None else str(cli).strip()), (ini or None)


def _positive(value: str | None, where: str) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise pytest.UsageError(f"{where} takes a positive whole number, got {value!r}")
    return n


def _session_seed(config: pytest.Config, cli: str | None, ini: str | None) -> tuple[int, bool]:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "simloop_seed" in workerinput:  # an xdist worker: the controller chose
        return int(workerinput["simloop_seed"]), bool(workerinput["simloop_seed_explicit"])
    raw, where = (cli, "--simloop-seed") if cli is not None else (ini, "the ini key simloop_seed")
    cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
    if raw == "last":
        if cache is None:
            raise pytest.UsageError(
                f"{where}=last reads the previous run's seed from pytest's cache, which is disabled "
                "(-p no:cacheprovider); pass the number from the previous run's header instead")
        previous = cache.get(CACHE_KEY, None)
        if not isinstance(previous, dict) or not isinstance(previous.get("seed"), int):
            raise pytest.UsageError(
                f"{where}=last: no previous simloop run in the cache ({config.rootpath / '.pytest_cache'}); "
                "run once without it, or pass a number")
        seed, explicit = int(previous["seed"]), bool(previous.get("explicit"))
    elif raw is not None:
        try:
            seed = int(raw)
        except ValueError:
            raise pytest.UsageError(f"{where} takes a whole number or 'last', got {raw!r}") from None
        if not 0 <= seed <= 0xFFFFFFFF:
            raise pytest.UsageError(f"{where} takes a number from 0 to {0xFFFFFFFF}, got {raw!r}")
        explicit = True
    else:
        seed, explicit = random.Random().getrandbits(32), False  # own Random: immune to random.seed() elsewhere
    if cache is not None and workerinput is None:
        cache.set(CACHE_KEY, {"seed": seed, "explicit": explicit})
    return seed, explicit


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "simloop(scenario=None, seed=None, max_examples=None, strict=True, drive=None, profile=None, turns=None, "
        "abort=None, restarts=None, context=None, claims=None, tools=None, server_tools=None): "
        "options of the simloop fixture for this test",
    )
    seed_cli, seed_ini = _given(config, "seed")
    seed, explicit = _session_seed(config, seed_cli, seed_ini)
    cli: dict[str, Any] = {}
    ini: dict[str, Any] = {}
    for name in ("max_examples", "turns", "profile", "drive", "workers", "database", "abort", "restarts", "context",
                 "claims", "tools", "server_tools"):
        for layer, value, where in zip((cli, ini), _given(config, name), ("--simloop-", "ini simloop_")):
            label = where + (name.replace("_", "-") if where.startswith("--") else name)
            if value is None:
                continue
            if name in ("max_examples", "turns", "workers", "restarts"):
                layer[name] = _positive(value, label)
            elif name in ("abort", "context"):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise pytest.UsageError(f"{label} is true or false, got {value!r}")
                layer[name] = value.lower() in ("true", "1", "yes")
            elif name == "claims":
                layer[name] = tuple(n.strip() for n in value.split(",") if n.strip())
            elif name == "profile" and value not in PROFILE_CHOICES:
                raise pytest.UsageError(f"{label} is one of {', '.join(PROFILE_CHOICES)}, got {value!r}")
            elif name == "server_tools" and value not in SERVER_TOOLS_CHOICES:
                raise pytest.UsageError(f"{label} is one of {', '.join(SERVER_TOOLS_CHOICES)}, got {value!r}")
            else:
                layer[name] = value
    folder = next((v for v in _given(config, "scenarios") if v), "scenarios")
    config.stash[_SESSION] = _Session(
        seed=seed, seed_explicit=explicit, cli=cli, ini=ini,
        drive=cli.get("drive") or ini.get("drive"), scenarios=(config.rootpath / folder).resolve(),
        worker=hasattr(config, "workerinput"),
    )
    config.pluginmanager.register(_Reporter(config.stash[_SESSION]), "simloop-reporter")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(config.stash[_SESSION]), "simloop-xdist")


class _XdistHooks:
    """Hands the controller's session seed to every worker (as pytest-randomly does): results equal serial."""

    def __init__(self, session: _Session) -> None:
        self.session = session

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["simloop_seed"] = self.session.seed
        node.workerinput["simloop_seed_explicit"] = self.session.seed_explicit


def _header_lines(session: _Session) -> list[str]:
    lines = [f"simloop: seed={session.seed} (reproduce with --simloop-seed={session.seed})"]
    chosen = {k: v for k, v in {**session.ini, **session.cli}.items() if k in ("profile", "drive")}
    if chosen:
        lines.append("simloop: " + ", ".join(f"{k}={v}" for k, v in sorted(chosen.items())))
    return lines


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The seed line, when simloop is configured for this run; otherwise it waits for collection (below)."""
    session = config.stash[_SESSION]
    if not (session.seed_explicit or session.cli or session.ini):
        return []  # maybe an unrelated suite: shown after collection only if a test uses simloop
    session.header_shown = True
    return _header_lines(session)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Settle the ``simloop.property`` tests collected: their database key becomes their node id (as HypoFuzz makes
    it, so what ``hypothesis fuzz`` saved replays here first), and a ``@settings`` on top keeps simloop's part."""
    for item in items:
        settle = getattr(getattr(item, "obj", None), "_simloop_settle", None)
        if callable(settle):
            settle(item.nodeid)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Print the seed line once collection shows a test that uses simloop (a suite that does not sees none)."""
    state = session.config.stash[_SESSION]
    if state.header_shown or session.config.option.verbose < 0:
        return
    if any("simloop" in getattr(item, "fixturenames", ()) or isinstance(item, ScenarioItem) for item in session.items):
        state.header_shown = True
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for line in _header_lines(state):
                reporter.write_line(line)


# -- fixtures ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def simloop_config() -> dict[str, Any]:
    """Defaults for this test's ``simloop`` fixture; override it in conftest.py (like pytest-recording's vcr_config).

    Keys: drive, max_examples, profile, seed, strict, scenario, limits, tools (a list, or a tools file's path),
    invariants, task, out_dir, turns, workers, database, abort, restarts, context, claims, server_tools, prices
    (the prices the loop pays, as ``simloop.verify(prices=...)``).
    The marker, the command line and the ini file win over it.
    """
    return {}


@pytest.fixture
def simloop(request: pytest.FixtureRequest, simloop_config: dict[str, Any]) -> Iterator[SimloopFixture]:
    """Sims, ``verify`` and ``replay`` with this test's seed and options: ``simloop.verify(drive)``.

    After the test, the Sims it made are closed; in strict mode (the default) the test fails if they left
    scripted replies unserved or faults unfired (``@pytest.mark.simloop(strict=False)`` opts out).
    """
    from simloop._pytest_support import SimloopFixture, rerun_hint
    from simloop.errors import UsageError

    problem = None
    try:
        options = _options(request.node, config=simloop_config)
    except UsageError as e:
        problem = str(e)
    if problem is not None:  # failed outside the except block, so the message is not shown twice (chained)
        pytest.fail(problem, pytrace=False)
    fixture = SimloopFixture(options, rerun=rerun_hint(options, test_id=_typed_id(request.node)))
    request.node.stash[_FIXTURE] = fixture
    request.node.user_properties.append(("simloop_seed", options.seed))
    try:
        yield fixture
    finally:
        fixture.close()


def _options(node: pytest.Item, *, config: dict[str, Any]) -> TestOptions:
    from simloop._pytest_support import resolve_options
    from simloop.errors import UsageError

    session = node.config.stash[_SESSION]
    marker: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers("simloop"))):  # closest last, so it wins
        if len(mark.args) > 1:
            raise UsageError("@pytest.mark.simloop takes at most one positional argument, the scenario")
        marker.update({"scenario": mark.args[0]} if mark.args else {}, **mark.kwargs)
    rootdir = node.config.rootpath
    search = [node.path.parent, rootdir, session.scenarios]
    return resolve_options(
        nodeid=node.nodeid, session_seed=session.seed, session_seed_explicit=session.seed_explicit,
        marker=marker, cli=session.cli, ini=session.ini, config=config,
        search=list(dict.fromkeys([*search, node.config.invocation_params.dir])),
        out_dir=rootdir / ".simloop" / "failures",
    )


def _typed_id(item: pytest.Item) -> str:
    """The node id as typed from the invocation folder (node ids are relative to the rootdir)."""
    _, sep, rest = item.nodeid.partition("::")
    try:
        path = os.path.relpath(item.path, item.config.invocation_params.dir)
    except ValueError:  # another drive on Windows
        return item.nodeid
    return path.replace(os.sep, "/") + sep + rest


# -- reports -------------------------------------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    result = yield  # the test itself; if it failed, that is the report and leftovers do not matter
    fixture = item.stash.get(_FIXTURE, None)
    if fixture is not None and fixture.options.strict:
        leftovers = fixture.leftovers()
        if leftovers:
            from simloop._pytest_support import leftovers_message

            pytest.fail(leftovers_message(leftovers, nodeid=item.nodeid), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if call.when != "call":
        return report
    fixture = item.stash.get(_FIXTURE, None)
    stats = fixture.stats() if fixture is not None else item.stash.get(_STATS, None)
    if stats is not None:
        report.simloop = stats  # a plain dict: xdist carries it to the controller with the report
    section = getattr(call.excinfo.value, "simloop_report", None) if call.excinfo is not None else None
    add = getattr(report.longrepr, "addsection", None)
    if isinstance(section, str) and add is not None:
        add("simloop", section)  # in the longrepr, so --junitxml and xdist carry it too
    return report


class _Reporter:
    """Sums the tests' simloop stats (they arrive on the reports, from xdist workers too) into one summary line."""

    def __init__(self, session: _Session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        stats = getattr(report, "simloop", None)
        if report.when != "call" or not isinstance(stats, dict):
            return
        if stats.get("file"):
            self.session.files_skipped += report.skipped
            self.session.files_run += not report.skipped
        if not report.skipped:  # a skipped file ran nothing
            self.session.add(stats, failed=report.failed)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A session whose every scenario file was skipped tested nothing: it exits 5, as pytest's "no tests ran"
        (a CI run must not pass by skipping: docs/design.md, Claims)."""
        if self.nothing_tested() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED

    def nothing_tested(self) -> bool:
        state = self.session
        return state.files_skipped > 0 and state.files_run == 0 and not state.worker

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.session.tests:
            terminalreporter.write_line(self.session.summary())
        if self.nothing_tested():
            from simloop._claims import nothing_tested

            terminalreporter.write_line(f"simloop: {nothing_tested(self.session.files_skipped)}", red=True)


# -- scenario files as tests -----------------------------------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    session = parent.config.stash[_SESSION]
    if session.drive is None or file_path.suffix not in (".yaml", ".yml"):
        return None
    if not file_path.resolve().is_relative_to(session.scenarios):
        return None
    try:
        text = file_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    from simloop._pytest_support import looks_like_scenario

    if not looks_like_scenario(text):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


class ScenarioFile(pytest.File):
    """A v1 scenario file: one test that replays it through the configured drive."""

    def collect(self) -> Iterator[pytest.Item]:
        from simloop.errors import ScenarioError
        from simloop.scenario import Scenario

        shown = self.path.relative_to(self.config.rootpath) if self.path.is_relative_to(self.config.rootpath) \
            else self.path
        try:
            scenario = Scenario.from_yaml(self.path.read_text(encoding="utf-8"), path=shown)
        except ScenarioError as e:
            raise self.CollectError(f"simloop cannot read this scenario file:\n  {e}") from None
        yield ScenarioItem.from_parent(self, name=scenario.name)


class ScenarioItem(pytest.Item):
    """Replays a scenario file with ``simloop.replay`` and checks its ``expect:`` block."""

    def runtest(self) -> None:
        from simloop._pytest_support import display_path, load_drive, replay_file, unclaimed
        from simloop.invariants import CATALOGUE

        options = _options(self, config={})
        self.user_properties.append(("simloop_seed", options.seed))
        stats = {"seed": options.seed, "examples": 0, "replays": 1, "invariants": list(CATALOGUE), "file": True}
        self.stash[_STATS] = stats
        skipped = unclaimed(self.path, options)
        if skipped is not None:  # the file needs what the loop does not claim: not a failure of the loop
            # reported at the file (as a skip mark is), not at this line of the plugin
            raise pytest.skip.Exception(skipped, _use_item_location=True)
        drive = load_drive(self.config.stash[_SESSION].drive, search=options.search)
        report = replay_file(drive, display_path(self.path), seed=options.seed)
        if report.skipped is not None:  # the file scripts what the loop's wire has no form for
            raise pytest.skip.Exception(report.skipped, _use_item_location=True)
        stats["invariants"] = list(report.checked)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        from simloop._pytest_support import render_failure, rerun_hint
        from simloop.errors import InvariantViolation, UsageError

        error = excinfo.value
        if isinstance(error, InvariantViolation):
            options = _options(self, config={})
            head = str(error).splitlines()[0]
            rerun = rerun_hint(options, test_id=_typed_id(self))
            derived = options.session_seed if options.seed_origin == "session" else None
            return head + "\n\n" + render_failure(
                error, seed=options.seed, rerun=rerun, show_scenario=False, session_seed=derived
            )
        if isinstance(error, UsageError):
            return f"simloop: {error}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"scenario {self.name}"  # line 0: the file itself (where a skip is reported)

