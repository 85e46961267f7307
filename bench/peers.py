"""simloop beside the usual ways to fake the API in a test: the same 10-call loop, CPU time against the bare SDK.

Every contender runs `bench/overhead.py`'s loop (the real SDK, ``client.messages.create`` with the growing
history) and serves the same ten replies; each run sets itself up as a test would (a fresh `Sim`, a respx
router, a vcrpy cassette opened):

* ``bare``: `httpx2.MockTransport` serving the pre-rendered bytes (checks nothing; the reference);
* ``simloop``: a fresh `Sim` per run (`overhead.sim_run`: validates every request, records the transcript,
  runs the loop on the virtual clock);
* ``respx``: respx's router mocking httpx2's connection pool (respx mocks httpx; for httpx2 it needs the
  ``httpcore2`` mocker of ``pytest-httpx2``, both ``pip install respx pytest-httpx2``); checks nothing;
* ``vcrpy (json)``, ``vcrpy (yaml)``: vcrpy replaying a cassette of the ten calls (recorded here, on the
  mock transport), opened for each run (``pip install vcrpy``, a simloop dependency); checks the
  request's method and URL.

A contender whose package is not installed is skipped with its install line.  pytest-httpx cannot take part:
it patches ``httpx.HTTPTransport`` only, and the SDK sends through httpx2.  The contenders alternate run by
run, each first in turn (`floor.median_cpu`); the ratio is of the median CPU times (the process's: a `Sim`
runs the loop on a worker thread).

    python bench/peers.py [--rounds 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic
import httpx2
import overhead
from floor import median_cpu

URL = "https://api.anthropic.com/v1/messages"


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def respx_run() -> Callable[[], object]:
    """The loop against respx's router (a fresh one per run), through httpx2's real transport."""
    import httpx
    import pytest_httpx2._plugin  # type: ignore[import-not-found, unused-ignore]  # noqa: F401 - respx's "httpcore2" mocker
    import respx  # type: ignore[import-not-found, unused-ignore]

    bodies = overhead.bodies_of_the_loop()
    client = anthropic.Anthropic(api_key="k", http_client=httpx2.Client())

    def run() -> int:
        served = iter(bodies)

        def reply(request: httpx.Request) -> httpx.Response:  # (respx hands httpx's objects, even for httpx2)
            return httpx.Response(200, headers={"content-type": "application/json"}, content=next(served))

        with respx.mock(using="httpcore2", assert_all_called=False) as router:
            router.post(URL).mock(side_effect=reply)
            return overhead.loop(client)

    return run


def vcrpy_run(directory: Path, serializer: str) -> Callable[[], object]:
    """The loop replaying a vcrpy cassette of its ten calls (opened per run), through httpx2's real transport."""
    import vcr  # type: ignore[import-untyped, unused-ignore]

    cassette = str(directory / f"loop.{serializer}")
    with vcr.use_cassette(cassette, serializer=serializer, record_mode="all"):
        overhead.loop(overhead.bare_client())  # (recorded on the mock transport, which vcrpy patches too)
    client = anthropic.Anthropic(api_key="k", http_client=httpx2.Client())

    def run() -> int:
        with vcr.use_cassette(cassette, serializer=serializer, record_mode="none"):
            return overhead.loop(client)

    return run


def contenders(directory: Path) -> tuple[dict[str, Callable[[], object]], list[str]]:
    """The runs that can take part here, and a line for each that cannot."""
    client = overhead.bare_client()
    runs: dict[str, Callable[[], object]] = {"bare": lambda: overhead.loop(client), "simloop": overhead.sim_run}
    skipped = []
    if missing := _missing("respx", "pytest_httpx2"):
        skipped.append(f"respx: skipped, not installed ({', '.join(missing)}): pip install respx pytest-httpx2")
    else:
        runs["respx"] = respx_run()
    if _missing("vcr", "yaml"):
        skipped.append("vcrpy: skipped, not installed: pip install vcrpy")
    else:
        runs["vcrpy (json)"] = vcrpy_run(directory, "json")
        runs["vcrpy (yaml)"] = vcrpy_run(directory, "yaml")
    skipped.append("pytest-httpx: cannot take part (it mocks httpx.HTTPTransport; the SDK sends through httpx2)")
    return runs, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="rounds of one run of each contender, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs, skipped = contenders(Path(tmp))
        for name, run in runs.items():
            assert run() == overhead.STEPS, f"{name} did not make the loop's {overhead.STEPS} calls"
        t = median_cpu(runs, args.rounds)
    print(f"the same {overhead.STEPS}-call loop, CPU per run (median of {args.rounds} alternating rounds):")
    for name, seconds in sorted(t.items(), key=lambda item: item[1]):
        print(f"  {name:<14} {seconds * 1e6:7.0f} us  {seconds / t['bare']:5.2f}x bare  "
              f"({(seconds - t['bare']) * 1e6 / overhead.STEPS:+5.0f} us a call)")
    for line in skipped:
        print(f"  {line}")


if __name__ == "__main__":
    main()
