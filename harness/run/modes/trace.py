"""Modes `trace` and `trace-closed`: a trace file's requests replayed (harness.run.trace),
each with its own lengths and, for Mooncake's hash ids, its shared prefix.

- `trace` (the default for a trace with timestamps): a level is a speedup X; the window's
  requests go out on the trace's clock divided by X whether or not earlier ones have ended
  (open loop, send lag recorded as in rate mode), a session's turns each after the answer
  before it. A level is stored whole once its last request ends, under the request rate it
  offers (the window's mean rate x X), so a resume replays it again or not at all; `--search`
  finds the highest speedup whose requests meet the targets.
- `trace-closed` (`--trace-schedule closed`, or a trace without timestamps): a level is a
  concurrency C; C workers take the window's requests in trace order, a session at a time, and
  a level is committed a batch of whole sessions at a time, so a resume sends only the
  requests it lacks.

`--trace` alone chooses between them; `--mode` may name either.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.flag_types import number, positive_float, positive_int
from common.readable import figure
from harness.config import (
    MAX_DURATION_S,
    MAX_REQUEST_TOKENS,
    MAX_RUN_REQUESTS,
    ConfigError,
    RunConfig,
)
from harness.records import RequestRecord
from harness.results.metrics import (
    LevelStats,
    Targets,
    judge,
    level_name,
    point,
    stats_by_level,
)
from harness.results.search import MAX_SPEEDUP, plan_speedup
from harness.run import aio
from harness.run.modes import base
from harness.run.prompts import Prompts
from harness.run.sweep import all_or_none
from harness.run.trace import context, lengths, source
from harness.run.trace.blocks import corpus_words
from harness.run.trace.formats import FORMATS, TraceError
from harness.run.trace.prompts import TraceBlocks, TraceTexts
from harness.run.trace.requests import PassRequests, Shaped, shaped, units
from harness.run.workload import UNCOUNTED, Turn
from harness.wire.client import build_request, stream_completion

if TYPE_CHECKING:
    from harness.run.sweep import Sweep

SCHEDULES = ("timed", "closed")
DEFAULT_BLOCK_TOKENS = 512
MAX_INPUT_SCALE = 1000.0


def trace_of(config: RunConfig) -> source.Trace:
    """The run's trace window, read once per process (the CLI checks it before anything is
    stored; the passes replay it)."""
    return lengths.read(config.trace, config.trace_format, lengths.window(config),
                        config.sort_trace)


@functools.lru_cache(maxsize=4)
def _shapes(config: RunConfig) -> tuple[Shaped, ...]:
    return tuple(shaped(config, trace_of(config)))


@functools.lru_cache(maxsize=4)
def _needs(config: RunConfig) -> tuple[context.Need, ...]:
    return tuple(context.needs(trace_of(config), _shapes(config)))


def _speedups(text: str) -> tuple[float, ...]:
    values = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not 0 < value <= MAX_SPEEDUP:
            raise argparse.ArgumentTypeError(
                f"must be speedups above 0 and at most {MAX_SPEEDUP:g}, e.g. 1,2,4; "
                f"{item!r} is not")
        values.append(value)
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError("lists a speedup twice")
    return tuple(sorted(values))


def _seconds(text: str) -> float:
    """0 or more seconds."""
    if not 0 <= (value := number(text)) < math.inf:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text!r}")
    return value


def _flags_given(config: RunConfig) -> list[str]:
    """The trace flags a run set, in the order --help lists them."""
    return [flag for flag, given in (
        ("--trace", bool(config.trace)), ("--trace-format", bool(config.trace_format)),
        ("--speedup", bool(config.speedups)),
        ("--trace-block-tokens", config.trace_block_tokens != DEFAULT_BLOCK_TOKENS),
        ("--sort-trace", config.sort_trace), ("--trace-start", config.trace_start_s != 0),
        ("--trace-duration", config.trace_duration_s is not None),
        ("--trace-limit", config.trace_limit is not None),
        ("--input-scale", config.input_scale != 1.0),
        ("--max-input-tokens", config.max_input_tokens is not None),
        ("--max-output-tokens", config.max_output_tokens is not None)) if given]


class _Replay(base.LoadMode):
    """What both trace modes share: the trace, its prompts, its lengths' checks."""

    def refuse_outside(self, config: RunConfig) -> None:
        """A sweep takes a trace's lengths (--lengths-from, with the flags that fit them to
        the server), not its clock or its blocks."""
        if config.mode in NAMES:  # the other trace mode: its own check says what it lacks
            return
        if config.trace:
            raise ConfigError(f"--trace replays in --mode trace or trace-closed, not "
                              f"{config.mode}: leave out --mode")
        fitting = ("--trace-format", "--sort-trace", "--trace-start", "--trace-duration",
                   "--trace-limit", "--input-scale", "--max-input-tokens", "--max-output-tokens")
        given = [f for f in _flags_given(config) if not (config.lengths_from and f in fitting)]
        if given:
            raise ConfigError(f"{given[0]} needs --trace (a trace replay)"
                              + ("" if config.lengths_from else " or --lengths-from"))

    def check(self, config: RunConfig) -> None:
        if not config.trace:
            raise ConfigError(f"--mode {self.name} needs --trace FILE")
        if config.lengths_from:
            raise ConfigError("--lengths-from draws lengths for a sweep: a trace replay sends "
                              "each of its requests at its own lengths")
        if config.turns > 1:
            raise ConfigError("--turns does not apply to a trace: its sessions (jsonl "
                              "session_id) are its conversations")
        if not 0 < config.input_scale <= MAX_INPUT_SCALE:
            raise ConfigError(f"--input-scale must be above 0 and at most "
                              f"{MAX_INPUT_SCALE:g}, not {config.input_scale:g}")
        trace = trace_of(config)
        if not trace.timed and (config.trace_start_s or config.trace_duration_s is not None
                                or config.sort_trace):
            raise ConfigError(f"trace {config.trace} has no timestamps, so --trace-start, "
                              "--trace-duration and --sort-trace do not apply: take a window "
                              "with --trace-limit")
        longest = max(_needs(config), key=lambda n: n.tokens)
        if longest.tokens > MAX_REQUEST_TOKENS:
            raise ConfigError(f"the trace's longest request, {context.describe(trace, longest)}, "
                              f"needs {longest.tokens:,} tokens, above the "
                              f"{MAX_REQUEST_TOKENS:,} one request may hold: "
                              f"{context.remedy(trace, [longest])}")

    @staticmethod
    def check_size(config: RunConfig, passes: int) -> None:
        """`passes` over the window must fit in one run."""
        trace = trace_of(config)
        if passes * len(trace.requests) > MAX_RUN_REQUESTS:
            raise ConfigError(f"{passes} passes over the trace's {len(trace.requests):,} "
                              f"requests ask for {passes * len(trace.requests):,}, above the "
                              f"{MAX_RUN_REQUESTS:,} one run may hold: take a window "
                              "(--trace-limit, --trace-duration) or fewer levels")

    def prompts(self, config: RunConfig) -> Prompts:
        trace = trace_of(config)
        if any(r.input_tokens is not None for r in trace.requests):
            return TraceBlocks(trace, config.seed)
        return TraceTexts(trace)

    def calibration_target(self, config: RunConfig) -> int:
        """The window's median prompt: the line is fitted around the lengths sent most."""
        sizes = [s.input_tokens for s in _shapes(config) if s.input_tokens is not None]
        return min(max(round(statistics.median(sizes)), 32), 4096) if sizes else 128

    def check_server(self, config: RunConfig, context_tokens: int | None,
                     kv_pool: int | None) -> None:
        """Every request, a session's turns with the conversation before them, must fit the
        server's context and KV pool."""
        trace = trace_of(config)
        for limit, what in ((context_tokens, "context (its max_model_len)"),
                            (kv_pool, "KV pool")):
            over = [n for n in _needs(config) if limit is not None and n.tokens > limit]
            if over:
                longest = max(over, key=lambda n: n.tokens)
                raise ConfigError(
                    f"{len(over):,} of the trace's {len(trace.requests):,} requests need more "
                    f"than the server's {limit:,}-token {what}; the longest, "
                    f"{context.describe(trace, longest)}, needs {longest.tokens:,} tokens of "
                    f"prompt and output: {context.remedy(trace, over)}")

    def notes(self, stats: LevelStats) -> list[str]:
        """What the server counted and found cached against what the trace asked and shares."""
        parts = []
        counted, asked = stats.number("mean_prompt_tokens"), stats.number(
            "mean_input_tokens_requested")
        if asked is not None and counted:
            parts.append(f"prompts {counted:.0f} tokens by the server's count "
                         f"({counted / asked - 1:+.1%} on the {asked:.0f} asked)")
        if (shared := stats.number("mean_trace_prefix_tokens")) is not None:
            found = stats.number("mean_cached_tokens")
            cached = "" if found is None else f", {found:.0f} found cached by the server"
            parts.append(f"{shared:.0f} shared by the trace's blocks{cached}")
        return [f"{level_name(stats)}: {'; '.join(parts)}"] if parts else []


class Timed(_Replay):
    name = "trace"
    splits = True
    help = "trace: a trace's requests on its own clock, --speedup times as fast (--trace)"
    max_name = "sustained speedup"
    stored_as = (("speedup", "speedups"), ("trace_start", "trace_start_s"),
                 ("trace_duration", "trace_duration_s"))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The flags of both trace modes (the closed one declares none of its own)."""
        parser.add_argument("--trace", metavar="FILE",
                            help="replay a trace: Mooncake JSONL, Azure or BurstGPT CSV, or "
                                 "engram-bench JSONL (messages or prompt, optional timestamp, "
                                 "session_id, max_tokens); chooses --mode trace, or "
                                 "trace-closed for a trace without timestamps (default: none)")
        parser.add_argument("--lengths-from", metavar="TRACE",
                            help="a sweep (not a replay): each request's input and output "
                                 "lengths drawn from this trace's (Mooncake, Azure or BurstGPT), "
                                 "fitted by --input-scale and --max-*-tokens (default: none, "
                                 "--input-tokens and --output-tokens)")
        parser.add_argument("--trace-format", choices=FORMATS,
                            help="the trace's format (default: guessed from its first line)")
        parser.add_argument("--trace-schedule", choices=SCHEDULES,
                            help="timed: on the trace's clock / --speedup; closed: at "
                                 "--levels concurrencies in trace order (default: timed when "
                                 "the trace has timestamps)")
        parser.add_argument("--speedup", type=_speedups, metavar="X,...",
                            help="mode trace: the trace's clock divided by each, one level "
                                 "each (default: 1)")
        parser.add_argument("--trace-block-tokens", type=positive_int,
                            default=DEFAULT_BLOCK_TOKENS, metavar="N",
                            help="tokens of a Mooncake hash id's block")
        parser.add_argument("--sort-trace", action="store_true",
                            help="sort a trace whose timestamps are out of order (default: "
                                 "refused)")
        parser.add_argument("--trace-start", type=_seconds, default=0.0, metavar="S",
                            help="replay from this many seconds into the trace")
        parser.add_argument("--trace-duration", type=positive_float, metavar="S",
                            help="replay this many seconds of the trace (default: to its end)")
        parser.add_argument("--trace-limit", type=positive_int, metavar="N",
                            help="replay at most the window's first N requests (default: all)")
        parser.add_argument("--input-scale", type=positive_float, default=1.0, metavar="F",
                            help="multiply every input length and the block size by F, "
                                 "keeping the blocks' sharing (e.g. 0.02 for a small server)")
        parser.add_argument("--max-input-tokens", type=positive_int, metavar="M",
                            help="clip each prompt to M tokens (default: none)")
        parser.add_argument("--max-output-tokens", type=positive_int, metavar="M",
                            help="clip each max_tokens to M (default: none)")

    def read_flags(self, args: argparse.Namespace, chosen: bool) -> dict[str, object]:
        def absolute(path: str | None) -> str:
            return str(Path(path).expanduser().absolute()) if path else ""

        return {"trace": absolute(args.trace), "lengths_from": absolute(args.lengths_from),
                "trace_format": args.trace_format or "",
                "speedups": args.speedup or ((1.0,) if chosen else ()),
                "trace_block_tokens": args.trace_block_tokens, "sort_trace": args.sort_trace,
                "trace_start_s": args.trace_start, "trace_duration_s": args.trace_duration,
                "trace_limit": args.trace_limit, "input_scale": args.input_scale,
                "max_input_tokens": args.max_input_tokens,
                "max_output_tokens": args.max_output_tokens}

    def implied(self, args: argparse.Namespace) -> str | None:
        """--trace without --mode: a timed replay if the trace has timestamps (and no
        --trace-schedule closed), else at concurrency levels."""
        if not args.trace:
            return None
        if args.trace_schedule:
            return NAMES[SCHEDULES.index(args.trace_schedule)]
        _, timed = source.sniff(Path(args.trace).expanduser(), args.trace_format or "")
        return self.name if timed else CLOSED.name

    def default_levels(self, concurrencies: tuple[int, ...],
                       args: argparse.Namespace) -> tuple[int, ...]:
        return ()  # its load points are --speedup

    def check(self, config: RunConfig) -> None:
        super().check(config)
        trace = trace_of(config)
        if not trace.timed:
            raise TraceError(f"trace {config.trace} has no timestamps: replay it at "
                             "concurrency levels (--trace-schedule closed)")
        if trace.rate is None:
            raise TraceError(f"every request of trace {config.trace}'s window arrives at the "
                             "same moment, so it has no rate to speed up: replay it at "
                             "concurrency levels (--trace-schedule closed)")
        if config.levels:
            raise ConfigError("--levels are concurrencies: a timed trace replay takes "
                              "--speedup instead (or --trace-schedule closed)")
        if config.repeat > 1:
            raise ConfigError("--repeat does not apply to a timed trace replay: each speedup "
                              "replays the window once")
        if not config.speedups:
            raise ConfigError("--mode trace needs at least one --speedup")
        if (longest := trace.span_s / min(config.speedups)) > MAX_DURATION_S:
            raise ConfigError(f"the window's {figure(trace.span_s)} s at "
                              f"{min(config.speedups):g}x take {figure(longest)} s, above the "
                              f"{MAX_DURATION_S:,.0f} s (a day) "
                              "a level may last: take a shorter window (--trace-duration) or "
                              "a higher --speedup")
        self.check_size(config, len(config.speedups))

    def describe(self, config: RunConfig) -> str:
        speedups = ", ".join(f"{x:g}x" for x in config.speedups)
        return f"trace mode (timed), {trace_of(config).describe()}, replayed at {speedups}"

    def levels(self, config: RunConfig) -> tuple[base.Level, ...]:
        return tuple(self.level(config, x) for x in config.speedups)

    @staticmethod
    def level(config: RunConfig, speedup: float) -> base.Level:
        """A speedup's level, stored under the request rate it offers."""
        rate = trace_of(config).rate
        assert rate is not None  # check() refused a window without one
        return base.Level(0, rate * speedup, speedup)

    def owed(self, config: RunConfig, level: base.Level,
             ledger: base.Ledger) -> list[base.Pass]:
        """A timed level is stored whole or not at all."""
        if level.rate in ledger.rates:
            return []
        return [base.Pass(level, requests=len(trace_of(config).requests))]

    def sender(self, sweep: Sweep) -> base.Sender:
        return TimedReplay(sweep)

    def notes(self, stats: LevelStats) -> list[str]:
        p50, p99 = stats.p50_send_lag_ms, stats.p99_send_lag_ms
        lag = ([f"X={stats.speedup:g}: send lag p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                + (f"; warning: {stats.lag_warning}" if stats.lag_warning else "")]
               if p50 is not None and p99 is not None else [])
        return lag + super().notes(stats)

    async def search(self, config: RunConfig, ledger: base.Ledger, targets: Targets,
                     measure: base.Measure, say: Callable[[str], None]) -> str:
        """Replays at the speedups harness.results.search.plan_speedup picks, until the
        highest sustained one is known within its resolution; each probe is a whole level,
        so a resumed run plans on from every level it has stored."""
        order = list(config.speedups)
        while True:
            verdicts = _verdicts(ledger.store.requests(ledger.run_id), config, targets)
            order += [x for x in sorted(verdicts) if x not in order]
            plan = plan_speedup(verdicts, order)
            if plan.next_probe is None:
                failed = (f" ({plan.failed_above:g}x failed)"
                          if plan.failed_above is not None and plan.sustained else "")
                return (f"sustains {plan.sustained:g}x the trace's rate{failed}: {plan.how}"
                        if plan.sustained else f"no speedup sustained: {plan.how}")
            order.append(plan.next_probe)
            await measure(self.level(config, plan.next_probe))


def _verdicts(records: Sequence[RequestRecord], config: RunConfig,
              targets: Targets) -> dict[float, bool]:
    """Whether each timed level met the targets (Max C's rule), by speedup."""
    return {s.speedup: judge(point(s, targets.statistic, targets.ttft_of), targets).passes
            for s in stats_by_level(records, config.output_tokens, targets.slo)
            if s.speedup is not None}


class Closed(_Replay):
    name = "trace-closed"
    splits = True
    help = "trace-closed: a trace's requests in order at concurrency levels (--trace)"

    def check(self, config: RunConfig) -> None:
        super().check(config)
        if config.speedups:
            raise ConfigError("--speedup applies to a timed trace replay (--trace-schedule "
                              "timed), not one at concurrency levels")
        if not config.levels:
            raise ConfigError("levels must be positive integers")
        self.check_size(config, len(config.levels) * config.repeat)

    def describe(self, config: RunConfig) -> str:
        repeats = f", {config.repeat} repeats interleaved per level" if config.repeat > 1 else ""
        return (f"trace-closed mode, {trace_of(config).describe()}, at levels "
                f"{list(config.levels)}{repeats}")

    def owed(self, config: RunConfig, level: base.Level,
             ledger: base.Ledger) -> list[base.Pass]:
        """Each repeat's sessions (or requests) not stored whole; a session begun but not
        ended is sent again from its first turn, its stored turns deleted first."""
        c, passes = level.concurrency, []
        for repeat in range(config.repeat):
            todo = [i for unit in units(trace_of(config))
                    if not all((c, repeat, i) in ledger.done for i in unit) for i in unit]
            if todo:
                redo = tuple(i for i in todo if (c, repeat, i) in ledger.done)
                passes.append(base.Pass(level, repeat, len(todo), tuple(todo), redo))
        return passes

    def sender(self, sweep: Sweep) -> base.Sender:
        return ClosedReplay(sweep)


TIMED = Timed()
CLOSED = Closed()
NAMES = (TIMED.name, CLOSED.name)


def _prepared(config: RunConfig) -> None:
    """What every pass of this process builds its requests from, read before a pass's clock."""
    _shapes(config)
    corpus_words()


def _pass_requests(sweep: Sweep, epoch: str) -> PassRequests:
    config = sweep.config
    line = sweep.line or UNCOUNTED
    return PassRequests.of(config, trace_of(config), _shapes(config), line, epoch)


class TimedReplay:
    """Sends a timed level: each request (a session's first turn) at its arrival over the
    speedup, whether or not earlier ones ended; a session's later turns at theirs, but never
    before the answer before them. Each request's body is built while the loop waits for the
    one before it to be due."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep

    async def warm(self, p: base.Pass) -> None:
        """About a second of this process's requests in flight; the trace's lengths and the
        blocks' corpus read (a new load process would read them on the clock)."""
        assert p.level.rate is not None
        _prepared(self.sweep.config)
        share = p.share.count if p.share else 1
        sends = len(p.streams(len(units(trace_of(self.sweep.config)))))
        await self.sweep.pool.warm(min(sends, max(1, math.ceil(p.level.rate / share))))

    async def run_pass(self, p: base.Pass, commit: base.Commit,
                       on_record: base.OnRecord) -> base.LevelOutcome:
        sweep, level = self.sweep, p.level
        speedup, rate = level.speedup, level.rate
        assert speedup is not None and rate is not None
        trace = trace_of(sweep.config)
        requests = _pass_requests(sweep, f"x{speedup:g}")
        every = units(trace)
        groups = [every[k] for k in p.streams(len(every))]
        done: list[RequestRecord] = []
        tasks: list[asyncio.Task[None]] = []
        start_ns = 0

        def due_ns(index: int) -> int:
            return start_ns + round((trace.requests[index].arrival_s or 0.0) / speedup * 1e9)

        def prepare(index: int, history: Sequence[Turn]) -> tuple[bytes, RequestRecord, str]:
            body, said = requests.body(index, history)
            request_id = f"{sweep.run_id}-x{speedup:g}-k{index}"
            record = requests.record(index, request_id, 0, 0, index,
                                     turn=len(history) + 1)
            record.rate, record.speedup = rate, speedup
            return build_request(sweep.endpoint, body, request_id), record, said

        async def send(prepared: tuple[bytes, RequestRecord, str], at_ns: int,
                       keep_text: bool) -> str:
            request, record, _ = prepared
            await aio.until_ns(at_ns)
            record.scheduled_at = sweep.clock.wall(at_ns)
            cfg = sweep.config
            await stream_completion(sweep.pool, request, record, sweep.clock,
                                    cfg.request_timeout_s, cfg.stall_timeout_s, keep_text)
            done.append(record)
            on_record(record)
            return record.reply or ""

        async def session(unit: list[int], first: tuple[bytes, RequestRecord, str]) -> None:
            more = len(unit) > 1
            history: list[Turn] = [(first[2], await send(first, due_ns(unit[0]), more))]
            for index in unit[1:]:
                prepared = prepare(index, history)
                answer = await send(prepared, max(due_ns(index), time.perf_counter_ns()), more)
                history.append((prepared[2], answer))

        nxt = prepare(groups[0][0], ()) if groups else None  # off the clock
        await p.started()
        cpu0 = time.process_time()
        start_ns = p.share.start_ns if p.share else time.perf_counter_ns()
        try:
            for k, unit in enumerate(groups):
                assert nxt is not None
                await aio.until_ns(due_ns(unit[0]))
                tasks.append(asyncio.create_task(session(unit, nxt)))
                nxt = prepare(groups[k + 1][0], ()) if k + 1 < len(groups) else None
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        done.sort(key=lambda r: r.worker)
        commit(done)
        return base.LevelOutcome(0, done, time.process_time() - cpu0, rate)

    async def stop(self) -> None:
        """A level's requests are all awaited within its pass."""


class ClosedReplay:
    """Sends a closed level: C workers take the sessions (or requests) still owed in trace
    order, each sends its turns back to back; finished sessions are committed in batches of
    at least C requests."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep

    async def warm(self, p: base.Pass) -> None:
        _prepared(self.sweep.config)
        await self.sweep.pool.warm(len(p.streams(p.level.concurrency)))

    async def run_pass(self, p: base.Pass, commit: base.Commit,
                       on_record: base.OnRecord) -> base.LevelOutcome:
        """A share takes every count-th owed session, with its part of the C workers."""
        sweep, cfg = self.sweep, self.sweep.config
        c, repeat = p.level.concurrency, p.repeat
        owed = set(p.rounds)
        sessions = [u for u in units(trace_of(cfg)) if u[0] in owed]
        todo = iter([sessions[k] for k in p.streams(len(sessions))])
        requests = _pass_requests(sweep, f"c{c}-p{repeat}")
        passes = f"-p{repeat}" if cfg.repeat > 1 else ""
        done: list[RequestRecord] = []
        batch: list[RequestRecord] = []
        await p.started()
        cpu0 = time.process_time()

        async def worker(w: int) -> None:
            while (unit := next(todo, None)) is not None:
                history: list[Turn] = []
                sent = []
                for turn, index in enumerate(unit, start=1):
                    body, said = requests.body(index, history)
                    request_id = f"{sweep.run_id}-c{c}{passes}-r{index}-w{w}"
                    record = requests.record(index, request_id, c, index, w, repeat, turn)
                    await stream_completion(
                        sweep.pool, build_request(sweep.endpoint, body, request_id), record,
                        sweep.clock, cfg.request_timeout_s, cfg.stall_timeout_s,
                        keep_text=len(unit) > 1)
                    on_record(record)
                    sent.append(record)
                    history.append((said, record.reply or ""))
                batch.extend(sent)
                if len(batch) >= c:
                    done.extend(batch)
                    commit(batch[:])
                    batch.clear()

        await all_or_none([worker(w) for w in p.streams(c)])
        if batch:
            done.extend(batch)
            commit(batch)
        return base.LevelOutcome(c, done, time.process_time() - cpu0)

    async def stop(self) -> None:
        """A level's requests are all awaited within its pass."""
