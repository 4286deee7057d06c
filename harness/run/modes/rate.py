"""Mode `rate`: a level is a request rate R held for --duration seconds, its requests sent at
the offsets of harness.run.arrivals.schedule whether or not earlier ones have ended (open
loop). A level (concurrency 0, round 0, worker = request index) is committed whole once its
last request ends, so a resume runs a rate level again or not at all."""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import time
from typing import TYPE_CHECKING

from common.flag_types import positive_float
from harness.config import (
    ARRIVALS,
    DEFAULT_DURATION_S,
    MAX_DURATION_S,
    MAX_RUN_REQUESTS,
    ConfigError,
    RunConfig,
    parse_rates,
)
from harness.records import RequestRecord
from harness.results.metrics import LevelStats
from harness.run import aio
from harness.run.arrivals import check_rate_levels, schedule
from harness.run.modes import base
from harness.run.modes.flags import parsed_by
from harness.wire.client import stream_completion

if TYPE_CHECKING:
    from harness.run.sweep import Sweep


def _report(on_record: base.OnRecord, task: asyncio.Task[RequestRecord]) -> None:
    """Progress as each open-loop request ends; a cancelled one (Ctrl-C) reports nothing."""
    if not task.cancelled() and task.exception() is None:
        on_record(task.result())


class RateSender:
    """Sends rate levels: each request at its offset, whether or not earlier ones ended;
    requests that fall behind go out at once (their lag shows it)."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep

    async def warm(self, p: base.Pass) -> None:
        """About a second of this process's requests in flight."""
        rate = p.level.rate
        assert rate is not None
        share = p.share.count if p.share else 1
        sends = len(p.streams(len(self.sweep.schedule(rate))))
        await self.sweep.pool.warm(min(sends, math.ceil(rate / share)))

    async def run_pass(self, p: base.Pass, commit: base.Commit,
                       on_record: base.OnRecord) -> base.LevelOutcome:
        sweep, rate = self.sweep, p.level.rate
        assert rate is not None
        schedule = sweep.schedule(rate)
        mine = p.streams(len(schedule))
        offsets = [schedule[k] for k in mine]
        prepared = [sweep.rate_request(rate, k) for k in mine]  # off the clock
        await p.started()
        cpu0 = time.process_time()
        tasks: list[asyncio.Task[RequestRecord]] = []
        start_ns = p.share.start_ns if p.share else time.perf_counter_ns()
        for offset, (request, record) in zip(offsets, prepared, strict=True):
            due_ns = start_ns + round(offset * 1e9)
            await aio.until_ns(due_ns)
            record.scheduled_at = sweep.clock.wall(due_ns)
            task = asyncio.create_task(stream_completion(
                sweep.pool, request, record, sweep.clock, sweep.config.request_timeout_s,
                sweep.config.stall_timeout_s))
            task.add_done_callback(functools.partial(_report, on_record))
            tasks.append(task)
        records = list(await asyncio.gather(*tasks))
        commit(records)
        return base.LevelOutcome(0, records, time.process_time() - cpu0, rate)

    async def stop(self) -> None:
        """A level's requests are all awaited within its pass."""


class Rate(base.LoadMode):
    name = "rate"
    splits = True
    help = "rate: open loop at each of --rates"
    stored_as = (("duration", "duration_s"),)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rates", type=parsed_by(parse_rates),
                            help="mode rate: request rates in requests/s, e.g. 0.5,1,2,4 "
                                 "(default: none)")
        parser.add_argument("--arrival", choices=ARRIVALS, default=ARRIVALS[0],
                            help="mode rate: poisson (exponential gaps, seeded by --seed) or "
                                 "constant gaps")
        parser.add_argument("--duration", type=positive_float, default=DEFAULT_DURATION_S,
                            metavar="S",
                            help="mode rate: seconds each rate level sends for")

    def read_flags(self, args: argparse.Namespace, chosen: bool) -> dict[str, object]:
        return {"rates": args.rates or (), "arrival": args.arrival,
                "duration_s": args.duration}

    def default_levels(self, concurrencies: tuple[int, ...],
                       args: argparse.Namespace) -> tuple[int, ...]:
        return ()  # its load points are --rates

    def refuse_outside(self, config: RunConfig) -> None:
        """Rates and concurrency levels are different load points: a run has one kind."""
        given = [flag for flag, value in (("--rates", config.rates),
                                          ("--duration", config.duration_s != DEFAULT_DURATION_S),
                                          ("--arrival", config.arrival != ARRIVALS[0]))
                 if value]
        if given:
            raise ConfigError(f"{given[0]} needs --mode rate")

    def check(self, config: RunConfig) -> None:
        if not config.rates:
            raise ConfigError("--mode rate needs --rates, e.g. --rates 0.5,1,2,4")
        if any(not 0 < r < math.inf for r in config.rates):
            raise ConfigError("--rates must be numbers of requests/s above 0")
        if not 0 < config.duration_s < math.inf:
            raise ConfigError(f"--duration must be a positive number of seconds, "
                              f"not {config.duration_s}")
        if config.arrival not in ARRIVALS:
            raise ConfigError(f"--arrival must be one of {', '.join(ARRIVALS)}, "
                              f"not {config.arrival!r}")
        if config.duration_s > MAX_DURATION_S:
            raise ConfigError(f"--duration must be at most {MAX_DURATION_S:,.0f} s (a day), not "
                              f"{config.duration_s:,g}: a rate level is stored only once it "
                              "ends")
        scheduled = sum(rate * config.duration_s for rate in config.rates)
        if scheduled > MAX_RUN_REQUESTS:
            raise ConfigError(f"--rates x --duration schedule {scheduled:,.0f} requests, above "
                              f"the {MAX_RUN_REQUESTS:,} one run may hold: lower the "
                              "rates or the duration")
        if config.levels:
            raise ConfigError("--levels are concurrencies: --mode rate takes --rates instead")
        if config.search:
            raise ConfigError("--search looks for a concurrency: it does not apply to --mode "
                              "rate")
        if config.turns > 1:
            raise ConfigError("--turns needs a user that waits for each answer: --mode closed, "
                              "burst or users, not rate")
        if config.repeat > 1:
            raise ConfigError("--repeat does not apply to --mode rate: a rate level is "
                              "repeated by running it for a longer --duration")
        check_rate_levels(config)  # a level of no request would measure nothing

    def describe(self, config: RunConfig) -> str:
        rates = ", ".join(f"{r:g}" for r in config.rates)
        return (f"rate mode, {config.arrival} arrivals at {rates} requests/s, "
                f"{config.duration_s:g} s each")

    def levels(self, config: RunConfig) -> tuple[base.Level, ...]:
        return tuple(base.Level(0, rate) for rate in config.rates)

    def owed(self, config: RunConfig, level: base.Level,
             ledger: base.Ledger) -> list[base.Pass]:
        """A rate level is stored whole or not at all."""
        assert level.rate is not None
        if level.rate in ledger.rates:
            return []
        sends = schedule(level.rate, config.duration_s, config.arrival, config.seed)
        return [base.Pass(level, requests=len(sends))]

    def sender(self, sweep: Sweep) -> base.Sender:
        return RateSender(sweep)

    def notes(self, stats: LevelStats) -> list[str]:
        """A rate level's send lag: whether the schedule, and so the rate, was kept."""
        p50, p99 = stats.p50_send_lag_ms, stats.p99_send_lag_ms
        line = (f"R={stats.rate:g} req/s: send lag p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                if p50 is not None and p99 is not None
                else f"R={stats.rate:g} req/s: nothing sent")
        return [f"{line}; warning: {stats.lag_warning}" if stats.lag_warning else line]


MODE = Rate()
