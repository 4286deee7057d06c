"""Scrapes the target's Prometheus /metrics, and the serving hosts' agents (`run
--host-metrics`), from a process of its own, so neither the GETs nor the parsing run next to
the event loop that timestamps chunks (as the round writer, writer.py).

The sweep brackets each measured level with `start` and `stop`; the scraper takes a snapshot
at each, of the target every INTERVAL_S between them and of each host every SLICE_S, and
answers `stop` with the level's aggregated rows and each host's figures and time slices
(harness.results.host_level). The target's GETs go through `client.get`, the route the
sweep's requests take: the same auth headers and TLS settings, and no proxy; the hosts' go
through harness.wire.host_scrape, without the server's key. A target without /metrics, or
whose /metrics is not Prometheus text, is said once and not asked again in that run; a host
that does not answer loses the figures of the levels it missed, each with the reason.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import queue
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from common import background, orphaned_queues
from harness.results.clock_offset import ClockReading, best_offset
from harness.results.host_level import SLICE_S, HostPass, Scrape, host_level
from harness.results.server_metrics import MetricRow, NotPrometheus, Snapshot, aggregate, parse
from harness.wire import host_scrape
from harness.wire.client import WireError, get
from harness.wire.endpoint import Endpoint

INTERVAL_S = 0.5
SCRAPE_TIMEOUT_S = 5.0
_POLL_S = 0.5

@dataclass(slots=True)
class LevelScrape:
    """What `stop` answers for a level: the target's aggregated rows, each host's figures
    and slices (in --host-metrics order), and notes for the user."""

    rows: list[MetricRow] = field(default_factory=list)
    hosts: list[HostPass] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Target:
    """The child's side of one run: its scrapes, and what to tell the user about them."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.url = endpoint.server_root + "/metrics"
        self.off = False
        self.notes: list[str] = []
        self._loop = asyncio.new_event_loop()

    def scrape(self) -> Snapshot | None:
        """A snapshot, or None: off, or this sample lost (a busy or restarting server)."""
        if self.off:
            return None
        try:
            resp = self._loop.run_until_complete(
                get(self.endpoint, self.endpoint.root_path + "/metrics", SCRAPE_TIMEOUT_S))
        except WireError:
            return None
        if 400 <= resp.status < 500:
            self._give_up(f"no server metrics: {self.url} answered HTTP {resp.status}")
        elif resp.status == 200:
            try:
                return parse(resp.body.decode("utf-8", "replace"))
            except NotPrometheus:
                self._give_up(f"warning: no server metrics: {self.url} is not Prometheus text")
        return None

    def _give_up(self, note: str) -> None:
        """Said once, on one short line; this run does not ask again."""
        self.off = True
        self.notes.append(note)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def close(self) -> None:
        self._loop.close()


class _Hosts:
    """The child's side of --host-metrics: each URL's scrapes over the level under way, and
    the round trip that read its agent's clocks best so far (harness.results.host_level)."""

    def __init__(self, urls: tuple[str, ...]) -> None:
        self.urls = urls
        self.best: list[ClockReading | None] = [None] * len(urls)
        self.level: list[list[Scrape]] = [[] for _ in urls]
        self._pool = ThreadPoolExecutor(len(urls)) if len(urls) > 1 else None

    def sample(self) -> None:
        """Every host at once (a host gone quiet holds the others back by none)."""
        scrapes = (list(self._pool.map(host_scrape.scrape, self.urls)) if self._pool
                   else [host_scrape.scrape(self.urls[0])])
        for i, taken in enumerate(scrapes):
            self.level[i].append(taken)
            best = self.best[i]
            if (reading := taken.reading()) is not None and (
                    best is None or reading.round_trip_ns < best.round_trip_ns):
                self.best[i] = reading

    def start(self) -> None:
        self.level = [[] for _ in self.urls]
        self.sample()

    def stop(self) -> list[HostPass]:
        """The level's figures and slices of each host, from its scrapes with the end's."""
        self.sample()
        out = [host_level(i, url, self.level[i],
                          best_offset([best]) if (best := self.best[i]) else None)
               for i, url in enumerate(self.urls)]
        self.level = [[] for _ in self.urls]
        return out

    def close(self) -> None:
        if self._pool:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _serve(endpoint: Endpoint | None, hosts: tuple[str, ...], inbox: mp.Queue, outbox: mp.Queue,
           parent: int) -> None:
    """Child process: between `start` and `stop` the wait for the next command is the timer
    of the next scrape (the server's every INTERVAL_S, the hosts' every SLICE_S); exits when
    told or when the parent died."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # at the run's own priority, unlike the writer: a level's samples must fall while it
    # runs, and at nice 19 behind a busy server on this host they fell in the pauses between
    # its rounds, when nothing ran (vLLM's num_requests_running read 0 at C=2)
    background.leave_stdout()
    target = _Target(endpoint) if endpoint is not None else None
    watched = _Hosts(hosts) if hosts else None
    level: list[Snapshot] | None = None  # the server's snapshots of the level under way
    next_server = next_hosts = math.inf

    def sample_server() -> None:
        nonlocal next_server
        assert level is not None
        if target is not None and (snapshot := target.scrape()) is not None:
            level.append(snapshot)
        next_server = (max(next_server + INTERVAL_S, time.monotonic()) if target is not None
                       else math.inf)

    def sample_hosts() -> None:
        nonlocal next_hosts
        if watched is not None:
            watched.sample()
            next_hosts = max(next_hosts + SLICE_S, time.monotonic())

    try:
        while True:
            wait = (_POLL_S if level is None
                    else max(0.0, min(next_server, next_hosts) - time.monotonic()))
            try:
                command = inbox.get(timeout=wait)
            except queue.Empty:
                if os.getppid() != parent:
                    orphaned_queues.release(inbox, outbox)
                    return
                if level is not None:
                    now = time.monotonic()
                    if now >= next_server:
                        sample_server()
                    if now >= next_hosts:
                        sample_hosts()
                continue
            if command is None:
                return
            if command == "start":
                level = []
                next_server = next_hosts = time.monotonic()
                sample_server()
                if watched is not None:
                    watched.start()
                    next_hosts += SLICE_S
                outbox.put(LevelScrape([], [], target.take_notes() if target else []))
            else:  # stop: answered even without a level, so the parent never waits forever
                if level is not None:
                    sample_server()
                rows = aggregate(level or [])
                passes = watched.stop() if watched is not None and level is not None else []
                outbox.put(LevelScrape(rows, passes, target.take_notes() if target else []))
                level, next_server, next_hosts = None, math.inf, math.inf
    finally:
        if target is not None:
            target.close()
        if watched is not None:
            watched.close()


class Scraper:
    """`start` and `stop` bracket a level; each waits for the child's answer, which comes
    after one scrape, between levels, never while requests are timed. `endpoint`: the target
    whose /metrics is scraped (None: not it); `hosts`: the --host-metrics URLs."""

    def __init__(self, endpoint: Endpoint | None, hosts: tuple[str, ...] = ()) -> None:
        ctx = mp.get_context("spawn")
        self._inbox: mp.Queue = ctx.Queue()
        self._outbox: mp.Queue = ctx.Queue()
        self._dead = False
        self._proc = ctx.Process(target=_serve, name="metrics-scraper", daemon=True,
                                 args=(endpoint, hosts, self._inbox, self._outbox,
                                       os.getpid()))
        self._proc.start()

    async def start(self) -> list[str]:
        """Snapshot the level's start; returns notes for the user."""
        return (await self._ask("start")).notes

    async def stop(self) -> LevelScrape:
        """Snapshot the level's end; returns its rows, host figures and notes for the user."""
        return await self._ask("stop")

    async def _ask(self, command: str) -> LevelScrape:
        if self._dead:
            return LevelScrape()
        self._inbox.put(command)
        return await asyncio.to_thread(self._answer)

    def _answer(self) -> LevelScrape:
        while True:
            try:
                return self._outbox.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._proc.is_alive():
                    self._dead = True
                    return LevelScrape(notes=[
                        "warning: the metrics scraper process died; the sweep goes on without "
                        "server or host metrics"])

    def close(self) -> None:
        """Stop the child; one busy with a scrape gets that scrape's timeout to finish."""
        self._inbox.put(None)
        self._proc.join(SCRAPE_TIMEOUT_S + 1)
        if self._proc.is_alive():
            self._proc.kill()
