"""Another host's clocks mapped to ours over round trips: each round trip reads its monotonic
and wall clocks once, between our send and our receipt, so the shortest round trip bounds the
offset's error (half of it). `run --ray` maps its load hosts' clocks so
(harness.run.ray_workers), and `run --host-metrics` the serving hosts' agents
(harness.results.host_level)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One round trip: our monotonic clock (ns) and wall time_ns before and after it, and the
    other host's two clocks as it answered."""

    sent_ns: int
    received_ns: int
    sent_wall_ns: int
    their_wall_ns: int
    their_ns: int

    @property
    def round_trip_ns(self) -> int:
        return self.received_ns - self.sent_ns


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """The other host's clocks minus ours at the midpoint of the shortest round trip: its
    error is at most half that round trip."""

    monotonic_ns: int
    wall_ns: int
    round_trip_ns: int


def best_offset(readings: list[ClockReading]) -> ClockOffset:
    """The offsets of the reading with the shortest round trip (the least time in flight to
    put on either side)."""
    r = min(readings, key=lambda r: r.round_trip_ns)
    half = r.round_trip_ns // 2
    return ClockOffset(r.their_ns - (r.sent_ns + half), r.their_wall_ns - (r.sent_wall_ns + half),
                       r.round_trip_ns)
