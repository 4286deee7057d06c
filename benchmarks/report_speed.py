"""`make bench-report`: how long `engram-bench report` takes and how big its file is, for one
run of 10 levels and for 10 such runs compared (targets: 3 s; 10 s and 10 MB).

Each run is stored as a sweep stores it (levels 1-512, 3 rounds, 3,069 requests), with a
failed request now and then, then the CLI writes the report as a user runs it; each is timed
twice, the file's size read after."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.config import RunConfig, StoredRun
from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.store import Store

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROUNDS, RUNS = 3, 10


def build(path: Path) -> list[str]:
    store = Store(path)
    store.initialise()
    rng = random.Random(1)
    run_ids = []
    for i in range(RUNS):
        run_id = f"speed-{i:02d}"
        config = RunConfig(url="http://127.0.0.1:8000/v1", model="bench-model", levels=LEVELS,
                           rounds=ROUNDS, device="spark", table_placement="nvme",
                           max_concurrency=max(LEVELS))
        store.create_run(RunRow(run_id=run_id, device="spark", engine="engram-bench",
                                model="bench-model", table_placement="nvme", mode="closed",
                                levels=list(LEVELS), rounds=ROUNDS, input_tokens=128,
                                output_tokens=128, config=StoredRun(config).to_json(),
                                target_url=config.url, version="0.1.0",
                                host=json.dumps({"hostname": "bench", "cpus": 2})))
        t0 = 1_790_000_000.0 + i * 10_000
        records = []
        for c in LEVELS:
            for rnd in range(ROUNDS):
                for w in range(c):
                    ttft = 80 + 9 * c + rng.uniform(0, 40)
                    failed = rng.random() < 0.002
                    records.append(RequestRecord(
                        request_id=f"{run_id}-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd,
                        worker=w, sent_at=t0 + c * 60 + rnd * 10 + w * 0.001,
                        ttft_ms=None if failed else ttft,
                        latency_ms=ttft + 127 * (20 + c / 8), output_tokens=0 if failed else 128,
                        input_tokens=128, chunks=0 if failed else 128, max_gap_ms=30.0,
                        finish_reason="length", http_status=500 if failed else 200,
                        error_kind="http_error" if failed else None,
                        error_message="HTTP 500" if failed else None))
        store.write_requests(run_id, records)
        store.finish_run(run_id, "complete")
        run_ids.append(run_id)
    return run_ids


def timed(db: Path, run_ids: list[str], out: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engram_bench", "report", *run_ids, "--db",
                           str(db), "-o", str(out)], capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(done.stderr)
    return time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        db = Path(work) / "bench.duckdb"
        run_ids = build(db)
        worst = 0
        for name, ids, limit_s, limit_mb in (("1 run of 10 levels", run_ids[:1], 3.0, None),
                                             ("10 runs of 10 levels", run_ids, 10.0, 10.0)):
            out = Path(work) / "report.html"
            seconds = [timed(db, ids, out) for _ in range(2)]
            mb = out.stat().st_size / 1e6
            ok = max(seconds) < limit_s and (limit_mb is None or mb < limit_mb)
            worst |= not ok
            print(f"{name}: {', '.join(f'{s:.2f}' for s in seconds)} s (target < {limit_s:g} "
                  f"s), {mb:.2f} MB{f' (target < {limit_mb:g} MB)' if limit_mb else ''}"
                  f"{'' if ok else '  MISSED'}")
        return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
