"""Two stored runs of one setup, the bundled server's table in host RAM and on NVMe, written
without a server: requests of known per-level means, the server's /stats around each level.

`ram` passes C=1,2,4 and fails C=8 (Max C 4); `disk` passes C=1,2 and fails C=4 and 8 (Max C
2). Each level has 20 rounds, so a level's mean TTFT has a bootstrap interval. The NVMe
server read DISK_BYTES_PER_TOKEN per token at every level and held RESIDENT[c] of the table in
the page cache after level c; the host-RAM server holds the whole TABLE_BYTES table.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.store import Store

T0 = 1_790_000_000.0
LEVELS = (1, 2, 4, 8)
ROUNDS = 20
# per run and level: mean TTFT ms, mean TPS
PROFILES = {
    "ram": {1: (200.0, 40.0), 2: (260.0, 32.0), 4: (400.0, 24.0), 8: (700.0, 15.0)},
    "disk": {1: (240.0, 34.0), 2: (330.0, 26.0), 4: (560.0, 18.0), 8: (950.0, 11.0)},
}
PLACEMENTS = {"ram": "host", "disk": "nvme"}
TABLE_BYTES = 2 << 30
DISK_BYTES_PER_TOKEN = 6144
RESIDENT = {1: 100 << 20, 2: 200 << 20, 4: 300 << 20, 8: 340 << 20}
KV_POOL = {"ram": (64_000, 2_621_440_000), "disk": (64_000, 2_621_440_000)}
TOKENS_PER_LEVEL = 10_000


def _records(kind: str, seed: int = 3) -> list[RequestRecord]:
    rng = random.Random(f"{kind}-{seed}")
    out, start = [], T0
    for c in LEVELS:
        ttft_mean, tps_mean = PROFILES[kind][c]
        for rnd in range(ROUNDS):
            for w in range(c):
                tps = tps_mean + rng.uniform(-0.5, 0.5)
                out.append(RequestRecord(
                    request_id=f"{kind}-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=start + rnd * 5.0, ttft_ms=ttft_mean + rng.uniform(-15, 15),
                    latency_ms=128 / tps * 1000, output_tokens=128, input_tokens=128,
                    chunks=128, max_gap_ms=40.0, finish_reason="length", http_status=200))
        start += ROUNDS * 10
    return out


def _snapshot(kind: str, c: int, done: int) -> dict:
    """/stats after `done` levels, the last of them level c (0: before the first)."""
    tokens = TOKENS_PER_LEVEL * done
    snap = {"tokens": tokens, "uptime_s": 10.0 * done, "placement": PLACEMENTS[kind],
            "table_bytes": TABLE_BYTES, "kv_pool_tokens": KV_POOL[kind][0],
            "kv_pool_bytes": KV_POOL[kind][1]}
    if kind == "disk":
        snap.update(disk_read_bytes=DISK_BYTES_PER_TOKEN * tokens, io_mode="mmap",
                    table_resident_bytes=RESIDENT.get(c, 0),
                    table_resident_peak_bytes=RESIDENT.get(c, 0))
    else:
        snap.update(disk_read_bytes=0)
    return snap


def build(path: Path, **differs: dict[str, object]) -> dict[str, str]:
    """Write both runs; `differs`: per kind, RunRow fields to set otherwise (a device, say).
    Returns {kind: run_id}."""
    store = Store(path)
    store.initialise()
    ids = {}
    for kind in ("ram", "disk"):
        run_id = f"placement-{kind}"
        fields: dict[str, object] = {
            "run_id": run_id, "device": "spark", "engine": "engram-bench", "model": "qwen-mini",
            "table_placement": PLACEMENTS[kind], "target_url": "http://127.0.0.1:8000/v1",
            "api": "chat", "mode": "closed", "levels": list(LEVELS), "rounds": ROUNDS,
            "input_tokens": 128, "output_tokens": 128, "measured_input_tokens": 128.0,
            "label": f"placement {kind}", "config": json.dumps({"prompt_words": 118}),
            **differs.get(kind, {})}
        store.create_run(RunRow(**fields))  # type: ignore[arg-type]
        store.write_requests(run_id, _records(kind))
        for i, c in enumerate(LEVELS):
            before = _snapshot(kind, LEVELS[i - 1] if i else 0, i)
            store.write_server_stats(run_id, c, before, _snapshot(kind, c, i + 1))
        store.finish_run(run_id, "complete")
        ids[kind] = run_id
    return ids
