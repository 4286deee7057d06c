"""Per-level statistics of a large run three ways, arms interleaved: the harness's pure-Python
path (rows to RequestRecord, then `metrics.stats_by_level`), DuckDB's `levels` view, and polars
over the Arrow result of the same query. Says whether polars would earn a place in the core.

`make bench-level-stats` (REQUESTS=1000000 by default); prints seconds per arm and whether the
three agree on every level's mean TTFT, mean TPS and p99 TTFT (largest relative difference).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import polars as pl

from harness.results.metrics import stats_by_level
from harness.results.run_row import RunRow
from harness.results.store import Store

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)


def build(path: Path, requests: int) -> str:
    """A run of `requests` rows spread over LEVELS, with seeded figures (DuckDB's random)."""
    store = Store(path)
    store.initialise()
    run_id = "bench-level-stats"
    store.create_run(RunRow(run_id=run_id, mode="closed", levels=list(LEVELS), rounds=1,
                            input_tokens=128, output_tokens=128, config="{}"))
    with store._connect() as con:  # bulk rows in SQL: a million inserts from Python take minutes
        con.execute("SELECT setseed(0.42)")
        con.execute(f"""
            INSERT INTO requests (run_id, concurrency, round, worker, request_id, sent_at,
                                  ttft_ms, latency_ms, output_tokens, output_tokens_estimated,
                                  input_tokens, chunks, ok, error_kind, repeat, turn)
            SELECT ?, [{','.join(map(str, LEVELS))}][1 + (i % {len(LEVELS)})], i // 1000,
                   i % 1000, 'r' || i, TIMESTAMP '2026-01-01' + to_microseconds(i * 1000),
                   100 + random() * 900, 4000 + random() * 6000, 128, false, 128, 128,
                   ok, CASE WHEN ok THEN NULL ELSE 'http_error' END, 0, 1
            FROM (SELECT i, random() > 0.001 AS ok FROM range(?) t(i))""", [run_id, requests])
    return run_id


def python_path(store: Store, run_id: str) -> dict[int, tuple[float | None, ...]]:
    stats = stats_by_level(store.requests(run_id), 128)
    return {s.concurrency: (s.number("mean_ttft_ms"), s.number("mean_tps"),
                            s.number("p99_ttft_ms")) for s in stats}


def duckdb_view(store: Store, run_id: str) -> dict[int, tuple[float, float, float]]:
    with store.read_only() as con:
        rows = con.execute("SELECT concurrency, mean_ttft_ms, mean_tps, p99_ttft_ms FROM levels "
                           "WHERE run_id = ?", [run_id]).fetchall()
    return {c: (t, s, p) for c, t, s, p in rows}


def polars_path(store: Store, run_id: str) -> dict[int, tuple[float, float, float]]:
    with store.read_only() as con:
        table = con.sql("SELECT concurrency, ok, ttft_ms, latency_ms, output_tokens "
                        "FROM requests WHERE run_id = $run", params={"run": run_id}
                        ).to_arrow_table()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    good = frame.filter(pl.col("ok")).with_columns(
        (pl.col("output_tokens") / (pl.col("latency_ms") / 1000)).alias("tps"))
    levels = good.group_by("concurrency").agg(
        pl.col("ttft_ms").mean().alias("mean_ttft_ms"), pl.col("tps").mean().alias("mean_tps"),
        pl.col("ttft_ms").quantile(0.99, interpolation="linear").alias("p99_ttft_ms"))
    return {r["concurrency"]: (r["mean_ttft_ms"], r["mean_tps"], r["p99_ttft_ms"])
            for r in levels.iter_rows(named=True)}


def worst_difference(a: dict, b: dict) -> float:
    """The largest relative difference of any figure (inf when the levels differ)."""
    if a.keys() != b.keys():
        return float("inf")
    return max(abs(x - y) / max(1.0, abs(y)) for k in a for x, y in zip(a[k], b[k], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    arms = {"python (RequestRecord + stats_by_level)": python_path,
            "duckdb (levels view)": duckdb_view, "polars (over Arrow)": polars_path}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "big.duckdb")
        run_id = build(store.path, args.requests)
        times: dict[str, list[float]] = {name: [] for name in arms}
        results = {}
        for _ in range(args.repeats):  # interleaved: this machine drifts between runs
            for name, arm in arms.items():
                t0 = time.perf_counter()
                results[name] = arm(store, run_id)
                times[name].append(time.perf_counter() - t0)
    reference = results["python (RequestRecord + stats_by_level)"]
    print(f"{args.requests:,} requests over {len(LEVELS)} levels, median of {args.repeats}:")
    for name, values in times.items():
        diff = worst_difference(results[name], reference)
        print(f"  {name:42s} {statistics.median(values):7.3f} s  "
              f"(largest relative difference from python {diff:.1e})")


if __name__ == "__main__":
    main()
