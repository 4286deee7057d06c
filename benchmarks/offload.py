"""`make bench-offload`: the offload study. What does moving the Engram table out of memory cost,
and where does the time go?

Arms: the table in device memory, in host memory, and on nvme (mmap) with the page cache held
to all of the table, spark's share (8 GiB / 47.7 GiB) and 1/32, each started cold or warm.
Each arm is its own server process with its own table file, so one arm's page-cache drops and
counters never touch another's. Levels are bursts of C requests (natural-text prompts, replayed
natural-text outputs, 128/64 tokens by default) run round by round, every arm in turn, so the
drift of this machine spreads over all arms. A cold arm drops its table from the page cache
before each of its rounds. Figures come from the server's own counters: kernel truth for
disk bytes, faults and residency; the block device's stat file for IOPS and queue depth. The
disk's own ceiling (4 KiB O_DIRECT random reads at queue depth 1 and 16) is probed first;
IOPS is shown over the level's wall time and over the time the disk was busy, and QD is the
mean number of reads in flight. One ablation arm lets each missing page be read by its own
page fault (queue depth 1), as a plain memory-mapped table is, against the default that asks
for all of a gather's missing pages at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.records import RequestRecord
from harness.run import aio
from harness.run.prompts import Prompts
from harness.run.prompts import load as load_prompts
from harness.run.workload import payload
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint
from runners.lifecycle import BundledServer
from runners.profiles import profile

SPARK = profile("spark").cache_ratio
TABLES = Path("results/tables/study")


@dataclass(slots=True, frozen=True)
class Arm:
    label: str
    placement: str
    ratio: float | None = None  # nvme only
    state: str | None = None  # nvme only: cold | warm
    page_reads: str = "parallel"  # nvme only: parallel (WILLNEED) | faults (queue depth 1)

    def server_args(self, preset: str, table_gib: float, max_running: int) -> list[str]:
        name = self.label.replace(" ", "_").replace("/", "-")
        args = ["--device", "cpu", "--preset", preset, "--placement", self.placement,
                "--table-size-gb", f"{table_gib:g}", "--decode", "replay",
                "--max-running", str(max_running),
                "--table-path", str(TABLES / f"{preset}-{table_gib:g}gib-{name}.bin")]
        if self.placement == "nvme":
            args += ["--io", "mmap", "--cache-ratio", f"{self.ratio:.6f}",
                     "--cache-state", str(self.state), "--page-reads", self.page_reads]
        return args


def arms_for(preset: str) -> list[Arm]:
    nvme = [Arm(f"nvme {name} {state}", "nvme", ratio, state)
            for name, ratio in (("all", 1.0), ("spark", SPARK), ("1/32", 1 / 32))
            for state in ("cold", "warm")]
    faults = Arm("nvme spark cold QD1", "nvme", SPARK, "cold", "faults")  # the ablation
    if preset == "deepseek-mini":  # the second geometry: fewer arms, C=1 and 8
        return [Arm("device", "device"), *[a for a in nvme if "spark" in a.label]]
    return [Arm("device", "device"), Arm("host", "host"), *nvme, faults]


@dataclass(slots=True)
class Cell:
    """One (arm, C): every request's TPS and the server's counters summed over rounds."""

    tps: list[float] = field(default_factory=list)
    delta: dict[str, float] = field(default_factory=dict)
    resident_max: float = 0.0
    budget: float | None = None

    def add(self, before: dict, after: dict) -> None:
        for key, value in after.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                old = before.get(key)
                if old is not None and key in COUNTED:
                    self.delta[key] = self.delta.get(key, 0.0) + value - old
        self.resident_max = max(self.resident_max, after.get("table_resident_bytes") or 0)
        self.budget = after.get("table_budget_bytes")

    def per(self, key: str, by: str) -> float | None:
        if key not in self.delta or not self.delta.get(by):
            return None
        return self.delta[key] / self.delta[by]


COUNTED = ("tokens", "decode_tokens", "steps", "step_ms", "compute_ms", "engram_wait_ms", "hash_ms",
           "sample_ms", "emit_ms", "gather_cpu_ms", "evict_cpu_ms", "disk_read_bytes",
           "page_faults_major", "page_faults_minor", "pages_requested", "blockdev_reads",
           "blockdev_read_ms", "blockdev_busy_ms", "uptime_s", "prefill_gather_ms",
           "decode_gather_ms")


def probe_disk(path: Path, seconds: float = 1.0) -> dict[int, float]:
    """Random 4 KiB O_DIRECT reads over `path`: IOPS at queue depth 1 and 16."""
    import mmap
    import random

    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)

    def reader(seed: int, deadline: float) -> int:
        buf, rng, n = mmap.mmap(-1, 4096), random.Random(seed), 0
        while time.perf_counter() < deadline:
            os.preadv(fd, [buf], rng.randrange(size // 4096) * 4096)
            n += 1
        return n

    out = {}
    try:
        for depth in (1, 16):
            deadline = time.perf_counter() + seconds
            with ThreadPoolExecutor(depth) as pool:
                done = sum(pool.map(reader, range(depth), [deadline] * depth))
            out[depth] = done / seconds
    finally:
        os.close(fd)
    return out


async def burst(url: str, model: str, prompts: Prompts, c: int, first: int,
                tokens: int) -> list[float]:
    """C requests at once; returns each one's TPS (output tokens / whole request time)."""
    endpoint = Endpoint(url, "chat", None)
    pool = ConnectionPool(endpoint)
    clock = Clock()
    await pool.warm(c)

    async def one(i: int) -> RequestRecord:
        body = payload("chat", model, prompts.text("", first + i), tokens, 0.0)
        record = RequestRecord(f"study-{first + i}", c, 0, i, 0.0)
        return await stream_completion(pool, build_request(endpoint, body, record.request_id),
                                       record, clock, 600.0)

    try:
        records = await asyncio.gather(*(one(i) for i in range(c)))
    finally:
        pool.close()
    failed = [r for r in records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed: {failed[0].error_message}")
    return [r.tps for r in records if r.tps is not None]



def study(preset: str, table_gib: float, levels: list[int], rounds: int, tokens: int,
          words: int, only: list[str]) -> None:
    arms = [a for a in arms_for(preset) if not only or any(w in a.label for w in only)]
    max_running = profile("spark").max_running_requests
    TABLES.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts("text", seed=1).sized(words)
    cells: dict[tuple[str, int], Cell] = {}
    with contextlib.ExitStack() as stack, httpx.Client(timeout=120) as http:
        servers = {}
        for arm in arms:
            started = time.perf_counter()
            server = stack.enter_context(BundledServer(
                arm.server_args(preset, table_gib, max_running)))
            servers[arm.label] = server
            print(f"  {arm.label:<16} up in {time.perf_counter() - started:5.1f} s "
                  f"({server.log_path})", flush=True)
        root = {label: s.url.removesuffix("/v1") for label, s in servers.items()}
        model = http.get(root[arms[0].label] + "/v1/models").json()["data"][0]["id"]
        for arm in arms:  # first-call costs; warm arms also fill their page cache here
            aio.run(burst(servers[arm.label].url, model, prompts, 4, 10**6, 16))
        ordinal = 0
        for r in range(rounds):
            for c in levels:
                for arm in arms:
                    if arm.state == "cold":
                        http.post(root[arm.label] + "/table/drop_cache").raise_for_status()
                    before = http.get(root[arm.label] + "/stats").json()
                    tps = aio.run(burst(servers[arm.label].url, model, prompts, c, ordinal,
                                        tokens))
                    after = http.get(root[arm.label] + "/stats").json()
                    cell = cells.setdefault((arm.label, c), Cell())
                    cell.tps += tps
                    cell.add(before, after)
                ordinal += c  # every arm gets the same prompts at the same level and round
            print(f"  round {r + 1}/{rounds} done", flush=True)
    report(preset, table_gib, arms, levels, cells, tokens)


def report(preset: str, table_gib: float, arms: list[Arm], levels: list[int],
           cells: dict[tuple[str, int], Cell], tokens: int) -> None:
    print(f"\n{preset}, table {table_gib:g} GiB, {tokens} output tokens, natural text in and "
          f"out, prefetch on; spark ratio {SPARK:.3f}")
    print(f"{'arm':<20}{'C':>3}{'TPS/req':>8}{'x dev':>7}{'stall':>7}{'disk B/tok':>11}"
          f"{'majflt/tok':>11}{'IOPS':>7}{'busy IOPS':>10}{'QD':>6}{'hit':>7}"
          f"{'resident/budget':>17}")
    for arm in arms:
        for c in levels:
            cell, device = cells[(arm.label, c)], cells[("device", c)]
            tps = statistics.fmean(cell.tps)
            iops = cell.per("blockdev_reads", "uptime_s")
            busy = cell.per("blockdev_reads", "blockdev_busy_ms")
            qd = cell.per("blockdev_read_ms", "uptime_s")
            hit = None
            if cell.delta.get("pages_requested") and "disk_read_bytes" in cell.delta:
                hit = max(0.0, 1 - cell.delta["disk_read_bytes"] / 4096
                          / cell.delta["pages_requested"])
            resident = (f"{cell.resident_max / 2**20:.0f}/{cell.budget / 2**20:.0f} MiB"
                        if cell.budget else "-")
            print(f"{arm.label:<20}{c:>3}{tps:>8.1f}{tps / statistics.fmean(device.tps):>7.3f}"
                  f"{cell(cell.per('engram_wait_ms', 'step_ms'), '>7.1%')}"
                  f"{cell(cell.per('disk_read_bytes', 'tokens'), '>11,.0f')}"
                  f"{cell(cell.per('page_faults_major', 'tokens'), '>11.2f')}"
                  f"{cell(iops, '>7,.0f')}{cell(busy and busy * 1000, '>10,.0f')}"
                  f"{cell(qd and qd / 1000, '>6.1f')}"
                  f"{cell(hit, '>7.1%')}{resident:>17}")
    print("\nwhere step time goes (all levels; shares of engine step time, CPU of other "
          "threads per step):")
    print(f"{'arm':<20}{'ms/step':>8}{'compute':>9}{'wait':>7}{'ids':>6}{'other':>7}"
          f"{'gather CPU':>11}{'evict CPU':>10}{'minflt/tok':>11}")
    for arm in arms:
        total = Cell()
        for c in levels:
            for key, value in cells[(arm.label, c)].delta.items():
                total.delta[key] = total.delta.get(key, 0.0) + value
        step = total.delta.get("step_ms") or float("nan")
        share = {k: total.delta.get(k, 0.0) / step for k in
                 ("compute_ms", "engram_wait_ms", "hash_ms", "sample_ms", "emit_ms")}
        print(f"{arm.label:<20}{cell(total.per('step_ms', 'steps'), '>8.1f')}"
              f"{share['compute_ms']:>9.1%}{share['engram_wait_ms']:>7.1%}"
              f"{share['hash_ms']:>6.1%}{share['sample_ms'] + share['emit_ms']:>7.1%}"
              f"{cell(total.per('gather_cpu_ms', 'steps'), '>11.2f')}"
              f"{cell(total.per('evict_cpu_ms', 'steps'), '>10.2f')}"
              f"{cell(total.per('page_faults_minor', 'tokens'), '>11.1f')}")
    print("\nlowest C at which the stall passes 5% of step time:")
    for arm in arms:
        over = [c for c in levels
                if (cells[(arm.label, c)].per("engram_wait_ms", "step_ms") or 0) > 0.05]
        print(f"  {arm.label:<20} {over[0] if over else f'none up to {max(levels)}'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen-mini")
    parser.add_argument("--table-gib", type=float, default=2.0)
    parser.add_argument("--levels", default="1,4,8,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--words", type=int, default=96, help="prompt words (~128 tokens)")
    parser.add_argument("--arms", default="", help="comma-separated parts of arm labels")
    parser.add_argument("--deepseek", default="1,8",
                        help="deepseek-mini levels after the qwen-mini study ('' to skip)")
    args = parser.parse_args()
    TABLES.mkdir(parents=True, exist_ok=True)
    probe_file = TABLES / "probe.bin"
    if not probe_file.exists() or probe_file.stat().st_size < 2**30:
        with open(probe_file, "wb") as f:
            for _ in range(16):
                f.write(os.urandom(64 * 2**20))
    ceiling = probe_disk(probe_file)
    print(f"disk ceiling, random 4 KiB O_DIRECT reads: {ceiling[1]:,.0f} IOPS at queue depth 1, "
          f"{ceiling[16]:,.0f} at 16")
    only = [w for w in args.arms.split(",") if w]
    study(args.preset, args.table_gib, [int(c) for c in args.levels.split(",")], args.rounds,
          args.tokens, args.words, only)
    if args.deepseek and args.preset != "deepseek-mini":
        study("deepseek-mini", args.table_gib, [int(c) for c in args.deepseek.split(",")],
              args.rounds, args.tokens, args.words, only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
