"""Figures derived from the bundled server's /stats counters, one level at a time: the
level's figures (harness.results.stats_counters) per pass, and the step time split into its
timed parts. Pure: the snapshots come in as dicts (data.server_stats reads them)."""

from __future__ import annotations

import pandas as pd

from common import stats_keys
from harness.results.stats_counters import delta, level_counters

STEP_PARTS = ((stats_keys.COMPUTE_MS, "compute"), (stats_keys.ENGRAM_WAIT_MS, "Engram wait"),
              (stats_keys.HASH_MS, "hash/submit"), (stats_keys.SAMPLE_MS, "sample"),
              (stats_keys.EMIT_MS, "emit"))
UNACCOUNTED = "unaccounted"


def step_breakdown(before: dict, after: dict) -> dict[str, float]:
    """Where the level's engine step time went (ms): each timed part, the Engram wait per
    layer when there are several, and the remainder as `unaccounted`, so the parts sum to
    the step time. Empty when the step time or every part is unknown."""
    parts: dict[str, float] = {}
    for key, name in STEP_PARTS:
        layers = _wait_by_layer(before, after) if key == stats_keys.ENGRAM_WAIT_MS else {}
        if len(layers) > 1:
            parts.update(layers)
        elif (ms := delta(before, after, key)) is not None:
            parts[name] = ms
    step = delta(before, after, stats_keys.STEP_MS)
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
        ms = delta(start, end, layer)
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
