"""Read-only data access for the explorer. Aggregation happens in SQL (the `levels` view);
results come back as pandas frames.

DuckDB lets one process write a file or many read it, never both at once. So the explorer
never keeps the file open: each query opens it read-only, runs and closes (a few ms), and
retries while a bench is committing a round. Query results are cached per file version
(size and mtime), so a page reruns without touching the file until a bench writes to it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pandas as pd

from harness.metrics import STATISTIC_FIELDS, LevelPoint, Targets, capacity
from harness.store import DEFAULT_DB, Store

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "results" / "reference"
PUBLISHED = "published"


def db_path() -> Path:
    return Path(os.environ.get("ENGRAM_BENCH_DB", str(DEFAULT_DB)))


def file_version(path: Path) -> tuple[int, int] | None:
    """Changes whenever the bench commits; the cache key of every query."""
    try:
        st = path.stat()
    except OSError:
        return None
    wal = path.with_name(path.name + ".wal")
    wal_mtime = wal.stat().st_mtime_ns if wal.exists() else 0
    return (st.st_mtime_ns, st.st_size + wal_mtime)


def query(path: Path, sql: str, params: list | None = None) -> pd.DataFrame:
    """One read-only query; an empty frame when the file is missing or has no schema."""
    if not path.exists():
        return pd.DataFrame()
    store = Store(path, lock_timeout_s=10)
    try:
        with store.read_only() as con:
            return con.execute(sql, params or []).df()
    except duckdb.CatalogException:
        return pd.DataFrame()


RUN_COLUMNS = ("run_id, started_at, status, device, engine, model, table_placement, label, "
               "mode, rounds, input_tokens, output_tokens, measured_input_tokens, target_url")


def runs(path: Path) -> pd.DataFrame:
    return query(path, f"SELECT {RUN_COLUMNS} FROM runs ORDER BY started_at DESC, run_id DESC")


def levels(path: Path, run_ids: list[str]) -> pd.DataFrame:
    if not run_ids:
        return pd.DataFrame()
    return query(path, "SELECT * FROM levels WHERE run_id IN (SELECT unnest(?)) "
                       "ORDER BY run_id, concurrency", [run_ids])


def request_distribution(path: Path, run_id: str, metric: str) -> pd.DataFrame:
    """Per-level box statistics of ttft_ms or tps, computed in SQL (no raw rows shipped)."""
    expr = {"ttft_ms": "ttft_ms",
            "tps": "output_tokens / (latency_ms / 1000.0)"}[metric]
    return query(path, f"""
        SELECT concurrency, count(*) AS n, min(v) AS lo, quantile_cont(v, 0.25) AS q1,
               median(v) AS med, quantile_cont(v, 0.75) AS q3, max(v) AS hi, avg(v) AS mean
        FROM (SELECT concurrency, {expr} AS v FROM requests
              WHERE run_id = ? AND ok AND latency_ms > 0)
        WHERE v IS NOT NULL GROUP BY concurrency ORDER BY concurrency""", [run_id])


def first_round_vs_rest(path: Path, run_id: str) -> pd.DataFrame:
    return query(path, """
        SELECT concurrency, CASE WHEN round = 0 THEN 'first round' ELSE 'later rounds' END
                   AS rounds,
               avg(ttft_ms) AS mean_ttft_ms,
               avg(output_tokens / (latency_ms / 1000.0)) AS mean_tps, count(*) AS requests
        FROM requests WHERE run_id = ? AND ok AND latency_ms > 0
        GROUP BY ALL ORDER BY concurrency, rounds""", [run_id])


def server_counters(path: Path, run_id: str) -> pd.DataFrame:
    """The bundled server's Engram counters per level (deltas of /stats over the level)."""
    stats = query(path, "SELECT concurrency, before, after FROM server_stats "
                        "WHERE run_id = ? ORDER BY concurrency", [run_id])
    rows = []
    for rec in stats.itertuples():
        before, after = json.loads(rec.before or "null"), json.loads(rec.after or "null")
        if not isinstance(after, dict) or "engram_bytes_read" not in after:
            continue
        before = before if isinstance(before, dict) else {}

        def delta(key: str, b: dict = before, a: dict = after) -> float:
            return (a.get(key) or 0) - (b.get(key) or 0)

        tokens = delta("tokens")
        step = delta("step_ms")
        rows.append({
            "concurrency": rec.concurrency,
            "bytes_per_token": delta("engram_bytes_read") / tokens if tokens else None,
            "stall_fraction": delta("stall_ms") / step if step else None,
            "page_faults_major": delta("page_faults_major"),
            "page_faults_minor": delta("page_faults_minor"),
            "row_cache_hits": delta("row_cache_hits"),
            "mapping_resident_bytes": after.get("mapping_resident_bytes"),
            "placement": after.get("placement"),
        })
    return pd.DataFrame(rows)


def requests_frame(path: Path, run_ids: list[str]) -> pd.DataFrame:
    if not run_ids:
        return pd.DataFrame()
    return query(path, "SELECT * FROM requests WHERE run_id IN (SELECT unnest(?)) "
                       "ORDER BY run_id, concurrency, round, worker", [run_ids])


def published_levels() -> pd.DataFrame:
    """The published reference runs (facts, not measurements), shaped like `levels`."""
    frame = pd.read_csv(REFERENCE_DIR / "published_runs.csv")
    frame = frame.rename(columns={"run": "run_id"})
    frame["errors"] = 0
    frame["source"] = PUBLISHED
    return frame


def published_runs() -> pd.DataFrame:
    frame = published_levels()
    meta = frame.groupby("run_id", as_index=False).first()
    meta = meta[["run_id", "model", "device", "nodes", "engine", "tp", "speculative",
                 "table_placement"]]
    caps = pd.read_csv(REFERENCE_DIR / "published_capacity.csv").rename(
        columns={"run": "run_id", "max_c": "published_max_c",
                 "chat_users": "published_chat_users",
                 "agentic_users": "published_agentic_users"})
    return meta.merge(caps, on="run_id", how="left")


def points(levels_frame: pd.DataFrame, statistic: str = "mean") -> dict[str, list[LevelPoint]]:
    """Per run, the figures capacity judges (TTFT at pNN, TPS at p(100-NN), errors)."""
    ttft_col, tps_col = STATISTIC_FIELDS[statistic]
    out: dict[str, list[LevelPoint]] = {}
    for row in levels_frame.to_dict("records"):
        ttft = row.get(ttft_col, row.get("mean_ttft_ms"))
        tps = row.get(tps_col, row.get("mean_tps"))
        out.setdefault(row["run_id"], []).append(LevelPoint(
            int(row["concurrency"]), None if pd.isna(ttft) else float(ttft),
            None if pd.isna(tps) else float(tps), int(row.get("errors") or 0)))
    return out


def capacity_table(levels_frame: pd.DataFrame, targets: Targets) -> pd.DataFrame:
    """Max C and users for every run in the frame, through harness.metrics."""
    rows = []
    for run_id, pts in points(levels_frame, targets.statistic).items():
        cap = capacity(pts, targets)
        rows.append({"run_id": run_id, "max_c": cap.max_c, "chat_users": cap.chat_users,
                     "agentic_users": cap.agentic_users,
                     "passing": ",".join(str(v.concurrency) for v in cap.levels if v.passes),
                     "warnings": "; ".join(cap.warnings)})
    return pd.DataFrame(rows, columns=["run_id", "max_c", "chat_users", "agentic_users",
                                       "passing", "warnings"])


def to_csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()
