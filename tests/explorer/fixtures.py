"""A deterministic results database for the explorer tests and its benchmark.

Two runs on the same device, table in memory vs on NVMe; levels 1, 2, 4, 8 with 10 rounds.
Per-request TTFT and TPS follow fixed per-level means with a seeded spread, so the capacity
figures are known: run `mem` passes C=1,2,4 (Max C 4), run `nvme` passes C=1,2 (Max C 2).
Server counters per level: run `nvme` has the bundled server's current /stats keys (what each
level adds is `nvme_growth`, the gauges after it `nvme_gauges`); run `mem` has the older keys.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from harness.records import RequestRecord
from harness.store import Store

T0 = 1_790_000_000.0
LEVELS = (1, 2, 4, 8)
# (mean TTFT ms, mean TPS) per level
PROFILES = {
    "mem": {1: (210, 36.0), 2: (300, 29.0), 4: (450, 22.0), 8: (800, 14.0)},
    "nvme": {1: (230, 33.0), 2: (330, 24.0), 4: (520, 18.5), 8: (900, 12.0)},
}


# Table pages each nvme level read from disk (of 16 requested per token)
MISSED_PAGES = {1: 8000, 2: 12000, 4: 16000, 8: 24000}


def nvme_growth(c: int) -> dict:
    """What level C adds to the bundled server's cumulative /stats counters."""
    tokens, missed = 1000 * c, MISSED_PAGES[c]
    return {
        "tokens": tokens, "prefill_tokens": tokens // 2, "decode_tokens": tokens // 2,
        "steps": 100 + 50 * c, "step_ms": 5000.0, "compute_ms": 3000.0,
        "engram_wait_ms": 100.0 * c, "engram_wait_ms_by_layer": {"2": 100.0 * c},
        "hash_ms": 200.0, "sample_ms": 300.0, "emit_ms": 100.0, "prefill_gather_ms": 40.0 * c,
        "decode_gather_ms": 400.0, "gather_cpu_ms": 50.0 * c, "evict_cpu_ms": 5.0 * c,
        "rows_requested": 16 * tokens, "unique_rows_requested": 12 * tokens,
        "bytes_requested": 2560 * tokens, "pages_requested": 16 * tokens,
        "disk_read_bytes": 4096 * missed, "page_faults_major": missed,
        "page_faults_minor": 100 * c, "blockdev_reads": missed + 500,
        "blockdev_read_ms": 0.75 * (missed + 500), "uptime_s": 10.0,
    }


def nvme_gauges(c: int) -> dict:
    """The bundled server's /stats gauges after level C (2 GiB table, 344 MiB budget)."""
    return {
        "table_bytes": 2 << 30, "table_budget_bytes": 344 << 20, "cache_ratio": 344 / 2048,
        "table_resident_bytes": 40 * c << 20, "table_resident_peak_bytes": (40 * c + 8) << 20,
        "table_mapping_rss_bytes": 40 * c << 20, "placement": "nvme", "io_mode": "mmap",
        "cache_state": "cold",
    }


def _grow(totals: dict, growth: dict) -> dict:
    return {k: _grow(totals.get(k, {}), v) if isinstance(v, dict) else totals.get(k, 0) + v
            for k, v in growth.items()}


def write_nvme_stats(store: Store, run_id: str) -> None:
    """Cumulative snapshots around each level, from a non-zero start (a warmup ran first).
    At C=8 the block device's counters could not be read (null)."""
    before = {**nvme_growth(1), **nvme_gauges(1)}
    for c in LEVELS:
        after = {**_grow(before, nvme_growth(c)), **nvme_gauges(c)}
        if c == 8:
            after.update(blockdev_reads=None, blockdev_read_ms=None)
        store.write_server_stats(run_id, c, before, after)
        before = after


def write_old_stats(store: Store, run_id: str, placement: str) -> None:
    """The keys an older bundled server exposed on /stats."""
    for c in LEVELS:
        before = {"tokens": 0, "step_ms": 0.0, "stall_ms": 0.0, "engram_bytes_read": 0,
                  "page_faults_major": 0}
        after = {"tokens": 1000 * c, "step_ms": 5000.0, "stall_ms": 50.0 * c,
                 "engram_bytes_read": 2560 * 1000 * c, "page_faults_major": 10 * c,
                 "placement": placement, "mapping_resident_bytes": 1 << 20}
        store.write_server_stats(run_id, c, before, after)


def records(kind: str, rounds: int = 10, seed: int = 1) -> list[RequestRecord]:
    rng = random.Random(f"{kind}-{seed}")
    out = []
    start = T0
    for c in LEVELS:
        ttft_mean, tps_mean = PROFILES[kind][c]
        for rnd in range(rounds):
            for w in range(c):
                ttft = ttft_mean + rng.uniform(-20, 20)
                tps = tps_mean + rng.uniform(-1, 1)
                latency = 128 / tps * 1000
                out.append(RequestRecord(
                    request_id=f"{kind}-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=start + rnd * latency / 1000, ttft_ms=ttft, latency_ms=latency,
                    output_tokens=128, input_tokens=128, chunks=128, max_gap_ms=40.0,
                    finish_reason="length", http_status=200))
        start += rounds * 10
    # tps as stored is output_tokens / latency: the spread above keeps the means exact enough
    return out


def build(path: Path) -> dict[str, str]:
    """Write the fixture database; returns {kind: run_id}."""
    store = Store(path)
    store.initialise()
    ids = {}
    for kind, placement in (("mem", "device"), ("nvme", "nvme")):
        run_id = f"fixture-{kind}"
        store.create_run(run_id, {
            "device": "spark", "engine": "engram-bench", "model": "qwen-mini",
            "table_placement": placement, "target_url": "http://127.0.0.1:8000/v1",
            "api": "chat", "mode": "closed", "levels": list(LEVELS), "rounds": 10,
            "input_tokens": 128, "output_tokens": 128, "measured_input_tokens": 128,
            "label": f"fixture {kind}", "config": json.dumps({"prompt_words": 118}),
        })
        store.write_requests(run_id, records(kind))
        if kind == "nvme":
            write_nvme_stats(store, run_id)
        else:
            write_old_stats(store, run_id, placement)
        store.finish_run(run_id, "complete")
        ids[kind] = run_id
    return ids
