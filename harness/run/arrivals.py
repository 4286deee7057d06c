"""Open-loop send schedules for rate levels, and the send lag that says whether they were kept.

In mode `rate` a level is a request rate R held for `duration` seconds: requests go out at
scheduled offsets whether or not earlier ones have finished (open loop), so queueing shows up
in TTFT instead of slowing the sender down. Poisson arrivals (exponential gaps) are what vLLM,
SGLang and GuideLLM send; constant spacing isolates the server from arrival bursts.

Seeding: the same seed gives the same uniform draws at every rate, so the schedules of
different rates are time-scaled copies of one another (common random numbers: rate levels
differ by rate, not by luck). Give each repeat its own seed (e.g. run seed + repeat).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from harness.results.metrics import quantile

ARRIVALS = ("poisson", "constant")
LAG_LIMIT_MS = 10.0  # above this p99 send lag the load generator, not the server, set the pace


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"the {name} must be a finite number above 0, got {value!r}")


def schedule(
    rate: float, duration: float, arrival: str = "poisson", seed: int = 0
) -> list[float]:
    """Send offsets in seconds from the level's start, ascending, all below `duration`.

    `constant`: k / rate for k = 0, 1, ... (the first request at 0). `poisson`: a Poisson
    process of intensity `rate`, the first request one exponential gap after the start, so the
    expected count is rate x duration in both modes.
    """
    _check_positive("request rate", rate)
    _check_positive("duration", duration)
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    offsets: list[float] = []
    if arrival == "constant":
        k = 0
        while (t := k / rate) < duration:
            offsets.append(t)
            k += 1
        return offsets
    rng = random.Random(seed)
    t = 0.0
    while (t := t + rng.expovariate(rate)) < duration:
        offsets.append(t)
    return offsets


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
    the same clock (e.g. offsets from the level's start); quantiles as `metrics.quantile`."""
    if len(scheduled) != len(actual):
        raise ValueError(f"{len(scheduled)} scheduled send times but {len(actual)} actual ones")
    _check_positive("send lag limit", limit_ms)
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
