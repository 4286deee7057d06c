"""`engram-bench` (also `python -m engram_bench`): the commands by name and their errors.

`run` is engram_bench/run_command.py, `summary`, `capacity` and `export` engram_bench/show.py,
`compare` engram_bench/compare.py, `report` engram_bench/report_command.py, the device, sizing
and recipe commands runners/commands.py; `explore` starts the explorer and `serve` the bundled
server, each as a process of its own. The parsers are engram_bench/parser.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from common.console import output_console
from engram_bench import extras
from engram_bench.compare import cmd_compare
from engram_bench.errors import UserError
from engram_bench.parser import build_parser
from engram_bench.report_command import cmd_report
from engram_bench.run_command import cmd_run, exit_status
from engram_bench.show import cmd_capacity, cmd_export, cmd_summary
from harness.config import ConfigError
from harness.results.capacity_csv import CapacityCSVError
from harness.results.store import Store, StoreError
from harness.run.prompts import PromptFileError
from harness.wire.endpoint import EndpointError
from harness.wire.target import TargetError
from runners import commands as runner_commands
from runners import engines
from runners.engines import EngineFlagError, UnknownEngine
from runners.lifecycle import ServerDied, ServerStartError
from runners.profiles import UnknownDevice

EXIT_USAGE = 2


def cmd_explore(args: argparse.Namespace, console: Console) -> int:
    """Streamlit serves the app in this process's place (headless, loopback only)."""
    extras.require("explorer")
    if args.db.exists():  # a pipe, a foreign or a newer file: one sentence here, not a page
        with Store(args.db, lock_timeout_s=10).read_only():
            pass
    spec = importlib.util.find_spec("explorer")
    assert spec is not None and spec.origin is not None  # explorer ships with the package
    app = Path(spec.origin).parent / "app.py"
    os.environ["ENGRAM_BENCH_DB"] = str(args.db)
    os.execv(sys.executable, [
        sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.port", str(args.port),
        "--browser.gatherUsageStats", "false"])
    return 0  # not reached


COMMANDS: dict[str, Callable[[argparse.Namespace, Console], int]] = {
    "run": cmd_run, "summary": cmd_summary, "compare": cmd_compare, "capacity": cmd_capacity,
    "export": cmd_export, "explore": cmd_explore, "report": cmd_report,
    **runner_commands.COMMANDS}


def serve(argv: list[str]) -> int:
    """The default engine's server in this process's place: it runs torch, which the harness
    never imports, so serve is its own process."""
    engine = engines.DEFAULT
    assert engine.serve_module is not None  # the default engine is one this package serves
    if engine.extra:
        extras.require(engine.extra)
    os.execv(sys.executable, [sys.executable, "-m", engine.serve_module, *argv])
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["serve"]:
            return serve(argv[1:])
        args = build_parser().parse_args(argv)
        console = output_console()
        return COMMANDS[args.command](args, console)
    except (extras.MissingExtra, UserError, ConfigError, EndpointError, StoreError, TargetError,
            CapacityCSVError, UnknownDevice, ServerStartError, ServerDied,
            runner_commands.CommandError, PromptFileError, EngineFlagError, UnknownEngine) as exc:
        print(f"engram-bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        print("engram-bench: interrupted", file=sys.stderr)
        return exit_status(exc)
