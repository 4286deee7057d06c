"""The argument parsers of `engram-bench`: every command's flags, their value types and
defaults (the targets' from harness.results.metrics.Targets, --mode's and each mode's flags
from the modes' registry, --bundled from the managed engines'); docs/reference/cli.md is their
help."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common.flag_types import number as _number
from common.flag_types import positive_float as _positive_float
from common.flag_types import positive_int
from common.help_format import DefaultsHelp
from engram_bench.errors import UserError
from harness.config import (
    DEFAULT_LEVELS,
    MAX_TEMPERATURE,
    TABLE_STATES,
    ConfigError,
    check_run_id,
    parse_levels,
)
from harness.results.goodput import Slo, parse_slo
from harness.results.metrics import STATISTICS, Targets
from harness.results.peer_views import PEER_TOOLS
from harness.results.store import DEFAULT_DB
from harness.run import modes
from harness.wire import host_scrape
from harness.wire.endpoint import API_PATHS
from runners import commands as runner_commands
from runners import engines
from runners.profiles import PROFILES

TARGETS = Targets()  # the target flags' defaults


def _levels(text: str) -> tuple[int, ...]:
    try:
        return parse_levels(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_id(text: str) -> str:
    try:
        return check_run_id(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or auto, not {text!r}")
    return int(text)


def _temperature(text: str) -> float:
    if not 0 <= (value := _number(text)) <= MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"must be a number from 0 to {MAX_TEMPERATURE:g}, not {text!r}")
    return value


def _host_urls(text: str) -> tuple[str, ...]:
    try:
        return host_scrape.parse_urls(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _existing_file(text: str) -> str:
    """An absolute path (a resumed run may start elsewhere) to a file that exists."""
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return str(path)


def _add_target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tps-min", type=float, default=TARGETS.tps_min,
                   help="TPS per request target")
    p.add_argument("--ttft-max-ms", type=float, default=TARGETS.ttft_max_ms,
                   help="TTFT target in ms")
    p.add_argument("--statistic", choices=STATISTICS, default=TARGETS.statistic,
                   help="mean, or pNN: TTFT at pNN and TPS at p(100-NN)")
    p.add_argument("--ttft-of", default=TARGETS.ttft_of, metavar="first|output",
                   help="which first token the TTFT target judges: the first of any kind "
                        "(first, the published method) or the answer's, after any reasoning "
                        "(output: TTFO)")
    p.add_argument("--chat-factor", type=float, default=TARGETS.chat_factor,
                   help="chat users per Max C")
    p.add_argument("--agentic-factor", type=float, default=TARGETS.agentic_factor,
                   help="agentic users per Max C")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _slo(text: str) -> Slo:
    try:
        return parse_slo(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_goodput_flags(p: argparse.ArgumentParser) -> None:
    """Judged from the stored requests, so `run` and `summary` take them, not `capacity`."""
    p.add_argument("--slo", type=_slo, metavar="KEY=MS,...",
                   help="per-request objectives for goodput, any of ttft_ms, tpot_ms, e2e_ms "
                        "(e.g. ttft_ms=1000,tpot_ms=50): each level then reports the share of "
                        "its requests meeting all of them and such requests per second "
                        "(default: none)")
    p.add_argument("--min-goodput", type=float, metavar="SHARE",
                   help="a level passes only if at least this share of its requests met --slo "
                        "(e.g. 0.9), beside the TTFT and TPS targets (default: none, goodput "
                        "is reported, not judged)")


def _add_connection_flags(run: argparse.ArgumentParser) -> None:
    run.add_argument("--connect-timeout", type=_positive_float, default=10.0, metavar="S",
                     help="seconds to open a connection (TCP and TLS)")
    run.add_argument("--stall-timeout", type=_positive_float, default=60.0, metavar="S",
                     help="seconds the stream may go silent between two chunks after the "
                          "first; the wait for the first byte (queueing) is bounded only by "
                          "--request-timeout")
    run.add_argument("--request-timeout", "--timeout", type=_positive_float, default=600.0,
                     metavar="S", help="seconds for a whole request, from send to the last "
                                       "byte (--timeout is the old name)")
    tls = run.add_mutually_exclusive_group()
    tls.add_argument("--ca-bundle", type=_existing_file, metavar="FILE",
                     help="PEM file of the CAs that signed an https server's certificate "
                          "(default: the system's CAs)")
    tls.add_argument("--insecure", action="store_true",
                     help="https without certificate checks")


def _add_request_flags(run: argparse.ArgumentParser) -> None:
    """What each request asks for, and how long it may take."""
    run.add_argument("--input-tokens", type=positive_int, default=128,
                     help="prompt tokens to calibrate to")
    run.add_argument("--output-tokens", type=positive_int, default=128,
                     help="output tokens per request (max_tokens)")
    run.add_argument("--temperature", type=_temperature, default=0.0,
                     help=f"sampling temperature sent with every request, 0 to "
                          f"{MAX_TEMPERATURE:g}")
    _add_connection_flags(run)


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="sweep a server through concurrency levels")
    run.add_argument("--url", help="OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (default: "
                     "none, --device starts the bundled server)")
    run.add_argument("--model", help="model name (default: the server's first model)")
    run.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY)")
    run.add_argument("--api", choices=tuple(API_PATHS), default="chat",
                     help="chat: /chat/completions; completions: /completions")
    run.add_argument("--device", help=f"device profile: {', '.join(PROFILES)}; without --url "
                     "the bundled server is started as that device would hold its table "
                     "(default: none)")
    run.add_argument("--placement", help="table placement: of the bundled server, or a label "
                     "for --url (default: the device's)")
    engines.add_arguments(run)  # --bundled and the flags of each managed engine
    run.add_argument("--engine", help="engine label (default: detected)")
    run.add_argument("--levels", type=_levels,
                     help="concurrency levels, e.g. 1,2,4,8 (default: the device's, else "
                          f"{','.join(map(str, DEFAULT_LEVELS))})")
    run.add_argument("--rounds", type=positive_int, default=10, help="requests per worker "
                     "and level")
    modes.add_arguments(run)  # --mode and the flags of each mode
    run.add_argument("--turns", type=int, default=1, metavar="N",
                     help="requests per conversation: each turn resends the conversation so far "
                          "plus a new --input-tokens message, so the context grows and a prefix "
                          "cache can reuse it (modes whose users wait for each answer)")
    _add_request_flags(run)
    run.add_argument("--warmup", type=int, default=0,
                     help="unstored requests before the sweep, sent at the first level's "
                          "concurrency")
    run.add_argument("--seed", type=int, default=0, help="seed of the prompts")
    run.add_argument("--prompts", metavar="words|text|FILE",
                     help="words: random common words (default with --url); text: natural prose "
                     "(default for the bundled server); FILE: .jsonl prompts sent at their own "
                     "lengths ({\"prompt\"}, {\"messages\"} or ShareGPT {\"conversations\"}), "
                     "or a text file cut like text")
    run.add_argument("--search", action="store_true",
                     help="after the levels, probe full levels (bisection between the highest "
                          "passing and the lowest failing C, doubling when all pass) until Max "
                          "C is known to the integer (default: off)")
    run.add_argument("--repeat", type=int, default=1, metavar="N",
                     help="run the whole sweep N times in one run, interleaved per level (level "
                          "1 of every repeat, then level 2 ...), for a 95%% interval of each "
                          "level's means and how many repeats agree on Max C (modes whose levels "
                          "are concurrencies or users)")
    run.add_argument("--max-concurrency", type=positive_int, default=256,
                     help="the highest C the search may probe")
    run.add_argument("--no-server-metrics", dest="server_metrics", action="store_false",
                     help="do not scrape the target's Prometheus /metrics (default: scraped "
                          "every 0.5 s of each level, stored per level)")
    run.add_argument("--host-metrics", type=_host_urls, default=(), metavar="URL[,URL...]",
                     help="the serving hosts' kernel counters, one URL a node: `engram-bench "
                          "agent`'s /metrics (or a node_exporter's, for the disk and host "
                          "figures), scraped every second of each level and stored per level "
                          "and per second: the server process tree's reads from storage and "
                          "faults per token, the table's "
                          "residency, peak file-backed and pinned memory, I/O stall, disk busy "
                          "share (default: none; a server --device starts gets an agent of its "
                          "own)")
    run.add_argument("--workers", type=_workers, default=1, metavar="N|auto",
                     help="load processes each level's streams (or requests) are split "
                          "across, each its own event loop and connections; auto: one per 512 "
                          "streams of the highest level, at most one per CPU, less one for a "
                          "server on this host")
    run.add_argument("--table-state", choices=TABLE_STATES, default="",
                     help="set the table's start state through each --host-metrics agent "
                          "before the first level: cold drops its files' page cache and checks "
                          "their residency (a drop other processes' mapped or locked pages "
                          "defeat is said, and not claimed cold), warm reads them in; the "
                          "first requests after cold are reported apart (default: as found)")
    run.add_argument("--warm-budget-gb", type=float, default=None, metavar="GB",
                     help="--table-state warm reads at most this many GB of the table "
                          "(default: all of it)")
    run.add_argument("--idle", type=float, default=0.0, metavar="S",
                     help="wait S seconds before each pass after the first (each level, each "
                          "--repeat of it and each --search probe), the agent reading the "
                          "table's residency before and after (its decay)")
    run.add_argument("--ray", metavar="HOST:PORT", default="",
                     help="run the --workers as Ray actors spread over the nodes of the Ray "
                          "cluster whose head is at HOST:PORT (`ray start --head` prints it; "
                          "needs pip install 'engram-bench[distributed]' on every node); auto "
                          "then counts the cluster's CPUs (default: processes of this host)")
    run.add_argument("--keep-going", action="store_true",
                     help="store a round in which no request could connect as errors and go "
                          "on (default: the run stops as failed, the server having stopped "
                          "answering); with --workers, measure the other levels after a load "
                          "process dies, and end the run failed for --resume to finish")
    run.add_argument("--token-times", action="store_true",
                     help="store every chunk's arrival time and tokens in the chunk_times "
                          "table: exact ITL distributions and the explorer's request timeline "
                          "(default: off; each request keeps its ITL figures and histogram)")
    run.add_argument("--label", default="", help="free text stored with the run (default: none)")
    run.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    run.add_argument("--resume", metavar="RUN_ID", type=_run_id,
                     help="run only the missing rounds of a run (default: a new run)")
    run.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    _add_target_flags(run)
    _add_goodput_flags(run)


class _Subcommand(argparse.ArgumentParser):
    """A subcommand's parser: its help shows every default, as the top level's does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"formatter_class": DefaultsHelp, **kwargs})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engram-bench", formatter_class=DefaultsHelp,
        description="Concurrency sweeps of OpenAI-compatible servers, stored in DuckDB.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Subcommand)
    _add_run_parser(sub)

    summary = sub.add_parser("summary", help="per-level table, Max C and users of a run")
    summary.add_argument("run_id", nargs="?", default="latest", type=_run_id,
                         help="a run id (default: latest, the newest run)")
    summary.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    summary.add_argument("--as", dest="as_tool", choices=PEER_TOOLS,
                         help="the figures as that tool defines them (TPOT, ITL, throughputs), "
                              "computed from the stored rows (default: engram-bench's own)")
    summary.add_argument("--format", choices=("table", "md"), default="table",
                         help="md: the verdict and the level table as Markdown, for an issue "
                              "or a chat")
    _add_target_flags(summary)
    _add_goodput_flags(summary)

    report = sub.add_parser("report", help="one self-contained HTML file of runs, to hand over")
    report.add_argument("runs", nargs="*", default=["latest"], metavar="RUN",
                        help="run ids, latest, or results files (each: all its runs); several "
                             "runs are compared")
    report.add_argument("-o", "--out", type=Path, default=Path("results"),
                        help="the HTML file (a name ending .html), or a folder for "
                             "report-<run>.html, made if missing (default: results)")
    report.add_argument("--png", type=Path, metavar="DIR",
                        help="also each chart as a PNG in DIR (drawn by headless Chromium)")
    report.add_argument("--svg", type=Path, metavar="DIR",
                        help="also each chart as an SVG in DIR (drawn by headless Chromium)")
    report.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    _add_target_flags(report)

    compare = sub.add_parser("compare", help="what moving the table did: a placement verdict "
                             "of two runs")
    compare.add_argument("run_ids", nargs="*", type=_run_id, metavar="RUN",
                         help="two run ids, the table's first placement (A) and its second (B); "
                              "latest: the newest run")
    compare.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    _add_target_flags(compare)

    cap = sub.add_parser("capacity", help="apply the capacity rules to a per-level CSV")
    cap.add_argument("--csv", type=Path, required=True,
                     help="columns run, concurrency, mean_ttft_ms, mean_tps [, errors], or the "
                          "columns of the --statistic judged (an export's levels file has all)")
    _add_target_flags(cap)

    export = sub.add_parser("export", help="write per-level and per-request files")
    export.add_argument("--run", dest="run_id", type=_run_id,
                        help="one run id or 'latest' (default: all runs)")
    export.add_argument("--format", choices=("csv", "parquet"), default="csv", help="file type")
    export.add_argument("--out", type=Path, default=Path("results/exports"), help="folder")
    export.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")

    explore = sub.add_parser("explore", help="open the explorer (Streamlit) over a results file")
    explore.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    explore.add_argument("--port", type=positive_int, default=8501, help="port on 127.0.0.1")

    runner_commands.add_parsers(sub)
    sub.add_parser("serve", help=f"start {engines.DEFAULT.title} (see `serve --help`)",
                   add_help=False)
    return parser


def targets(args: argparse.Namespace) -> Targets:
    """The targets a run is judged by, from the target and goodput flags."""
    try:
        return Targets(args.tps_min, args.ttft_max_ms, args.statistic, args.chat_factor,
                       args.agentic_factor, getattr(args, "slo", None),
                       getattr(args, "min_goodput", None), args.ttft_of)
    except ValueError as exc:
        raise UserError(str(exc)) from None
