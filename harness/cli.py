"""`engram-bench` (also `python -m harness`): run, summary, capacity, export; the device,
sizing and recipe commands come from runners/commands.py; `serve` starts the bundled server."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from harness import aio
from harness.config import DEFAULT_LEVELS, MODES, ConfigError, RunConfig, parse_levels
from harness.endpoint import API_PATHS, Endpoint, EndpointError
from harness.metrics import STATISTICS, Targets, stats_by_level
from harness.prompts import BUILTIN, PromptFileError, load
from harness.report import (
    CapacityCSVError,
    capacity_object,
    print_capacity,
    print_summary,
    read_level_csv,
    summarise,
)
from harness.store import DEFAULT_DB, Store, StoreError
from harness.target import TargetError
from runners import commands as runner_commands
from runners.commands import positive_int
from runners.lifecycle import BundledServer, ServerStartError
from runners.profiles import PROFILES, UnknownDevice, profile

EXIT_USAGE = 2
EXIT_ABORTED = 130


class UserError(Exception):
    """Anything the user can fix; printed as one sentence, exit 2."""


def _levels(text: str) -> tuple[int, ...]:
    try:
        return parse_levels(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(text: str) -> float:
    """The flag's value, NaN when it is no number (every range check then fails)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _cache_ratio(text: str) -> float:
    if not 0 < (value := _number(text)) <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], not {text!r}")
    return value


def _positive_float(text: str) -> float:
    if not 0 < (value := _number(text)) < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def _add_target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tps-min", type=float, default=20.0, help="TPS per request target")
    p.add_argument("--ttft-max-ms", type=float, default=1000.0, help="TTFT target in ms")
    p.add_argument("--statistic", choices=STATISTICS, default="mean",
                   help="mean, or pNN: TTFT at pNN and TPS at p(100-NN)")
    p.add_argument("--chat-factor", type=float, default=4.0)
    p.add_argument("--agentic-factor", type=float, default=1.5)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engram-bench",
        description="Concurrency sweeps of OpenAI-compatible servers, stored in DuckDB.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="sweep a server through concurrency levels")
    run.add_argument("--url", help="OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    run.add_argument("--model", help="model name (default: the server's first model)")
    run.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    run.add_argument("--api", choices=tuple(API_PATHS), default="chat")
    run.add_argument("--device", help=f"device profile: {', '.join(PROFILES)}; without --url "
                     "the bundled server is started as that device would hold its table")
    run.add_argument("--placement", default="",
                     help="table placement: of the bundled server, or a label for --url")
    run.add_argument("--io", choices=("mmap", "direct"), help="bundled server: nvme I/O mode")
    run.add_argument("--table-gb", type=float, help="bundled server: table size in GiB")
    run.add_argument("--preset", default="qwen-mini", help="bundled server: model preset")
    run.add_argument("--cache-ratio", type=_cache_ratio, metavar="R",
                     help="bundled server: share of the table the page cache may hold, in (0, 1]")
    run.add_argument("--page-cache-gb", type=_positive_float, metavar="G",
                     help="bundled server: page-cache budget for the table in GiB")
    run.add_argument("--cache-state", choices=("cold", "warm"),
                     help="bundled server: table start state (server default: cold on nvme)")
    run.add_argument("--decode", choices=("sample", "replay"),
                     help="bundled server: output tokens (default replay: a natural token stream)")
    run.add_argument("--engine", default="", help="engine label (default: detected)")
    run.add_argument("--levels", type=_levels, help="concurrency levels, e.g. 1,2,4,8")
    run.add_argument("--rounds", type=positive_int, default=10)
    run.add_argument("--mode", choices=MODES, default="closed")
    run.add_argument("--input-tokens", type=positive_int, default=128)
    run.add_argument("--output-tokens", type=positive_int, default=128)
    run.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    run.add_argument("--warmup", type=int, default=0, help="unstored requests before the sweep")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--prompts", metavar="words|text|FILE",
                     help="words: random common words (default with --url); text: natural prose "
                     "(default for the bundled server); FILE: .jsonl prompts sent at their own "
                     "lengths ({\"prompt\"}, {\"messages\"} or ShareGPT {\"conversations\"}), or "
                     "a text file cut like text")
    run.add_argument("--label", default="")
    run.add_argument("--db", type=Path, default=DEFAULT_DB)
    run.add_argument("--resume", metavar="RUN_ID", help="run only the missing rounds of a run")
    run.add_argument("--no-progress", action="store_true")
    _add_target_flags(run)

    summary = sub.add_parser("summary", help="per-level table, Max C and users of a run")
    summary.add_argument("run_id", nargs="?", default="latest")
    summary.add_argument("--db", type=Path, default=DEFAULT_DB)
    _add_target_flags(summary)

    cap = sub.add_parser("capacity", help="apply the capacity rules to a per-level CSV")
    cap.add_argument("--csv", type=Path, required=True,
                     help="columns run, concurrency, mean_ttft_ms, mean_tps [, errors]")
    _add_target_flags(cap)

    export = sub.add_parser("export", help="write per-level and per-request files")
    export.add_argument("--run", dest="run_id", help="one run id or 'latest' (default: all)")
    export.add_argument("--format", choices=("csv", "parquet"), default="csv")
    export.add_argument("--out", type=Path, default=Path("results/exports"))
    export.add_argument("--db", type=Path, default=DEFAULT_DB)

    runner_commands.add_parsers(sub)
    sub.add_parser("serve", help="start the bundled Engram server (see `serve --help`)",
                   add_help=False)
    return parser


def _targets(args: argparse.Namespace) -> Targets:
    try:
        return Targets(args.tps_min, args.ttft_max_ms, args.statistic, args.chat_factor,
                       args.agentic_factor)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def bundled_server_args(args: argparse.Namespace, device: str, placement: str) -> tuple[str, ...]:
    """`engram-bench serve` flags for a bundled run; its decode defaults to replay here, and
    flags left unset are not passed, so the server's own defaults hold."""
    optional = (("--io", args.io), ("--table-size-gb", args.table_gb),
                ("--cache-ratio", args.cache_ratio), ("--page-cache-gb", args.page_cache_gb),
                ("--cache-state", args.cache_state), ("--decode", args.decode or "replay"))
    return ("--device", device, "--preset", args.preset, "--placement", placement,
            *(item for flag, value in optional if value is not None
              for item in (flag, repr(value) if isinstance(value, float) else value)))


def _prompt_spec(args: argparse.Namespace) -> str:
    """words, text, or the file as an absolute path (a resume may start elsewhere)."""
    spec = args.prompts or ("words" if args.url else "text")
    return spec if spec in BUILTIN else str(Path(spec).expanduser().absolute())


def config_for(args: argparse.Namespace, store: Store) -> tuple[RunConfig, str | None]:
    """A new run's config from flags, or a resumed run's stored config (URL may change)."""
    if args.resume:
        run = store.run(args.resume)
        if run["status"] == "complete":
            raise UserError(f"run {run['run_id']} is already complete; nothing to resume")
        config = RunConfig.from_json_dict(json.loads(run["config"]))
        if args.url:
            config = replace(config, url=args.url, server_args=())
        return config, run["run_id"]
    levels = args.levels or DEFAULT_LEVELS
    placement = args.placement
    server_args: tuple[str, ...] = ()
    if not args.url:
        if not args.device:
            raise UserError("give --device to sweep the bundled Engram server, or --url of an "
                            "OpenAI-compatible server, e.g. --url http://127.0.0.1:8000/v1")
        prof = profile(args.device)
        levels = args.levels or prof.default_levels
        placement = placement or prof.table_placement
        server_args = bundled_server_args(args, prof.name, placement)
    config = RunConfig(
        url=args.url or "", model=args.model or "", api=args.api, levels=levels,
        rounds=args.rounds, mode=args.mode, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, timeout_s=args.timeout, warmup=args.warmup,
        seed=args.seed, label=args.label, device=args.device or "", engine=args.engine,
        table_placement=placement, server_args=server_args, prompts=_prompt_spec(args),
    )
    return config, None


@contextlib.contextmanager
def _target(config: RunConfig, console: Console) -> Iterator[str]:
    """The URL to sweep: the given one, or a bundled server started (and stopped) here."""
    if not config.server_args:
        yield config.url
        return
    console.print(f"starting the bundled Engram server: {' '.join(config.server_args)}",
                  highlight=False)
    with BundledServer(config.server_args) as server:
        console.print(f"bundled server up at {server.url} (log {server.log_path})",
                      highlight=False)
        yield server.url


def _interrupt_on_sigterm() -> None:
    """`kill` of a bench behaves like Ctrl-C: the run is marked aborted, the server stopped."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from harness.progress import LevelProgress
    from harness.session import execute, new_run_id

    targets = _targets(args)
    store = Store(args.db)
    store.initialise()
    config, resume_id = config_for(args, store)
    prompts = load(config.prompts, config.seed)  # a bad file stops here: nothing stored
    run_id = resume_id or new_run_id()
    progress = LevelProgress(enabled=not args.no_progress)
    status = Console(stderr=True)
    _interrupt_on_sigterm()
    try:
        with _target(config, status) as url:
            config = replace(config, url=url)
            endpoint = Endpoint(config.url, config.api, args.api_key)
            aio.run(execute(config, endpoint, store, progress, run_id, resume=bool(resume_id),
                            prompts=prompts))
    except KeyboardInterrupt:
        progress.stop()
        print(f"engram-bench: aborted; run {run_id} keeps its finished rounds "
              f"(continue with --resume {run_id})", file=sys.stderr)
        return EXIT_ABORTED
    return _show(store, run_id, targets, args.json, console)


def _show(store: Store, run_id: str, targets: Targets, as_json: bool, console: Console) -> int:
    run = store.run(run_id)
    records = store.requests(run["run_id"])
    summary = summarise(run, stats_by_level(records, run["output_tokens"]), records, targets)
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        print_summary(summary, console)
    return 0


def cmd_summary(args: argparse.Namespace, console: Console) -> int:
    if not args.db.exists():
        raise UserError(f"{args.db} does not exist yet: start a run with `make bench`")
    return _show(Store(args.db), args.run_id, _targets(args), args.json, console)


def cmd_capacity(args: argparse.Namespace, console: Console) -> int:
    result = capacity_object(read_level_csv(args.csv), _targets(args))
    if args.json:
        print(json.dumps(result))
    else:
        print_capacity(result, console)
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    if not args.db.exists():
        raise UserError(f"{args.db} does not exist yet: start a run with `make bench`")
    for path in Store(args.db).export(args.out, args.run_id, args.format):
        console.print(f"wrote {path}", highlight=False)
    return 0


COMMANDS = {"run": cmd_run, "summary": cmd_summary, "capacity": cmd_capacity,
            "export": cmd_export, **runner_commands.COMMANDS}


def serve(argv: list[str]) -> int:
    """The server runs torch; the harness never imports it, so serve is its own process."""
    os.execv(sys.executable, [sys.executable, "-m", "runners.engram", *argv])
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    args = build_parser().parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    try:
        return COMMANDS[args.command](args, console)
    except (UserError, ConfigError, EndpointError, StoreError, TargetError, CapacityCSVError,
            UnknownDevice, ServerStartError, runner_commands.CommandError,
            PromptFileError) as exc:
        print(f"engram-bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("engram-bench: interrupted", file=sys.stderr)
        return EXIT_ABORTED
