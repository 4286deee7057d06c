"""Whether the harness itself was the limit at a level: its timing loop's lag and CPU share.

Every chunk is timestamped in the loop's read callback, so a callback that waits behind
others reads late by that wait. A periodic timer on the same loop measures the wait: how late
it fires (`loop lag`). A level is *client-bound* when that lag's p99 or the timing process's
CPU share passes the limits below; its TTFT and ITL may then be late by up to the lag.

The limits come from `make bench-harness` on a 2-core machine against the mock server: at
levels that met the targets (C=1..128) the lag p99 stayed at or under ~1.3 ms (uvloop's timers
tick in whole milliseconds) and CPU under 45 % of a core; a loop starved by a CPU hog pinned
beside it, or reading C=1024 streams, passed 5 ms and ran at 90 % of a core and more.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.results.quantiles import quantile

LAG_P99_LIMIT_MS = 5.0
CPU_SHARE_LIMIT = 0.9  # of one core: the loop is one thread


@dataclass(slots=True, frozen=True)
class ClientCheck:
    """What the monitor saw over one pass of a level."""

    loop_lag_p50_ms: float | None
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    cpu_share: float | None  # the timing process's CPU seconds per wall second
    unread_bytes_max: int | None  # received bytes waiting in the sockets, at the worst tick

    @property
    def client_bound(self) -> bool:
        lag, cpu = self.loop_lag_p99_ms, self.cpu_share
        return (lag is not None and lag > LAG_P99_LIMIT_MS) or (
            cpu is not None and cpu > CPU_SHARE_LIMIT)


def check(lags_ms: list[float], cpu_s: float, wall_s: float,
          unread: list[int]) -> ClientCheck:
    """The level's check from the monitor's samples."""
    return ClientCheck(
        loop_lag_p50_ms=quantile(lags_ms, 0.5),
        loop_lag_p99_ms=quantile(lags_ms, 0.99),
        loop_lag_max_ms=max(lags_ms) if lags_ms else None,
        cpu_share=cpu_s / wall_s if wall_s > 0 else None,
        unread_bytes_max=max(unread) if unread else None,
    )


def describe(name: str, c: ClientCheck) -> str:
    """One sentence for a client-bound level."""
    return (f"{name} was client-bound (loop lag p99 {c.loop_lag_p99_ms or 0:.1f} ms, CPU "
            f"{c.cpu_share or 0:.0%} of a core): its TTFT and ITL may read up to "
            f"{c.loop_lag_p99_ms or 0:.1f} ms late; fewer streams per harness process, or a "
            "quieter machine, measure the server instead")
