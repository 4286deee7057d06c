"""Whether the harness itself was the limit at a level: its timing loop's lag, CPU share and
wait for a CPU.

Every chunk is timestamped in the loop's read callback, so a callback that waits behind
others reads late by that wait. A periodic timer on the same loop measures the wait: how late
it fires (`loop lag`). The kernel says how long the loop's thread was runnable but had no CPU
(run-queue wait): a machine busy with other work delays every timestamp by that much. A level
is *client-bound* when the lag's p50 or p99, the timing process's CPU share or that wait passes the
limits below; its TTFT and ITL may then be late by up to the lag. A timer can fire on time
while the loop reads late: with hundreds of streams each callback waits behind the others'
reads, not behind a sleeping timer. So the client also asks the kernel, as it reads a
request's first token, how long ago that connection last received data (TCP_INFO's
tcpi_last_data_recv, in ticks of the kernel's clock, so exact as a mean over many requests;
asked on every connection of a pass up to 64 of them, on every k-th beyond, as each ask
delays the reads queued behind it): a level whose first tokens were read more than
READ_LAG_LIMIT_MS late on average is client-bound too, its TTFT read late by about that much.

The limits come from `make bench-harness` on a 2-core machine against the mock server
(docs/studies/accuracy.md#the-harness-checks-itself): at levels that met the targets
(C=1..128) the lag's p50 stayed at or under 0.4 ms and its p99 under 13 ms, the CPU under 40 %
of a core and the wait for a CPU under 22 % of the time; the loop pinned to one core beside
two favoured busy processes had a lag p50 of 1.9 ms and more and waited for a CPU 33-95 % of
the time, and its TTFT read up to hundreds of ms late.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.results.quantiles import quantile

LAG_P50_LIMIT_MS = 1.0  # half the timer's fires this late: most timestamps are
LAG_P99_LIMIT_MS = 20.0
READ_LAG_LIMIT_MS = 3.0  # first tokens read this late on average: their TTFT too
CPU_SHARE_LIMIT = 0.9  # of one core: the loop is one thread
CPU_WAIT_LIMIT = 0.35  # of the wall time: the loop's thread runnable, waiting for a CPU


@dataclass(slots=True, frozen=True)
class ClientCheck:
    """What the monitor saw over one pass of a level."""

    loop_lag_p50_ms: float | None
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    cpu_share: float | None  # the timing process's CPU seconds per wall second
    unread_bytes_max: int | None  # received bytes waiting in the sockets, at the worst tick
    cpu_wait_share: float | None = None  # the loop's thread runnable but without a CPU
    # how long a first token's bytes had been in the socket when the loop read them, mean
    # over the level's requests (the kernel's tick is a few ms: the mean is exact over many)
    read_lag_mean_ms: float | None = None

    @property
    def client_bound(self) -> bool:
        return any(value is not None and value > limit for value, limit in (
            (self.loop_lag_p50_ms, LAG_P50_LIMIT_MS), (self.loop_lag_p99_ms, LAG_P99_LIMIT_MS),
            (self.cpu_share, CPU_SHARE_LIMIT), (self.cpu_wait_share, CPU_WAIT_LIMIT),
            (self.read_lag_mean_ms, READ_LAG_LIMIT_MS)))


def check(lags_ms: list[float], cpu_s: float, wall_s: float, unread: list[int],
          waited_s: float | None = None, reads_ms: list[float] | None = None) -> ClientCheck:
    """The level's check from the monitor's samples (`reads_ms`: each first read's lag)."""
    return ClientCheck(
        loop_lag_p50_ms=quantile(lags_ms, 0.5),
        loop_lag_p99_ms=quantile(lags_ms, 0.99),
        loop_lag_max_ms=max(lags_ms) if lags_ms else None,
        cpu_share=cpu_s / wall_s if wall_s > 0 else None,
        unread_bytes_max=max(unread) if unread else None,
        cpu_wait_share=waited_s / wall_s if waited_s is not None and wall_s > 0 else None,
        read_lag_mean_ms=sum(reads_ms) / len(reads_ms) if reads_ms else None,
    )


def worst(checks: list[ClientCheck]) -> ClientCheck:
    """The checks of several timing loops (`run --workers`) as one: each figure the worst
    loop's, so the level is client-bound when any of its loops was."""
    def top(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    unread = [c.unread_bytes_max for c in checks if c.unread_bytes_max is not None]
    return ClientCheck(
        loop_lag_p50_ms=top([c.loop_lag_p50_ms for c in checks]),
        loop_lag_p99_ms=top([c.loop_lag_p99_ms for c in checks]),
        loop_lag_max_ms=top([c.loop_lag_max_ms for c in checks]),
        cpu_share=top([c.cpu_share for c in checks]),
        unread_bytes_max=max(unread) if unread else None,
        cpu_wait_share=top([c.cpu_wait_share for c in checks]),
        read_lag_mean_ms=top([c.read_lag_mean_ms for c in checks]))


def breaches(c: ClientCheck) -> list[str]:
    """Each figure past its limit, with the limit: what a client-bound level was judged from."""
    figures = (
        (c.loop_lag_p50_ms, LAG_P50_LIMIT_MS, "loop lag p50 {:.1f} ms (limit {:g} ms)"),
        (c.loop_lag_p99_ms, LAG_P99_LIMIT_MS, "loop lag p99 {:.1f} ms (limit {:g} ms)"),
        (c.cpu_share, CPU_SHARE_LIMIT, "CPU {:.0%} of a core (limit {:.0%})"),
        (c.cpu_wait_share, CPU_WAIT_LIMIT, "waiting for a CPU {:.0%} of the time (limit {:.0%})"),
        (c.read_lag_mean_ms, READ_LAG_LIMIT_MS,
         "first tokens read {:.1f} ms after they arrived, on average (limit {:g} ms)"),
    )
    return [text.format(value, limit) for value, limit, text in figures
            if value is not None and value > limit]


def describe(name: str, c: ClientCheck) -> str:
    """One sentence for a client-bound level: the figures it was judged from, each beside its
    limit, and the loop's longest lag (a loop stopped or starved for seconds has that far
    beyond its p99)."""
    return (f"{name} was client-bound ({'; '.join(breaches(c))}): its TTFT and ITL may read "
            f"late (the loop's longest lag was {c.loop_lag_max_ms or 0:.1f} ms); fewer streams "
            "per harness process, or a quieter machine, measure the server instead")
