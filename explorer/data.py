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
from collections.abc import Collection
from pathlib import Path

import duckdb
import pandas as pd

from explorer import literal
from harness.config import StoredRun
from harness.results import users
from harness.results.confidence import difference_of_clusters, interval_of_clusters
from harness.results.goodput import Slo
from harness.results.host_figures import levels_host
from harness.results.metrics import (
    STATISTIC_FIELDS,
    LevelPoint,
    Targets,
    capacity,
    judged_fields,
    level_key,
)
from harness.results.report import level_intervals
from harness.results.run_row import RunRow
from harness.results.server_metrics import OFFLOAD, MetricRow, level_figures
from harness.results.store import DEFAULT_DB, Store, StoreError
from harness.results.users import paired_concurrency_run
from harness.results.verdicts import users_verdict, verdict

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "results" / "reference"
PUBLISHED = "published"


def db_path() -> Path:
    return Path(os.environ.get("ENGRAM_BENCH_DB", str(DEFAULT_DB)))


def unreadable(path: Path) -> str | None:
    """Why the results file cannot be read, in one sentence of markdown (the path and the
    store's words shown as typed); None when it can (or is absent, which the pages explain
    themselves)."""
    if not path.exists():
        return None
    if path.is_dir():
        return (f"{literal.markdown(str(path))} is a folder, not a results file: open a file "
                "with `make explore DB=path`")
    try:
        with Store(path, lock_timeout_s=10).read_only() as con:
            con.execute("SELECT 1")
    except StoreError as exc:
        return f"{literal.markdown(str(exc))}: open another file with `make explore DB=path`"
    return None


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
SETTINGS = ("profile", "duty_target", "think_s", "turns")


def run_settings(config: str | None) -> dict:
    """What a run's config says of simulated users and turns: `profile` ('chat', 'agentic' or
    None), `duty_target` and `think_s` (None unless set), `turns` (None for a single-turn run;
    older runs lack every key)."""
    knobs = StoredRun.from_json(config).config
    if knobs is None:
        return dict.fromkeys(SETTINGS)
    return {"profile": knobs.profile or None, "duty_target": knobs.duty_cycle,
            "think_s": knobs.think_s, "turns": knobs.turns if knobs.turns > 1 else None}


def runs(path: Path) -> pd.DataFrame:
    """Every run, newest first, with its `run_settings` as columns."""
    frame = query(path, f"SELECT {RUN_COLUMNS}, config FROM runs "
                        "ORDER BY started_at DESC, run_id DESC")
    if "config" not in frame:
        return frame
    settings = pd.DataFrame([run_settings(c) for c in frame.pop("config")], index=frame.index,
                            columns=list(SETTINGS))
    return pd.concat([frame, settings.astype({"turns": "Int64", "duty_target": "float64",
                                              "think_s": "float64"})], axis=1)


def levels(path: Path, run_ids: list[str]) -> pd.DataFrame:
    if not run_ids:
        return pd.DataFrame()
    return query(path, "SELECT * FROM levels WHERE run_id IN (SELECT unnest(?)) "
                       "ORDER BY run_id, concurrency", [run_ids])


def turns(path: Path, run_id: str) -> pd.DataFrame:
    """Per level and turn of a run (the `turns` view), with `cached_share`: the share of the
    prompt (the context the turn sent) the server reported as cached."""
    frame = query(path, "SELECT * FROM turns WHERE run_id = ? ORDER BY concurrency, turn",
                  [run_id])
    if not frame.empty:
        frame["cached_share"] = frame["mean_cached_tokens"] / frame["mean_prompt_tokens"]
    return frame


def request_distribution(path: Path, run_id: str, metric: str) -> pd.DataFrame:
    """Per-level box statistics of ttft_ms or tps, computed in SQL (no raw rows shipped)."""
    column = {"ttft_ms": "ttft_ms", "tps": "tps"}[metric]
    return query(path, f"""
        SELECT concurrency, count(*) AS n, min(v) AS lo, quantile_cont(v, 0.25) AS q1,
               median(v) AS med, quantile_cont(v, 0.75) AS q3, max(v) AS hi, avg(v) AS mean
        FROM (SELECT concurrency, {column} AS v FROM request_figures
              WHERE run_id = ? AND ok AND latency_ms > 0)
        WHERE v IS NOT NULL GROUP BY concurrency ORDER BY concurrency""", [run_id])


def goodput(path: Path, run_id: str, slo: Slo) -> pd.DataFrame:
    """Per level, the share of requests meeting every objective of `slo` and such requests
    per second of busy time (harness.results.goodput, in SQL: an error or a missing figure
    misses its objective)."""
    checks = [f"{column} <= {float(limit)!r}" for key, column in
              (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"), ("e2e_ms", "latency_ms"))
              if (limit := getattr(slo, key)) is not None]
    met = " AND ".join(["ok", *checks])
    return query(path, f"""
        SELECT f.concurrency, count(*) AS requests,
               avg(CASE WHEN {met} THEN 1.0 ELSE 0.0 END) AS goodput_share,
               count(*) FILTER (WHERE {met}) / any_value(l.busy_s) AS goodput_rps
        FROM request_figures f JOIN levels l ON l.run_id = f.run_id
            AND l.concurrency = f.concurrency AND l.rate IS NULL
        WHERE f.run_id = ? AND f.rate IS NULL
        GROUP BY f.concurrency ORDER BY f.concurrency""", [run_id])


def has_token_times(path: Path, run_id: str) -> bool:
    """The run was stored with `--token-times` (chunk_times rows)."""
    found = query(path, "SELECT count(*) AS n FROM (SELECT 1 FROM chunk_times WHERE run_id = ? "
                        "LIMIT 1)", [run_id])
    return not found.empty and int(found["n"].iloc[0]) > 0


def timeline(path: Path, run_id: str, concurrency: int, limit: int = 64) -> tuple[
        pd.DataFrame, pd.DataFrame]:
    """A level's first `limit` requests as (requests, chunks): each request's send offset
    from the level's first send, TTFT and latency (ms); each chunk's arrival on that axis."""
    requests = query(path, """
        SELECT request_id, round, worker, ttft_ms, latency_ms, ok,
               (epoch_us(sent_at) - min(epoch_us(sent_at)) OVER ()) / 1000.0 AS sent_ms
        FROM requests WHERE run_id = ? AND concurrency = ? AND rate IS NULL
        ORDER BY sent_at, request_id LIMIT ?""", [run_id, concurrency, limit])
    if requests.empty:
        return requests, pd.DataFrame()
    chunks = query(path, """
        SELECT request_id, idx, t_ns / 1e6 AS t_ms, tokens FROM chunk_times
        WHERE run_id = ? AND request_id IN (SELECT unnest(?)) ORDER BY request_id, idx""",
                   [run_id, requests["request_id"].tolist()])
    if not chunks.empty:
        sent = requests.set_index("request_id")["sent_ms"]
        chunks["at_ms"] = chunks["request_id"].map(sent) + chunks["t_ms"]
    return requests, chunks


def host_levels(path: Path, run_id: str, levels_frame: pd.DataFrame) -> pd.DataFrame:
    """Per level of a run with host metrics, the serving hosts' figures as `summary --json`
    gives them (harness.results.host_figures) beside the level's mean TTFT and TPOT; empty
    for a run without them."""
    if not path.exists():
        return pd.DataFrame()
    store = Store(path, lock_timeout_s=10)
    try:
        by_level = store.host_levels(run_id)
    except StoreError:
        return pd.DataFrame()
    if not by_level:
        return pd.DataFrame()
    tokens = query(path, "SELECT concurrency, rate, sum(output_tokens) AS output_tokens, "
                         "sum(input_tokens) AS prompt_tokens FROM requests WHERE run_id = ? "
                         "GROUP BY ALL", [run_id])
    counted = {(int(r.concurrency), None if pd.isna(r.rate) else float(r.rate)):
               (float(r.output_tokens or 0), float(r.prompt_tokens or 0))
               for r in tokens.itertuples()}
    config = StoredRun.from_json(store.run(run_id).config).config
    table_state = config.table_state if config else ""
    found = levels_host(by_level, counted, table_state,
                        store.requests(run_id) if table_state else [])
    frame = pd.DataFrame([{"concurrency": c, "rate": rate, **host}
                          for (c, rate), host in sorted(found.items(),
                                                        key=lambda kv: (kv[0][0],
                                                                        kv[0][1] or 0))])
    shown = [c for c in ("concurrency", "mean_ttft_ms", "mean_tpot_ms") if c in levels_frame]
    if "concurrency" in shown and len(shown) > 1:
        frame = frame.merge(levels_frame[shown].drop_duplicates("concurrency"),
                            on="concurrency", how="left")
    return frame


def host_slices(path: Path, run_id: str, concurrency: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A level's host time slices (each host's, each pass's) and its requests, both on the
    level's own time axis: seconds since its first request was sent (the slices' times are
    the agents' clocks mapped to the harness's). Slices carry their rates per second of the
    slice: read MB/s, the I/O stall and disk busy shares."""
    # both from the level's first request sent, a failed one too
    first = """WITH first AS (SELECT min(epoch_us(sent_at)) AS t0 FROM requests
                              WHERE run_id = ? AND concurrency = ? AND rate IS NULL)"""
    slices = query(path, first + """
        SELECT node, coalesce(repeat, 0) AS repeat,
               (epoch_us(started_at) - t0) / 1e6 AS t_s, width_s,
               read_bytes / width_s / 1e6 AS read_mb_per_s,
               major_faults / width_s AS major_faults_per_s,
               table_resident_bytes / 2 ^ 20 AS resident_mib,
               rss_file_bytes / 2 ^ 20 AS rss_file_mib,
               io_some_s / width_s AS io_stall_share,
               disk_io_time_s / width_s AS disk_busy_share
        FROM host_slices, first WHERE run_id = ? AND concurrency = ? AND rate IS NULL
            AND width_s > 0
        ORDER BY repeat, node, t_s""", [run_id, concurrency, run_id, concurrency])
    requests = query(path, first + """
        SELECT (epoch_us(sent_at) - t0) / 1e6 AS t_s, ttft_ms, coalesce(repeat, 0) AS repeat
        FROM requests, first WHERE run_id = ? AND concurrency = ? AND rate IS NULL AND ok
        ORDER BY sent_at""", [run_id, concurrency, run_id, concurrency])
    return slices, requests


def first_round_vs_rest(path: Path, run_id: str) -> pd.DataFrame:
    return query(path, """
        SELECT concurrency, CASE WHEN round = 0 THEN 'first round' ELSE 'later rounds' END
                   AS rounds,
               avg(ttft_ms) AS mean_ttft_ms,
               avg(tps) AS mean_tps, count(*) AS requests
        FROM request_figures WHERE run_id = ? AND ok AND latency_ms > 0
        GROUP BY ALL ORDER BY concurrency, rounds""", [run_id])


def server_stats(path: Path, run_id: str) -> list[tuple[int, int, dict, dict]]:
    """Per pass of a level (concurrency, repeat), the server's /stats snapshots before and
    after it ({} where it gave none)."""
    frame = query(path, "SELECT concurrency, coalesce(repeat, 0) AS repeat, before, after "
                        "FROM server_stats WHERE run_id = ? "
                        "ORDER BY concurrency, repeat, recorded_at", [run_id])
    return [(int(r.concurrency), int(r.repeat), _snapshot(r.before), _snapshot(r.after))
            for r in frame.itertuples()]


def _snapshot(text: str | None) -> dict:
    value = json.loads(text or "null")
    return value if isinstance(value, dict) else {}


# level_figures key: (readable name, number format), in the order tables show them
SERVER_FIGURES = {
    "ttft_mean_ms": ("server TTFT mean (ms)", "%.1f"),
    "ttft_p50_ms": ("server TTFT p50 (ms)", "%.1f"),
    "ttft_p99_ms": ("server TTFT p99 (ms)", "%.1f"),
    "queue_time_mean_ms": ("server queue time mean (ms)", "%.1f"),
    "queue_time_p50_ms": ("server queue time p50 (ms)", "%.1f"),
    "itl_mean_ms": ("server ITL mean (ms)", "%.2f"),
    "e2e_mean_ms": ("server end-to-end mean (ms)", "%.0f"),
    "kv_usage_mean": ("KV-cache usage mean", "percent"),
    "kv_usage_max": ("KV-cache usage max", "percent"),
    "running_mean": ("running requests mean", "%.1f"),
    "running_max": ("running requests max", "%.0f"),
    "waiting_mean": ("waiting requests mean", "%.1f"),
    "waiting_max": ("waiting requests max", "%.0f"),
    "preemptions": ("preemptions", "%.0f"),
    "prefix_hit_rate": ("prefix-cache hit rate", "percent"),
}


def server_figures(path: Path, run_ids: list[str]) -> pd.DataFrame:
    """Per run and level, the figures of the target's /metrics (harness.results.server_metrics):
    SERVER_FIGURES columns and `offload: ...` ones, where the server exposed them; empty when
    no chosen run stored any. A level run in several passes (`--repeat`) shows the mean of
    each figure over its passes."""
    if not run_ids:
        return pd.DataFrame()
    keys = ["run_id", "concurrency", "repeat"]
    rows = query(path, "SELECT run_id, concurrency, coalesce(repeat, 0) AS repeat, name, "
                       "labels, kind, stat, value FROM server_metrics "
                       "WHERE run_id IN (SELECT unnest(?)) ORDER BY run_id, concurrency, repeat",
                 [run_ids])
    if rows.empty:
        return pd.DataFrame()
    out = []
    for (run_id, concurrency, repeat), level in rows.groupby(keys, sort=False):
        figures = level_figures(MetricRow(*r) for r in level.drop(columns=keys)
                                .itertuples(index=False))
        if figures:
            out.append({"run_id": run_id, "concurrency": int(concurrency), "repeat": repeat,
                        **figures})
    if not out:
        return pd.DataFrame()
    return (pd.DataFrame(out).groupby(["run_id", "concurrency"], sort=False, as_index=False)
            .mean(numeric_only=True).drop(columns="repeat"))


def server_columns(figures: pd.DataFrame) -> list[str]:
    """The figure columns a frame holds, in SERVER_FIGURES order, offload counters last."""
    return ([c for c in SERVER_FIGURES if c in figures]
            + sorted(c for c in figures if c.startswith(OFFLOAD)))


def server_vs_client(levels: pd.DataFrame, figures: pd.DataFrame) -> pd.DataFrame:
    """One run's levels: the client's TTFT (mean, p50) beside the server's figures."""
    client = levels[["concurrency", "mean_ttft_ms", "p50_ttft_ms"]]
    return client.merge(figures.drop(columns=["run_id"]), on="concurrency", how="left")


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


def points(levels_frame: pd.DataFrame, statistic: str = "mean",
           ttft_of: str = "first") -> dict[str, list[LevelPoint]]:
    """Per run, the figures capacity judges (TTFT at pNN, or TTFO with `ttft_of` "output",
    TPS at p(100-NN), errors). A run without TTFO (published) reads its TTFT for it, as an
    upgraded results file's rows do."""
    ttft_col, tps_col = judged_fields(statistic, ttft_of)
    first_col = STATISTIC_FIELDS[statistic][0]
    out: dict[str, list[LevelPoint]] = {}
    for row in levels_frame.to_dict("records"):
        ttft = row.get(ttft_col)
        if ttft is None or pd.isna(ttft):
            ttft = row.get(first_col, row.get("mean_ttft_ms"))
        tps = row.get(tps_col, row.get("mean_tps"))
        out.setdefault(row["run_id"], []).append(LevelPoint(
            int(row["concurrency"]), None if pd.isna(ttft) else float(ttft),
            None if pd.isna(tps) else float(tps), int(row.get("errors") or 0)))
    return out


def probe_levels(levels_frame: pd.DataFrame) -> dict[str, set[int]]:
    """Per run, the levels `run --search` added (published runs have none)."""
    if "probe" not in levels_frame:
        return {}
    probes = levels_frame[levels_frame["probe"].eq(True)]
    return {run_id: set(map(int, frame["concurrency"]))
            for run_id, frame in probes.groupby("run_id")}


def capacity_table(levels_frame: pd.DataFrame, targets: Targets) -> pd.DataFrame:
    """Max C, users and the verdict line for every run in the frame, via harness.results.metrics."""
    probes = probe_levels(levels_frame)
    rows = []
    for run_id, pts in points(levels_frame, targets.statistic, targets.ttft_of).items():
        cap = capacity(pts, targets)
        rows.append({"run_id": run_id, "max_c": cap.max_c, "chat_users": cap.chat_users,
                     "agentic_users": cap.agentic_users,
                     "verdict": verdict(cap, probes.get(run_id, set())),
                     "passing": ",".join(str(v.concurrency) for v in cap.levels if v.passes),
                     "warnings": "; ".join(cap.warnings)})
    return pd.DataFrame(rows, columns=["run_id", "max_c", "chat_users", "agentic_users",
                                       "verdict", "passing", "warnings"])


USERS_COLUMNS = ["run_id", "max_users", "duty_cycle", "estimated_users", "estimate", "factor",
                 "paired_run", "paired_max_c", "measured_factor", "verdict", "passing",
                 "uncertain", "unsteady", "warnings"]
NO_PAIRED_RUN = "no closed run of the same setup to estimate from"
GET_PAIRED_RUN = ("Run a closed `make bench` (--mode closed) with the same device, engine, model, "
                  "table placement and prompt and output tokens: its Max C times the profile's "
                  "factor is the estimate set beside the measured users.")


def _duty_at(levels_frame: pd.DataFrame, run_id: str, users: int) -> float | None:
    """The measured duty cycle of a users run at U users (None: not measured there)."""
    if "duty_cycle" not in levels_frame:
        return None
    rows = levels_frame[(levels_frame["run_id"] == run_id)
                        & (levels_frame["concurrency"] == users)]["duty_cycle"].dropna()
    return float(rows.iloc[0]) if len(rows) else None


USERS_CHECK_COLUMNS = ["run_id", "concurrency", "lead_in_cycles", "think_mean_ms",
                       "response_time_law_error_pct",
                       "steady_state", "steady_state_note", "within_noise", "in_flight_mean",
                       "in_flight_sd"]


def users_checks(path: Path, run_id: str, targets: Targets) -> pd.DataFrame:
    """Per level of a users run, the summary's own checks (harness.results.users.level_checks):
    the lead-in's requests per user, the mean think Z, the response-time law's error, steady
    state (and why not), whether the level's interval holds a target, and the requests in
    flight (mean and spread over time)."""
    store = Store(path, lock_timeout_s=10)
    records = store.requests(run_id)
    config = StoredRun.from_json(store.run(run_id).config).config
    if config is None or not records:
        return pd.DataFrame(columns=USERS_CHECK_COLUMNS)
    ttft, tps = level_intervals(records)
    lead_ins = store.lead_ins(run_id)
    checks = users.level_checks(records, config, targets, tps, ttft, lead_ins)
    zs = store.user_levels(run_id)
    return pd.DataFrame([{"run_id": run_id, "concurrency": c,
                          "lead_in_cycles": lead_ins[c].cycles(c) if c in lead_ins else None,
                          "think_mean_ms": zs.get(c, check.steady.think_mean_ms),
                          "response_time_law_error_pct": check.steady.law_error_pct,
                          "steady_state": check.steady.flag is None,
                          "steady_state_note": check.steady.flag,
                          "within_noise": check.within_noise,
                          "in_flight_mean": check.steady.in_flight_mean,
                          "in_flight_sd": check.steady.in_flight_sd}
                         for c, check in checks.items()], columns=USERS_CHECK_COLUMNS)


def steady_levels(levels_frame: pd.DataFrame) -> pd.DataFrame:
    """The levels Max users is judged on: all but users levels not in steady state."""
    if "steady_state" not in levels_frame:
        return levels_frame
    return levels_frame[levels_frame["steady_state"].ne(False)]


def users_runs(runs_frame: pd.DataFrame, run_ids: Collection[str]) -> dict[str, str | None]:
    """The users runs (`--mode users`) among `run_ids`, each with its paired closed run (the
    newest complete closed run of the same setup, harness.results.users) or None."""
    if runs_frame.empty:
        return {}
    rows = [RunRow.from_mapping(r) for r in runs_frame.to_dict("records")]
    out = {}
    for run in rows:
        if level_key(run.mode) == "U" and run.run_id in run_ids:
            paired = paired_concurrency_run(rows, run)
            out[run.run_id] = None if paired is None else paired.run_id
    return out


def users_table(levels_frame: pd.DataFrame, runs_frame: pd.DataFrame,
                pairs: dict[str, str | None], targets: Targets) -> pd.DataFrame:
    """Per users run of `pairs` (from `users_runs`): Max users (harness.results.metrics.capacity
    with U as the concurrency, the Max C targets), the duty cycle measured there, and the
    estimate from the paired run's Max C by `harness.results.users.estimate`, with the
    measured users per Max C. The frame must hold the paired runs' levels too."""
    pts = points(steady_levels(levels_frame), targets.statistic, targets.ttft_of)
    settings = runs_frame.set_index("run_id")
    rows = []
    for run_id, paired in pairs.items():
        if run_id not in pts:
            continue
        cap = capacity(pts[run_id], targets, users_levels=True)
        duty = _duty_at(levels_frame, run_id, cap.max_c)
        max_c = capacity(pts[paired], targets).max_c if paired in pts else None
        run = settings.loc[run_id].to_dict()
        target = run.get("duty_target")
        est = users.estimate(cap.max_c, duty, max_c, run.get("profile"),
                             None if pd.isna(target) else target, targets)
        estimated, factor, how = est.estimated_users, est.factor, est.how
        line = users_verdict(cap, duty)
        mine = levels_frame[levels_frame["run_id"] == run_id]
        uncertain = _levels_where(mine, "within_noise", True)
        unsteady = _levels_where(mine, "steady_state", False)
        if uncertain:
            line += f"; levels within noise of the targets: {uncertain}"
        if unsteady:
            line += f"; not in steady state, left out: {unsteady}"
        estimate = None
        if max_c is None:
            line += f"; {NO_PAIRED_RUN}"
        elif factor is None:
            line += (f"; no users per C known to estimate from Max C {max_c} "
                     f"(run {literal.shorten(str(paired))})")
        else:
            estimate = f"Max C {max_c} {how} = {estimated}"
            line += f"; estimate {estimate} (run {literal.shorten(str(paired))})"
        rows.append({"run_id": run_id, "max_users": cap.max_c, "duty_cycle": duty,
                     "estimated_users": estimated, "estimate": estimate, "paired_run": paired,
                     "factor": how, "paired_max_c": max_c,
                     "measured_factor": est.measured_factor, "verdict": line,
                     "passing": ",".join(str(v.concurrency) for v in cap.levels if v.passes),
                     "uncertain": uncertain, "unsteady": unsteady,
                     "warnings": "; ".join(cap.warnings)})
    return pd.DataFrame(rows, columns=USERS_COLUMNS)


def _levels_where(frame: pd.DataFrame, column: str, value: bool) -> str:
    """'8, 16': the levels whose `column` is `value` ('' when none or not checked)."""
    if column not in frame:
        return ""
    return ", ".join(str(int(c)) for c in frame[frame[column].eq(value)]["concurrency"])


def with_rows(caps: pd.DataFrame, others: pd.DataFrame) -> pd.DataFrame:
    """A capacity table whose rows of the runs in `others` (rate or users runs, judged in
    their own terms) are replaced by those rows, in place; counts stay integers, blank where
    unknown."""
    if others.empty:
        return caps
    order = [*caps["run_id"], *(r for r in others["run_id"] if r not in set(caps["run_id"]))]
    kept = caps[~caps["run_id"].isin(others["run_id"])]
    out = pd.concat([kept, others], ignore_index=True) if not kept.empty else others.copy()
    out = out.set_index("run_id").loc[order].reset_index()
    counts = ("max_c", "chat_users", "agentic_users", "max_users", "estimated_users",
              "paired_max_c")
    return out.astype({c: "Int64" for c in counts if c in out})


def cluster_sums(path: Path, run_ids: list[str]) -> pd.DataFrame:
    """Per run, concurrency, repeat and round: sum and count of successful requests' TTFT and
    TPS, the unit `harness.results.confidence` resamples (summed in SQL: no raw rows shipped)."""
    if not run_ids:
        return pd.DataFrame()
    return query(path, """
        SELECT run_id, concurrency, coalesce(repeat, 0) AS repeat, round,
               sum(ttft_ms) AS ttft_sum, count(ttft_ms) AS ttft_n,
               sum(tps) AS tps_sum, count(tps) AS tps_n
        FROM request_figures WHERE run_id IN (SELECT unnest(?)) AND ok AND rate IS NULL
        GROUP BY ALL ORDER BY ALL""", [run_ids])


DIFF_COLUMNS = ["run_id", "concurrency", "tps_diff_pct", "tps_diff_low", "tps_diff_high",
                "tps_verdict", "ttft_diff_pct", "ttft_diff_low", "ttft_diff_high",
                "ttft_verdict"]


def _clusters_of(frame: pd.DataFrame, metric: str) -> dict[int, list[tuple[int, int, float, int]]]:
    out: dict[int, list[tuple[int, int, float, int]]] = {}
    for row in frame.itertuples():
        n = getattr(row, f"{metric}_n")
        if n:
            out.setdefault(int(row.concurrency), []).append(
                (int(row.repeat), int(row.round), float(getattr(row, f"{metric}_sum")), int(n)))
    return out


def _pct(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or pd.isna(value) or pd.isna(base) or not base:
        return None
    return (float(value) / float(base) - 1) * 100


def differences(levels_frame: pd.DataFrame, clusters: pd.DataFrame,
                baseline: str) -> pd.DataFrame:
    """Per run and C, the % difference of mean TPS and mean TTFT against the baseline run,
    with an interval from both runs' (repeat, round) clusters and a verdict: "within noise"
    where the interval spans 0, "significant" where not, "single run" (no interval, no
    verdict) where either run has only one repeat or no stored requests (a published run)."""
    if levels_frame.empty:
        return pd.DataFrame(columns=DIFF_COLUMNS)
    levels_frame = levels_frame[levels_frame["concurrency"] > 0]
    by_run = {run_id: frame for run_id, frame in clusters.groupby("run_id")} \
        if not clusters.empty else {}
    empty = pd.DataFrame(columns=["concurrency", "repeat", "round"])
    base_levels = levels_frame[levels_frame["run_id"] == baseline].set_index("concurrency")
    base_clusters = {m: _clusters_of(by_run.get(baseline, empty), m) for m in ("tps", "ttft")}
    rows = []
    for run_id, frame in levels_frame[levels_frame["run_id"] != baseline].groupby(
            "run_id", sort=False):
        other = {m: _clusters_of(by_run.get(run_id, empty), m) for m in ("tps", "ttft")}
        for lv in frame.itertuples():
            c = int(lv.concurrency)
            if c not in base_levels.index:
                continue
            row: dict = {"run_id": run_id, "concurrency": c}
            for metric, column in (("tps", "mean_tps"), ("ttft", "mean_ttft_ms")):
                a, b = base_clusters[metric].get(c), other[metric].get(c)
                diff = difference_of_clusters(a, b) if a and b else None
                if diff is None:
                    pct = _pct(getattr(lv, column), base_levels.loc[c, column])
                    row.update({f"{metric}_diff_pct": pct, f"{metric}_diff_low": None,
                                f"{metric}_diff_high": None,
                                f"{metric}_verdict": None if pct is None else "single run"})
                else:
                    row.update({f"{metric}_diff_pct": diff.pct, f"{metric}_diff_low": diff.low,
                                f"{metric}_diff_high": diff.high,
                                f"{metric}_verdict": diff.verdict})
            rows.append(row)
    return pd.DataFrame(rows, columns=DIFF_COLUMNS)


def to_csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


BAND_COLUMNS = ["run_id", "concurrency", "metric", "mean", "low", "high", "method"]


def level_bands(clusters: pd.DataFrame) -> pd.DataFrame:
    """Per run with repeats (more than one), C and metric ("ttft", "tps"): the band the charts
    draw around the level mean, from `cluster_sums` through harness.results.confidence: the 95%
    bootstrap interval over (repeat, round) clusters, or the range over repeats with fewer
    than 20 clusters (`method`). Runs without repeats get no rows."""
    rows = []
    if clusters.empty:
        return pd.DataFrame(columns=BAND_COLUMNS)
    for run_id, frame in clusters.groupby("run_id", sort=False):
        if frame["repeat"].nunique() < 2:
            continue
        for metric in ("ttft", "tps"):
            for c, sums in _clusters_of(frame, metric).items():
                iv = interval_of_clusters(sums)
                if iv is not None:
                    rows.append({"run_id": run_id, "concurrency": c, "metric": metric,
                                 "mean": iv.mean, "low": iv.low, "high": iv.high,
                                 "method": iv.method})
    return pd.DataFrame(rows, columns=BAND_COLUMNS)
