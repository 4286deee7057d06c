"""`engram-bench agent`'s flags and its run. `engram-bench agent` comes here straight from
engram_bench/__main__.py, without the other commands' imports (duckdb, the harness): the
agent lives beside the server for hours, in 24 MB of RSS instead of 50. The full CLI's parser
adds the same flags (runners/commands.py), so --help and the CLI reference show them."""

from __future__ import annotations

import argparse
import sys

from common.flag_types import positive_int
from common.help_format import DefaultsHelp
from runners.host_agent import residency
from runners.host_agent.agent import AUTO, DEFAULT_PORT, Agent, AgentConfig, AgentError
from runners.host_agent.server import BindError
from runners.host_agent.tables import TableError

HELP = "serve the serving host's kernel counters at /metrics (run it there)"
DESCRIPTION = (
    "Reads the kernel on the serving host (the process tree's faults, reads and memory, each "
    "table file's page-cache residency, the disks under them, the host's page cache and "
    "pressure stall) at each scrape and serves them at /metrics in Prometheus text, on "
    "127.0.0.1 unless --host says otherwise. See docs/host-agent.md.")
EXIT_USAGE = 2
ERRORS = (AgentError, TableError, BindError)  # what a user can get wrong: one sentence, exit 2


def port_number(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, not {text!r}")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--pid", type=positive_int,
                        help="the serving process (its children are included)")
    target.add_argument("--match", metavar="TEXT",
                        help="every process whose command line holds TEXT, and their children")
    parser.add_argument("--table", action="append", metavar="PATH",
                        help="a table file, or a folder of them (its regular files); "
                        "repeatable")
    parser.add_argument("--residency", choices=(AUTO, *residency.METHODS), default=AUTO,
                        help="how residency is read: auto is cachestat where the kernel has "
                        "it (Linux 6.5+), else mincore")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to serve on (another host can scrape only if you say "
                        "so)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help="port to serve on; 0 picks a free one (the URL is printed)")


def serve(args: argparse.Namespace) -> int:
    """Serves until SIGINT, SIGTERM or SIGHUP; 0 then. Raises one of ERRORS for bad input."""
    agent = Agent(AgentConfig(args.pid, args.match, args.table or [], args.residency,
                              args.host, args.port))
    for line in agent.banner():
        print(line, flush=True)
    agent.server.serve_until_signalled()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="engram-bench agent", description=DESCRIPTION,
                                     formatter_class=DefaultsHelp)
    add_arguments(parser)
    try:
        return serve(parser.parse_args(argv))
    except ERRORS as exc:
        print(f"engram-bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
