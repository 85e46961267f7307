"""The README's sample outputs, regenerated from real runs: ``make readme`` writes them, ``--check`` compares.

Each sample is the fenced block right after a ``<!-- sample: NAME -->`` line of README.md:

* ``demo``: what ``python -m examples.demo`` (``make demo``) prints;
* ``quickstart``: what ``pytest quickstart --simloop-seed=2`` prints for the Quick start's two files, taken from
  the README itself and run in a fresh folder outside the checkout (as a user runs them after ``pip install``).

A run's output is long; the sample keeps its telling lines (`demo_sample`, `quickstart_sample` say which) and
wraps lines at `WIDTH`.  What differs from run to run (real durations) is normalised before a comparison
(`normalise`), so ``tests/test_readme_samples.py`` fails only when a sample no longer matches what simloop prints.

    python bench/readme_samples.py           # rewrite README.md's samples
    python bench/readme_samples.py --check   # exit 1, with a diff, when they are stale
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = 118
SEED = 2  # the Quick start's session seed
_MARK = re.compile(r"^<!-- sample: (?P<name>[a-z]+) -->\n```\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_DURATION = re.compile(r"\b\d+\.\d+s\b(?! +\d)")  # a real duration ("in 3.8s"), not a timeline's virtual time column


def normalise(text: str) -> str:
    """``text`` without what changes between runs of the same seeds: real durations."""
    return "\n".join(_DURATION.sub("N.Ns", line) if " in " in line else line for line in text.splitlines())


def _wrap(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if len(line) <= WIDTH or line.startswith(("replay it", "re-run the test")):  # a command stays whole
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.extend(textwrap.wrap(line, width=WIDTH, subsequent_indent=indent + "  ", break_long_words=False,
                                 break_on_hyphens=False))
    return out


def _elide_scenario(lines: list[str]) -> list[str]:
    """The minimal scenario's YAML down to its ``model:`` and what follows (its task and tools are the run's)."""
    out: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("minimal scenario"):
            out += [line, "  ..."]
            skipping = True
            continue
        if skipping and line.startswith("  model:"):
            skipping = False
        if skipping and line.startswith("  "):
            continue
        skipping = False
        out.append(line)
    return out


def demo_sample(output: str) -> str:
    """``make demo``'s output as the README shows it: the rules, the search's advice and its timing left out."""
    lines = [line for line in output.splitlines() if not set(line) <= {"-"} or not line]
    lines = [line for line in lines if not line.startswith(("or re-run the search", "(found and shrunk"))]
    lines = [re.sub(r"(invariants hold: (?:[a-z_]+, ){4})[a-z_, ]+$", r"\1...", line) for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(_wrap(_elide_scenario(lines)))


def quickstart_sample(output: str) -> str:
    """The Quick start's pytest output as the README shows it: the seed header, the assertion, the simloop
    section and the summary line."""
    lines = output.splitlines()
    header = next(line for line in lines if line.startswith("simloop: seed="))
    error = next(line for line in lines if re.match(r"E +simloop\.errors\.InvariantViolation", line))
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"-+ simloop -+", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("====="))
    section = [line for line in lines[start:end] if line]
    if len(error) > WIDTH:
        error = error[: WIDTH - 1] + "…"
    return "\n".join([header, "...", error, *_wrap(_elide_scenario(section))])


def demo_output() -> str:
    """``python -m examples.demo``, run in the checkout."""
    return _run([sys.executable, "-m", "examples.demo"], cwd=ROOT)


def quickstart_output() -> str:
    """The README's two Quick start files, run with pytest in a fresh folder at `SEED`."""
    text = README.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="simloop-readme-") as tmp:
        folder = Path(tmp) / "quickstart"
        folder.mkdir()
        for match in re.finditer(r"```python\n# quickstart/(\S+)\n(.*?)```", text, re.DOTALL):
            (folder / match.group(1)).write_text(match.group(2), encoding="utf-8")
        return _run([sys.executable, "-m", "pytest", "quickstart", "-p", "no:cacheprovider",
                     f"--simloop-seed={SEED}"], cwd=Path(tmp))


def _run(command: list[str], *, cwd: Path) -> str:
    env = {**os.environ, "COLUMNS": "80", "PYTHONHASHSEED": "0"}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    return done.stdout


SAMPLES: dict[str, tuple[Callable[[], str], Callable[[str], str]]] = {
    "demo": (demo_output, demo_sample),
    "quickstart": (quickstart_output, quickstart_sample),
}


def samples() -> dict[str, str]:
    """Every sample, from a real run of each."""
    return {name: shape(run()) for name, (run, shape) in SAMPLES.items()}


def written(readme: str) -> dict[str, str]:
    """The samples README.md holds now."""
    return {m.group("name"): m.group("body").rstrip("\n") for m in _MARK.finditer(readme)}


def rewrite(readme: str, fresh: dict[str, str]) -> str:
    """README.md with each marked block replaced by its fresh sample."""
    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        body = fresh.get(name, m.group("body").rstrip("\n"))
        return f"<!-- sample: {name} -->\n```\n{body}\n```"

    return _MARK.sub(block, readme)


def stale(readme: str, fresh: dict[str, str]) -> str:
    """A diff of each sample README.md holds against its fresh one (normalised); empty when all match."""
    held = written(readme)
    out: list[str] = []
    for name, sample in fresh.items():
        if name not in held:
            out.append(f"README.md has no '<!-- sample: {name} -->' block")
            continue
        a, b = normalise(held[name]).splitlines(), normalise(sample).splitlines()
        out += difflib.unified_diff(a, b, f"README.md ({name})", f"a real run ({name})", lineterm="")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    readme = README.read_text(encoding="utf-8")
    fresh = samples()
    if "--check" in argv:
        diff = stale(readme, fresh)
        if diff:
            print(diff)
            print("\nthe README's samples are stale: run `make readme` (python bench/readme_samples.py)")
            return 1
        return 0
    README.write_text(rewrite(readme, fresh), encoding="utf-8")
    print(f"wrote {len(fresh)} sample(s) to {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
