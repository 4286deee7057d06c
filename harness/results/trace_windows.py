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
    """One window of trace time: from `start_s` on the trace's clock, `width_s` long. The
    level's trace time ends at its last arrival, so the last window may end before its
    width: its rate is over the part it covers."""

    start_s: float
    width_s: float
    requests: int  # arrivals in it, on the trace's clock
    # ... per second of the replay (the trace's rate x the speedup); None for a last window
    # of no width (its arrivals all at the level's last instant)
    arrival_rate: float | None
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
    millisecond) are all counted."""
    timed = sorted((r for r in records if r.scheduled_at is not None),
                   key=lambda r: r.scheduled_at or 0.0)
    if not timed:
        return []
    origin = timed[0].scheduled_at or 0.0
    at = [((r.scheduled_at or 0.0) - origin) * speedup for r in timed]
    span = at[-1]
    width = width_s or window_width(span)
    buckets: list[list[RequestRecord]] = [[] for _ in range(int(span // width) + 1)]
    for t, r in zip(at, timed, strict=True):
        buckets[int(t // width)].append(r)
    windows = []
    for k, rs in enumerate(buckets):
        real = min(width, span - k * width)  # the last window ends at the last arrival
        windows.append(TraceWindow(
            start_s=k * width, width_s=width, requests=len(rs),
            arrival_rate=len(rs) / (real / speedup) if real > 0 else None,
            errors=sum(1 for r in rs if not r.ok),
            mean_ttft_ms=mean([r.ttft_ms for r in rs if r.ok and r.ttft_ms is not None]),
            mean_tpot_ms=mean([r.tpot_ms for r in rs if r.tpot_ms is not None])))
    return windows
