"""The harness checks itself: a timing loop kept busy is seen late, and the level says so."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import urllib.request

from harness.config import RunConfig
from harness.records import RequestRecord
from harness.results.client_check import READ_LAG_LIMIT_MS, check, describe
from harness.results.store import Store
from harness.run import aio
from harness.run.loop_monitor import LoopMonitor
from harness.run.progress import LevelProgress
from harness.run.session import execute, new_run_id
from harness.run.workload import payload
from harness.wire.client import (
    FIRST_READ_LAGS_MS,
    FIRST_READS_DATED,
    Clock,
    ConnectionPool,
    build_request,
    stream_completion,
)
from harness.wire.endpoint import Endpoint
from runners.lifecycle import free_port
from tests.harness.fixtures import CannedServer, delta
from tests.helpers import ROOT, run_cli, wait_for_port


def _monitored(blocking_s: float, blocks: int) -> object:
    async def level():
        monitor = LoopMonitor(lambda: 0)
        monitor.start()
        for _ in range(blocks):
            await asyncio.sleep(0.03)
            time.sleep(blocking_s)  # a callback that holds the loop, as a flood of chunks does
        await asyncio.sleep(0.03)
        return monitor.stop()

    return asyncio.run(level())


def test_a_loop_held_by_callbacks_is_client_bound_and_an_idle_one_is_not():
    # An idle loop is flagged only when the machine keeps it from a CPU: a preemption of 20 ms
    # and more is its lag too. So it gets 3 s (~150 timer fires), and 3 tries on a busy runner.
    idles = []
    while len(idles) < 3 and (not idles or idles[-1].client_bound):
        idles.append(_monitored(0.0, 100))
    held = _monitored(0.05, 10)
    assert not idles[-1].client_bound, idles
    assert held.client_bound
    assert held.loop_lag_max_ms >= 40 and held.loop_lag_p99_ms >= 40
    assert held.cpu_share is not None and idles[-1].unread_bytes_max == 0


def test_every_level_stores_its_self_check_and_the_summary_shows_it(sweep):
    swept = sweep({"ttft_ms": 5, "itl_ms": 2}, levels=(1, 4), rounds=2, output_tokens=16)
    checks = swept.store.client_checks(swept.run_id)
    assert set(checks) == {(1, None), (4, None)}
    proc = run_cli("summary", "--db", str(swept.store.path), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    stored = {lv["concurrency"]: lv for lv in swept.store.levels(swept.run_id)}
    for level in summary["levels"]:
        check = checks[(level["concurrency"], None)]
        assert level["loop_lag_p99_ms"] == round(check.loop_lag_p99_ms, 3)
        assert level["client_bound"] is check.client_bound
        assert stored[level["concurrency"]]["client_bound"] is check.client_bound
        assert 0 < level["client_cpu_share"] < 2
        flagged = any(w.startswith(f"C={level['concurrency']} was client-bound")
                      for w in summary["warnings"])
        assert flagged is check.client_bound


def _exact_servers(count: int, *flags: str) -> tuple[list[subprocess.Popen], str, list[int]]:
    """`count` fake server processes sharing one port, each logging at a control port of
    its own."""
    port, controls = free_port(), [free_port() for _ in range(count)]
    procs = [subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port", str(port),
                               "--reuse-port", "--control-port", str(control), *flags],
                              stdout=subprocess.DEVNULL, cwd=ROOT) for control in controls]
    for control in controls:
        wait_for_port(control)
    return procs, f"http://127.0.0.1:{port}/v1", controls


def _first_writes(controls: list[int]) -> dict[str, float]:
    """When each server process wrote each request's first token (the monotonic clock)."""
    writes = {}
    for control in controls:
        with urllib.request.urlopen(f"http://127.0.0.1:{control}/mock/timings") as r:
            writes.update({t["request_id"]: t["first_write"] for t in json.load(r)
                           if t["first_write"]})
    return writes


def test_a_level_past_what_the_machine_holds_is_flagged_by_the_first_tokens_read_late(tmp_path):
    """C=1024 streams of a token every 5 ms (~200,000 chunks a second: past one loop on any
    machine) against exact servers, one per CPU: the timing loop reads first tokens late, many
    with the tokens after them. The level is flagged, and the read lag it was judged from
    covers how late the servers' own log says the first tokens were read (from their write
    to the harness's read)."""
    servers = max(2, min(os.cpu_count() or 1, 8))
    procs, url, controls = _exact_servers(servers, "--ttft-ms", "50", "--itl-ms", "5")
    try:
        config = RunConfig(url=url, model="mock-model", levels=(1024,), max_concurrency=1024,
                           rounds=1, input_tokens=16, output_tokens=32, server_metrics=False)
        store = Store(tmp_path / "b.duckdb")
        store.initialise()
        result = aio.run(execute(config, Endpoint(url), store, LevelProgress(enabled=False),
                                 new_run_id()))
        writes = _first_writes(controls)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(5)
    outcome, clock = result.outcomes[0], result.clock
    late_ms = [(r.sent_at - clock.anchor_wall + clock.anchor_ns / 1e9 + r.ttft_ms / 1000
                - writes[r.request_id]) * 1000 for r in outcome.records
               if r.ok and r.ttft_ms is not None and r.request_id in writes]
    read_late_ms = sum(late_ms) / len(late_ms)
    check = outcome.client
    assert check is not None and check.read_lag_mean_ms is not None
    assert read_late_ms > READ_LAG_LIMIT_MS, "the machine kept up: nothing to flag"
    assert check.client_bound
    assert check.read_lag_mean_ms >= read_late_ms / 2, (check.read_lag_mean_ms, read_late_ms)
    assert "first tokens read" in describe("C=1024", check)


def test_a_first_token_read_with_later_ones_is_dated_from_its_own_arrival():
    """The kernel dates only the newest bytes a read takes (TCP_INFO's time since data last
    arrived): a loop held while the first token and two more arrive, 20 ms apart, reads them
    together ~50 ms after the first came, not ~10 ms after the newest."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    events = [b"data: " + delta(word) + b"\n\n" for word in "abcdefgh"]
    ep = Endpoint("http://127.0.0.1:1/v1")  # the server's, once it listens

    async def held_while_tokens_arrive() -> RequestRecord:
        pool = ConnectionPool(ep, connect_timeout=2.0)
        await pool.warm(1)
        body = payload("chat", "mock-model", "Hello there.", 8, 0.0)
        request = build_request(ep, body, "r")
        # the request leaves at once; the loop is then held over the first three tokens
        asyncio.get_running_loop().call_later(0.005, time.sleep, 0.065)
        record = await stream_completion(pool, request, RequestRecord("r", 1, 0, 0, 0.0),
                                         Clock(), 10.0)
        pool.close()
        return record

    with CannedServer([head, *events, b"data: [DONE]\n\n"]) as server:  # 20 ms apart
        ep = Endpoint(server.url)
        FIRST_READ_LAGS_MS.clear()
        record = aio.run(held_while_tokens_arrive())
    assert record.ok and record.ttft_ms is not None and record.chunk_offsets_ns is not None
    together = sum(1 for t in record.chunk_offsets_ns if t == record.chunk_offsets_ns[0])
    assert together >= 2, record.chunk_offsets_ns  # the loop was held past the second token
    waited_ms = record.ttft_ms - 20  # the first token left 20 ms after the head
    [measured] = FIRST_READ_LAGS_MS
    assert measured >= waited_ms / 2, (measured, waited_ms)


def test_the_warning_names_the_figures_it_judged_from_and_the_longest_lag():
    """A load process stopped for 30 s (SIGSTOP) fires its timer once 30 s late among
    hundreds on time: the p99 it is judged by stays near 36 ms, and the warning says so beside
    its limit, and what the times may be late by: the 30 s."""
    lags = [0.2] * 300 + [35.9] * 4 + [30014.0]
    stopped = check(lags, cpu_s=1.0, wall_s=40.0, unread=[0])
    assert stopped.client_bound
    warning = describe("C=64", stopped)
    assert "loop lag p99 35.9 ms (limit 20 ms)" in warning
    assert "30014.0 ms" in warning
    assert "loop lag p50" not in warning  # within its limit: not what it was judged from


def test_no_full_garbage_collection_stops_the_loop_while_a_level_is_measured():
    """Objects kept alive by the thousand trigger full collections, except between a
    monitor's start and stop (a level); young ones still run."""
    full: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop":
            full.append(info["generation"])

    async def allocate(monitored: bool) -> list[int]:
        monitor = LoopMonitor(lambda: 0)
        if monitored:
            monitor.start()
        full.clear()
        kept = [[i] for i in range(300_000)]  # survivors: each collection promotes them
        if monitored:
            monitor.stop()
        del kept
        return full[:]

    gc.callbacks.append(count)
    try:
        held = asyncio.run(allocate(monitored=True))
        free = asyncio.run(allocate(monitored=False))
    finally:
        gc.callbacks.remove(count)
    assert 2 not in held and 0 in held, held
    assert 2 in free, free


def test_a_wide_pass_dates_a_sample_of_its_first_reads_and_a_narrow_one_every_one(mock_server):
    """Each first read's date is a syscall in the read callback, paid by every read queued
    behind it in a burst: a pass of 16 streams dates all 16, one of 256 a sample of at least
    FIRST_READS_DATED spread over its connections, far fewer than 256."""
    ep = Endpoint(mock_server.url)

    async def pass_of(streams: int) -> list[float]:
        pool = ConnectionPool(ep, connect_timeout=5.0)
        await pool.warm(streams)
        FIRST_READ_LAGS_MS.clear()
        body = payload("chat", "mock-model", "Hello there.", 4, 0.0)
        records = await asyncio.gather(*(
            stream_completion(pool, build_request(ep, body, f"r{i}"),
                              RequestRecord(f"r{i}", streams, 0, i, 0.0), Clock(), 30.0)
            for i in range(streams)))
        pool.close()
        assert all(r.ok for r in records)
        return FIRST_READ_LAGS_MS[:]

    assert len(aio.run(pass_of(16))) == 16
    dated = len(aio.run(pass_of(256)))
    assert FIRST_READS_DATED <= dated <= 256 // 2, dated
