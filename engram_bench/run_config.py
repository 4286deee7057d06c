"""A `run`'s config: a new run's from its flags (and the managed engine --device starts), a
resumed run's as it was stored, with the flags a resume may not change refused."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path

from engram_bench import extras
from engram_bench.errors import UserError
from engram_bench.parser import build_parser
from harness.config import DEFAULT_LEVELS, RunConfig, StoredRun
from harness.results import short_levels
from harness.results.metrics import Targets
from harness.results.store import Store
from harness.run import modes, ray_workers, workers
from harness.run.prompts import BUILTIN
from harness.run.ray_workers import Cluster
from runners import engines
from runners.profiles import profile


def _prompt_spec(args: argparse.Namespace) -> str:
    """words, text, or the file as an absolute path (a resume may start elsewhere)."""
    spec = args.prompts or ("words" if args.url else "text")
    return spec if spec in BUILTIN else str(Path(spec).expanduser().absolute())


# `run --resume` takes these as given: where the server and its hosts' agents are now, where
# results go, how they are judged and shown. Every other flag is part of the run, which
# continues as it was started.
RESUME_FREE = {"command", "resume", "url", "api_key", "db", "no_progress", "json", "tps_min",
               "ttft_max_ms", "statistic", "chat_factor", "agentic_factor", "keep_going",
               "slo", "min_goodput", "ray", "host_metrics"}
# the flags stored under another name (a mode's own are in its declaration)
RESUME_STORED_AS = {"request_timeout": "request_timeout_s", "connect_timeout": "connect_timeout_s",
                    "stall_timeout": "stall_timeout_s", "idle": "idle_s",
                    **modes.stored_as()}


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


def ray_cluster(args: argparse.Namespace) -> Cluster | None:
    """The Ray cluster `--ray` names, joined (None without it); one sentence if it cannot be."""
    if not args.ray:
        return None
    extras.require("distributed")
    try:
        return ray_workers.connect(args.ray, args.connect_timeout)
    except ray_workers.RayUnavailable as exc:
        raise UserError(str(exc)) from None


def config_for(args: argparse.Namespace, store: Store,
               cluster: Cluster | None = None) -> tuple[RunConfig, str | None]:
    """A new run's config from flags, or a resumed run's stored config (URL and the Ray
    cluster may change), checked by its mode here, the once a run is; `cluster`: the one
    `--ray` joined."""
    if not args.resume:
        return _new_config(args, cluster), None
    run = store.run(args.resume)
    # a level a load worker's death left short was stored complete under --keep-going before
    if run.status == "complete" and not short_levels.is_short(run, store.requests(run.run_id)):
        raise UserError(f"run {run.run_id} is already complete; nothing to resume")
    stored = StoredRun.from_json(run.config).config
    if stored is None:
        raise UserError(f"run {run.run_id} was stored without a configuration this "
                        "version can rebuild, so it cannot be resumed: start a new run")
    conflicts = resume_conflicts(args, stored)
    if conflicts:
        raise UserError(f"--resume continues run {run.run_id} as it was started, so "
                        f"{', '.join(conflicts)} cannot change it: drop "
                        f"{'them' if len(conflicts) > 1 else 'it'}, or start a new run")
    # the table's state was set before the run's first pass: a resume measures on as the table
    # is, and does not drop or warm it again under a level the summary does not name
    config = _on_cluster(replace(stored, keep_going=args.keep_going, ray=args.ray,
                                 host_metrics=args.host_metrics, table_state="",
                                 warm_budget_gb=None), cluster)
    if args.url:
        config = replace(config, url=args.url, server_args=())
    return modes.check(config), run.run_id


def _on_cluster(config: RunConfig, cluster: Cluster | None) -> RunConfig:
    """Refuse what a cluster cannot run: more workers than 4 per CPU of it, or a mode whose
    load one process sends."""
    if cluster is None:
        return config
    if not modes.mode_for(config.mode).splits:
        raise UserError(f"mode {config.mode} sends its load from one process, so --ray has no "
                        "workers to place: drop --ray")
    if config.workers > 4 * cluster.cpus:
        raise UserError(f"--workers must be from 1 to {4 * cluster.cpus} (4 per CPU of the Ray "
                        f"cluster at {cluster.address}), not {config.workers}")
    return config


def _new_config(args: argparse.Namespace, cluster: Cluster | None) -> RunConfig:
    """A new run's config; without --url, the server args of the engine --device starts."""
    levels: tuple[int, ...] = DEFAULT_LEVELS  # without --levels the mode makes its own of these
    placement = args.placement or ""
    server_args: tuple[str, ...] = ()
    server_flags: tuple[str, ...] = ()
    if args.url and args.bundled:
        raise UserError("--bundled starts a server and --url sweeps one already running: "
                        "give one of them")
    if args.url and args.device:
        profile(args.device)  # a device names a profile with --url too (--label is free text)
    if not args.url:
        if not args.device:
            raise UserError(f"give --device to sweep {engines.DEFAULT.title}, or --url of an "
                            "OpenAI-compatible server, e.g. --url http://127.0.0.1:8000/v1")
        prof = profile(args.device)
        levels = prof.default_levels
        engine, options = engines.chosen(args)  # its own flags, read once
        server_args = engine.server_args(options, prof)
        server_flags = tuple(engine.run_flags(server_args))
        placement = engine.table_placement(options, prof)
        if args.table_state and not engine.reads_table_file(options, prof):
            raise UserError(f"--table-state drops or warms the table's file, and {engine.title} "
                            "started here reads its table from none (it is in memory, or there "
                            "is no table): drop --table-state, or place the table in a file "
                            "(the bundled server: --placement nvme)")
    config = RunConfig(
        url=args.url or "", model=args.model or "", api=args.api,
        rounds=args.rounds, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, temperature=args.temperature,
        request_timeout_s=args.request_timeout, connect_timeout_s=args.connect_timeout,
        stall_timeout_s=args.stall_timeout, ca_bundle=args.ca_bundle or "",
        insecure=args.insecure, warmup=args.warmup, seed=args.seed, label=args.label,
        device=args.device or "", engine=args.engine or "",
        table_placement=placement, server_args=server_args, server_flags=server_flags,
        prompts=_prompt_spec(args),
        server_metrics=args.server_metrics, host_metrics=args.host_metrics, search=args.search,
        table_state=args.table_state, warm_budget_gb=args.warm_budget_gb, idle_s=args.idle,
        max_concurrency=args.max_concurrency, repeat=args.repeat, turns=args.turns,
        keep_going=args.keep_going, token_times=args.token_times, ray=args.ray,
        workers=1 if args.workers == "auto" else args.workers, **modes.read_flags(args, levels),
    )
    config = modes.check(config)  # the one check: `auto` gives more than 1 only where it splits
    if args.workers == "auto":
        config = replace(config, workers=auto_workers(config, cluster)[0])
    return _on_cluster(config, cluster)


def auto_workers(config: RunConfig, cluster: Cluster | None) -> tuple[int, str]:
    """`--workers auto` over this host's CPUs, or the Ray cluster's; and what it picked."""
    if cluster is None:
        return workers.auto(config)
    return workers.auto(config, cluster.cpus, f" of the Ray cluster at {cluster.address}, "
                                              f"{cluster.nodes} nodes")


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

