"""`run --table-state`: which level met the table in the state the run set, and the time to
first token of its first requests. The state was set before the run's first pass, so that
pass is the level of the run's first request; its first C requests (one per stream) are the
ones that met the table as set. Cold is claimed only where the residency stored at that
level's start is a cold table's (at most COLD_SHARE of its bytes), never on the drop's word."""

from __future__ import annotations

from collections.abc import Sequence

from common.host_metrics import COLD_SHARE
from harness.records import RequestRecord

NOT_COLD = "not cold"

Level = tuple[int, float | None]  # (concurrency, rate), as the summary keys its levels


def first_level(records: Sequence[RequestRecord]) -> Level | None:
    """The level of the run's first request (None: no request)."""
    if not records:
        return None
    first = min(records, key=lambda r: r.sent_at)
    return first.concurrency, first.rate


def state_at_start(asked: str, table_bytes: float | None, resident_start: float | None) -> str:
    """What the level's start was: `asked` (cold or warm), or NOT_COLD where cold was asked
    and the stored residency at its start is no cold table's (or is not known)."""
    if asked != "cold":
        return asked
    if not table_bytes or resident_start is None or resident_start > COLD_SHARE * table_bytes:
        return NOT_COLD
    return "cold"


def first_ttft_ms(records: Sequence[RequestRecord], level: Level) -> tuple[float | None, int]:
    """The mean TTFT of the level's first C requests (C: its concurrency, 1 for a rate level)
    in its first pass, and how many of them had one."""
    concurrency = level[0]
    first_pass = sorted((r for r in records if (r.concurrency, r.rate) == level
                         and r.repeat == 0), key=lambda r: r.sent_at)
    ttfts = [r.ttft_ms for r in first_pass[:max(concurrency, 1)] if r.ttft_ms is not None]
    return (sum(ttfts) / len(ttfts) if ttfts else None), len(ttfts)


def figures(asked: str, table_bytes: float | None, resident_start: float | None,
            records: Sequence[RequestRecord], level: Level) -> dict[str, object]:
    """The level's `table_state`, `table_state_ttft_ms` and `table_state_requests`, as the
    summary's host object and the explorer show them."""
    ttft, count = first_ttft_ms(records, level)
    return {"table_state": state_at_start(asked, table_bytes, resident_start),
            "table_state_ttft_ms": None if ttft is None else round(ttft, 3),
            "table_state_requests": count}
