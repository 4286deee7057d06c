"""Goodput: the share of a level's requests that met every per-request objective (`--slo`),
and how many such requests per second it served (vLLM's `--goodput`, per level).

A failed request meets no objective; an objective on a figure a request lacks (TPOT of a
one-token answer) is not met either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.records import RequestRecord
from harness.results.quantiles import busy_seconds

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


@dataclass(slots=True, frozen=True)
class Slo:
    """Per-request objectives in milliseconds; None: not asked for."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def met(self, r: RequestRecord) -> bool:
        if not r.ok:
            return False
        figures = {"ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms, "e2e_ms": r.latency_ms}
        for key in SLO_KEYS:
            limit = getattr(self, key)
            if limit is not None and (figures[key] is None or figures[key] > limit):
                return False
        return True


def parse_slo(text: str) -> Slo:
    """`ttft_ms=1000,tpot_ms=50` (any subset of SLO_KEYS); ValueError in one sentence."""
    given: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise ValueError(f"--slo takes key=value items such as ttft_ms=1000, not {item!r}")
        if key not in SLO_KEYS:
            raise ValueError(f"--slo has no objective {key!r}; it knows {', '.join(SLO_KEYS)}")
        if key in given:
            raise ValueError(f"--slo gives {key} twice")
        try:
            limit = float(value)
        except ValueError:
            raise ValueError(f"--slo {key} must be a number of milliseconds, not {value!r}") \
                from None
        if not 0 < limit < math.inf:  # NaN fails too
            raise ValueError(f"--slo {key} must be a finite number above 0, not {value}")
        given[key] = limit
    return Slo(**given)


def goodput(records: Sequence[RequestRecord], slo: Slo) -> tuple[float | None, float | None]:
    """(share of the requests meeting `slo`, such requests per second of the level's busy
    time); None for a level without requests (or without busy time, for the rate)."""
    if not records:
        return None, None
    good = sum(1 for r in records if slo.met(r))
    busy = busy_seconds([(r.sent_at, r.sent_at + (r.latency_ms or 0.0) / 1000) for r in records])
    return good / len(records), (good / busy if busy > 0 else None)
