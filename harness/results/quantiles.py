"""Quantile and mean over plain floats, as every statistic of the results uses them."""

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
