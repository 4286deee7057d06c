"""/metrics: the /stats snapshot as a Prometheus exposition (prometheus_client renders it).

One set of figures: runtime.Runtime.stats() builds the snapshot; /stats returns it as JSON and
/metrics renders the same dictionary here, typed by the tables below. A null figure (its
source is unavailable on this machine) is left out of /metrics rather than exported as 0.
The server-side latency histograms and the running/waiting gauges are also exported under
vLLM's names (`vllm:...`, label model_name), so a scraper reads this server as it reads vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from runners.engram.latency import HISTOGRAMS
from runners.engram.stats import ServerStats

PREFIX = "engram_"

COUNTERS: dict[str, str] = {
    # engine clock (ms of the engine thread)
    "tokens": "prompt and generated tokens processed",
    "prefill_tokens": "prompt tokens processed",
    "decode_tokens": "tokens generated",
    "steps": "engine steps",
    "step_ms": "wall time of engine steps",
    "prefill_steps": "engine steps that prefilled a prompt",
    "decode_steps": "engine steps that decoded the running requests",
    "prefill_step_ms": "wall time of prefill steps",
    "decode_step_ms": "wall time of decode steps",
    "compute_ms": "step time in the forward pass, Engram waits excluded",
    "engram_wait_ms": "step time blocked waiting for Engram rows (stall), all layers",
    "hash_ms": "step time computing row ids and submitting gathers",
    "sample_ms": "step time choosing the next tokens",
    "emit_ms": "step time handing tokens to the HTTP layer",
    # the store's own arithmetic and clocks
    "gathers": "row gathers submitted",
    "rows_requested": "Engram rows requested (duplicates included)",
    "unique_rows_requested": "Engram rows requested, de-duplicated per gather",
    "bytes_requested": "Engram bytes requested: rows x row width (the code's arithmetic)",
    "pages_requested": "distinct table file pages the gathers touched, summed (nvme mmap)",
    "prefill_gather_ms": "wall time of prefill gathers in the gather thread",
    "decode_gather_ms": "wall time of decode gathers in the gather thread",
    "gather_cpu_ms": "CPU time of the gather threads",
    "copy_ms": "host placement: time copying staged rows to the compute device",
    "row_cache_hits": "nvme direct: rows served from the row cache",
    "row_cache_misses": "nvme direct: rows read from disk",
    "pages_evicted": "nvme mmap: pages the LRU dropped from the mapping and page cache",
    "evictions": "nvme mmap: eviction batches",
    "evict_cpu_ms": "nvme mmap: CPU time of the eviction thread",
    # the kernel's word
    "disk_read_bytes": "bytes this process read from storage (/proc/self/io read_bytes)",
    "page_faults_major": "major page faults of this process (getrusage)",
    "page_faults_minor": "minor page faults of this process (getrusage)",
    "blockdev_reads": "reads completed by the table's block device, all processes (sysfs)",
    "blockdev_read_ms": "time the table's block device spent on reads, summed per read (sysfs)",
    "blockdev_busy_ms": "time the table's block device had any I/O in flight (sysfs)",
    "requests_finished": "requests finished",
    "requests_cancelled": "requests cancelled by their client",
    "reasoning_tokens": "generated tokens sent as reasoning deltas (--reasoning-tokens)",
    "prefix_cache_queries": "prompt tokens looked up in the prefix cache",
    "prefix_cache_hits": "prompt tokens found in the prefix cache",
    "preemptions": "requests preempted for KV blocks, to be prefilled again",
}

GAUGES: dict[str, str] = {
    "uptime_s": "seconds since the server started serving",
    "table_bytes": "Engram table size (values and scales)",
    "table_budget_bytes": "nvme: page-cache (mmap) or row-cache (direct) budget of the table",
    "cache_ratio": "nvme: budget / table size",
    "weight_bytes": "model weight bytes",
    "table_resident_bytes": "table bytes resident in the page cache now (mincore)",
    "table_resident_peak_bytes": "highest sampled table residency (mincore)",
    "table_mapping_rss_bytes": "RSS of the table's mapping in this process (/proc/self/pagemap)",
    "bytes_requested_per_token": "Engram bytes requested per token (the code's arithmetic)",
    "disk_read_bytes_per_token": "bytes read from storage per token since serving began",
    "major_faults_per_token": "major page faults per token since serving began",
    "stall_fraction": "share of step time blocked on Engram rows",
    "page_hit_rate": "1 - pages read from disk (kernel) / pages the gathers touched",
    "requests_waiting": "requests waiting to be admitted (for a running slot or KV blocks)",
    "requests_waiting_for_kv": "waiting requests a free running slot would take, blocked by KV",
    "running_requests": "requests running",
    "kv_pool_bytes": "KV pool size (keys and values, every layer)",
    "kv_blocks_total": "KV pool blocks",
    "kv_blocks_used": "KV pool blocks referenced by requests",
    "kv_block_size": "tokens per KV block",
    "kv_pool_tokens": "tokens the KV pool holds",
}

# vLLM's name -> (the stats key, help)
VLLM_GAUGES: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": ("running_requests", "requests running"),
    "vllm:num_requests_waiting": ("requests_waiting",
                                  "requests waiting to be admitted (running slot or KV blocks)"),
    "vllm:kv_cache_usage_perc": ("kv_cache_usage", "KV-cache usage: 1 means 100 percent"),
}
VLLM_COUNTERS: dict[str, tuple[str, str]] = {
    "vllm:prefix_cache_queries": ("prefix_cache_queries",
                                  "prefix cache queries, in terms of prompt tokens queried"),
    "vllm:prefix_cache_hits": ("prefix_cache_hits",
                               "prefix cache hits, in terms of prompt tokens cached"),
    "vllm:prompt_tokens_cached": ("prompt_tokens_cached",
                                  "prompt tokens whose KV came from the prefix cache"),
    "vllm:num_preemptions": ("preemptions", "requests preempted for KV blocks"),
}
HISTOGRAMS_KEY = "latency_histograms"

LABELS = ("model", "device", "placement", "io_mode", "cache_state", "page_reads", "decode",
          "prefetch")
PER_LAYER = "engram_wait_ms_by_layer"


class _Snapshot(Collector):
    def __init__(self, stats: Mapping[str, Any]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        for name, doc in COUNTERS.items():
            if stats.get(name) is not None:
                counter = CounterMetricFamily(PREFIX + name, doc)
                counter.add_metric([], stats[name])
                yield counter
        for name, doc in GAUGES.items():
            if stats.get(name) is not None:
                yield GaugeMetricFamily(PREFIX + name, doc, value=stats[name])
        layers = CounterMetricFamily(PREFIX + "layer_wait_ms",
                                     "step time blocked waiting for one Engram layer's rows",
                                     labels=["layer"])
        for layer, ms in (stats.get(PER_LAYER) or {}).items():
            layers.add_metric([str(layer)], ms)
        yield layers
        info = GaugeMetricFamily(PREFIX + "info", "what this server serves and how",
                                 labels=list(LABELS))
        info.add_metric(["" if stats.get(k) is None else str(stats[k]) for k in LABELS], 1)
        yield info
        yield from self._vllm()

    def _vllm(self) -> Iterator[Metric]:
        stats = self._stats
        model = [str(stats["model"])]
        for name, (key, doc) in VLLM_GAUGES.items():
            if stats.get(key) is None:
                continue
            gauge = GaugeMetricFamily(name, doc, labels=["model_name"])
            gauge.add_metric(model, stats[key])
            yield gauge
        for name, (key, doc) in VLLM_COUNTERS.items():
            if stats.get(key) is None:
                continue
            counter = CounterMetricFamily(name, doc, labels=["model_name"])
            counter.add_metric(model, stats[key])
            yield counter
        if stats.get("kv_blocks_total") is not None:
            info = GaugeMetricFamily("vllm:cache_config_info", "information of the cache config",
                                     labels=["block_size", "num_gpu_blocks",
                                             "enable_prefix_caching"])
            info.add_metric([str(stats["kv_block_size"]), str(stats["kv_blocks_total"]),
                             str(bool(stats["prefix_caching"]))], 1)
            yield info
        for name, snapshot in stats[HISTOGRAMS_KEY].items():
            histogram = HistogramMetricFamily(name, HISTOGRAMS[name][0], labels=["model_name"])
            histogram.add_metric(model, list(snapshot["buckets"].items()), snapshot["sum"])
            yield histogram


def exposition(stats: ServerStats) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(stats))
    return generate_latest(registry)
