"""Server-side request latencies under vLLM's metric names and buckets, so the harness joins
the bundled server's /metrics exactly as it joins vLLM's.

Times are `time.monotonic()` seconds: CLOCK_MONOTONIC on Linux, the clock `perf_counter`
reads, so a client on the same machine can compare its own stamps with these. Serving feeds
the histograms from the event loop; /stats snapshots them from a worker thread (the lock).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

from runners.engram.stats import HistogramDict

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
E2E = "vllm:e2e_request_latency_seconds"

_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# name -> (help text, upper bounds): vLLM's own buckets for each
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    TTFT: ("received to first content written to the response, seconds",
           (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
            7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)),
    ITL: ("gap between successive content chunks written, seconds",
          (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
           10.0, 20.0, 40.0, 80.0)),
    QUEUE: ("received to the start of the request's prefill step, seconds", _REQUEST_BUCKETS),
    E2E: ("received to the end of the response, seconds", _REQUEST_BUCKETS),
}


@dataclass(slots=True)
class RequestTimes:
    """One request's stamps (monotonic seconds); None until it happens."""

    received: float
    admitted: float | None = None  # its prefill step began (set on the engine thread)
    first_token: float | None = None
    first_answer: float | None = None  # first content that is not reasoning (--reasoning-tokens)
    last_token: float | None = None
    finished: float | None = None

    def admit(self, at: float) -> None:
        self.admitted = at


class Histogram:
    """Prometheus histogram state: per-bucket counts (le = upper bound, inclusive) and sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def snapshot(self) -> HistogramDict:
        """Cumulative counts keyed by Prometheus `le` label, as JSON can carry them."""
        buckets: dict[str, int] = {}
        total = 0
        for bound, count in zip([*map(repr, self.bounds), "+Inf"], self.counts, strict=True):
            total += count
            buckets[bound] = total
        return {"buckets": buckets, "sum": self.sum, "count": total}


class ServerLatency:
    """The four vLLM latency histograms, fed as chunks are written and requests end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._histograms = {name: Histogram(bounds) for name, (_, bounds) in HISTOGRAMS.items()}

    def _observe(self, name: str, value: float) -> None:
        with self._lock:
            self._histograms[name].observe(value)

    def token(self, times: RequestTimes, now: float) -> None:
        """Content was written: the first is the TTFT, each later one an inter-token gap."""
        if times.last_token is None:
            times.first_token = now
            self._observe(TTFT, now - times.received)
        else:
            self._observe(ITL, now - times.last_token)
        times.last_token = now

    def finish(self, times: RequestTimes, now: float) -> None:
        """The request ended (any way): end-to-end, and queue time if it was ever scheduled."""
        times.finished = now
        self._observe(E2E, now - times.received)
        if times.admitted is not None:
            self._observe(QUEUE, times.admitted - times.received)

    def snapshot(self) -> dict[str, HistogramDict]:
        with self._lock:
            return {name: h.snapshot() for name, h in self._histograms.items()}
