"""Figures derived from the bundled server's /stats counters, one level at a time: its
snapshots before and after the level give rates (deltas over the level: bytes per token, reads
per second, faults per token) and sizes (the gauges after it), and the step time splits into
its timed parts. Pure: the snapshots come in as dicts (data.server_stats reads them)."""

from __future__ import annotations

import math

import pandas as pd

from common import stats_keys

PAGE_BYTES = 4096
# Older bundled servers named two counters differently; each measured the same thing, so runs
# recorded with them keep their figures (a key that is present but null never falls back).
LEGACY_KEYS = {stats_keys.BYTES_REQUESTED: stats_keys.LEGACY_ENGRAM_BYTES_READ,
               stats_keys.ENGRAM_WAIT_MS: stats_keys.LEGACY_STALL_MS}
STEP_PARTS = ((stats_keys.COMPUTE_MS, "compute"), (stats_keys.ENGRAM_WAIT_MS, "Engram wait"),
              (stats_keys.HASH_MS, "hash/submit"), (stats_keys.SAMPLE_MS, "sample"),
              (stats_keys.EMIT_MS, "emit"))
# the text figures, shown as the server sent them
LABELS = (stats_keys.PLACEMENT, stats_keys.IO_MODE, stats_keys.CACHE_STATE, stats_keys.DECODE)
UNACCOUNTED = "unaccounted"


def _number(stats: dict, key: str) -> float | None:
    """A finite number, or None: missing, null (not measurable there) or not a number."""
    if key not in stats:
        key = LEGACY_KEYS.get(key, key)
    value = stats.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _text(stats: dict, key: str) -> str | None:
    value = stats.get(key)
    return value if isinstance(value, str) else None


def _delta(before: dict, after: dict, key: str) -> float | None:
    """A counter's growth over the level; None when an end is unknown or the counter went
    back (the server restarted in between), so no figure is made up."""
    start, end = _number(before, key), _number(after, key)
    if start is None or end is None or end < start:
        return None
    return end - start


def _per(value: float | None, per: float | None) -> float | None:
    return None if value is None or not per else value / per


def level_counters(before: dict, after: dict) -> dict[str, float | str | None]:
    """One level's figures from its /stats snapshots: rates are deltas over the level, sizes
    are the gauges after it; None wherever a source is missing or null."""
    def delta(key: str) -> float | None:
        return _delta(before, after, key)

    tokens, uptime = delta(stats_keys.TOKENS), delta(stats_keys.UPTIME_S)
    disk, pages = delta(stats_keys.DISK_READ_BYTES), delta(stats_keys.PAGES_REQUESTED)
    hit = None if disk is None or not pages else min(1.0, max(0.0, 1 - disk / PAGE_BYTES / pages))
    busy_ms_per_s = _per(delta(stats_keys.BLOCKDEV_READ_MS), uptime)
    resident = _number(after, stats_keys.TABLE_RESIDENT_BYTES)
    peak = _number(after, stats_keys.TABLE_RESIDENT_PEAK_BYTES)
    budget = _number(after, stats_keys.TABLE_BUDGET_BYTES)
    return {
        "tokens": tokens,
        "disk_bytes_per_token": _per(disk, tokens),
        "requested_bytes_per_token": _per(delta(stats_keys.BYTES_REQUESTED), tokens),
        "page_hit_rate": hit,
        "major_faults_per_token": _per(delta(stats_keys.PAGE_FAULTS_MAJOR), tokens),
        "minor_faults_per_token": _per(delta(stats_keys.PAGE_FAULTS_MINOR), tokens),
        "engram_stall": _per(delta(stats_keys.ENGRAM_WAIT_MS), delta(stats_keys.STEP_MS)),
        "gather_cpu_ms_per_token": _per(delta(stats_keys.GATHER_CPU_MS), tokens),
        "read_iops": _per(delta(stats_keys.BLOCKDEV_READS), uptime),
        "read_queue_depth": None if busy_ms_per_s is None else busy_ms_per_s / 1000,
        "resident_bytes": resident,
        "resident_peak_bytes": peak,
        "budget_bytes": budget,
        "resident_of_budget": _per(resident, budget),
        "peak_of_budget": _per(peak, budget),
        "mapping_rss_bytes": _number(after, stats_keys.TABLE_MAPPING_RSS_BYTES),
        "counted_resident_bytes": _number(after, stats_keys.LEGACY_MAPPING_RESIDENT_BYTES),
        **{key: _text(after, key) for key in LABELS},
    }


def step_breakdown(before: dict, after: dict) -> dict[str, float]:
    """Where the level's engine step time went (ms): each timed part, the Engram wait per
    layer when there are several, and the remainder as `unaccounted`, so the parts sum to
    the step time. Empty when the step time or every part is unknown."""
    parts: dict[str, float] = {}
    for key, name in STEP_PARTS:
        layers = _wait_by_layer(before, after) if key == stats_keys.ENGRAM_WAIT_MS else {}
        if len(layers) > 1:
            parts.update(layers)
        elif (ms := _delta(before, after, key)) is not None:
            parts[name] = ms
    step = _delta(before, after, stats_keys.STEP_MS)
    if not step or not parts:
        return {}
    return {**parts, UNACCOUNTED: step - sum(parts.values())}


def _wait_by_layer(before: dict, after: dict) -> dict[str, float]:
    """The Engram wait per layer, ordered by layer; empty unless every layer's delta is known."""
    key = stats_keys.ENGRAM_WAIT_MS_BY_LAYER
    start, end = before.get(key), after.get(key)
    if not isinstance(start, dict) or not isinstance(end, dict):
        return {}
    out = {}
    for layer in sorted(end, key=lambda k: (len(k), k)):
        ms = _delta(start, end, layer)
        if ms is None:
            return {}
        out[f"Engram wait L{layer}"] = ms
    return out


def counters_frame(stats: list[tuple[int, int, dict, dict]]) -> pd.DataFrame:
    """`level_counters` per pass of a level (a `repeat` column); passes whose snapshots give
    no number at all (a server whose /stats is not the bundled one's) are left out."""
    rows = []
    for concurrency, repeat, before, after in stats:
        figures = level_counters(before, after)
        if any(isinstance(v, int | float) for v in figures.values()):
            rows.append({"concurrency": concurrency, "repeat": repeat, **figures})
    return pd.DataFrame(rows)


def breakdown_frame(stats: list[tuple[int, int, dict, dict]]) -> pd.DataFrame:
    """`step_breakdown` per level in long form, with each part's share of the step time; a
    level run in several passes (`--repeat`) shows their mean."""
    rows = [{"concurrency": concurrency, "part": part, "ms": ms}
            for concurrency, _, before, after in stats
            for part, ms in step_breakdown(before, after).items()]
    if not rows:
        return pd.DataFrame(columns=["concurrency", "part", "ms", "share"])
    frame = (pd.DataFrame(rows).groupby(["concurrency", "part"], sort=False, as_index=False)
             ["ms"].mean())
    frame["share"] = frame["ms"] / frame.groupby("concurrency")["ms"].transform("sum")
    return frame
