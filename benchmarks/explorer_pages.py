"""`make bench-explorer`: render time of every explorer page on 1,000,000 request rows.

Builds a database of 20 runs x 50,000 requests (levels 1-64, 3 repeats x 10 rounds, so the
Run and Compare charts draw their confidence bands) with SQL, then renders each page with
Streamlit's AppTest twice: cold (nothing cached) and warm (the file unchanged).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import duckdb
import streamlit as st
from streamlit.testing.v1 import AppTest

from harness.store import Store

APP = str(Path(__file__).resolve().parent.parent / "explorer" / "app.py")
PAGES = ["views/runs.py", "views/run.py", "views/compare.py", "views/capacity.py",
         "views/sizing.py", "views/reference.py"]
RUNS, ROWS_PER_RUN, REPEATS = 20, 50_000, 3
BANDED = {"views/run.py", "views/compare.py"}  # pages whose TTFT/TPS charts draw bands


def build(path: Path) -> None:
    store = Store(path)
    store.initialise()
    levels = [1, 2, 4, 8, 16, 32, 64]
    for i in range(RUNS):
        store.create_run(f"big-{i:02d}", {
            "device": ["spark", "rtx-pro-6000"][i % 2], "engine": "engram-bench",
            "model": "qwen-mini", "table_placement": ["nvme", "host"][i % 2], "mode": "closed",
            "levels": levels, "rounds": 10, "input_tokens": 128, "output_tokens": 128,
            "label": f"synthetic {i}",
            "config": json.dumps({"prompt_words": 118, "repeat": REPEATS})})
        store.finish_run(f"big-{i:02d}", "complete")
    with duckdb.connect(str(path)) as con:  # a bulk synthetic load, not a bench's writes
        con.execute(f"""
            INSERT INTO requests (run_id, concurrency, round, worker, request_id, sent_at,
                                  ttft_ms, latency_ms, output_tokens, output_tokens_estimated,
                                  input_tokens, chunks, max_gap_ms, finish_reason, ok,
                                  error_kind, error_message, http_status, repeat)
            SELECT 'big-' || lpad(CAST(r AS VARCHAR), 2, '0'), c, n % 10, n % c,
                   'req-' || i, TIMESTAMP '2026-11-29 00:00:00' + to_microseconds(i * 1000),
                   150 + 20 * c + (i % 97) + 10 * ((n // 10) % {REPEATS}),
                   128 / (40.0 / sqrt(c)) * 1000 + (i % 89),
                   128, false, 128, 128, 30.0, 'length', true, NULL, NULL, 200,
                   (n // 10) % {REPEATS}
            FROM (SELECT i, i // {ROWS_PER_RUN} AS r, i % {ROWS_PER_RUN} AS n,
                         [1, 2, 4, 8, 16, 32, 64][1 + (i % 7)] AS c
                  FROM range({RUNS * ROWS_PER_RUN}) t(i))""")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.duckdb"
        started = time.perf_counter()
        build(db)
        with Store(db).read_only() as con:
            rows = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
        print(f"database: {rows:,} request rows in {RUNS} runs x {REPEATS} repeats "
              f"({time.perf_counter() - started:.1f} s to build, "
              f"{db.stat().st_size / 1e6:.0f} MB)")
        os.environ["ENGRAM_BENCH_DB"] = str(db)
        worst = 0.0
        print(f"{'page':<22}{'cold s':>8}{'warm s':>8}")
        for page in PAGES:
            times = []
            st.cache_data.clear()  # cold: nothing cached from an earlier page
            at = AppTest.from_file(APP, default_timeout=120)
            for _ in range(2):
                at.switch_page(page)
                start = time.perf_counter()
                at.run()
                times.append(time.perf_counter() - start)
                if at.exception:
                    print(f"{page}: {at.exception}")
                    return 1
            worst = max(worst, *times)
            bands = sum('"fill":"tonexty"' in chart.proto.spec
                        for chart in at.get("plotly_chart"))
            print(f"{page:<22}{times[0]:>8.2f}{times[1]:>8.2f}"
                  f"{f'   {bands} charts with bands' if bands else ''}")
            if page in BANDED and not bands:
                print(f"{page}: no confidence band drawn on a run with repeats")
                return 1
        print(f"slowest render {worst:.2f} s (target < 2 s): "
              f"{'meets' if worst < 2 else 'MISSES'} the target")
        return 0 if worst < 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
