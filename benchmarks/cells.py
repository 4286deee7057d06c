"""A table cell of the benchmarks' markdown output: a figure in its format, or a mark where
nothing was measured; passes' figures as their mean and range."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean


def cell(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def span(values: Sequence[float], spec: str) -> str:
    """The mean of passes' figures and the range it came from; "-" for none."""
    if not values:
        return "-"
    return (f"{format(fmean(values), spec)} ({format(min(values), spec)} .. "
            f"{format(max(values), spec)})")
