"""Scrapes the target's Prometheus /metrics from a process of its own, so neither the GETs nor
the parsing run next to the event loop that timestamps chunks (as the round writer, writer.py).

The sweep brackets each measured level with `start` and `stop`; the scraper takes a snapshot
at each and every INTERVAL_S between them, and answers `stop` with the level's aggregated rows.
Its GETs go through `client.get`, the route the sweep's requests take: the same auth headers
and TLS settings, and no proxy. A target without /metrics, or whose /metrics is not Prometheus
text, is said once and not asked again in that run.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import time

from common import orphaned_queues
from harness.results.server_metrics import MetricRow, NotPrometheus, Snapshot, aggregate, parse
from harness.wire.client import WireError, get
from harness.wire.endpoint import Endpoint

INTERVAL_S = 0.5
SCRAPE_TIMEOUT_S = 5.0
_POLL_S = 0.5

Answer = tuple[list[MetricRow], list[str]]  # (a level's rows, notes for the user)


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

    def answer(self, rows: list[MetricRow]) -> Answer:
        notes, self.notes = self.notes, []
        return rows, notes

    def close(self) -> None:
        self._loop.close()


def _serve(endpoint: Endpoint, inbox: mp.Queue, outbox: mp.Queue, parent: int) -> None:
    """Child process: between `start` and `stop` the wait for the next command is the timer
    of the next scrape; exits when told or when the parent died."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    target = _Target(endpoint)
    level: list[Snapshot] | None = None  # the snapshots of the level under way
    next_at = 0.0

    def sample() -> None:
        nonlocal next_at
        assert level is not None
        if (snapshot := target.scrape()) is not None:
            level.append(snapshot)
        next_at = max(next_at + INTERVAL_S, time.monotonic())

    try:
        while True:
            wait = _POLL_S if level is None else max(0.0, next_at - time.monotonic())
            try:
                command = inbox.get(timeout=wait)
            except queue.Empty:
                if os.getppid() != parent:
                    orphaned_queues.release(inbox, outbox)
                    return
                if level is not None:
                    sample()
                continue
            if command is None:
                return
            if command == "start":
                level, next_at = [], time.monotonic()
                sample()
                outbox.put(target.answer([]))
            else:  # stop: answered even without a level, so the parent never waits forever
                if level is not None:
                    sample()
                outbox.put(target.answer(aggregate(level or [])))
                level = None
    finally:
        target.close()


class Scraper:
    """`start` and `stop` bracket a level; each waits for the child's answer, which comes
    after one scrape, between levels, never while requests are timed."""

    def __init__(self, endpoint: Endpoint) -> None:
        ctx = mp.get_context("spawn")
        self._inbox: mp.Queue = ctx.Queue()
        self._outbox: mp.Queue = ctx.Queue()
        self._dead = False
        self._proc = ctx.Process(target=_serve, name="metrics-scraper", daemon=True,
                                 args=(endpoint, self._inbox, self._outbox, os.getpid()))
        self._proc.start()

    async def start(self) -> list[str]:
        """Snapshot the level's start; returns notes for the user."""
        _, notes = await self._ask("start")
        return notes

    async def stop(self) -> Answer:
        """Snapshot the level's end; returns its rows and notes for the user."""
        return await self._ask("stop")

    async def _ask(self, command: str) -> Answer:
        if self._dead:
            return [], []
        self._inbox.put(command)
        return await asyncio.to_thread(self._answer)

    def _answer(self) -> Answer:
        while True:
            try:
                return self._outbox.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._proc.is_alive():
                    self._dead = True
                    return [], ["warning: the server metrics process died; the sweep goes on "
                                "without server metrics"]

    def close(self) -> None:
        """Stop the child; one busy with a scrape gets that scrape's timeout to finish."""
        self._inbox.put(None)
        self._proc.join(SCRAPE_TIMEOUT_S + 1)
        if self._proc.is_alive():
            self._proc.kill()
