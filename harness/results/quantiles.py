"""Quantile, mean and busy time over plain floats, as every statistic of the results uses them."""

from __future__ import annotations

import math
from collections.abc import Sequence


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default, DuckDB's quantile_cont)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean; None for no values."""
    return sum(values) / len(values) if values else None


def busy_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of (start, end) spans: the time at least one was in flight. A level
    resumed an hour later, or paused between its repeats, counts neither gap (the levels view
    sums the same way: each span adds what it reaches past every earlier-starting one)."""
    busy, reached = 0.0, -math.inf
    for start, end in sorted(spans):
        busy += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return busy
