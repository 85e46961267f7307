"""From a wheel installed outside the checkout: `simloop demo`, the Quick start and the README's CLI lines.

How, and why this way:

* the wheel is built from a copy of the sources in a temporary folder (the build's ``build/`` folder never
  lands in the checkout), with no build isolation: setuptools and wheel come from the ``dev`` extra, so the
  build needs no network;
* it is installed with ``--no-deps --no-index`` into a fresh venv in a temporary folder; that venv gets the
  project venv's dependencies (the SDK, Hypothesis, pytest...) through one ``.pth`` path line.
  ``venv --system-site-packages`` would not do: a venv made from the project venv's interpreter inherits
  the *base* interpreter's packages, not the project venv's.  A ``.pth`` path line only appends the folder
  to ``sys.path`` (the editable install's own ``.pth`` hook there is not run), so the wheel's simloop, first
  on the path, is the one imported, and its console script and pytest entry point are the ones used;
* every command runs with the temporary user folder as its working directory and no PYTHONPATH, so nothing
  of the checkout is importable.

Marked ``wheel``: ``-m "not wheel"`` deselects it, and ``SIMLOOP_SKIP_WHEEL=1`` skips it (where the
project venv has no setuptools>=77, e.g. installed without the dev extra).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

pytestmark = [
    pytest.mark.wheel,
    pytest.mark.skipif(os.environ.get("SIMLOOP_SKIP_WHEEL") == "1", reason="SIMLOOP_SKIP_WHEEL=1 asks to skip building and installing the wheel (slow: a fresh venv)"),
]


def _setuptools_ok() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


class Installed:
    """A fresh venv with the wheel installed, and a user folder outside the checkout to run commands in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.home = root / "user"
        self.home.mkdir()
        self.python = self.venv / "bin" / "python"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["COLUMNS"] = "120"

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), cwd=self.home, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def simloop(self, line: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.run(*line.split(), timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if not _setuptools_ok():
        pytest.skip("building the wheel offline needs setuptools>=77 in this venv: pip install -e '.[dev]'")
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".*")
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("simloop", "pytest_plugin", "examples", "scenarios"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    dist = root / "dist"
    pip = [sys.executable, "-m", "pip"]
    built = subprocess.run(
        [*pip, "wheel", "--quiet", "--no-cache-dir", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(source)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert "Warning" not in built.stdout + built.stderr, f"the build warned (pyproject.toml's packages?):\n{built.stderr}"
    [wheel] = dist.glob("simloop-*.whl")

    env = Installed(root)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env.venv)], check=True, timeout=120)
    purelib = subprocess.run(
        [str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(purelib, "_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    done = subprocess.run(
        [*pip, "--python", str(env.python), "install", "--quiet", "--no-cache-dir", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return env


def _readme_cli_lines() -> list[str]:
    section = README.split("## The command line", 1)[1]
    block = section.split("```", 2)[1]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("simloop ")]


def test_the_wheel_ships_the_loops_the_scenarios_and_py_typed(installed: Installed) -> None:
    code = (
        "import pathlib, simloop, simloop.examples.correct_sync as c; from simloop._library import scenarios_dir; "
        "p = pathlib.Path(simloop.__file__).parent; "
        "print(p.is_relative_to(pathlib.Path.cwd().parent), (p / 'py.typed').is_file(), scenarios_dir() == p / 'scenarios', "
        "len(list(scenarios_dir().rglob('*.yaml'))), callable(c.drive))"
    )
    out = installed.run(str(installed.python), "-c", code)
    assert out.returncode == 0, out.stderr
    shipped = sum(1 for _ in (ROOT / "scenarios").rglob("*.yaml"))
    assert out.stdout.split() == ["True", "True", "True", str(shipped), "True"]
    # every reference loop imports from the installed package (relative imports inside examples/)
    modules = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if p.stem != "__init__")
    code = "import importlib; " + "; ".join(f"importlib.import_module('simloop.examples.{m}')" for m in modules)
    out = installed.run(str(installed.python), "-c", code)
    assert out.returncode == 0, out.stderr
    # the loops in other languages (`simloop verify --command`) ship beside them, byte for byte
    others = sorted(p.name for p in (ROOT / "examples" / "any_language").iterdir() if p.suffix in (".sh", ".ts", ".py"))
    assert others == ["agent.sh", "agent.ts", "openai_agent.py", "openai_agent.ts"]
    code = ("import pathlib, simloop.examples as e; d = pathlib.Path(e.__file__).parent / 'any_language'; "
            "print(sorted(p.name for p in d.iterdir() if p.name != '__pycache__'))")  # (pip compiles the .py)
    out = installed.run(str(installed.python), "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(others)
    code = ("import pathlib, sys, simloop.examples as e; d = pathlib.Path(e.__file__).parent / 'any_language'; "
            "sys.stdout.buffer.write(b''.join((d / n).read_bytes() for n in sys.argv[1:]))")
    out = subprocess.run([str(installed.python), "-c", code, *others], cwd=installed.home, env=installed.env,
                         capture_output=True, check=False, timeout=60)
    assert out.stdout == b"".join((ROOT / "examples" / "any_language" / n).read_bytes() for n in others)


def test_simloop_demo_from_the_wheel(installed: Installed) -> None:
    out = installed.simloop("simloop demo")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all 17 invariants hold" in out.stdout
    assert re.search(r"written to \.simloop/failures/rerun_after_api_error-no_rerun-[0-9a-f]{8}\.yaml", out.stdout)
    assert "replay it: simloop run .simloop/failures/" in out.stdout


def test_every_cli_line_of_the_readme_runs_from_the_wheel(installed: Installed) -> None:
    lines = _readme_cli_lines()
    assert lines[0] == "simloop demo" and any(line.startswith("simloop serve") for line in lines)
    for line in lines:
        if line.startswith("simloop convert"):
            # needs a recorded cassette of one's own (the README says so); the command itself is there
            assert installed.simloop("simloop convert --help").returncode == 0
            continue
        if line.startswith("simloop serve"):
            server = subprocess.Popen(
                line.split(), cwd=installed.home, env=installed.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )
            assert server.stdout is not None
            base_url = server.stdout.readline().strip()
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=60)
            assert base_url.startswith("http://127.0.0.1:") and server.returncode == 0, err
            assert "simloop: stopped (SIGTERM) after 0 request(s)" in err
            continue
        out = installed.simloop(line)
        assert out.returncode == 0, f"{line}\n{out.stdout}\n{out.stderr}"
    assert (installed.home / "scenarios" / "happy-path.yaml").is_file()
    assert (installed.home / "run.jsonl").is_file() and (installed.home / "report.html").is_file()
    templates = ROOT / "simloop" / "cli" / "templates"  # `simloop init tests` wrote them from the wheel's package data
    for name in ("conftest.py", "simloop_drive.py", "test_agent_loop.py", "tools.yaml"):
        written = (installed.home / "tests" / name).read_text(encoding="utf-8")
        assert written == (templates / f"{name}.txt").read_text(encoding="utf-8"), name

    # the commands' own --help examples (show/report read a trace.jsonl; the verify line above wrote run.jsonl)
    shutil.copy(installed.home / "run.jsonl", installed.home / "trace.jsonl")
    for name in ("verify", "run", "show", "report", "scenarios", "init"):
        help_text = installed.simloop(f"simloop {name} --help").stdout
        example = " ".join(help_text.split("Example: ", 1)[1].split("\n\n", 1)[0].split())  # click wraps it
        for command in example.split(" && "):
            out = installed.simloop(command)
            assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"


def test_the_quick_start_from_the_wheel(installed: Installed) -> None:
    blocks = re.findall(r"```python\n(# quickstart/(\w+\.py)\n.*?)```", README, flags=re.DOTALL)
    assert [name for _, name in blocks] == ["conftest.py", "test_agent.py"]
    folder = installed.home / "quickstart"
    folder.mkdir()
    for text, name in blocks:
        (folder / name).write_text(text, encoding="utf-8")
    out = installed.run(str(installed.python), "-m", "pytest", "quickstart", "--simloop-seed=2", "-p", "no:cacheprovider")
    assert "1 failed, 1 passed" in out.stdout, out.stdout + out.stderr
    assert re.search(r"written to \.simloop/failures/assistant_not_appended-pairing-[0-9a-f]{8}\.yaml", out.stdout)
    assert "simloop: seed=2 (reproduce with --simloop-seed=2)" in out.stdout
    assert str(installed.venv) in installed.run(str(installed.python), "-c", "import pytest_simloop; print(pytest_simloop.__file__)").stdout
