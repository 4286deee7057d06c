"""One benchmark run end to end: check the target, calibrate prompts, sweep, store.

Every finished round is on disk before the next level starts; Ctrl-C marks the run aborted
with its finished rounds kept; `resume` runs only the (level, repeat, round) still missing.
Under `--repeat N` each level runs its N passes back to back (level 1 of repeat 0, 1, ...,
then level 2), so drift over the run lands inside every level's spread.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import secrets
import signal
import time
from dataclasses import dataclass, field, replace

from harness import __version__
from harness.config import ConfigError, RunConfig, StoredRun, check_run_id
from harness.records import RequestRecord
from harness.results import spill
from harness.results.client_check import describe as describe_client
from harness.results.client_check import worst
from harness.results.metrics import (
    LevelStats,
    Targets,
    first_turns,
    level_name,
    level_stats,
    mean_prompt_tokens,
    prompt_warning,
)
from harness.results.run_row import RunRow
from harness.results.server_cpu import ServerCpu
from harness.results.server_cpu import describe as describe_starved
from harness.results.server_table import describe_server_table, server_table
from harness.results.store import Store, StoreError
from harness.run import aio
from harness.run.limits import ensure_open_files
from harness.run.loop_monitor import LoopMonitor
from harness.run.modes.base import Ledger, Level, LevelOutcome, LoadMode, Pass, Sender
from harness.run.progress import LevelProgress
from harness.run.prompts import Prompts
from harness.run.ray_workers import Cluster, RaySpawner
from harness.run.server_cpu_monitor import ServerCpuMonitor
from harness.run.settled import SettledRun, settle
from harness.run.sweep import Sweep, calibration_key, calibration_ordinal
from harness.run.table_state import TableState, check_hosts
from harness.run.workers import WorkerDied, WorkerSender
from harness.run.workload import Calibration, TokenLine, calibrate, payload
from harness.run.writer import BackgroundWriter, WriterError
from harness.wire import host_scrape, target
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint
from harness.wire.scraper import LevelScrape, Scraper

# prompts per calibration probe: a window of ~100 words of prose varies ~3 % in tokens (with
# this project's tokenizer; word prompts ~0.3 %), so 8 hold the probe's mean to ~1 %
CALIBRATION_SAMPLES = 8
# a stop ends within seconds, whatever holds the results file: the writer gets this long to
# store what it has (~0.5 s at C=32, measured), marking the run aborted this long to get the lock
STOP_DRAIN_S = 2.0
STOP_LOCK_WAIT_S = 1.0


class RunFailed(RuntimeError):
    """The run stopped as failed (stored so), with what it measured kept; one sentence."""


class RunStopped(aio.Stopped):
    """A signal stopped the run. `stored`: the run was stored before it (it is left aborted,
    to resume); else there is nothing to resume. `notes`: sentences on what the stop left
    where (rows kept in a spill file, a run that could not be marked aborted)."""

    def __init__(self, signum: int, stored: bool, notes: tuple[str, ...] = ()) -> None:
        super().__init__(signum)
        self.stored = stored
        self.notes = notes


@dataclass(slots=True)
class _StopReport:
    """Filled in as the run goes, for the RunStopped a stop raises: an exception raised in the
    run's clean-up can be replaced there by a repeated cancellation (aio.run resends it)."""

    stored: bool
    notes: list[str] = field(default_factory=list)


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
                     run_id: str, target_tokens: int) -> Calibration:
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
        return await calibrate(target_tokens, probe)
    finally:
        pool.close()


async def execute(
    run: SettledRun | RunConfig,
    endpoint: Endpoint,
    store: Store,
    progress: LevelProgress,
    run_id: str,
    resume: bool = False,
    targets: Targets | None = None,
    cluster: Cluster | None = None,
    server_pid: int | None = None,
) -> RunResult:
    """Run (or resume) a sweep. TargetError (or ConfigError, for prompts a resumed run no longer
    has) before anything is stored if the target is bad. `run`: as the CLI settled it (its
    mode's check and its prompts done once, there), or a bare config, settled here.
    RunStopped when a signal stops it (aio.run), saying whether the run had been stored.
    `cluster`: the Ray cluster `--ray` joined, whose actors send the load. `server_pid`: the
    process of a server this run started itself, whose CPU each level measures."""
    report = _StopReport(stored=resume)
    try:
        settled = run if isinstance(run, SettledRun) else settle(run)
        return await _execute(settled, endpoint, store, progress, run_id, resume, targets,
                              report, cluster, server_pid)
    except (asyncio.CancelledError, KeyboardInterrupt) as exc:
        signum = aio.stopping()
        if signum is None and isinstance(exc, asyncio.CancelledError):
            raise  # cancelled by its caller, not stopped by a signal
        raise RunStopped(signum or signal.SIGINT, report.stored, tuple(report.notes)) from None


async def _execute(settled: SettledRun, endpoint: Endpoint, store: Store,
                   progress: LevelProgress, run_id: str, resume: bool, targets: Targets | None,
                   report: _StopReport, cluster: Cluster | None,
                   server_pid: int | None) -> RunResult:
    config, mode, prompts = settled.config, settled.mode, settled.prompts
    ensure_open_files(config)  # a level past the limit would be stored as server errors
    check_run_id(run_id)
    config, server = await _preflight(config, mode, endpoint, progress)
    clock = Clock()
    if resume:
        stored = _reopen(config, store, progress, run_id, prompts)
    else:
        stored = await _create(config, mode, endpoint, clock, store, progress, run_id, prompts,
                               server)
        report.stored = True
    if stored.prompt_words is not None:
        prompts = prompts.sized(stored.prompt_words)
    ledger = Ledger(store, run_id)
    progress.message(f"run {run_id}: {mode.describe(config)}, target {endpoint.base_url} "
                     f"model {config.model}")
    line = TokenLine(*stored.prompt_line) if stored.prompt_line else None
    sweep = Sweep(config, endpoint, run_id, prompts, clock, line)
    writer = BackgroundWriter(store, run_id, lambda rows: progress.notice(
        f"the results writer process died: restarted it, and sent the {rows} rows it had not "
        "stored again"), token_times=config.token_times)
    spawner = (RaySpawner(cluster, config.workers,
                          lambda host: store.write_load_host(run_id, host)) if cluster else None)
    sender = (WorkerSender(sweep, config.workers, config.keep_going, progress.notice, spawner)
              if config.workers > 1 or spawner else mode.sender(sweep))
    scraper = (Scraper(endpoint if config.server_metrics else None, config.host_metrics)
               if config.server_metrics or config.host_metrics else None)
    passes = Passes(config, mode, ledger, sweep, sender, writer, scraper,
                    LoopMonitor(sweep.pool.unread_bytes), progress, prompts.calibrated,
                    ServerCpuMonitor(server_pid) if server_pid else None,
                    TableState(config.host_metrics, config.table_state,
                               round(config.warm_budget_gb * 2**30)
                               if config.warm_budget_gb else None,
                               config.idle_s, progress.message, progress.notice)
                    if config.table_state or config.idle_s else None)
    try:
        if config.warmup and not resume:  # before the first level's scrape: left out
            first = config.levels[0] if config.levels else 1
            await sweep.warmup(config.warmup, min(config.warmup, first))
        for level in mode.levels(config):
            await passes.level(level)
        if config.search:
            progress.message(await mode.search(config, ledger, targets or Targets(),
                                               passes.level, progress.message))
        if isinstance(sender, WorkerSender):  # a level --keep-going left short: failed
            sender.check_whole()
    except (asyncio.CancelledError, KeyboardInterrupt):
        kept = _keep_unwritten(writer, store, run_id, STOP_DRAIN_S)
        unmarked = _finish(Store(store.path, STOP_LOCK_WAIT_S), run_id, "aborted",
                           "interrupted by the user")
        report.notes.extend(note for note in (kept, unmarked) if note)
        raise
    except (WriterError, StoreError, ServerStoppedAnswering, WorkerDied) as exc:
        kept = _keep_unwritten(writer, store, run_id)
        _finish(store, run_id, "failed", str(exc))
        raise RunFailed(f"{exc}{'; ' + kept if kept else ''}") from None
    except Exception as exc:
        _keep_unwritten(writer, store, run_id)
        _finish(store, run_id, "failed", str(exc) or type(exc).__name__)
        raise
    finally:
        await passes.close()
    writer.close()
    store.finish_run(run_id, "complete")
    return RunResult(run_id, config, passes.outcomes, clock)


async def _preflight(config: RunConfig, mode: LoadMode, endpoint: Endpoint,
                     progress: LevelProgress) -> tuple[RunConfig, dict[str, object] | None]:
    """The target checked before anything is stored: the config with the model and engine it
    serves, and its /stats table (None: it has none)."""
    info = await target.describe(endpoint, config.model or None)
    config = replace(config, model=info.model, engine=config.engine or info.engine)
    pool = await target.kv_pool_tokens(endpoint) if config.server_metrics else None
    mode.check_server(config, info.max_model_len, pool)
    if info.max_model_len is None:
        sized = ("the trace's requests" if config.trace or config.lengths_from
                 else f"requests of {config.longest_request_tokens} tokens")
        progress.message(f"the server does not say its context length (max_model_len), so "
                         f"{sized} cannot be checked against it")
    server = server_table(await target.fetch_stats(endpoint))
    if server:
        progress.message(describe_server_table(server))
    samples = []
    for url in config.host_metrics:  # each host answers with its metrics, or nothing is sent
        try:
            sample = await asyncio.to_thread(host_scrape.read, url)
        except host_scrape.HostScrapeError as exc:
            raise target.TargetError(host_scrape.refusal(url, exc)) from None
        progress.message(f"host metrics: {url} ({sample.source})")
        samples.append((url, sample))
    check_hosts(config.table_state, samples)
    return config, server


async def _create(config: RunConfig, mode: LoadMode, endpoint: Endpoint, clock: Clock,
                  store: Store, progress: LevelProgress, run_id: str, prompts: Prompts,
                  server: dict[str, object] | None) -> StoredRun:
    """A new run: its prompts calibrated, then stored; what it stored of them."""
    words, probed, line = None, None, None
    if prompts.calibrated:
        calibration = await _calibrate(config, endpoint, clock, prompts, run_id,
                                       mode.calibration_target(config))
        progress.message(f"{calibration.describe()}; source: {prompts.describe()}")
        words, probed = calibration.words, calibration.prompt_tokens
        line = calibration.line
    else:
        progress.message(f"prompts: not calibrated; source: {prompts.describe()}")
    stored = StoredRun(config, words, probed, prompts.digest(), server,
                       (line.base, line.per_word) if line else None)
    store.create_run(RunRow(
        run_id=run_id, device=config.device, engine=config.engine, model=config.model,
        table_placement=config.table_placement, target_url=config.url,
        api=config.api, mode=config.mode, levels=list(config.levels),
        rounds=config.rounds, input_tokens=config.input_tokens,
        output_tokens=config.output_tokens, label=config.label,
        config=stored.to_json(), host=json.dumps(host_info()), version=__version__,
    ))
    return stored


def _reopen(config: RunConfig, store: Store, progress: LevelProgress, run_id: str,
            prompts: Prompts) -> StoredRun:
    """A resumed run: running again, with the rows a full disk kept out of the file stored;
    what it stored of its prompts. ConfigError if its prompts have changed (naming the file,
    and a trace's first changed line)."""
    stored = StoredRun.from_json(store.run(run_id).config)
    if stored.prompts_digest is not None and (what := prompts.changed(stored.prompts_digest)):
        raise ConfigError(f"{what} since run {run_id} started, so its missing rounds cannot be "
                          "rebuilt alike")
    store.update_run(run_id, status="running", finished_at=None, error=None)
    for path, rows in spill.pending(store.path, run_id):  # measured when the disk was full
        store.write_requests(run_id, rows, config.token_times)
        path.unlink()
        progress.message(f"stored the {len(rows)} rows kept in {path}")
    return stored


@dataclass(eq=False)
class Passes:
    """Sends what each level still owes, pass by pass, each with the server's counters around
    it, the timing loop's own lag and every figure stored before the next pass starts."""

    config: RunConfig
    mode: LoadMode
    ledger: Ledger
    sweep: Sweep
    sender: Sender
    writer: BackgroundWriter
    scraper: Scraper | None
    monitor: LoopMonitor
    progress: LevelProgress
    calibrated: bool  # prompts sized to --input-tokens: warn when the server counts otherwise
    server_cpu: ServerCpuMonitor | None = None  # a server this run started: its CPU per pass
    table_state: TableState | None = None  # --table-state and --idle, through the agents
    outcomes: list[LevelOutcome] = field(default_factory=list)

    async def level(self, level: Level) -> None:
        """Every pass the level still owes."""
        for p in self.mode.owed(self.config, level, self.ledger):
            store, run_id = self.ledger.store, self.ledger.run_id
            store.delete_rounds(run_id, p.level.concurrency, p.repeat, p.redo)
            await self.run(p)

    def commit(self, records: list[RequestRecord]) -> None:
        """A finished round to the writer; the run stops if it shows the server is gone."""
        self.writer.submit(records)
        if not self.config.keep_going and (why := stopped_answering(records)):
            raise ServerStoppedAnswering(why)

    async def run(self, p: Pass) -> None:
        """One pass of a level: its requests, the server's counters around it, stored."""
        endpoint, progress = self.sweep.endpoint, self.progress
        if self.table_state:
            await self.table_state.before_pass()
        before = await target.fetch_stats(endpoint)
        for note in await self.scraper.start() if self.scraper else []:
            progress.message(note)
        await self.sender.warm(p)  # before its clock and the loop's monitor
        progress.start_level(p.level.concurrency, p.requests)
        if self.server_cpu:
            self.server_cpu.start()
        self.monitor.start()
        outcome = await self.sender.run_pass(p, self.commit, progress.advance)
        outcome.client = worst([self.monitor.stop(), *outcome.worker_checks])
        server_cpu = self.server_cpu.stop() if self.server_cpu else None
        scraped = await self.scraper.stop() if self.scraper else LevelScrape()
        await self.writer.flush()
        stats = level_stats(p.level.concurrency, outcome.records, self.config.output_tokens,
                            p.level.rate)
        progress.end_level(stats)
        for note in scraped.notes:
            progress.message(note)
        self._warn(p, outcome, stats)
        after = await target.fetch_stats(endpoint)
        self._store(p, outcome, stats, (before, after), scraped, server_cpu)
        self.outcomes.append(outcome)

    def _warn(self, p: Pass, outcome: LevelOutcome, stats: LevelStats) -> None:
        """Prompts the server counted off --input-tokens, and what the mode says of a level."""
        sized = stats if self.config.turns == 1 else level_stats(
            p.level.concurrency, first_turns(outcome.records), self.config.output_tokens,
            p.level.rate)
        if self.calibrated and (warning := prompt_warning(sized, self.config.input_tokens)):
            self.progress.message(f"warning: {warning}")
        for note in self.mode.notes(stats):
            self.progress.message(note)

    def _store(self, p: Pass, outcome: LevelOutcome, stats: LevelStats,
               server: tuple[dict | None, dict | None], scraped: LevelScrape,
               server_cpu: ServerCpu | None) -> None:
        """A pass's figures beside its requests: the server's counters (before, after) and
        /metrics rows, the serving hosts' figures, the client's own check, a server this run
        started: its CPU and others', what the mode keeps."""
        store, run_id, c, rate = self.ledger.store, self.ledger.run_id, p.level.concurrency, \
            p.level.rate
        if server[0] is not None or server[1] is not None:
            store.write_server_stats(run_id, c, server[0], server[1], rate, p.repeat)
        if scraped.rows:
            store.write_server_metrics(run_id, c, scraped.rows, rate, p.repeat)
        if scraped.hosts:
            store.write_host_levels(run_id, c, scraped.hosts, rate, p.repeat)
        for level, _ in scraped.hosts:
            if level.missing:
                self.progress.message(f"warning: {level_name(stats)}: no host figures from "
                                      f"{level.url}: {level.missing}")
        assert outcome.client is not None
        store.write_client_check(run_id, c, outcome.client, rate, p.repeat)
        if server_cpu:
            store.write_server_cpu(run_id, c, server_cpu, rate, p.repeat)
        self.mode.store_pass(store, self.config, run_id, p, outcome)
        if outcome.client.client_bound:
            self.progress.message(
                f"warning: {describe_client(level_name(stats), outcome.client)}")
        if server_cpu and server_cpu.server_starved:
            self.progress.message(f"warning: {describe_starved(level_name(stats), server_cpu)}")
        # what the prompts sent so far measured, right even if the run is killed next
        store.update_run(run_id, measured_input_tokens=mean_prompt_tokens(store.requests(run_id)))

    async def close(self) -> None:
        """Nothing of the run left sending, its connections and scraper closed."""
        await self.sender.stop()
        self.sweep.close()
        if self.scraper:
            self.scraper.close()


def _keep_unwritten(writer: BackgroundWriter, store: Store, run_id: str,
                    patience_s: float = math.inf) -> str | None:
    """Close the writer, put back a results file deleted under the run (Store.put_back), and
    put what the writer could not store into a spill file that `--resume` imports; a sentence
    saying so, or None when everything is on disk. A write error here must not mask the one
    that stopped the run."""
    try:
        writer.close(patience_s)  # a stop's patience: what is left then is kept as below
    except Exception:
        pass
    back = "it is put back as it was, from the copy this run held open" if store.put_back() else ""
    resume = f"`run --resume {run_id} --db {store.path}`"
    rows = writer.unwritten
    if not rows:
        return f"{back}, and {resume} measures the rest" if back else None
    try:
        path = spill.write(store.path, run_id, rows)
    except spill.SpillError as exc:
        return f"{back}; {exc}" if back else str(exc)
    kept = (f"the {len(rows)} measured rows not yet stored are kept in {path}, and {resume} "
            "stores them")
    return f"{back}; {kept}" if back else kept


def _finish(store: Store, run_id: str, status: str, error: str) -> str | None:
    """Mark the run stopped; on a full disk or a file another process holds locked even that
    may fail, and the resume is the same: then a sentence saying so."""
    try:
        store.finish_run(run_id, status, error)
    except StoreError as exc:
        return (f"the run could not be marked {status} ({exc}); --resume continues it all "
                "the same")
    return None
