"""What a report shows of one run: its summary (the object `summary --json` prints) and what
the summary leaves out, read from the results file by `sources`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.results.run_row import RunRow
from harness.results.summary import Summary

# published per-level figures: concurrency, mean_ttft_ms, mean_tps (None where unpublished)
ReferencePoint = Mapping[str, float | None]


@dataclass(frozen=True)
class RunReport:
    """A run as its report shows it. `counters`: per level pass, the growth of the server's
    numeric /stats counters over it (level name, {counter: growth}); `errors`: failed
    requests per kind, then per level name; `reference`: the published curves of the run's
    device (name -> points)."""

    run: RunRow
    summary: Summary
    counters: Sequence[tuple[str, Mapping[str, float]]] = ()
    errors: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    reference: Mapping[str, Sequence[ReferencePoint]] = field(default_factory=dict)
