"""A deterministic results database for the explorer tests and its benchmark.

Two runs on the same device, table in memory vs on NVMe; levels 1, 2, 4, 8 with 10 rounds.
Per-request TTFT and TPS follow fixed per-level means with a seeded spread, so the capacity
figures are known: run `mem` passes C=1,2,4 (Max C 4), run `nvme` passes C=1,2 (Max C 2).
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
        for c in LEVELS:
            before = {"tokens": 0, "step_ms": 0.0, "stall_ms": 0.0, "engram_bytes_read": 0,
                      "page_faults_major": 0}
            after = {"tokens": 1000 * c, "step_ms": 5000.0, "stall_ms": 50.0 * c,
                     "engram_bytes_read": 2560 * 1000 * c, "page_faults_major": 10 * c,
                     "placement": placement, "mapping_resident_bytes": 1 << 20}
            store.write_server_stats(run_id, c, before, after)
        store.finish_run(run_id, "complete")
        ids[kind] = run_id
    return ids
