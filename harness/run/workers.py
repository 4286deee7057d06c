"""`run --workers N`: a pass's load split across N worker processes, past what one event loop
times exactly (a few hundred streams: docs/studies/accuracy.md#beyond-one-loop).

Each worker is a process of its own with its own event loop (uvloop), connection pool and
copy of the run's sweep (config, prompts, the run's wall-clock anchor), spawned at the run's
first pass. A pass goes out in two steps: each worker opens the connections of its share
(`Share`: every N-th stream or request) and says so; then all are told one start time on the
system's monotonic clock, which every process reads alike (CLOCK_MONOTONIC), so a closed
level starts together and a rate or trace schedule keeps one clock. Each finished request
streams back to this process, which shows progress, and commits a round once its requests
have arrived from every worker (a rate or timed trace level once all of it has): the one
writer stores them as for one loop. Each worker's own loop lag, CPU and wait for a CPU come
back with its share, and the worst of them is the level's.

A worker that dies ends its level: the rounds whose requests all arrived are stored, and so
is the part of a round the other workers had finished (a resume sends such a round again
whole); the run fails with a sentence, or, with `--keep-going`, stores what it had and
carries on with a new worker. A stop (Ctrl-C, SIGTERM, a closed terminal) is the main
process's: its workers ignore those signals and are ended with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Protocol
from urllib.parse import urlsplit

from harness.config import RunConfig
from harness.records import RequestRecord
from harness.results.client_check import ClientCheck
from harness.results.metrics import level_label
from harness.run import aio, modes
from harness.run.loop_monitor import LoopMonitor
from harness.run.modes.base import Commit, LevelOutcome, OnRecord, Pass, Share
from harness.run.prompts import Prompts
from harness.run.sweep import Sweep
from harness.run.workload import TokenLine
from harness.wire.client import Clock
from harness.wire.endpoint import Endpoint, is_loopback

STREAMS_PER_WORKER = 512  # one loop times this many streams within a few ms, and splitting
# them costs more than it gains (C=512 on 2 cores: +2.9 ms of TTFT bias in one loop, +7.1 ms
# in two; C=1024: +35 ms in one, +15 ms in two); an open loop's requests/s alike. A server on
# this host takes a CPU of its own: on 2 cores beside one, a second load process read first
# tokens later at C=256 and 512 (+3.7 and +5.9 ms against +0.9 and +1.1), no sooner in all
# at C=1024, and starved the server at C=2048 (+1.1 s of TTFT bias against +0.16 s)
GO_MARGIN_NS = 5_000_000  # the start time sent is this far ahead: every worker has it by then
_PARENT_CHECK_S = 0.5  # a worker whose parent died stops within this
_JOIN_S = 2.0  # a worker told to stop gets this long to close its connections


def auto(config: RunConfig, cpus: int | None = None, where: str = "") -> tuple[int, str]:
    """`--workers auto`: one process per STREAMS_PER_WORKER streams of the run's highest
    level (an open loop's: per so many requests/s), at most one per CPU (this host's, or
    `cpus` of a cluster, said as `where`) the server leaves: a server on this host (one the
    run starts, or a loopback URL) keeps one of this host's CPUs; and why."""
    beside = cpus is None and served_here(config)
    cpus = cpus or os.cpu_count() or 1
    if not modes.mode_for(config.mode).splits:
        return 1, f"--workers auto: 1 load process (mode {config.mode} runs in one)"
    if config.levels:
        peak, what = max(config.levels), f"C up to {max(config.levels)}"
    else:
        mode = modes.mode_for(config.mode)
        peak = round(max(mode.levels(config), key=lambda lv: lv.rate or 0).rate or 0)
        what = f"up to {peak} requests/s"
    count = max(1, min(cpus - 1 if beside else cpus, -(-peak // STREAMS_PER_WORKER)))
    server = ", one of them the server's on this host" if beside else ""
    return count, (f"--workers auto: {count} load process{'es' if count > 1 else ''} "
                   f"({what}, one per {STREAMS_PER_WORKER}, on {cpus} CPUs{where}{server})")


def served_here(config: RunConfig) -> bool:
    """Whether the target's server runs on this host: one the run starts (no URL yet), or a
    loopback URL."""
    return not config.url or is_loopback(urlsplit(config.url).hostname or "")


class WorkerDied(RuntimeError):
    """A worker process ended in the middle of a pass; one sentence."""


@dataclass(slots=True, frozen=True)
class Setup:
    """What a worker builds its sweep from: the run's, as the main process has it."""

    config: RunConfig
    endpoint: Endpoint
    run_id: str
    prompts: Prompts
    anchor: tuple[float, int]  # the run's Clock: wall seconds at a perf_counter_ns
    line: TokenLine | None


@dataclass(frozen=True, slots=True)
class Link:
    """One end of two one-way pipes between a worker and the process it reports to. An event
    loop that reads `incoming` makes its descriptor non-blocking, so messages go out on
    `outgoing`, whose descriptor stays blocking: a reader that lags slows the writer (its
    loop lag says so) and never fails it."""

    incoming: Connection
    outgoing: Connection

    def send(self, message: Any) -> None:
        self.outgoing.send(message)

    def close(self) -> None:
        for end in (self.incoming, self.outgoing):
            with contextlib.suppress(OSError):
                end.close()


def link_pair(ctx: Any = mp) -> tuple[Link, Link]:
    """The two ends of a worker's link (`ctx`: a multiprocessing context, or the module)."""
    a_reads, b_writes = ctx.Pipe(duplex=False)
    b_reads, a_writes = ctx.Pipe(duplex=False)
    return Link(a_reads, a_writes), Link(b_reads, b_writes)


def _main(link: Link, setup: Setup, parent: int) -> None:
    """A worker process: passes in, requests out, until told to stop or its parent dies."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # a stop is the main process's to handle
        signal.signal(signum, signal.SIG_IGN)
    serve(link, setup, parent)


def serve(link: Link, setup: Setup, parent: int | None) -> None:
    """A worker's own event loop over `link` (in a process of its own, or a thread of a Ray
    actor: `parent` None, which Ray ends with its driver)."""
    with asyncio.Runner(loop_factory=aio.loop_factory()) as runner:
        runner.run(_serve(link, setup, parent))


async def _serve(link: Link, setup: Setup, parent: int | None) -> None:
    clock = Clock()
    clock.anchor_wall, clock.anchor_ns = setup.anchor
    sweep = Sweep(setup.config, setup.endpoint, setup.run_id, setup.prompts, clock, setup.line)
    sender = modes.mode_for(setup.config.mode).sender(sweep)
    inbox: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue()
    _Inbox(link.incoming, inbox, None)
    watch = asyncio.create_task(_watch_parent(parent)) if parent is not None else None
    try:
        while (message := (await inbox.get())[1]) is not None:
            p: Pass = message[1]
            await sender.warm(p)
            link.send(("warm",))
            if (go := (await inbox.get())[1]) is None:
                return
            assert p.share is not None
            p = replace(p, share=replace(p.share, start_ns=go[1]))
            monitor = LoopMonitor(sweep.pool.unread_bytes)
            monitor.start()
            outcome = await sender.run_pass(p, _no_commit,
                                            lambda r: link.send(("record", r)))
            link.send(("done", outcome.cpu_s, outcome.unstored_chunks, monitor.stop()))
    except BrokenPipeError:  # the main process is gone (killed): none is left to tell
        return
    except Exception as exc:  # said by the main process, not as a traceback of this one
        with contextlib.suppress(BrokenPipeError):  # ... unless it is gone meanwhile
            link.send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        if watch is not None:
            watch.cancel()
        await sender.stop()
        sweep.close()


def _no_commit(records: list[RequestRecord]) -> None:
    """A worker commits nothing: the main process stores its requests as they arrive."""


async def _watch_parent(parent: int) -> None:
    """A worker whose main process died (killed) stops at once: nothing would store its
    requests."""
    while os.getppid() == parent:
        await asyncio.sleep(_PARENT_CHECK_S)
    os._exit(1)


class _Inbox:
    """A connection's messages into a queue on the event loop, as (tag, message): a reader
    callback, never a blocking read (message None: the other end closed). The main process
    reads every worker's from one queue, each tagged with its worker."""

    def __init__(self, conn: Connection, queue: asyncio.Queue[tuple[Any, Any]],
                 tag: Any) -> None:
        self.conn = conn
        self.queue = queue
        self.tag = tag
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            while self.conn.poll():
                self.queue.put_nowait((self.tag, self.conn.recv()))
        except (EOFError, OSError):
            self.close()
            self.queue.put_nowait((self.tag, None))

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self.conn.fileno())


class LoadWorker(Protocol):
    """One started worker as the main process sees it, whatever runs it: `send` a pass
    ("warm", Pass), its start ("go", perf_counter_ns on this process's clock) or None (stop);
    its answers arrive on the sender's queue, tagged with the worker (None: it ended)."""

    index: int

    def send(self, message: Any) -> None: ...

    def alive(self) -> bool: ...

    def ended(self) -> str:
        """How it ended, for the sentence that fails its level (after a None or "failed")."""
        ...

    def close(self, kill: bool = False) -> None: ...


class Spawner(Protocol):
    """Starts workers: processes on this host (`Processes`) or actors on a Ray cluster
    (harness.run.ray_workers). `go_margin_ns`: how far ahead a pass's start is set, so every
    worker has it by then."""

    go_margin_ns: int

    async def start(self, index: int, setup: Setup,
                    queue: asyncio.Queue[tuple[Any, Any]]) -> LoadWorker: ...


@dataclass(slots=True, eq=False)
class _Process:
    index: int
    proc: Any  # a multiprocessing process (its type is the context's)
    conn: Link
    inbox: _Inbox | None = None

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def alive(self) -> bool:
        return bool(self.proc.is_alive())

    def ended(self) -> str:
        self.proc.join(_JOIN_S)
        return f"exit code {self.proc.exitcode}"

    def close(self, kill: bool = False) -> None:
        if self.inbox is not None:
            self.inbox.close()
        if kill and self.proc.is_alive():
            self.proc.kill()
        self.conn.close()
        self.proc.join(_JOIN_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(_JOIN_S)


class Processes:
    """Workers as processes of this host, spawned, each with a pipe to this one."""

    go_margin_ns = GO_MARGIN_NS

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")

    async def start(self, index: int, setup: Setup,
                    queue: asyncio.Queue[tuple[Any, Any]]) -> LoadWorker:
        """Worker `index`, started with SIGHUP blocked, which it keeps: a closed terminal
        hangs up the process group, and the run is the main process's to stop."""
        ours, theirs = link_pair(self._ctx)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            proc = self._ctx.Process(target=_main, name=f"load-worker-{index}", daemon=True,
                                     args=(theirs, setup, os.getpid()))
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        theirs.close()
        worker = _Process(index, proc, ours)
        worker.inbox = _Inbox(ours.incoming, queue, worker)
        return worker


@dataclass(slots=True)
class _Rounds:
    """A pass's requests as they arrive from its workers, committed a round at a time once
    every request of the round is in (a pass without rounds: the whole level at once), in
    batches of at least C requests."""

    p: Pass
    commit: Commit
    records: list[RequestRecord] = field(default_factory=list)
    waiting: dict[int | None, list[RequestRecord]] = field(default_factory=dict)
    ready: list[RequestRecord] = field(default_factory=list)

    @property
    def per_round(self) -> int:
        return self.p.requests // len(self.p.rounds) if self.p.rounds else self.p.requests

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        key = record.round if self.p.rounds else None
        bucket = self.waiting.setdefault(key, [])
        bucket.append(record)
        if len(bucket) == self.per_round:
            self.ready.extend(sorted(self.waiting.pop(key), key=lambda r: r.worker))
            if len(self.ready) >= max(self.p.level.concurrency, 1):
                self.flush()

    def flush(self, partial: bool = False) -> None:
        """Commit what is ready (`partial`: every request in, whole rounds or not)."""
        if partial:
            for key in sorted(self.waiting, key=lambda k: -1 if k is None else k):
                self.ready.extend(sorted(self.waiting.pop(key), key=lambda r: r.worker))
        if self.ready:
            batch, self.ready = self.ready, []
            self.commit(batch)

    @property
    def unfinished(self) -> int:
        return sum(len(bucket) for bucket in self.waiting.values())


class WorkerSender:
    """Sends each pass through `count` workers (as many as the pass has streams or requests,
    at most `count`), started at the first pass by `spawner` (default: processes of this
    host); their messages arrive on one queue, each tagged with its worker."""

    def __init__(self, sweep: Sweep, count: int, keep_going: bool,
                 notice: Callable[[str], None], spawner: Spawner | None = None) -> None:
        self.sweep = sweep
        self.count = count
        self.keep_going = keep_going
        self.notice = notice
        self.spawner = spawner or Processes()
        self._workers: dict[int, LoadWorker] = {}
        self._active: list[LoadWorker] = []
        self._queue: asyncio.Queue[tuple[Any, Any]] | None = None
        self.left_short: list[str] = []  # --keep-going: the levels a worker's death cut short

    def _setup(self) -> Setup:
        s = self.sweep
        return Setup(s.config, s.endpoint, s.run_id, s.prompts,
                     (s.clock.anchor_wall, s.clock.anchor_ns), s.line)

    async def _worker(self, index: int) -> LoadWorker:
        """Worker `index`, started (again, if it died)."""
        worker = self._workers.get(index)
        if worker is not None and worker.alive():
            return worker
        if worker is not None:
            worker.close()
        if self._queue is None:
            self._queue = asyncio.Queue()
        worker = await self.spawner.start(index, self._setup(), self._queue)
        self._workers[index] = worker
        return worker

    @staticmethod
    def shares(p: Pass, count: int) -> int:
        """Workers a pass is split across: no more than it has streams (or requests)."""
        return max(1, min(count, p.level.concurrency or p.requests))

    async def _next(self, p: Pass) -> tuple[LoadWorker, Any]:
        """The next message of a worker of the pass (a worker ended before it: those are
        left out); WorkerDied for one that died or failed."""
        assert self._queue is not None
        while True:
            worker, message = await self._queue.get()
            if worker not in self._active:
                continue
            if message is None or message[0] == "failed":
                how = (f"failed ({message[1]})" if message is not None
                       else f"died ({worker.ended()})")
                at = level_label(p.level.concurrency, p.level.rate, p.level.speedup)
                raise WorkerDied(f"load worker {worker.index + 1} of {len(self._active)} "
                                 f"{how} at {at}")
            return worker, message

    async def warm(self, p: Pass) -> None:
        """Each worker opens its share's connections; returns once all have."""
        n = self.shares(p, self.count)
        try:
            self._active = [await self._worker(i) for i in range(n)]
        except BaseException:
            self._stop_active()
            raise
        for worker in self._active:
            worker.send(("warm", replace(p, share=Share(worker.index, n))))
        warmed = 0
        try:
            while warmed < n:
                _, message = await self._next(p)
                assert message == ("warm",), message
                warmed += 1
        except BaseException:
            self._stop_active()
            raise

    async def run_pass(self, p: Pass, commit: Commit, on_record: OnRecord) -> LevelOutcome:
        """The pass's requests as they stream in; its CPU is every worker's and this
        process's own (receiving, committing) over the pass."""
        cpu0 = time.process_time()
        start_ns = time.perf_counter_ns() + self.spawner.go_margin_ns
        for worker in self._active:
            worker.send(("go", start_ns))
        rounds = _Rounds(p, commit)
        cpu_s, unstored, checks = 0.0, 0, list[ClientCheck]()
        try:
            while len(checks) < len(self._active):
                _, message = await self._next(p)
                if message[0] == "record":
                    on_record(message[1])
                    rounds.add(message[1])
                else:  # "done": its CPU, unstored chunks and loop check
                    cpu_s += message[1]
                    unstored += message[2]
                    checks.append(message[3])
        except WorkerDied as died:
            self._stop_active()
            return self._died(died, p, rounds, cpu_s, unstored, checks)
        except BaseException:
            self._stop_active()
            raise
        rounds.flush(partial=True)
        cpu_s += time.process_time() - cpu0
        return LevelOutcome(p.level.concurrency, rounds.records, cpu_s, p.level.rate, unstored,
                            worker_checks=checks)

    def _died(self, died: WorkerDied, p: Pass, rounds: _Rounds, cpu_s: float, unstored: int,
              checks: list[ClientCheck]) -> LevelOutcome:
        """What a worker's death leaves of the pass: the rounds it had (in part, too) stored,
        and WorkerDied; with --keep-going the level is noted as left short (`left_short`, for
        the run to end failed and --resume to finish it) and the run goes on."""
        kept = len(rounds.records)
        whole = not p.rounds  # a rate or timed trace level is stored whole or not at all
        if not whole:
            rounds.flush(partial=True)
        lost = (f"its {kept} measured requests are not stored (the level is stored whole, and "
                "--resume measures it again)" if whole else
                f"its {kept} measured requests are stored (a round stored in part is sent "
                "again whole by --resume)")
        if not self.keep_going:
            raise WorkerDied(f"{died}: {lost}")
        self.notice(f"{died}: {lost}; --keep-going: the run goes on, and ends failed")
        self.left_short.append(level_label(p.level.concurrency, p.level.rate, p.level.speedup))
        return LevelOutcome(p.level.concurrency, [] if whole else rounds.records, cpu_s,
                            p.level.rate, unstored, worker_checks=checks)

    def check_whole(self) -> None:
        """At the run's end: WorkerDied naming the levels --keep-going left short, if any."""
        if self.left_short:
            levels = ", ".join(dict.fromkeys(self.left_short))
            raise WorkerDied(f"{levels} left short by a load worker that died (--keep-going "
                             "measured the other levels): --resume measures the rest")

    def _stop_active(self) -> None:
        """End the pass's workers at once (a stop, or another worker died): their requests in
        flight are not stored, as a stopped loop's are not."""
        for worker in self._active:
            worker.close(kill=True)
            self._workers.pop(worker.index, None)
        self._active = []

    async def stop(self) -> None:
        """Tell every worker to stop (each closes its connections), then end any left."""
        for worker in self._workers.values():
            with contextlib.suppress(OSError):
                worker.send(None)
        for worker in list(self._workers.values()):
            worker.close()
        self._workers.clear()
