"""One level's figures from the bundled server's /stats counters: its snapshots before and
after the level give rates (deltas over the level: bytes per token, reads per second, faults
per token) and sizes (the gauges after it). Pure: the snapshots come in as dicts. The explorer
shows these per level and `compare` reads the table's part of them, so both say the same."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from common import stats_keys

PAGE_BYTES = 4096
# Older bundled servers named two counters differently; each measured the same thing, so runs
# recorded with them keep their figures (a key that is present but null never falls back).
LEGACY_KEYS = {stats_keys.BYTES_REQUESTED: stats_keys.LEGACY_ENGRAM_BYTES_READ,
               stats_keys.ENGRAM_WAIT_MS: stats_keys.LEGACY_STALL_MS}
# the text figures, shown as the server sent them
LABELS = (stats_keys.PLACEMENT, stats_keys.IO_MODE, stats_keys.CACHE_STATE, stats_keys.DECODE)


def number(stats: dict, key: str) -> float | None:
    """A finite number, or None: missing, null (not measurable there) or not a number."""
    if key not in stats:
        key = LEGACY_KEYS.get(key, key)
    value = stats.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def text(stats: Mapping[str, Any], key: str) -> str | None:
    """A /stats value that is text (the placement, the I/O mode); None where it is not."""
    value = stats.get(key)
    return value if isinstance(value, str) else None


def delta(before: dict, after: dict, key: str) -> float | None:
    """A counter's growth over the level; None when an end is unknown or the counter went
    back (the server restarted in between), so no figure is made up."""
    start, end = number(before, key), number(after, key)
    if start is None or end is None or end < start:
        return None
    return end - start


def _per(value: float | None, per: float | None) -> float | None:
    return None if value is None or not per else value / per


def level_counters(before: dict, after: dict) -> dict[str, float | str | None]:
    """One level's figures from its /stats snapshots: rates are deltas over the level, sizes
    are the gauges after it; None wherever a source is missing or null."""
    def grew(key: str) -> float | None:
        return delta(before, after, key)

    tokens, uptime = grew(stats_keys.TOKENS), grew(stats_keys.UPTIME_S)
    disk, pages = grew(stats_keys.DISK_READ_BYTES), grew(stats_keys.PAGES_REQUESTED)
    hit = None if disk is None or not pages else min(1.0, max(0.0, 1 - disk / PAGE_BYTES / pages))
    busy_ms_per_s = _per(grew(stats_keys.BLOCKDEV_READ_MS), uptime)
    resident = number(after, stats_keys.TABLE_RESIDENT_BYTES)
    peak = number(after, stats_keys.TABLE_RESIDENT_PEAK_BYTES)
    budget = number(after, stats_keys.TABLE_BUDGET_BYTES)
    return {
        "tokens": tokens,
        "disk_bytes_per_token": _per(disk, tokens),
        "requested_bytes_per_token": _per(grew(stats_keys.BYTES_REQUESTED), tokens),
        "page_hit_rate": hit,
        "major_faults_per_token": _per(grew(stats_keys.PAGE_FAULTS_MAJOR), tokens),
        "minor_faults_per_token": _per(grew(stats_keys.PAGE_FAULTS_MINOR), tokens),
        "engram_stall": _per(grew(stats_keys.ENGRAM_WAIT_MS), grew(stats_keys.STEP_MS)),
        "gather_cpu_ms_per_token": _per(grew(stats_keys.GATHER_CPU_MS), tokens),
        "read_iops": _per(grew(stats_keys.BLOCKDEV_READS), uptime),
        "read_queue_depth": None if busy_ms_per_s is None else busy_ms_per_s / 1000,
        "resident_bytes": resident,
        "resident_peak_bytes": peak,
        "budget_bytes": budget,
        "resident_of_budget": _per(resident, budget),
        "peak_of_budget": _per(peak, budget),
        "mapping_rss_bytes": number(after, stats_keys.TABLE_MAPPING_RSS_BYTES),
        "counted_resident_bytes": number(after, stats_keys.LEGACY_MAPPING_RESIDENT_BYTES),
        **{key: text(after, key) for key in LABELS},
    }
