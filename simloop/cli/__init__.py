"""The ``simloop`` command: verify a loop, replay scenario files, look at a run, serve the simulated API.

::

    simloop demo
    simloop scenarios --copy scenarios
    simloop verify examples.correct_sync:drive --max-examples 200 --seed 0
    simloop run scenarios/ --drive examples.correct_sync:drive --trace traces/
    simloop show traces/stuck-search.jsonl
    simloop report traces/stuck-search.jsonl -o report.html
    simloop serve --scenario scenarios/outage.yaml --port 0
    simloop convert recorded.yaml -o scenario.yaml

Exit codes: 0 clean, 1 invariant violations, 2 usage errors (bad flags, a drive that cannot be
imported, a malformed scenario or transcript file).

One module per command or family: `verify` (verify), `run` (run), `show` (show, report), `serve`
(serve, mcp), `convert` (convert), `library` (demo, scenarios, init; the ``init`` skeleton is package
data under ``templates/``).  What several commands share is in `_options` (caps, option types, the
drive, the console) and `_stopping` (SIGTERM ends the commands' processes); `_main` puts the group
together and ends the process.

rich is imported only by the commands that print with it, and the simulator's modules by the commands
that run it (``import simloop`` never imports rich or this package).
"""

from __future__ import annotations

from simloop.cli import _options
from simloop.cli._main import EXIT_HOOKS_S as EXIT_HOOKS_S  # (docs/design.md: Runs end, and stay in the simulator)
from simloop.cli._main import cli, main
from simloop.cli._options import load_drive

__all__ = ["cli", "load_drive", "main"]

# The caps under the names they had in the one-module CLI: tests check that they agree with the scenario
# format's (simloop._loading.fileguard, simloop._claims) and with simloop.command's, which the CLI does not import.
_MAX_COUNT = _options.MAX_COUNT
_MAX_DEADLINE_S = _options.MAX_DEADLINE_S
_MAX_TOKENS = _options.MAX_TOKENS
_LIMIT_NAMES = _options.LIMIT_NAMES
_MAX_TIMEOUT_S = _options.MAX_TIMEOUT_S
