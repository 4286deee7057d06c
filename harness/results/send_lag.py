"""Send lag of a rate level: how late requests went out against their open-loop schedule, and
whether the load generator rather than the server set the pace."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.results.quantiles import quantile

LAG_LIMIT_MS = 10.0  # above this p99 send lag the load generator, not the server, set the pace


@dataclass(slots=True, frozen=True)
class SendLag:
    """How late requests went out against their schedule (actual - scheduled), in ms."""

    count: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    limit_ms: float
    generator_limited: bool  # p99 above the limit: the figures measure the sender, not the server

    @property
    def warning(self) -> str | None:
        if not self.generator_limited:
            return None
        return (f"p99 send lag {self.p99_ms:.1f} ms > {self.limit_ms:g} ms: the load generator, "
                "not the server, was the limit")


def send_lag(
    scheduled: Sequence[float], actual: Sequence[float], limit_ms: float = LAG_LIMIT_MS
) -> SendLag:
    """Lag statistics of one level from scheduled and actual send times, both in seconds on
    the same clock (e.g. offsets from the level's start); quantiles as `quantiles.quantile`."""
    if len(scheduled) != len(actual):
        raise ValueError(f"{len(scheduled)} scheduled send times but {len(actual)} actual ones")
    if not (math.isfinite(limit_ms) and limit_ms > 0):
        raise ValueError(f"the send lag limit must be a finite number above 0, got {limit_ms!r}")
    lags = [(a - s) * 1000.0 for s, a in zip(scheduled, actual, strict=True)]
    p99 = quantile(lags, 0.99)
    return SendLag(
        count=len(lags),
        p50_ms=quantile(lags, 0.5),
        p99_ms=p99,
        max_ms=max(lags, default=None),
        limit_ms=limit_ms,
        generator_limited=p99 is not None and p99 > limit_ms,
    )
