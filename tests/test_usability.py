"""The small things a careful new user hit (issue 18, item 7), each pinned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import simloop
from simloop import cli
from simloop.cli import main
from simloop.cli import serve as cli_serve
from simloop.transcript import Transcript

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
pytest_plugins = ["pytester"]


# -- the command line ------------------------------------------------------------------------------------------------


def test_verify_trace_on_a_passing_run_writes_the_last_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "run.jsonl"
    code = main(["verify", "examples.correct_sync:drive", "--max-examples", "5", "--seed", "0", "--trace", str(trace),
                 "--no-progress", "--out", str(tmp_path / "fails")])
    assert code == 0
    assert f"no run failed; the last run's transcript written to {trace}" in capsys.readouterr().out
    assert Transcript.read(trace).model_calls >= 1
    assert main(["show", str(trace), "--plain"]) == 0  # a clean run: exit 0


def test_show_and_report_exit_1_on_a_trace_with_violations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    assert main(["run", str(SCENARIOS / "happy-path.yaml"), "--drive", "examples.made_up_ids:drive", "--trace", str(bad)]) == 1
    assert main(["run", str(SCENARIOS / "happy-path.yaml"), "--drive", "examples.correct_sync:drive", "--trace", str(good)]) == 0
    assert main(["show", str(bad)]) == 1
    assert main(["show", str(bad), "--plain"]) == 1
    assert main(["report", str(bad), "-o", str(tmp_path / "bad.html")]) == 1
    assert (tmp_path / "bad.html").is_file()  # written either way
    assert main(["show", str(good)]) == 0
    assert main(["report", str(good)]) == 0
    capsys.readouterr()


def test_serve_writes_its_trace_on_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def terminated() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # what `kill` and container runtimes send; the handler raises here
        raise AssertionError("SIGTERM did not stop the server")

    monkeypatch.setattr(cli_serve, "_wait_for_interrupt", terminated)
    before = signal.getsignal(signal.SIGTERM)
    trace = tmp_path / "served.jsonl"
    assert main(["serve", "--scenario", str(SCENARIOS / "happy-path.yaml"), "--trace", str(trace)]) == 0
    err = capsys.readouterr().err
    assert "simloop: stopped (SIGTERM) after 0 request(s)" in err and f"transcript written to {trace}" in err
    assert trace.is_file()
    assert signal.getsignal(signal.SIGTERM) == before  # put back


def test_serve_exhaustion_message_tells_replies_from_rejected_calls() -> None:
    from simloop.wire import loopback

    scenario = simloop.Scenario.model_validate({"name": "one", "task": "Hi", "model": [{"end_turn": "Only one."}]})
    good = {"model": "claude-sonnet-5", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
    rejected = {**good, "messages": [{"role": "user", "content": ""}]}  # empty text: the API's 400

    def post(base: str, body: dict[str, object]) -> int:
        request = urllib.request.Request(
            f"{base}/v1/messages", data=json.dumps(body).encode(), method="POST",
            headers={"content-type": "application/json", "x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # loopback only
                return int(response.status)
        except urllib.error.HTTPError as e:
            return e.code

    with loopback.serve(scenario) as server:
        assert [post(server.base_url, b) for b in (good, rejected, good)] == [200, 400, 500]
    message = str(server.errors[0])
    assert "asked for another at model call 3, reply #2 (requests the API rejected are numbered as calls" in message


# -- scenario files, adapters, the package ---------------------------------------------------------------------------


def test_a_bad_tool_kind_lists_the_tool_kinds() -> None:
    with pytest.raises(simloop.ScenarioError) as info:
        simloop.Scenario.from_yaml("task: x\ntools:\n  - name: a\n    kind: writ\nmodel: [{end_turn: x}]\n", path="s.yaml")
    assert str(info.value) == "s.yaml:4: tools[0].kind: expected one of read, write, got 'writ'"


@pytest.mark.parametrize(("adapter", "harness", "extra"), [
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("langgraph", "langchain_anthropic", "langgraph"),
])
def test_an_adapter_without_its_extra_says_which_to_install(adapter: str, harness: str, extra: str) -> None:
    code = (
        f"import sys; sys.modules[{harness!r}] = None\n"  # as if the extra were not installed
        f"try:\n    import simloop.adapters.{adapter}\nexcept ModuleNotFoundError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert f"simloop.adapters.{adapter} needs {harness}, which is not installed: pip install 'simloop[{extra}]'" in out


def test_cassettes_and_adapters_are_attributes_after_import_simloop() -> None:
    code = "import simloop; print(simloop.cassettes.Recorded.__name__, simloop.adapters.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split() == ["Recorded", "simloop.adapters"]
    with pytest.raises(AttributeError, match="module 'simloop' has no attribute 'casettes'"):
        simloop.casettes  # noqa: B018 - the attribute access is the test


def test_the_package_is_typed_and_no_message_cites_the_old_brief() -> None:
    assert (ROOT / "simloop" / "py.typed").is_file()
    cited = [str(p) for p in (ROOT / "simloop").rglob("*.py") if "DESIGN §" in p.read_text(encoding="utf-8")]
    assert cited == [], "point to docs/design.md by section name"
    assert (ROOT / "docs" / "design.md").is_file()


# -- the plugin ------------------------------------------------------------------------------------------------------


def test_the_seed_line_only_when_a_test_uses_simloop(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    plain = pytester.runpytest()
    plain.assert_outcomes(passed=1)
    assert not [line for line in plain.outlines if line.startswith("simloop")]
    pytester.makepyfile(test_uses="def test_uses(simloop):\n    assert simloop.seed >= 0\n")
    used = pytester.runpytest()
    used.assert_outcomes(passed=2)
    used.stdout.fnmatch_lines(["collected 2 items", "simloop: seed=* (reproduce with --simloop-seed=*)"])


def test_a_typo_in_simloop_config_is_reported_once(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef simloop_config():\n    return {'max_exampels': 5}\n"
    )
    pytester.makepyfile(test_typo="def test_typo(simloop):\n    pass\n")
    result = pytester.runpytest("-rN")  # no short summary (under CI=true pytest prints its lines whole)
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert text.count("unknown option 'max_exampels' (did you mean 'max_examples'?)") == 1
    assert "During handling of the above exception" not in text


def test_simloop_corpus_points_the_fidelity_tests_at_a_folder(tmp_path: Path) -> None:
    # the folder is read as well as the shared corpus (when present): every fidelity test covers both
    code = "import corpus; print(corpus.CORPORA[-1]); print(corpus.cassette_paths(corpus.CORPORA[-1]))"
    env = {**os.environ, "SIMLOOP_CORPUS": str(tmp_path), "PYTHONPATH": str(ROOT / "tests")}
    (tmp_path / "mine.yaml").write_text("interactions: []\nversion: 1\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.splitlines() == [str(tmp_path.resolve()), f"[PosixPath('{(tmp_path / 'mine.yaml').resolve()}')]"]


# -- what ships with simloop ----------------------------------------------------------------------------------------


def test_examples_drive_specs_fall_back_to_the_installed_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from simloop._library import import_drive_module, installed_name

    assert installed_name("examples.correct_sync") == "simloop.examples.correct_sync"
    assert installed_name("my_agent.testing") is None
    # as where no examples/ folder is importable: the checkout off the path, its examples modules forgotten
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != ROOT])
    for name in [m for m in sys.modules if m == "examples" or m.startswith("examples.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ModuleNotFoundError):
        __import__("examples")
    module = import_drive_module("examples.correct_sync")
    assert module.__name__ == "simloop.examples.correct_sync" and callable(module.drive)
    assert cli.load_drive("examples.correct_sync:drive").__module__ == "simloop.examples.correct_sync"
    with pytest.raises(ModuleNotFoundError):
        import_drive_module("examples.no_such_loop")


def test_simloop_scenarios_lists_and_copies_the_library(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shipped = sorted(p.relative_to(SCENARIOS) for p in SCENARIOS.rglob("*.yaml"))
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{len(shipped)} curated scenarios in ")
    assert "  stuck-search.yaml" in out and "findings/" in out
    assert main(["scenarios", "--copy", str(tmp_path / "lib")]) == 0
    assert capsys.readouterr().out == f"copied {len(shipped)} scenario file(s) to {tmp_path / 'lib'}\n"
    assert sorted(p.relative_to(tmp_path / "lib") for p in (tmp_path / "lib").rglob("*.yaml")) == shipped
    (tmp_path / "lib" / "happy-path.yaml").write_text("# mine\n", encoding="utf-8")
    assert main(["scenarios", "--copy", str(tmp_path / "lib")]) == 0
    again = capsys.readouterr().out
    assert again == f"copied 0 scenario file(s) to {tmp_path / 'lib'} ({len(shipped)} already there, left alone)\n"
    assert (tmp_path / "lib" / "happy-path.yaml").read_text(encoding="utf-8") == "# mine\n"


def test_simloop_init_writes_a_tests_folder_that_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "tests"]) == 0
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["tests/conftest.py", "tests/scenarios/happy-path.yaml", "tests/simloop_drive.py",
                       "tests/test_agent_loop.py", "tests/tools.yaml"]
    (tmp_path / "tests" / "conftest.py").write_text("# mine\n", encoding="utf-8")
    assert main(["init", "tests"]) == 0  # leaves what is there alone
    assert (tmp_path / "tests" / "conftest.py").read_text(encoding="utf-8") == "# mine\n"
    (tmp_path / "tests" / "conftest.py").unlink()
    assert main(["init", "tests"]) == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider", "--simloop-seed=1"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout and "1 scenario replay in 2 tests" in out.stdout
