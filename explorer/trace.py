"""Timed trace replays (`run --trace`) in the explorer: their levels, the speedup they
sustain, and a level over the trace's own time axis.

A timed level is a speedup X of the trace's clock, stored under the request rate it offers;
its capacity is the highest speedup meeting the targets (the rate rule,
harness.results.metrics.rate_capacity, on those rates), and its requests are windowed by the
trace time they were due at (harness.results.trace_windows).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from explorer import rate
from harness.results.metrics import RateCapacity, Targets
from harness.results.store import Store
from harness.results.trace_windows import trace_windows


def trace_levels(levels: pd.DataFrame) -> pd.DataFrame:
    """The frame's timed trace levels (speedup set), by run and speedup; empty when none."""
    if levels.empty or "speedup" not in levels:
        return levels.iloc[0:0]
    timed = levels[levels["speedup"].notna()]
    return timed.sort_values(["run_id", "speedup"], kind="stable").reset_index(drop=True)


def sustained(timed: pd.DataFrame, cap: RateCapacity) -> float:
    """The speedup of the highest rate that passed (0.0: none)."""
    if not cap.max_rate:
        return 0.0
    at = timed.loc[(timed["rate"] - cap.max_rate).abs() < 1e-9 * cap.max_rate, "speedup"]
    return float(at.iloc[0]) if not at.empty else 0.0


def capacity(timed: pd.DataFrame, targets: Targets) -> tuple[RateCapacity, float]:
    """The rate rule on one run's timed levels, and the speedup it sustains."""
    cap = rate.capacity(timed, targets)
    return cap, sustained(timed, cap)


def windows(path: Path, run_id: str, speedup: float) -> pd.DataFrame:
    """One timed level over the trace's time: per window, arrivals and mean TTFT and TPOT."""
    records = [r for r in Store(path, lock_timeout_s=10).requests(run_id)
               if r.speedup == speedup]
    return pd.DataFrame([asdict(w) for w in trace_windows(records, speedup)])
