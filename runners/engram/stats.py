"""The shape of what the bundled server measures: `Runtime.stats()` builds it, `/stats` sends
it as JSON and `/metrics` renders it (exposition.py). Each name carries its unit, and says
whether it is kernel or wire truth or the server's own arithmetic (`*_requested`). The
names read outside the server (by the harness and the explorer) are common/stats_keys.py's."""

from __future__ import annotations

from typing import TypedDict


class TableCountersDict(TypedDict):
    """table_store.TableCounters: the store's own arithmetic and clocks."""

    gathers: int
    rows_requested: int
    unique_rows_requested: int
    bytes_requested: int
    pages_requested: int
    prefill_gather_ms: float
    decode_gather_ms: float
    gather_cpu_ms: float
    copy_ms: float
    row_cache_hits: int
    row_cache_misses: int
    pages_evicted: int
    evictions: int
    evict_cpu_ms: float


class ResidencyDict(TypedDict):
    """Kernel-measured residency of the table file (mincore, smaps); None where meaningless."""

    table_resident_bytes: int | None
    table_resident_peak_bytes: int | None
    table_mapping_rss_bytes: int | None


class KVDict(TypedDict):
    """The paged KV pool and prefix cache, as the engine's block manager counts them."""

    kv_pool_bytes: int
    kv_blocks_total: int
    kv_blocks_used: int
    kv_block_size: int
    kv_pool_tokens: int
    kv_cache_usage: float
    prefix_caching: bool
    prefix_cache_queries: int
    prefix_cache_hits: int
    prompt_tokens_cached: int
    requests_waiting_for_kv: int
    preemptions: int


class HistogramDict(TypedDict):
    """One latency histogram: cumulative counts keyed by Prometheus `le`, sum in seconds."""

    buckets: dict[str, int]
    sum: float
    count: int


class ServerStats(TableCountersDict, ResidencyDict, KVDict):
    """Every figure of GET /stats."""

    model: str
    device: str
    placement: str
    io_mode: str | None
    cache_state: str | None
    decode: str
    page_reads: str | None
    prefetch: bool
    table_path: str
    uptime_s: float
    table_bytes: int
    table_budget_bytes: int | None
    cache_ratio: float | None
    weight_bytes: int
    tokens: int
    prefill_tokens: int
    decode_tokens: int
    steps: int
    prefill_steps: int
    decode_steps: int
    step_ms: float
    prefill_step_ms: float
    decode_step_ms: float
    compute_ms: float
    engram_wait_ms: float
    engram_wait_ms_by_layer: dict[str, float]
    hash_ms: float
    sample_ms: float
    emit_ms: float
    disk_read_bytes: int | None  # /proc/self/io read_bytes: kernel truth
    page_faults_major: int
    page_faults_minor: int
    blockdev_reads: int | None  # the block device's own counters: kernel truth
    blockdev_read_ms: int | None
    blockdev_busy_ms: int | None
    bytes_requested_per_token: float | None
    disk_read_bytes_per_token: float | None
    major_faults_per_token: float | None
    stall_fraction: float | None
    page_hit_rate: float | None
    requests_waiting: int
    running_requests: int
    requests_finished: int
    requests_cancelled: int
    reasoning_tokens: int  # tokens sent as reasoning (--reasoning-tokens), since the start
    latency_histograms: dict[str, HistogramDict]
