"""``simloop serve`` and ``simloop mcp``: a scenario's world for a loop in another process.

``serve`` puts the simulated API (and, with ``--mcp``, the tools) on a loopback socket until Ctrl-C or
SIGTERM; ``mcp`` serves the tools to an MCP client over stdio.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

__all__ = ["mcp_command", "serve"]


def _wait_for_interrupt() -> None:
    """Block until Ctrl-C or SIGTERM (a seam the tests replace)."""
    threading.Event().wait()


class _Terminated(Exception):
    """SIGTERM arrived: stop serving as on Ctrl-C, so the transcript is still written."""


@contextmanager
def _sigterm_stops() -> Iterator[None]:
    """While serving, SIGTERM (what `kill`, systemd and container runtimes send) stops like Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def stop(signum: int, frame: object) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command()
@click.option(
    "--scenario",
    "scenario_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The scenario file whose simulated API to serve.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to bind (both ports). Anything but loopback makes the API and the tools reachable from "
    "other machines: simloop warns on stderr and in every response's x-simloop-warning header.",
)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=0,
    show_default=True,
    help="The port to bind; 0 picks a free one.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The seed of the run (ids, retry jitter).")
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="On stop (Ctrl-C or SIGTERM), write the session's transcript (JSONL; times are real seconds) here.",
)
@click.option(
    "--mcp",
    is_flag=True,
    help="Also serve the scenario's tools (faults and ledger included) over MCP streamable HTTP; its URL is the "
    "second line of stdout (needs pip install 'simloop[mcp]').",
)
def serve(scenario_path: str, host: str, port: int, seed: int, trace: str | None, mcp: bool) -> int:
    """Serve a scenario's simulated API on a loopback socket until Ctrl-C (or SIGTERM): both wires, one world.

    Prints the base URL alone on the first line of stdout, for loops in other processes or languages: for
    the anthropic SDKs set ANTHROPIC_BASE_URL to it (the Messages API); for the openai SDKs set
    OPENAI_BASE_URL to it plus /v1 (Chat Completions) and OPENAI_API_KEY to anything. Any API key is
    accepted; stderr shows the lines to export. The server answers at once (real time): scripted latencies
    are reported in the x-envoy-upstream-service-time header, not waited out.

    With --mcp the scenario's tools are served too, over MCP streamable HTTP (the URL on the second line of
    stdout; set SIMLOOP_MCP_URL to it) and as plain JSON at POST BASE_URL/simloop/tools/NAME; every tool call
    lands in the transcript matched to the tool_use it answers.

    Example: simloop serve --scenario scenarios/outage.yaml --port 0

    Example: simloop serve --scenario scenarios/happy-path.yaml --mcp
    """
    from simloop.scenario import load_scenario
    from simloop.wire.loopback import KEPT_TEXT, export_lines
    from simloop.wire.loopback import serve as serve_loopback

    scenario = load_scenario(scenario_path)
    if mcp:
        from simloop.mcp import require_mcp

        require_mcp()
    how = ""
    # SIGTERM is handled before the base URL is printed: a client may stop the server as soon as it reads it
    server = None
    with _sigterm_stops():
        try:
            server = serve_loopback(scenario, host=host, port=port, seed=seed, mcp=mcp, max_kept_text=KEPT_TEXT)
            with server:
                warning = getattr(server, "warning", None)
                if warning is not None:
                    click.echo(f"simloop: WARNING: {warning}", err=True)
                click.echo(server.base_url)
                mcp_url = getattr(server, "mcp_url", None)
                if mcp_url:
                    click.echo(mcp_url)
                sys.stdout.flush()
                exports = "".join(f"\n  {line}" for line in export_lines(server))
                click.echo(f"simloop: serving scenario {scenario.name!r}; Ctrl-C stops{exports}", err=True)
                _wait_for_interrupt()
        except KeyboardInterrupt:
            pass
        except _Terminated:
            how = " (SIGTERM)"
    if server is None:  # stopped while starting: nothing was served
        click.echo(f"simloop: stopped{how} before serving", err=True)
        return 0
    transcript = server.transcript
    requests = len(transcript.requests)
    click.echo(f"simloop: stopped{how} after {requests} request(s)", err=True)
    for error in getattr(server, "errors", []):
        click.echo(f"simloop: a request was answered with a simloop 500: {error}", err=True)
    if trace:
        click.echo(f"transcript written to {transcript.write(trace)}", err=True)
    return 0


@click.command(name="mcp")
@click.option(
    "--scenario",
    "scenario_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The scenario file whose tools to serve.",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    default=None,
    help="When the client disconnects, write the tool executions (JSONL transcript; real seconds) here.",
)
def mcp_command(scenario_path: str, trace: str | None) -> int:
    """Serve a scenario's tools as an MCP server over stdio (for an MCP client that starts its servers).

    Every tools/call runs the scenario's tool with its faults (raise, timeout, slow, huge_output,
    commit_then_raise) and is written to the execution ledger; a failure is answered as an MCP tool error.
    Nothing but MCP is written to stdout. Needs pip install 'simloop[mcp]'.

    Example: simloop mcp --scenario scenarios/happy-path.yaml --trace tools.jsonl
    """
    from simloop.mcp import require_mcp, serve_stdio, tool_server
    from simloop.scenario import load_scenario
    from simloop.tools import ToolBox
    from simloop.transcript import Header, Transcript

    require_mcp()
    scenario = load_scenario(scenario_path)
    transcript = Transcript(header=Header(scenario=scenario.name, seed=0, tools={t.name: t.kind for t in scenario.tools}))
    start = time.monotonic()
    tools = ToolBox(scenario, transcript, now=lambda: round(time.monotonic() - start, 6), sleep=lambda s: None)

    async def call(name: str, arguments: dict[str, Any], *, tool_use_id: str | None = None) -> str:
        return tools.run(name, arguments, tool_use_id=tool_use_id)

    serve_stdio(tool_server([t.schema_dict() for t in scenario.tools], call))
    if trace:
        click.echo(f"simloop mcp: {tools.executions} tool call(s); transcript written to {transcript.write(trace)}", err=True)
    return 0
