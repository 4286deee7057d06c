"""A target's Prometheus /metrics, per level: parsing, aggregation, and the engines' names.

Pure (text in, rows out), so the scraping process and the explorer share one set of rules:
- a snapshot is one scrape; a level's rows come from its snapshots (start, every ~0.5 s, end):
  counter growth ("delta"), gauge "mean" and "max", histogram growth turned into "p50", "p90",
  "p99" (as Prometheus' histogram_quantile computes them), "count" and "mean";
- `level_figures` maps vLLM's, SGLang's and the bundled server's names (renamed and prefixed
  variants included) to the canonical figures the explorer shows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import NamedTuple

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
HISTOGRAM_KEYS = ("ttft", "queue_time", "itl", "e2e")
GAUGE_KEYS = ("running", "waiting", "kv_usage")
# Canonical key -> names as `_normalise` writes them, the preferred first: a server that
# exposes several (the bundled one has vLLM's names and its own) is read from one only.
ALIASES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs",
                "engram:running_requests"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs",
                "engram:requests_waiting"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "preemptions": ("vllm:num_preemptions", "sglang:num_retracted_requests"),
    "prefix_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "prefix_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_hit_rate": ("sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate"),
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds",
            "sglang:time_per_output_token"),
    "queue_time": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
    # speculative decoding: vLLM's counters, SGLang's own mean accept length (a gauge)
    "spec_drafts": ("vllm:spec_decode_num_drafts",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
    "spec_accepted": ("vllm:spec_decode_num_accepted_tokens",),
    "spec_accept_length": ("sglang:spec_accept_length",),
}
# Gauges that count requests add up over series (engines); fractions are averaged.
_ADDITIVE = {"running", "waiting"}
# The offload tier's counters: vLLM's offloading connector, and the bundled server's.
_OFFLOAD_PREFIX = "vllm:kv_offload_"
_ENGRAM_OFFLOAD = frozenset(f"engram:{n}" for n in (
    "disk_read_bytes", "bytes_requested", "rows_requested", "pages_requested",
    "page_faults_major", "row_cache_hits", "row_cache_misses", "pages_evicted",
    "blockdev_reads", "engram_wait_ms"))
# Labels naming the model or engine replica: the same on every series, noise in a column name.
_IDENTITY_LABELS = frozenset({"model_name", "model", "engine"})
_ENGINE_PREFIX = re.compile(r"^(vllm|sglang|engram)[:_]")
OFFLOAD = "offload: "  # what the figures of the offload tier's counters are named with


class NotPrometheus(ValueError):
    """The body is not Prometheus text; the message says where it broke."""


@dataclass(slots=True, frozen=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), +Inf last
    count: float
    total: float | None  # the sum of observations, None when not exposed


class MetricRow(NamedTuple):
    """One row of the `server_metrics` table, less run and level."""

    name: str
    labels: str  # JSON object, keys sorted, `le` left out
    kind: str  # counter, gauge, histogram
    stat: str  # delta; mean, max; p50, p90, p99, count, mean
    value: float


SeriesKey = tuple[str, str, str]  # (name, labels, kind)
Snapshot = dict[SeriesKey, float | Histogram]


def parse(text: str) -> Snapshot:
    """One scrape. Counters keep their exposed name (`_total` included: prometheus_client's
    parser strips it from the family only); untyped samples count as counters when named
    `*_total`, else as gauges. Left out: `*_created` (the client library's creation times,
    exposed as gauges), summaries (their quantiles span the server's own window, not the
    level) and values that are not finite. NotPrometheus for text the parser refuses."""
    try:
        return _snapshot(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # the parser's, or a bad `le`
        raise NotPrometheus(str(exc) or type(exc).__name__) from None


def _snapshot(families: Iterable[Metric]) -> Snapshot:
    snapshot: Snapshot = {}
    for family in families:
        if family.type == "histogram":
            snapshot.update(_histograms(family.name, family.samples))
            continue
        if family.type not in ("counter", "gauge", "unknown"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created") or not math.isfinite(sample.value):
                continue
            kind = family.type
            if kind == "unknown":
                kind = "counter" if sample.name.endswith("_total") else "gauge"
            snapshot[(sample.name, _labels(sample.labels), kind)] = float(sample.value)
    return snapshot


def _labels(labels: dict[str, str]) -> str:
    return json.dumps({k: v for k, v in labels.items() if k != "le"}, sort_keys=True)


def _histograms(name: str, samples: Iterable) -> Snapshot:
    parts: dict[str, dict] = {}
    for sample in samples:
        part = parts.setdefault(_labels(sample.labels), {"buckets": [], "count": None,
                                                        "sum": None})
        if sample.name == name + "_bucket":
            part["buckets"].append((float(sample.labels["le"]), float(sample.value)))
        elif sample.name == name + "_count":
            part["count"] = float(sample.value)
        elif sample.name == name + "_sum":
            part["sum"] = float(sample.value)
    out: Snapshot = {}
    for labels, part in parts.items():
        buckets = tuple(sorted(part["buckets"]))
        if buckets and buckets[-1][0] == math.inf:  # without +Inf no quantile is defined
            count = buckets[-1][1] if part["count"] is None else part["count"]
            out[(name, labels, "histogram")] = Histogram(buckets, count, part["sum"])
    return out


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative (upper bound, count) buckets, ascending,
    +Inf last: linear interpolation inside the bucket that holds rank q x count, the lowest
    bucket starting at 0, and the highest finite bound when the rank falls in +Inf. None where
    Prometheus gives NaN (no observations, fewer than two buckets)."""
    if len(buckets) < 2 or buckets[-1][0] != math.inf:
        return None
    counts, running = [], 0.0
    for _, n in buckets:  # what Prometheus' ensureMonotonic does to a non-monotonic series
        running = max(running, n)
        counts.append(running)
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(buckets) - 1) if counts[i] >= rank), len(buckets) - 1)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], counts[b]
    if b > 0:
        start = buckets[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count)


def aggregate(snapshots: Sequence[Snapshot]) -> list[MetricRow]:
    """One level's rows from its snapshots in time order. Counters and histograms: growth
    from the first snapshot to the last (two at least); a series born during the level grows
    from zero (client libraries create a labelled series at first use), one that went back
    (the server restarted) gives no row, so no figure is made up. Gauges: mean and max over
    the snapshots that hold them."""
    if not snapshots:
        return []
    first, last = snapshots[0], snapshots[-1]
    rows: list[MetricRow] = []
    for key in dict.fromkeys(k for snapshot in snapshots for k in snapshot):
        name, labels, kind = key
        if kind == "gauge":
            values = [v for s in snapshots if isinstance(v := s.get(key), float)]
            rows += [MetricRow(name, labels, kind, "mean", fmean(values)),
                     MetricRow(name, labels, kind, "max", max(values))]
        elif len(snapshots) > 1 and key in last:
            end, start = last[key], first.get(key)
            if isinstance(end, Histogram):
                rows += _histogram_rows(name, labels, start, end)
            elif (delta := end - (start if isinstance(start, float) else 0.0)) >= 0:
                rows.append(MetricRow(name, labels, kind, "delta", delta))
    return rows


def _histogram_rows(name: str, labels: str, start: float | Histogram | None,
                    end: Histogram) -> list[MetricRow]:
    before = start if isinstance(start, Histogram) else Histogram((), 0.0, 0.0)
    earlier = dict(before.buckets)
    buckets = [(le, n - earlier.get(le, 0.0)) for le, n in end.buckets]
    count = end.count - before.count
    if count < 0 or any(n < 0 for _, n in buckets):
        return []
    rows = [MetricRow(name, labels, "histogram", "count", count)]
    if count > 0:
        for stat, q in QUANTILES:
            if (value := histogram_quantile(q, buckets)) is not None:
                rows.append(MetricRow(name, labels, "histogram", stat, value))
        if end.total is not None and before.total is not None:
            rows.append(MetricRow(name, labels, "histogram", "mean",
                                  (end.total - before.total) / count))
    return rows


def _normalise(name: str) -> str:
    """`sglang_x`, `sglang:x` and `sglang:x_total` alike: the engine prefix written with a
    colon, and no counter suffix."""
    return _ENGINE_PREFIX.sub(r"\1:", name).removesuffix("_total")


def canonical(name: str) -> str | None:
    """The explorer's key for an exposed name ("offload" for the offload tier's counters),
    None for names it does not show."""
    norm = _normalise(name)
    key = next((k for k, names in ALIASES.items() if norm in names), None)
    if key is None and (norm.startswith(_OFFLOAD_PREFIX) or norm in _ENGRAM_OFFLOAD):
        return "offload"
    return key


def level_figures(rows: Iterable[MetricRow]) -> dict[str, float]:
    """The canonical figures of one level's rows, each key read from one family (the first
    alias present). Several series of that family (engines) add up: counters and histogram
    counts sum, request gauges sum (their max then an upper bound), fractions average;
    histogram quantiles come from the busiest series. Latencies in ms; the offload tier's
    figures named `OFFLOAD` + series."""
    families: dict[str, dict[str, list[MetricRow]]] = {}
    offload: list[MetricRow] = []
    for row in rows:
        key = canonical(row.name)
        if key == "offload":
            offload.append(row)
        elif key is not None:
            families.setdefault(key, {}).setdefault(_normalise(row.name), []).append(row)
    chosen = {key: found[min(found, key=ALIASES[key].index)] for key, found in families.items()}
    figures: dict[str, float] = {}
    for key in GAUGE_KEYS:
        if key in chosen:
            figures.update(_gauge(key, chosen[key]))
    for key in HISTOGRAM_KEYS:
        if key in chosen:
            figures.update(_histogram(key, chosen[key]))
    if (preempted := _sum(chosen.get("preemptions", []), "delta")) is not None:
        figures["preemptions"] = preempted
    if (rate := _hit_rate(chosen)) is not None:
        figures["prefix_hit_rate"] = rate
    figures.update(_spec_decode(chosen))
    for row in offload:  # engines' series of one counter add up
        if (row.kind, row.stat) in (("counter", "delta"), ("gauge", "mean")):
            label = _offload_label(row)
            figures[label] = figures.get(label, 0.0) + row.value
    return figures


def _sum(rows: list[MetricRow], stat: str) -> float | None:
    values = [r.value for r in rows if r.stat == stat]
    return sum(values) if values else None


def _gauge(key: str, rows: list[MetricRow]) -> dict[str, float]:
    out = {}
    for stat in ("mean", "max"):
        values = [r.value for r in rows if r.stat == stat]
        if values:
            combine = sum if key in _ADDITIVE else (fmean if stat == "mean" else max)
            out[f"{key}_{stat}"] = combine(values)
    return out


def _histogram(key: str, rows: list[MetricRow]) -> dict[str, float]:
    by_series: dict[str, dict[str, float]] = {}
    for row in rows:
        by_series.setdefault(row.labels, {})[row.stat] = row.value
    count = sum(s.get("count", 0.0) for s in by_series.values())
    out = {f"{key}_count": count}
    if count <= 0:
        return out
    busiest = max(by_series.values(), key=lambda s: s.get("count", 0.0))
    for stat, _ in QUANTILES:
        if stat in busiest:
            out[f"{key}_{stat}_ms"] = busiest[stat] * 1000
    weighted = [(s["mean"], s["count"]) for s in by_series.values() if "mean" in s]
    if weighted and (n := sum(c for _, c in weighted)) > 0:
        out[f"{key}_mean_ms"] = sum(m * c for m, c in weighted) / n * 1000
    return out


def _hit_rate(chosen: dict[str, list[MetricRow]]) -> float | None:
    """Prefix-cache hits over queries in the level (vLLM), else the server's own rate gauge
    (SGLang), averaged over the level."""
    hits = _sum(chosen.get("prefix_hits", []), "delta")
    queries = _sum(chosen.get("prefix_queries", []), "delta")
    if hits is not None and queries:
        return hits / queries
    rates = [r.value for r in chosen.get("prefix_hit_rate", []) if r.stat == "mean"]
    return fmean(rates) if rates else None


def _spec_decode(chosen: dict[str, list[MetricRow]]) -> dict[str, float]:
    """Speculative decoding over the level: the share of draft tokens accepted, and the mean
    tokens a step yields (1 + accepted / drafts: the accepted run plus the target's own token);
    SGLang's accept length is that mean, as it exposes it."""
    out = {}
    accepted = _sum(chosen.get("spec_accepted", []), "delta")
    proposed = _sum(chosen.get("spec_draft_tokens", []), "delta")
    drafts = _sum(chosen.get("spec_drafts", []), "delta")
    if accepted is not None and proposed:
        out["spec_acceptance_rate"] = accepted / proposed
    if accepted is not None and drafts:
        out["spec_mean_accepted_length"] = 1 + accepted / drafts
    lengths = [r.value for r in chosen.get("spec_accept_length", []) if r.stat == "mean"]
    if lengths and "spec_mean_accepted_length" not in out:
        out["spec_mean_accepted_length"] = fmean(lengths)
    return out


def _offload_label(row: MetricRow) -> str:
    """`offload: vllm:kv_offload_total_bytes{transfer_type=GPU_to_CPU}`: the exposed name
    without `_total`, with the labels that tell its series apart."""
    name = row.name.removesuffix("_total")
    labels = {k: v for k, v in json.loads(row.labels).items() if k not in _IDENTITY_LABELS}
    suffix = ",".join(f"{k}={v}" for k, v in labels.items())
    mean = " (mean)" if row.kind == "gauge" else ""
    return f"{OFFLOAD}{name}{{{suffix}}}{mean}" if suffix else f"{OFFLOAD}{name}{mean}"
