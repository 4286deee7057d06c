"""`make bench-explorer`: render time of every explorer page on 1,000,000 request rows.

Builds a database of 20 runs x 50,000 requests (levels 1-64, 3 repeats x 10 rounds, so the
Run and Compare charts draw their confidence bands) with SQL, then renders each page with
Streamlit's AppTest twice: cold (nothing cached) and warm (the file unchanged). The newest run
simulates chat users (`--mode users`, paired with the closed runs of its setup), the one before
it has 3 turns, so the Run page and the Runs table judge Max users and draw turns at scale.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from harness.results.results_file import connect
from harness.results.run_row import RunRow
from harness.results.store import Store

APP = str(Path(__file__).resolve().parent.parent / "explorer" / "app.py")
PAGES = ["views/runs.py", "views/run.py", "views/compare.py", "views/capacity.py",
         "views/sizing.py", "views/reference.py"]
RUNS, ROWS_PER_RUN, REPEATS = 20, 50_000, 3
USERS_RUN, TURNS_RUN = RUNS - 1, RUNS - 2  # the newest run simulates users, the next has turns
BANDED = {"views/run.py", "views/compare.py"}  # pages whose TTFT/TPS charts draw bands


def build(path: Path) -> None:
    store = Store(path)
    store.initialise()
    levels = [1, 2, 4, 8, 16, 32, 64]
    for i in range(RUNS):
        users, turns = i == USERS_RUN, 3 if i == TURNS_RUN else 1
        store.create_run(RunRow(
            run_id=f"big-{i:02d}", device=["spark", "rtx-pro-6000"][i % 2], engine="engram-bench",
            model="qwen-mini", table_placement=["nvme", "host"][i % 2],
            mode="users" if users else "closed",
            levels=levels, rounds=10, input_tokens=128, output_tokens=128,
            label=f"synthetic {i}",
            config=json.dumps({"prompt_words": 118, "repeat": REPEATS, "turns": turns,
                                  "profile": "chat" if users else "",
                                  "duty_cycle": 0.25 if users else None})))
        store.finish_run(f"big-{i:02d}", "complete")
    with connect(path) as con:  # a bulk synthetic load, not a bench's writes
        con.execute(f"""
            INSERT INTO requests (run_id, concurrency, round, worker, request_id, sent_at,
                                  ttft_ms, latency_ms, output_tokens, output_tokens_estimated,
                                  input_tokens, chunks, max_gap_ms, finish_reason, ok,
                                  error_kind, error_message, http_status, repeat, turn,
                                  cached_tokens, think_ms)
            SELECT 'big-' || lpad(CAST(r AS VARCHAR), 2, '0'), c, n % 10, n % c,
                   'req-' || i, TIMESTAMP '2026-11-29 00:00:00' + to_microseconds(i * 1000),
                   150 + 20 * c + (i % 97) + 10 * ((n // 10) % {REPEATS}),
                   128 / (40.0 / sqrt(c)) * 1000 + (i % 89),
                   128, false, 128 + CASE WHEN r = {TURNS_RUN} THEN 256 * (n % 3) ELSE 0 END,
                   128, 30.0, 'length', true, NULL, NULL, 200,
                   (n // 10) % {REPEATS},
                   CASE WHEN r = {TURNS_RUN} THEN 1 + n % 3 END,
                   CASE WHEN r = {TURNS_RUN} THEN 256 * (n % 3) END,
                   CASE WHEN r = {USERS_RUN} AND n % 10 < 9
                        THEN 3 * (128 / (40.0 / sqrt(c)) * 1000) END
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
