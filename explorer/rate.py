"""Rate runs (`run --mode rate`) in the explorer: pure helpers over the `levels` frame.

A rate level is a request rate R (concurrency 0); its capacity is the sustainable request
rate (harness.results.metrics.rate_capacity), and a level whose p99 send lag passed the limit was
paced by the load generator, not the server (harness.run.arrivals).
"""

from __future__ import annotations

import pandas as pd

from harness.results.metrics import (
    DECLARED_FIGURES,
    LevelStats,
    RateCapacity,
    Targets,
    rate_capacity,
)
from harness.results.send_lag import LAG_LIMIT_MS, SendLag
from harness.results.verdicts import rate_verdict


def _value(row: dict, key: str) -> float | None:
    value = row.get(key)
    return None if value is None or pd.isna(value) else float(value)


def rate_levels(levels: pd.DataFrame) -> pd.DataFrame:
    """The frame's rate levels (rate set), ordered by run and rate; empty when none."""
    if levels.empty or "rate" not in levels:
        return levels.iloc[0:0]
    rated = levels[levels["rate"].notna()]
    return rated.sort_values(["run_id", "rate"], kind="stable").reset_index(drop=True)


def lag_warning(p99_ms: float | None, limit_ms: float = LAG_LIMIT_MS) -> str | None:
    """The harness's warning for a level whose p99 send lag passed the limit (else None)."""
    if p99_ms is None:
        return None
    return SendLag(0, None, p99_ms, None, limit_ms, p99_ms > limit_ms).warning


def level_stats(rated: pd.DataFrame) -> list[LevelStats]:
    """LevelStats of one run's rate levels, from `levels` rows."""
    out = []
    for row in rated.to_dict("records"):
        p99_lag = _value(row, "p99_send_lag_ms")
        out.append(LevelStats(
            concurrency=int(row.get("concurrency") or 0),
            requests=int(row.get("requests") or 0),
            errors=int(row.get("errors") or 0),
            short_outputs=int(row.get("short_outputs") or 0),
            throughput_tps=_value(row, "throughput_tps"),
            rate=_value(row, "rate"),
            p50_send_lag_ms=_value(row, "p50_send_lag_ms"),
            declared={key: _value(row, key) for key in DECLARED_FIGURES
                      if key in row and not isinstance(row[key], str)},
            p99_send_lag_ms=p99_lag,
            lag_warning=lag_warning(p99_lag),
        ))
    return out


def capacity(rated: pd.DataFrame, targets: Targets) -> RateCapacity:
    """The sustainable rate of one run's rate levels, by harness.results.metrics.rate_capacity."""
    return rate_capacity(level_stats(rated), targets)


def judged(rated: pd.DataFrame, cap: RateCapacity) -> pd.DataFrame:
    """One run's rate levels with `passes`, `fails_because` and `lag_limited` columns."""
    verdicts = dict(cap.levels)
    out = rated.copy()
    out["passes"] = [verdicts[float(r)].passes for r in out["rate"]]
    out["fails_because"] = [verdicts[float(r)].reason for r in out["rate"]]
    lag = out["p99_send_lag_ms"] if "p99_send_lag_ms" in out else pd.Series(None, out.index)
    out["lag_limited"] = [bool(v is not None and not pd.isna(v) and v > LAG_LIMIT_MS)
                          for v in lag]
    return out


def rate_table(levels: pd.DataFrame, targets: Targets) -> pd.DataFrame:
    """Per rate run in the frame: the sustainable rate (`max_rate`) and its verdict line."""
    rated = rate_levels(levels)
    rows = [] if rated.empty else [
        {"run_id": run_id, "max_rate": (cap := capacity(frame, targets)).max_rate,
         "verdict": rate_verdict(cap)}
        for run_id, frame in rated.groupby("run_id", sort=False)]
    return pd.DataFrame(rows, columns=["run_id", "max_rate", "verdict"])
