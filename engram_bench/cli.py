"""`engram-bench` (also `python -m engram_bench`): run, summary, capacity, export; the device,
sizing and recipe commands come from runners/commands.py; `serve` starts the bundled server."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from common.help_format import DefaultsHelp
from engram_bench import extras
from harness.config import (
    ARRIVALS,
    DEFAULT_LEVELS,
    MAX_TEMPERATURE,
    MODES,
    PROFILE_DUTY,
    THINK_DISTS,
    ConfigError,
    RunConfig,
    StoredRun,
    parse_levels,
    parse_rates,
)
from harness.config import PROFILES as USER_PROFILES
from harness.results import report
from harness.results.goodput import Slo, parse_slo
from harness.results.metrics import STATISTICS, Targets, capacity, point, stats_by_level
from harness.results.peer_views import PEER_TOOLS, peer_view, with_chunk_times
from harness.results.report import (
    CapacityCSVError,
    capacity_object,
    print_capacity,
    print_summary,
    read_level_csv,
    summarise,
)
from harness.results.store import DEFAULT_DB, Store, StoreError
from harness.results.users import paired_closed_run
from harness.run import aio
from harness.run.prompts import BUILTIN, PromptFileError, load
from harness.wire.endpoint import API_PATHS, Endpoint, EndpointError
from harness.wire.target import TargetError
from runners import commands as runner_commands
from runners.commands import positive_int
from runners.lifecycle import BundledServer, ManagedServer, ServerDied, ServerStartError
from runners.profiles import PROFILES, UnknownDevice, profile
from runners.vllm import server as vllm

EXIT_FAILED = 1  # the run started and stopped as failed, what it measured kept
EXIT_USAGE = 2
EXIT_ABORTED = 130


class UserError(Exception):
    """Anything the user can fix; printed as one sentence, exit 2."""


def _levels(text: str) -> tuple[int, ...]:
    try:
        return parse_levels(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rates(text: str) -> tuple[float, ...]:
    try:
        return parse_rates(text)
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


def _temperature(text: str) -> float:
    if not 0 <= (value := _number(text)) <= MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"must be a number from 0 to {MAX_TEMPERATURE:g}, not {text!r}")
    return value


def _existing_file(text: str) -> str:
    """An absolute path (a resumed run may start elsewhere) to a file that exists."""
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return str(path)


def _add_target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tps-min", type=float, default=20.0, help="TPS per request target")
    p.add_argument("--ttft-max-ms", type=float, default=1000.0, help="TTFT target in ms")
    p.add_argument("--statistic", choices=STATISTICS, default="mean",
                   help="mean, or pNN: TTFT at pNN and TPS at p(100-NN)")
    p.add_argument("--chat-factor", type=float, default=4.0, help="chat users per Max C")
    p.add_argument("--agentic-factor", type=float, default=1.5,
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
    run.add_argument("--bundled", choices=("engram", "vllm"),
                     help="the server --device starts (no --url): engram, the bundled Engram "
                          "server; vllm, vLLM's CPU build serving a tiny Llama (its own venv, "
                          ".venv-vllm, and model, results/models/, made on first use) "
                          "(default: engram)")
    run.add_argument("--placement", help="table placement: of the bundled server, or a label "
                     "for --url (default: the device's)")
    run.add_argument("--io", choices=("mmap", "direct"),
                     help="bundled server: nvme I/O mode (default: the device's)")
    run.add_argument("--table-size-gb", "--table-gb", type=_positive_float, metavar="G",
                     help="bundled server: table size in GiB (default: the server's, 2; "
                          "--table-gb is the old name)")
    run.add_argument("--preset", default="qwen-mini", help="bundled server: model preset")
    run.add_argument("--cache-ratio", type=_cache_ratio, metavar="R",
                     help="bundled server: share of the table the page cache may hold, in "
                          "(0, 1] (default: the device's)")
    run.add_argument("--page-cache-gb", type=_positive_float, metavar="G",
                     help="bundled server: page-cache budget for the table in GiB (default: "
                          "from --cache-ratio)")
    run.add_argument("--cache-state", choices=("cold", "warm"),
                     help="bundled server: table start state (default: the server's, cold on "
                          "nvme)")
    run.add_argument("--decode", choices=("sample", "replay"),
                     help="bundled server: output tokens (default: replay, a natural token "
                          "stream)")
    run.add_argument("--engine", help="engine label (default: detected)")
    run.add_argument("--levels", type=_levels,
                     help="concurrency levels, e.g. 1,2,4,8 (default: the device's, else "
                          f"{','.join(map(str, DEFAULT_LEVELS))})")
    run.add_argument("--rounds", type=positive_int, default=10, help="requests per worker "
                     "and level")
    run.add_argument("--mode", choices=MODES, default="closed",
                     help="closed: C workers back to back; burst: C requests at once, per "
                          "round; rate: open loop at each of --rates; users: each level is a "
                          "number of simulated users who think between requests (--profile)")
    run.add_argument("--rates", type=_rates,
                     help="mode rate: request rates in requests/s, e.g. 0.5,1,2,4 (default: "
                          "none)")
    run.add_argument("--arrival", choices=ARRIVALS, default="poisson",
                     help="mode rate: poisson (exponential gaps, seeded by --seed) or constant "
                          "gaps")
    run.add_argument("--duration", type=_positive_float, default=60.0, metavar="S",
                     help="mode rate: seconds each rate level sends for")
    run.add_argument("--profile", choices=USER_PROFILES,
                     help="mode users: chat (a request running ~25%% of a user's time: think "
                          "~3x the level's mean request) or agentic (~67%%: think ~0.5x) "
                          "(default: chat)")
    run.add_argument("--duty-cycle", type=_number, metavar="D",
                     help="mode users: the share of a user's time with a request running, in "
                          "(0, 1], instead of the profile's (default: none)")
    run.add_argument("--think-time", type=_number, metavar="S",
                     help="mode users: a fixed mean think time in seconds instead of a duty "
                          "cycle (default: none)")
    run.add_argument("--think-dist", choices=THINK_DISTS,
                     help="mode users: how each think is drawn around the level's mean: "
                          "exponential, constant or lognormal (sigma 0.8) (default: exponential)")
    run.add_argument("--turns", type=int, default=1, metavar="N",
                     help="requests per conversation: each turn resends the conversation so far "
                          "plus a new --input-tokens message, so the context grows and a prefix "
                          "cache can reuse it (closed, burst and users modes)")
    run.add_argument("--input-tokens", type=positive_int, default=128,
                     help="prompt tokens to calibrate to")
    run.add_argument("--output-tokens", type=positive_int, default=128,
                     help="output tokens per request (max_tokens)")
    run.add_argument("--temperature", type=_temperature, default=0.0,
                     help=f"sampling temperature sent with every request, 0 to "
                          f"{MAX_TEMPERATURE:g}")
    _add_connection_flags(run)
    run.add_argument("--warmup", type=int, default=0, help="unstored requests before the sweep")
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
                          "level's means and how many repeats agree on Max C (closed and burst "
                          "modes)")
    run.add_argument("--max-concurrency", type=positive_int, default=256,
                     help="the highest C the search may probe")
    run.add_argument("--no-server-metrics", dest="server_metrics", action="store_false",
                     help="do not scrape the target's Prometheus /metrics (default: scraped "
                          "every 0.5 s of each level, stored per level)")
    run.add_argument("--keep-going", action="store_true",
                     help="store a round in which no request could connect as errors and go "
                          "on (default: the run stops as failed, the server having stopped "
                          "answering)")
    run.add_argument("--token-times", action="store_true",
                     help="store every chunk's arrival time and tokens in the chunk_times "
                          "table: exact ITL distributions and the explorer's request timeline "
                          "(default: off; each request keeps its ITL figures and histogram)")
    run.add_argument("--label", default="", help="free text stored with the run (default: none)")
    run.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    run.add_argument("--resume", metavar="RUN_ID",
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
    summary.add_argument("run_id", nargs="?", default="latest",
                         help="a run id (default: latest, the newest run)")
    summary.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    summary.add_argument("--as", dest="as_tool", choices=PEER_TOOLS,
                         help="the figures as that tool defines them (TPOT, ITL, throughputs), "
                              "computed from the stored rows (default: engram-bench's own)")
    _add_target_flags(summary)
    _add_goodput_flags(summary)

    cap = sub.add_parser("capacity", help="apply the capacity rules to a per-level CSV")
    cap.add_argument("--csv", type=Path, required=True,
                     help="columns run, concurrency, mean_ttft_ms, mean_tps [, errors], or the "
                          "columns of the --statistic judged (an export's levels file has all)")
    _add_target_flags(cap)

    export = sub.add_parser("export", help="write per-level and per-request files")
    export.add_argument("--run", dest="run_id",
                        help="one run id or 'latest' (default: all runs)")
    export.add_argument("--format", choices=("csv", "parquet"), default="csv", help="file type")
    export.add_argument("--out", type=Path, default=Path("results/exports"), help="folder")
    export.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")

    explore = sub.add_parser("explore", help="open the explorer (Streamlit) over a results file")
    explore.add_argument("--db", type=Path, default=DEFAULT_DB, help="results file")
    explore.add_argument("--port", type=positive_int, default=8501, help="port on 127.0.0.1")

    runner_commands.add_parsers(sub)
    sub.add_parser("serve", help="start the bundled Engram server (see `serve --help`)",
                   add_help=False)
    return parser


def _targets(args: argparse.Namespace) -> Targets:
    try:
        return Targets(args.tps_min, args.ttft_max_ms, args.statistic, args.chat_factor,
                       args.agentic_factor, getattr(args, "slo", None),
                       getattr(args, "min_goodput", None))
    except ValueError as exc:
        raise UserError(str(exc)) from None


def bundled_server_args(args: argparse.Namespace, device: str, placement: str) -> tuple[str, ...]:
    """`engram-bench serve` flags for a bundled run; its decode defaults to replay here, and
    flags left unset are not passed, so the server's own defaults hold."""
    optional = (("--io", args.io), ("--table-size-gb", args.table_size_gb),
                ("--cache-ratio", args.cache_ratio), ("--page-cache-gb", args.page_cache_gb),
                ("--cache-state", args.cache_state), ("--decode", args.decode or "replay"))
    return ("--device", device, "--preset", args.preset, "--placement", placement,
            *(item for flag, value in optional if value is not None
              for item in (flag, repr(value) if isinstance(value, float) else value)))


def vllm_server_args(args: argparse.Namespace, max_running: int) -> tuple[str, ...]:
    """vLLM's flags for a bundled run: at most the device's running requests at once."""
    engram_only = [flag for flag, value in (
        ("--placement", args.placement), ("--io", args.io),
        ("--table-size-gb", args.table_size_gb), ("--cache-ratio", args.cache_ratio),
        ("--page-cache-gb", args.page_cache_gb), ("--cache-state", args.cache_state),
        ("--decode", args.decode)) if value is not None]
    if engram_only:
        raise UserError(f"{', '.join(engram_only)} set up the bundled Engram server, not vLLM: "
                        "drop them or leave out --bundled vllm")
    return vllm.server_args(max_running)


def _prompt_spec(args: argparse.Namespace) -> str:
    """words, text, or the file as an absolute path (a resume may start elsewhere)."""
    spec = args.prompts or ("words" if args.url else "text")
    return spec if spec in BUILTIN else str(Path(spec).expanduser().absolute())


# `run --resume` takes these as given: where the server is now, where results go, how they are
# judged and shown. Every other flag is part of the run, which continues as it was started.
RESUME_FREE = {"command", "resume", "url", "api_key", "db", "no_progress", "json", "tps_min",
               "ttft_max_ms", "statistic", "chat_factor", "agentic_factor", "keep_going",
               "slo", "min_goodput"}
RESUME_STORED_AS = {"request_timeout": "request_timeout_s", "connect_timeout": "connect_timeout_s",
                    "stall_timeout": "stall_timeout_s", "duration": "duration_s",
                    "think_time": "think_s"}


def resume_conflicts(args: argparse.Namespace, stored: RunConfig) -> list[str]:
    """The sweep flags a `--resume` was given that would change the run: each is neither its
    default nor the resumed run's own value."""
    defaults = vars(build_parser().parse_args(["run"]))
    conflicts = []
    for name, value in vars(args).items():
        if name in RESUME_FREE or value == defaults.get(name):
            continue
        field = RESUME_STORED_AS.get(name, name)
        if name == "prompts":
            value = _prompt_spec(args)  # a file is stored by its absolute path
        if hasattr(stored, field) and _same(getattr(stored, field), value):
            continue
        conflicts.append("--" + name.replace("_", "-"))
    return conflicts


def _same(stored: object, given: object) -> bool:
    """A flag's value equals what the run stored (levels as tuples, prompt files as paths)."""
    if isinstance(stored, tuple) and isinstance(given, list | tuple):
        return tuple(stored) == tuple(given)
    return stored == given or str(stored) == str(given)


def config_for(args: argparse.Namespace, store: Store) -> tuple[RunConfig, str | None]:
    """A new run's config from flags, or a resumed run's stored config (URL may change)."""
    if args.resume:
        run = store.run(args.resume)
        if run["status"] == "complete":
            raise UserError(f"run {run['run_id']} is already complete; nothing to resume")
        stored = StoredRun.from_json(run["config"]).config
        if stored is None:
            raise UserError(f"run {run['run_id']} was stored without a configuration this "
                            "version can rebuild, so it cannot be resumed: start a new run")
        conflicts = resume_conflicts(args, stored)
        if conflicts:
            raise UserError(f"--resume continues run {run['run_id']} as it was started, so "
                            f"{', '.join(conflicts)} cannot change it: drop "
                            f"{'them' if len(conflicts) > 1 else 'it'}, or start a new run")
        config = replace(stored, keep_going=args.keep_going)
        if args.url:
            config = replace(config, url=args.url, server_args=())
        return config, run["run_id"]
    rate_mode = args.mode == "rate"  # its load points are --rates: no default levels
    levels = args.levels or (() if rate_mode else DEFAULT_LEVELS)
    placement = args.placement or ""
    server_args: tuple[str, ...] = ()
    if args.url and args.bundled:
        raise UserError("--bundled starts a server and --url sweeps one already running: "
                        "give one of them")
    if args.url and args.device:
        profile(args.device)  # a device names a profile with --url too (--label is free text)
    if not args.url:
        if not args.device:
            raise UserError("give --device to sweep the bundled Engram server, or --url of an "
                            "OpenAI-compatible server, e.g. --url http://127.0.0.1:8000/v1")
        prof = profile(args.device)
        levels = args.levels or (() if rate_mode else prof.default_levels)
        if args.bundled == "vllm":
            server_args = vllm_server_args(args, prof.max_running_requests)
        else:
            placement = placement or prof.table_placement
            server_args = bundled_server_args(args, prof.name, placement)
    if args.mode == "users" and not args.levels:
        levels = users_levels(levels, args.profile, args.duty_cycle, args.think_time)
    config = RunConfig(
        url=args.url or "", model=args.model or "", api=args.api, levels=levels,
        rounds=args.rounds, mode=args.mode, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, temperature=args.temperature,
        request_timeout_s=args.request_timeout, connect_timeout_s=args.connect_timeout,
        stall_timeout_s=args.stall_timeout, ca_bundle=args.ca_bundle or "",
        insecure=args.insecure, warmup=args.warmup, seed=args.seed, label=args.label,
        device=args.device or "", engine=args.engine or "",
        table_placement=placement, server_args=server_args, prompts=_prompt_spec(args),
        server_metrics=args.server_metrics, search=args.search,
        max_concurrency=args.max_concurrency, rates=args.rates or (), arrival=args.arrival,
        duration_s=args.duration, repeat=args.repeat, turns=args.turns,
        profile=args.profile or ("chat" if args.mode == "users" and args.duty_cycle is None
                                 and args.think_time is None else ""),
        duty_cycle=args.duty_cycle, think_s=args.think_time,
        think_dist=args.think_dist or "exponential", keep_going=args.keep_going,
        token_times=args.token_times,
    )
    return config, None


def users_levels(concurrencies: tuple[int, ...], profile: str | None, duty: float | None,
                 think_s: float | None) -> tuple[int, ...]:
    """Mode users without --levels: the concurrency levels over the duty cycle (chat: x4), the
    users the factor estimate would expect; with a fixed think time, the levels as they are."""
    if think_s is not None or (duty is not None and not 0 < duty <= 1):
        return concurrencies  # a bad duty cycle is refused by RunConfig with its sentence
    d = duty or PROFILE_DUTY[profile or "chat"]
    return tuple(sorted({max(1, round(c / d)) for c in concurrencies}))


def check_search(config: RunConfig, targets: Targets) -> None:
    """`--search` bisects on pass/fail verdicts: refuse targets or a statistic under which no
    level can be told apart (one sentence, before anything is stored)."""
    if not config.search:
        return
    if not 0 < targets.tps_min < math.inf:
        raise UserError(f"--search needs a TPS target above 0 (--tps-min {targets.tps_min:g}): "
                        "with none, no level can fail on TPS and the search has nothing to find")
    if not 0 < targets.ttft_max_ms < math.inf:
        raise UserError(f"--search needs a finite TTFT target above 0 (--ttft-max-ms "
                        f"{targets.ttft_max_ms:g})")
    if targets.statistic != "mean":
        tail = 100 - int(targets.statistic[1:])
        need = math.ceil(100 / tail) if tail else math.inf
        fewest = min(config.levels) * config.rounds * config.repeat if config.levels else 0
        if fewest < need:
            raise UserError(f"--search judges --statistic {targets.statistic}, which needs at "
                            f"least {need} requests per level to be measured, but the lowest "
                            f"level sends {fewest}: raise --rounds or use --statistic mean")


@contextlib.contextmanager
def _target(config: RunConfig, console: Console) -> Iterator[str]:
    """The URL to sweep: the given one, or a bundled server started (and stopped) here."""
    if not config.server_args:
        yield config.url
        return
    server_cm: contextlib.AbstractContextManager[ManagedServer]
    if vllm.is_vllm(config.server_args):
        server_cm = vllm.vllm_server(config.server_args,
                                     lambda text: console.print(text, highlight=False))
    else:
        console.print(f"starting the bundled Engram server: {' '.join(config.server_args)}",
                      highlight=False)
        server_cm = BundledServer(config.server_args)
    with server_cm as server:
        if not vllm.is_vllm(config.server_args):
            console.print(f"bundled server up at {server.url} after {server.start_s:.1f} s "
                          f"(log {server.log_path})", highlight=False)
        try:
            yield server.url
        except Exception:  # a death explains whatever failed after it
            if server.death:
                raise ServerDied(server.death) from None
            raise
        if server.death:  # its requests failed and are stored; the run did not complete
            raise ServerDied(server.death)


_KILLS: list[int] = []  # the kill signals received, for a stop whose exception DuckDB swallowed


def _exit_status(stop: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal for a kill (143 for SIGTERM), as shells report them."""
    if isinstance(stop, aio.Stopped):
        return 128 + stop.signum
    return 128 + _KILLS[-1] if _KILLS else EXIT_ABORTED


def _handle_interrupts() -> None:
    """Ctrl-C works whatever the process inherited (a background job of a non-interactive
    shell starts with SIGINT ignored), and `kill` of a bench behaves like Ctrl-C: the run is
    marked aborted, the server stopped."""
    def handler(signum: int, frame: object) -> None:  # outside the event loop (aio.run)
        _KILLS.append(signum)
        raise aio.Stopped(signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, handler)


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from harness.run.progress import LevelProgress
    from harness.run.session import RunFailed, execute, new_run_id

    _handle_interrupts()
    targets = _targets(args)
    store = Store(args.db)
    config, resume_id = config_for(args, store)  # bad flags stop here: nothing stored
    if config.server_args and not vllm.is_vllm(config.server_args):
        extras.require("server")
    check_search(config, targets)
    store.initialise()
    prompts = load(config.prompts, config.seed)  # a bad file stops here: nothing stored
    run_id = resume_id or new_run_id()
    progress = LevelProgress(enabled=not args.no_progress)
    status = Console(stderr=True)
    try:
        # one writer per run (a second --resume is refused), taken before a server starts
        with store.run_lock(run_id), _target(config, status) as url:
            config = replace(config, url=url)
            endpoint = Endpoint(config.url, config.api,
                                args.api_key or os.environ.get("OPENAI_API_KEY"),
                                ca_bundle=Path(config.ca_bundle) if config.ca_bundle else None,
                                insecure=config.insecure)
            aio.run(execute(config, endpoint, store, progress, run_id, resume=bool(resume_id),
                            prompts=prompts, targets=targets))
    except ServerDied as exc:
        progress.stop()
        with contextlib.suppress(StoreError):  # a run it had started is failed, not complete
            store.run(run_id)
            store.finish_run(run_id, "failed", str(exc))
        raise
    except RunFailed as exc:
        progress.stop()
        print(f"engram-bench: run {run_id} failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        progress.stop()
        print(f"engram-bench: aborted; run {run_id} keeps its finished rounds "
              f"(continue with --resume {run_id})", file=sys.stderr)
        return _exit_status(exc)
    finally:
        progress.stop()  # idempotent; an error's message is printed after the bar ends
    return _show(store, run_id, targets, args.json, console)


def _show(store: Store, run_id: str, targets: Targets, as_json: bool, console: Console) -> int:
    run = store.run(run_id)
    records = store.requests(run["run_id"])
    config = StoredRun.from_json(run["config"]).config
    found = (report.search_plan(store, run["run_id"], config, targets)
             if config and config.search and records else None)
    summary = summarise(run, stats_by_level(records, run["output_tokens"], targets.slo),
                        records, targets, found, _paired_max_c(store, run, targets),
                        report.server_levels(store.server_metrics(run["run_id"])),
                        store.client_checks(run["run_id"]), store.user_levels(run["run_id"]))
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        print_summary(summary, console)
    return 0


def _paired_max_c(store: Store, run: dict, targets: Targets) -> tuple[str, int] | None:
    """A users run: the newest closed run of its setup and that run's Max C (its estimate)."""
    if run["mode"] != "users":
        return None
    closed = paired_closed_run(store.runs(), run)
    if closed is None:
        return None
    stats = stats_by_level(store.requests(closed["run_id"]), closed["output_tokens"],
                           targets.slo)
    return closed["run_id"], capacity([point(s, targets.statistic) for s in stats],
                                      targets).max_c


def cmd_summary(args: argparse.Namespace, console: Console) -> int:
    if not args.db.exists():
        raise UserError(f"{args.db} does not exist yet: start a run with `make bench`")
    if args.as_tool:
        return _show_as(Store(args.db), args.run_id, args.as_tool, args.json, console)
    return _show(Store(args.db), args.run_id, _targets(args), args.json, console)


def _show_as(store: Store, run_id: str, tool: str, as_json: bool, console: Console) -> int:
    run = store.run(run_id)
    records = with_chunk_times(store.requests(run["run_id"]), store.chunk_times(run["run_id"]))
    view = peer_view(records, tool)
    if as_json:
        print(json.dumps({"run_id": run["run_id"], **view}))
    else:
        report.print_peer_view(view, run["run_id"], console)
    return 0


def cmd_capacity(args: argparse.Namespace, console: Console) -> int:
    targets = _targets(args)
    result = capacity_object(read_level_csv(args.csv, targets.statistic), targets)
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


def cmd_explore(args: argparse.Namespace, console: Console) -> int:
    """Streamlit serves the app in this process's place (headless, loopback only)."""
    extras.require("explorer")
    spec = importlib.util.find_spec("explorer")
    assert spec is not None and spec.origin is not None  # explorer ships with the package
    app = Path(spec.origin).parent / "app.py"
    os.environ["ENGRAM_BENCH_DB"] = str(args.db)
    os.execv(sys.executable, [
        sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.port", str(args.port),
        "--browser.gatherUsageStats", "false"])
    return 0  # not reached


COMMANDS = {"run": cmd_run, "summary": cmd_summary, "capacity": cmd_capacity,
            "export": cmd_export, "explore": cmd_explore, **runner_commands.COMMANDS}


def serve(argv: list[str]) -> int:
    """The server runs torch; the harness never imports it, so serve is its own process."""
    extras.require("server")
    os.execv(sys.executable, [sys.executable, "-m", "runners.engram", *argv])
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["serve"]:
            return serve(argv[1:])
        args = build_parser().parse_args(argv)
        console = Console(width=None if sys.stdout.isatty() else 160)
        return COMMANDS[args.command](args, console)
    except (extras.MissingExtra, UserError, ConfigError, EndpointError, StoreError, TargetError,
            CapacityCSVError, UnknownDevice, ServerStartError, ServerDied,
            runner_commands.CommandError, PromptFileError) as exc:
        print(f"engram-bench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        print("engram-bench: interrupted", file=sys.stderr)
        return _exit_status(exc)
