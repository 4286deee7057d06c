"""A timed trace replay's level over the trace's own time axis: per window of trace time, the
requests that arrived and how they were served (mean TTFT and TPOT), so a burst in the trace
can be set beside the latency it caused. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.records import RequestRecord
from harness.results.quantiles import mean

WINDOWS = 12  # about this many windows over a level, each at least MIN_WINDOW_S of trace time
MIN_WINDOW_S = 10.0
_STEPS = (10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400)


@dataclass(slots=True, frozen=True)
class TraceWindow:
    """One window of trace time: from `start_s` on the trace's clock, `width_s` long."""

    start_s: float
    width_s: float
    requests: int  # arrivals in it, on the trace's clock
    arrival_rate: float  # ... per second of the replay (the trace's rate x the speedup)
    errors: int
    mean_ttft_ms: float | None
    mean_tpot_ms: float | None


def window_width(span_s: float) -> float:
    """A round window width that cuts `span_s` of trace time into about WINDOWS windows."""
    want = max(span_s / WINDOWS, MIN_WINDOW_S)
    return float(next((s for s in _STEPS if s >= want), _STEPS[-1]))


def trace_windows(records: Sequence[RequestRecord], speedup: float,
                  width_s: float | None = None) -> list[TraceWindow]:
    """The level's requests by the window of trace time they were due in (their scheduled
    send over the level's first, times the speedup), every window from the first to the last
    listed, empty ones too. Requests due at the same moment (a trace's many at one
    millisecond) are ordered by their own order, never compared."""
    timed = sorted(((r.scheduled_at, r) for r in records if r.scheduled_at is not None),
                   key=lambda sr: sr[0])
    if not timed:
        return []
    origin = timed[0][0]
    at = [((s - origin) * speedup, r) for s, r in timed]
    width = width_s or window_width(at[-1][0])
    buckets: list[list[RequestRecord]] = [[] for _ in range(int(at[-1][0] // width) + 1)]
    for t, r in at:
        buckets[int(t // width)].append(r)
    return [TraceWindow(
        start_s=k * width, width_s=width, requests=len(rs),
        arrival_rate=len(rs) / (width / speedup), errors=sum(1 for r in rs if not r.ok),
        mean_ttft_ms=mean([r.ttft_ms for r in rs if r.ok and r.ttft_ms is not None]),
        mean_tpot_ms=mean([r.tpot_ms for r in rs if r.tpot_ms is not None]))
        for k, rs in enumerate(buckets)]
