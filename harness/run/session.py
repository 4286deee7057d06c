"""One benchmark run end to end: check the target, calibrate prompts, sweep, store.

Every finished round is on disk before the next level starts; Ctrl-C marks the run aborted
with its finished rounds kept; `resume` runs only the (level, repeat, round) still missing.
Under `--repeat N` each level runs its N passes back to back (level 1 of repeat 0, 1, ...,
then level 2), so drift over the run lands inside every level's spread.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import platform
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from harness import __version__
from harness.config import ConfigError, RunConfig, StoredRun
from harness.records import RequestRecord
from harness.results import spill
from harness.results.client_check import describe as describe_client
from harness.results.metrics import (
    LevelStats,
    Targets,
    first_turns,
    level_name,
    level_stats,
    mean_prompt_tokens,
    prompt_warning,
)
from harness.results.report import describe_server_table, search_plan, server_table
from harness.results.store import Store, StoreError
from harness.run.limits import ensure_open_files
from harness.run.loop_monitor import LoopMonitor
from harness.run.progress import LevelProgress
from harness.run.prompts import Prompts, load
from harness.run.sweep import LevelOutcome, Sweep, calibration_key, calibration_ordinal
from harness.run.workload import Calibration, calibrate, payload
from harness.run.writer import BackgroundWriter, WriterError
from harness.wire import target
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint
from harness.wire.scraper import Scraper

# prompts per calibration probe: a window of ~100 words of prose varies ~3 % in tokens (with
# this project's tokenizer; word prompts ~0.3 %), so 8 hold the probe's mean to ~1 %
CALIBRATION_SAMPLES = 8


class RunFailed(RuntimeError):
    """The run stopped as failed (stored so), with what it measured kept; one sentence."""


class ServerStoppedAnswering(RuntimeError):
    """A whole round could not connect: the target is gone (unless --keep-going)."""


def stopped_answering(records: list[RequestRecord]) -> str | None:
    """Why a finished round says the server is gone: none of its requests could connect."""
    if not records or any(r.error_kind != "connect_error" for r in records):
        return None
    r = records[0]
    where = f"R={r.rate:g} req/s" if r.rate is not None else f"C={r.concurrency}, round {r.round}"
    return f"the server stopped answering at {where} ({r.error_message})"


@dataclass(slots=True)
class RunResult:
    run_id: str
    config: RunConfig
    outcomes: list[LevelOutcome]
    clock: Clock  # maps stored wall times back to the monotonic clock (benchmarks do)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def host_info() -> dict:
    info = {"hostname": platform.node(), "platform": platform.platform(),
            "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        with open("/proc/meminfo") as f:
            info["memory_kb"] = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return info


async def _calibrate(config: RunConfig, endpoint: Endpoint, clock: Clock, prompts: Prompts,
                     run_id: str) -> Calibration:
    """Each probe measures the mean of CALIBRATION_SAMPLES prompts: natural-text windows differ
    by ~7% in tokens per word, so one window would fit the length to itself, not to the mean.
    The samples keep their ordinals from probe to probe, so only the length changes."""
    pool = ConnectionPool(endpoint, connect_timeout=config.connect_timeout_s)
    probes = 0

    async def one(words: int, sample: int) -> int | None:
        request_id = calibration_key(run_id, probes, sample)
        text = prompts.sized(words).text(request_id, calibration_ordinal(sample))
        body = payload(config.api, config.model, text, 1, config.temperature, force_length=False)
        record = await stream_completion(
            pool, build_request(endpoint, body, request_id),
            RequestRecord(request_id, 1, 0, 0, 0.0), clock, config.request_timeout_s,
            config.stall_timeout_s,
        )
        if not record.ok:
            raise target.TargetError(
                f"the calibration request to {endpoint.base_url} failed: {record.error_message}"
            )
        return record.input_tokens

    async def probe(words: int) -> int | None:
        nonlocal probes
        counts = [await one(words, sample) for sample in range(CALIBRATION_SAMPLES)]
        probes += 1
        counted = [c for c in counts if c is not None]
        if len(counted) < len(counts):
            return None
        return round(sum(counted) / len(counted))

    try:
        return await calibrate(config.input_tokens, probe)
    finally:
        pool.close()


async def execute(
    config: RunConfig,
    endpoint: Endpoint,
    store: Store,
    progress: LevelProgress,
    run_id: str,
    resume: bool = False,
    prompts: Prompts | None = None,
    targets: Targets | None = None,
) -> RunResult:
    """Run (or resume) a sweep. TargetError (or ConfigError, for prompts a resumed run no longer
    has) before anything is stored if the target is bad. `prompts`: config.prompts, loaded."""
    ensure_open_files(config)  # a level past the limit would be stored as server errors
    prompts = prompts or load(config.prompts, config.seed)
    info = await target.describe(endpoint, config.model or None)
    config = replace(config, model=info.model, engine=config.engine or info.engine)
    pool = await target.kv_pool_tokens(endpoint) if config.server_metrics else None
    config.check_server_limits(info.max_model_len, pool)
    if info.max_model_len is None:
        progress.message(f"the server does not say its context length (max_model_len), so "
                         f"requests of {config.longest_request_tokens} tokens cannot be "
                         "checked against it")
    clock = Clock()
    server = server_table(await target.fetch_stats(endpoint))
    if server:
        progress.message(describe_server_table(server))
    if not resume:
        words, probed = None, None
        if prompts.calibrated:
            calibration = await _calibrate(config, endpoint, clock, prompts, run_id)
            progress.message(f"{calibration.describe()}; source: {prompts.describe()}")
            words, probed = calibration.words, calibration.prompt_tokens
        else:
            progress.message(f"prompts: not calibrated; source: {prompts.describe()}")
        store.create_run(run_id, {
            "device": config.device, "engine": config.engine, "model": config.model,
            "table_placement": config.table_placement, "target_url": config.url,
            "api": config.api, "mode": config.mode, "levels": list(config.levels),
            "rounds": config.rounds, "input_tokens": config.input_tokens,
            "output_tokens": config.output_tokens, "label": config.label,
            "config": StoredRun(config, words, probed, prompts.digest(), server).to_json(),
            "host": json.dumps(host_info()), "version": __version__,
        })
    else:
        stored = StoredRun.from_json(store.run(run_id)["config"])
        if stored.prompts_digest not in (None, prompts.digest()):
            raise ConfigError(f"the prompts of run {run_id} ({config.prompts}) have changed "
                              "since it started, so its missing rounds cannot be rebuilt alike")
        words = stored.prompt_words
        store.update_run(run_id, status="running", finished_at=None, error=None)
        for path, rows in spill.pending(store.path, run_id):  # measured when the disk was full
            store.write_requests(run_id, rows, config.token_times)
            path.unlink()
            progress.message(f"stored the {len(rows)} rows kept in {path}")
    if words is not None:
        prompts = prompts.sized(words)
    done = store.done_clusters(run_id)
    progress.message(f"run {run_id}: {_describe_load(config)}, target {endpoint.base_url} "
                     f"model {config.model}")
    sweep = Sweep(config, endpoint, run_id, prompts, clock)
    writer = BackgroundWriter(store, run_id, lambda rows: progress.message(
        f"the results writer process died: restarted it, and sent the {rows} rows it had not "
        "stored again"), token_times=config.token_times)
    scraper = Scraper(endpoint) if config.server_metrics else None
    monitor = LoopMonitor(sweep.pool.unread_bytes)
    outcomes: list[LevelOutcome] = []

    def commit(records: list[RequestRecord]) -> None:
        """A finished round to the writer; the run stops if it shows the server is gone."""
        writer.submit(records)
        if not config.keep_going and (why := stopped_answering(records)):
            raise ServerStoppedAnswering(why)
    try:
        if config.warmup and not resume:  # before the first level's scrape: left out
            first = config.levels[0] if config.levels else 1
            await sweep.warmup(config.warmup, min(config.warmup, first))

        async def level(c: int, rate: float | None, total: int,
                        run: Callable[[], Awaitable[LevelOutcome]], repeat: int = 0) -> None:
            """One pass of a level: its requests, the server's counters around it, stored."""
            before = await target.fetch_stats(endpoint)
            for note in await scraper.start() if scraper else []:
                progress.message(note)
            progress.start_level(c, total)
            monitor.start()
            outcome = await run()
            outcome.client = monitor.stop()
            rows, notes = await scraper.stop() if scraper else ([], [])
            await writer.flush()
            stats = level_stats(c, outcome.records, config.output_tokens, rate)
            progress.end_level(stats)
            for note in notes:
                progress.message(note)
            sized = stats if config.turns == 1 else level_stats(
                c, first_turns(outcome.records), config.output_tokens, rate)
            if prompts.calibrated and (warning := prompt_warning(sized, config.input_tokens)):
                progress.message(f"warning: {warning}")
            if rate is not None:
                progress.message(_describe_lag(stats))
            after = await target.fetch_stats(endpoint)
            if before is not None or after is not None:
                store.write_server_stats(run_id, c, before, after, rate, repeat)
            if rows:
                store.write_server_metrics(run_id, c, rows, rate, repeat)
            store.write_client_check(run_id, c, outcome.client, rate, repeat)
            if config.think is not None:
                store.write_user_level(run_id, c, repeat, outcome.think_mean_s,
                                       config.think.dist, outcome.lead_in)
            if outcome.client.client_bound:
                progress.message(f"warning: {describe_client(level_name(stats), outcome.client)}")
            # what the prompts sent so far measured, right even if the run is killed next
            store.update_run(run_id,
                             measured_input_tokens=mean_prompt_tokens(store.requests(run_id)))
            outcomes.append(outcome)

        async def measure(c: int, repeat: int, todo: list[int]) -> None:
            await level(c, None, c * len(todo),
                        lambda: sweep.run_level(c, todo, commit, progress.advance,
                                                repeat), repeat)

        async def measure_users(c: int, repeat: int) -> None:
            """A users pass stores U x rounds requests; a resumed one sends those it lacks,
            with rounds numbered on from the last stored (a conversation from its start)."""
            count, last_round = store.stored_count(run_id, c, repeat)
            first = 0 if last_round is None else last_round + 1
            first += -first % config.turns
            if count < c * config.rounds:
                await level(c, None, c * config.rounds - count,
                            lambda: sweep.run_users(c, c * config.rounds - count, commit,
                                                    progress.advance, repeat, first, count),
                            repeat)

        async def measure_missing(c: int) -> None:
            if config.mode == "users":
                for repeat in range(config.repeat):
                    await measure_users(c, repeat)
                return
            for repeat in range(config.repeat):
                todo = _todo(config, [r for r in range(config.rounds)
                                      if (c, repeat, r) not in done])
                store.delete_rounds(run_id, c, repeat, [r for r in todo
                                                        if (c, repeat, r) in done])
                if todo:
                    await measure(c, repeat, todo)

        for c in config.levels:
            await measure_missing(c)
        done_rates = store.done_rates(run_id)
        for rate in config.rates:
            if rate not in done_rates:
                await level(0, rate, len(sweep.schedule(rate)),
                            functools.partial(sweep.run_rate, rate, commit,
                                              progress.advance))
        if config.search:
            how = await _search(config, store, run_id, targets or Targets(), measure_missing)
            progress.message(how)
    except (asyncio.CancelledError, KeyboardInterrupt):
        kept = _keep_unwritten(writer, store, run_id)
        _finish(store, run_id, "aborted", "interrupted by the user")
        if kept:
            progress.message(kept)
        raise
    except (WriterError, StoreError, ServerStoppedAnswering) as exc:
        kept = _keep_unwritten(writer, store, run_id)
        _finish(store, run_id, "failed", str(exc))
        raise RunFailed(f"{exc}{'; ' + kept if kept else ''}") from None
    except Exception as exc:
        _keep_unwritten(writer, store, run_id)
        _finish(store, run_id, "failed", str(exc) or type(exc).__name__)
        raise
    finally:
        await sweep.stop_users()
        sweep.close()
        if scraper:
            scraper.close()
    writer.close()
    store.finish_run(run_id, "complete")
    return RunResult(run_id, config, outcomes, clock)


async def _search(config: RunConfig, store: Store, run_id: str, targets: Targets,
                  measure_missing: Callable[[int], Awaitable[None]]) -> str:
    """After the levels: full levels (every repeat) at the C that harness.results.search picks,
    until Max C is known to the integer (or the cap passes). Probes are stored before they run, so a
    resumed run finishes a probe it had begun and then plans on from every verdict it has."""
    for c in store.probes(run_id):
        await measure_missing(c)
    while True:
        plan = search_plan(store, run_id, config, targets)
        if plan.next_probe is None:
            return f"Max C {plan.max_c}{'+' if plan.lower_bound else ''}: {plan.how}"
        store.add_probe(run_id, plan.next_probe)
        await measure_missing(plan.next_probe)


def _todo(config: RunConfig, missing: list[int]) -> list[int]:
    """Rounds to run: the missing ones, widened under --turns N to whole conversations (a turn
    resends the answers before it, which are not stored)."""
    if config.turns == 1:
        return missing
    starts = sorted({r - r % config.turns for r in missing})
    return [r for s in starts for r in range(s, min(s + config.turns, config.rounds))]


def _describe_load(config: RunConfig) -> str:
    """The load points of a run, for its first progress line."""
    turns = f", conversations of {config.turns} turns" if config.turns > 1 else ""
    if config.mode == "users":
        assert config.think is not None
        profile = f"{config.profile} " if config.profile else ""
        return (f"users mode, {profile}users at {config.think.describe()}, users "
                f"{list(config.levels)}, {config.rounds} requests each{turns}")
    return _describe_sweep(config) + turns


def _describe_sweep(config: RunConfig) -> str:
    if config.mode == "rate":
        rates = ", ".join(f"{r:g}" for r in config.rates)
        return (f"rate mode, {config.arrival} arrivals at {rates} requests/s, "
                f"{config.duration_s:g} s each")
    repeats = f", {config.repeat} repeats interleaved per level" if config.repeat > 1 else ""
    return f"{config.mode} mode, levels {list(config.levels)}, {config.rounds} rounds{repeats}"


def _describe_lag(stats: LevelStats) -> str:
    """A rate level's send lag: whether the schedule, and so the rate, was kept."""
    p50, p99 = stats.p50_send_lag_ms, stats.p99_send_lag_ms
    line = (f"R={stats.rate:g} req/s: send lag p50 {p50:.2f} ms, p99 {p99:.2f} ms"
            if p50 is not None and p99 is not None else f"R={stats.rate:g} req/s: nothing sent")
    return f"{line}; warning: {stats.lag_warning}" if stats.lag_warning else line


def _keep_unwritten(writer: BackgroundWriter, store: Store, run_id: str) -> str | None:
    """Close the writer, and put what it could not store into a spill file that `--resume`
    imports; a sentence saying where, or None when everything is on disk. A write error here
    must not mask the one that stopped the run."""
    try:
        writer.close()
    except Exception:
        pass
    rows = writer.unwritten
    if not rows:
        return None
    try:
        path = spill.write(store.path, run_id, rows)
    except spill.SpillError as exc:
        return str(exc)
    return (f"the {len(rows)} measured rows not yet stored are kept in {path}, and "
            f"`run --resume {run_id} --db {store.path}` stores them")


def _finish(store: Store, run_id: str, status: str, error: str) -> None:
    """Mark the run stopped; on a full disk even that may fail, and the resume is the same."""
    try:
        store.finish_run(run_id, status, error)
    except StoreError:
        pass
