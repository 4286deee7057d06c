"""A table cell of the benchmarks' markdown output: a figure in its format, or a mark where
nothing was measured."""

from __future__ import annotations


def cell(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)
