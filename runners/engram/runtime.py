"""Assembles a running server from its options: table, store, model, engine, counters."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from common import stats_keys
from common.reasoning import settings_refusal
from runners.engram import os_io, table_file
from runners.engram.compression import compression_map
from runners.engram.config import ModelConfig, preset
from runners.engram.engine import DECODE_MODES, Engine
from runners.engram.exposition import exposition
from runners.engram.geometry import EngramGeometry
from runners.engram.kv_blocks import BLOCK_SIZE, blocks_for
from runners.engram.model import kv_bytes_per_token, load_model
from runners.engram.request_log import RequestLog
from runners.engram.serving import Serving
from runners.engram.stats import ServerStats
from runners.engram.table_store import (
    CACHE_STATES,
    IO_MODES,
    PAGE,
    PAGE_READS,
    PLACEMENTS,
    TableCacheError,
    TableStore,
    open_store,
)
from runners.engram.tokenizer import EngramTokenizer
from runners.profiles import UnknownDevice, profile
from runners.sizing import bundled_kv_pool_bytes, fits_placement

GIB = 2**30
FALLBACK_KV_TOKENS = 1024  # per running request, where the device publishes no KV pool


class ServerConfigError(ValueError):
    """Options the server cannot run with; one sentence for the user."""


@dataclass(slots=True, frozen=True)
class ServerOptions:
    preset: str = "qwen-mini"
    placement: str = "device"
    io_mode: str = "mmap"
    table_gib: float = 2.0
    table_path: Path | None = None
    memory_budget_gib: float | None = None  # fit check; default: free RAM
    cache_ratio: float = 1.0  # nvme: share of the table its cache may hold (the device's)
    page_cache_gib: float | None = None  # nvme: an absolute cache budget instead of the ratio
    cache_state: str | None = None  # nvme: cold (default) or warm at start
    decode: str = "sample"  # or replay: emit a natural text, logits still computed
    page_reads: str = "parallel"  # nvme mmap: parallel (WILLNEED) or faults (one at a time)
    max_running: int = 8
    max_waiting: int = 256
    prefetch: bool = True
    results_dir: Path = Path("results")
    request_log: Path | None = None  # one JSON line per finished request (request_log.py)
    device_profile: str | None = None  # its published KV pool figures size the pool
    kv_pool_gib: float | None = None  # explicit KV pool size (overrides the device's)
    prefix_caching: bool = True
    reasoning_tokens: int = 0  # a chat's first tokens sent as reasoning (serving.py)
    reasoning_share: float = 0.0  # ... or this share of each chat's max_tokens
    reasoning_field: str = "reasoning_content"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ServerConfigError(f"--placement must be one of {', '.join(PLACEMENTS)}")
        if self.io_mode not in IO_MODES:
            raise ServerConfigError(f"--io must be one of {', '.join(IO_MODES)}")
        if self.table_gib <= 0:
            raise ServerConfigError("--table-size-gb must be positive")
        if self.max_running < 1:
            raise ServerConfigError("max running requests must be at least 1")
        if refused := settings_refusal(self.reasoning_tokens, self.reasoning_share,
                                       self.reasoning_field):
            raise ServerConfigError(refused)
        if not 0 < self.cache_ratio <= 1:
            raise ServerConfigError(f"--cache-ratio must be in (0, 1], not {self.cache_ratio:g}")
        if self.page_cache_gib is not None and self.page_cache_gib <= 0:
            raise ServerConfigError("--page-cache-gb must be positive")
        if self.cache_state is not None and self.cache_state not in CACHE_STATES:
            raise ServerConfigError(f"--cache-state must be one of {', '.join(CACHE_STATES)}")
        if self.cache_state is not None and self.placement != "nvme":
            raise ServerConfigError(
                f"--cache-state means nothing for --placement {self.placement}: the table is "
                "read into memory at start; only nvme has a page cache to start cold or warm")
        if self.page_reads not in PAGE_READS:
            raise ServerConfigError(f"--page-reads must be one of {', '.join(PAGE_READS)}")
        if self.decode not in DECODE_MODES:
            raise ServerConfigError(f"--decode must be one of {', '.join(DECODE_MODES)}")
        if self.kv_pool_gib is not None and self.kv_pool_gib <= 0:
            raise ServerConfigError("--kv-pool-gb must be positive")


def free_ram_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("MemAvailable not found in /proc/meminfo")


def check_fits(placement: str, table_bytes: int, budget_bytes: int, budget_source: str) -> None:
    """Refuse, before allocating, a table that its placement's memory cannot hold."""
    if not fits_placement(placement, table_bytes, budget_bytes):
        raise ServerConfigError(
            f"a {table_bytes / GIB:.1f} GiB table does not fit --placement {placement}: the "
            f"memory budget is {budget_bytes / GIB:.1f} GiB ({budget_source}); "
            "--placement nvme keeps it on disk and serves it"
        )


class Runtime:
    def __init__(self, options: ServerOptions, device: torch.device | None = None) -> None:
        self.options = options
        self.device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            self.cfg: ModelConfig = preset(options.preset)
        except ValueError as exc:
            raise ServerConfigError(str(exc)) from None
        table_bytes = int(options.table_gib * GIB)
        if options.memory_budget_gib is not None:
            budget, source = int(options.memory_budget_gib * GIB), "--memory-budget-gb"
        else:
            budget, source = free_ram_bytes(), "free RAM"
        check_fits(options.placement, table_bytes, budget, source)
        self.kv_pool_bytes, self.kv_pool_source = self._kv_pool(table_bytes)
        block_bytes = BLOCK_SIZE * kv_bytes_per_token(self.cfg)
        if self.kv_pool_bytes < block_bytes:
            raise ServerConfigError(
                f"a KV pool of {self.kv_pool_bytes:,} bytes ({self.kv_pool_source}) is smaller "
                f"than one {BLOCK_SIZE}-token block of {self.cfg.name} ({block_bytes:,} bytes); "
                "raise --kv-pool-gb or --table-size-gb")
        self.request_log = self._open_request_log()  # a bad path fails before the table work
        self.tokenizer = EngramTokenizer()
        self.geometry = EngramGeometry(
            self.cfg.engram_layers, self.cfg.engram_orders, self.cfg.engram_heads,
            self.cfg.engram_row_values, table_bytes, seed=self.cfg.seed,
            scale_bytes=self.cfg.engram_scale_bytes,
            compression=compression_map(self.tokenizer))
        scaled = f"-s{self.cfg.engram_scale_bytes}" if self.cfg.engram_scale_bytes else ""
        path = options.table_path or (options.results_dir / "tables"
                                      / f"{self.cfg.name}-{options.table_gib:g}gib{scaled}.bin")
        try:
            self.table = table_file.open_or_create(path, self.geometry)
        except table_file.TableFileError as exc:
            raise ServerConfigError(str(exc)) from None
        self.nvme = options.placement == "nvme"
        self.cache_state = (options.cache_state or "cold") if self.nvme else None
        self.table_budget = self._table_budget() if self.nvme else None
        try:
            self.store: TableStore = open_store(self.table, options.placement, options.io_mode,
                                                self.device, self.table_budget or 0,
                                                self.cache_state or "cold", options.page_reads)
        except TableCacheError as exc:
            raise ServerConfigError(str(exc)) from None
        model = load_model(self.cfg, options.results_dir / "weights", self.device)
        self.engine = Engine(model, self.geometry, self.store, self.tokenizer.eos_id,
                             options.max_running, options.max_waiting, options.prefetch,
                             options.decode, kv_blocks=self.kv_pool_bytes // block_bytes,
                             prefix_caching=options.prefix_caching)
        self.serving = Serving(self.engine, self.tokenizer, self.cfg.name, self.request_log,
                               options.reasoning_tokens, options.reasoning_field,
                               options.reasoning_share)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self._block_stat = os_io.block_stat_path(str(self.table.path))
        self._started = time.monotonic()
        self._kernel_at_start = (os_io.disk_read_bytes(), os_io.page_faults()[0])

    def _kv_pool(self, table_bytes: int) -> tuple[int, str]:
        """The KV pool's bytes and where the figure came from: --kv-pool-gb, else the device's
        published pool scaled like the table (sizing.bundled_kv_pool_bytes), else room for
        every running request at 1,024 tokens (the short-prompt workload; at least one request
        at full context), so a device without published pools does not pin GiBs of KV."""
        o = self.options
        if o.kv_pool_gib is not None:
            return int(o.kv_pool_gib * GIB), "--kv-pool-gb"
        if o.device_profile is not None:
            try:
                prof = profile(o.device_profile)
            except UnknownDevice as exc:
                raise ServerConfigError(str(exc)) from None
            scaled = bundled_kv_pool_bytes(prof, o.placement, table_bytes)
            if scaled is not None:
                return scaled, f"{prof.name}'s published {o.placement} pool, scaled like the table"
        per_request = min(self.cfg.max_seq, FALLBACK_KV_TOKENS)
        tokens = max(o.max_running * per_request, self.cfg.max_seq)
        return (tokens * kv_bytes_per_token(self.cfg),
                f"{o.max_running} running requests x {per_request} tokens")

    def describe_kv(self) -> str:
        """One line for the start-up log: the KV pool and what it holds."""
        b = self.engine.blocks
        return (f"KV pool {self.engine.kv.nbytes / GIB:.3f} GiB ({self.kv_pool_source}): "
                f"{b.num_blocks:,} blocks of {b.block_size} = {b.pool_tokens:,} tokens, "
                f"room for {b.num_blocks // blocks_for(self.cfg.max_seq)} requests at the "
                f"full {self.cfg.max_seq}-token context; prefix caching "
                f"{'on' if b.prefix_caching else 'off'}")

    def _table_budget(self) -> int:
        """nvme: the device's share of the table (or --page-cache-gb), at least one decode
        step's pages at the running limit, so a step never evicts its own rows."""
        o = self.options
        budget = (int(o.page_cache_gib * GIB) if o.page_cache_gib is not None
                  else int(o.cache_ratio * self.table.data_bytes))
        step_pages = o.max_running * self.geometry.rows_per_token * self.geometry.accesses_per_row
        if budget < step_pages * PAGE:
            raise ServerConfigError(
                f"a table cache budget of {budget / 2**20:.2f} MiB is smaller than one decode "
                f"step's pages at {o.max_running} running requests ({o.max_running} x "
                f"{self.geometry.rows_per_token} rows x {self.geometry.accesses_per_row} "
                f"accesses x 4 KiB = {step_pages * PAGE / 2**20:.2f} MiB); raise --cache-ratio "
                "or --page-cache-gb")
        return budget

    def _open_request_log(self) -> RequestLog | None:
        path = self.options.request_log
        if path is None:
            return None
        try:
            return RequestLog(path)
        except OSError as exc:
            raise ServerConfigError(f"--request-log {path} cannot be written: {exc.strerror} "
                                    f"({exc.filename})") from None

    def describe_table(self) -> str:
        """One line for the start-up log: where the table is and what it may keep resident."""
        text = (f"table {self.table.data_bytes / GIB:.2f} GiB on {self.options.placement}"
                f"{f' ({self.options.io_mode})' if self.nvme else ''} at {self.table.path}")
        if self.table_budget is not None:
            kind = "page-cache" if self.options.io_mode == "mmap" else "row-cache"
            text += (f"; {kind} budget {self.table_budget / 2**20:.1f} MiB "
                     f"({self.table_budget / self.table.data_bytes:.3f} of the table), "
                     f"{self.cache_state} start")
        return text + f"; decode {self.options.decode}"

    def start(self) -> None:
        self.engine.start()

    def drop_table_cache(self) -> None:
        self.store.drop_cache()

    def close(self) -> None:
        self.engine.stop()
        self.store.close()
        if self.request_log is not None:
            self.request_log.close()

    def stats(self) -> ServerStats:
        """Every figure the server measures; /stats is this dict, /metrics renders it."""
        e = self.engine.stats
        t = self.store.counters.snapshot()
        tokens = e.prefill_tokens + e.decode_tokens
        wait = e.engram_wait_ms
        read = os_io.disk_read_bytes()
        major, minor = os_io.page_faults()
        block = os_io.block_reads(self._block_stat)
        read0, major0 = self._kernel_at_start
        served = tokens or None  # per-token figures need tokens

        def per_token(value: float | None) -> float | None:
            return None if value is None or served is None else value / served

        disk_since = None if read is None or read0 is None else read - read0
        hit_rate = None
        if disk_since is not None and t[stats_keys.PAGES_REQUESTED]:
            hit_rate = max(0.0, 1 - disk_since / PAGE / t[stats_keys.PAGES_REQUESTED])
        return {
            "model": self.cfg.name, "device": str(self.device),
            stats_keys.PLACEMENT: self.options.placement,
            stats_keys.IO_MODE: self.options.io_mode if self.nvme else None,
            stats_keys.CACHE_STATE: self.cache_state, stats_keys.DECODE: self.options.decode,
            "page_reads": (self.options.page_reads
                           if self.nvme and self.options.io_mode == "mmap" else None),
            "prefetch": self.options.prefetch, "table_path": str(self.table.path),
            stats_keys.UPTIME_S: time.monotonic() - self._started,
            stats_keys.TABLE_BYTES: self.table.data_bytes,
            stats_keys.TABLE_BUDGET_BYTES: self.table_budget,
            stats_keys.CACHE_RATIO: (self.table_budget / self.table.data_bytes
                                     if self.table_budget is not None else None),
            "weight_bytes": self.weight_bytes,
            stats_keys.TOKENS: tokens, stats_keys.PREFILL_TOKENS: e.prefill_tokens,
            stats_keys.DECODE_TOKENS: e.decode_tokens, "steps": e.steps,
            "prefill_steps": e.prefill_steps, "decode_steps": e.decode_steps,
            stats_keys.STEP_MS: e.step_ms, "prefill_step_ms": e.prefill_step_ms,
            "decode_step_ms": e.decode_step_ms, stats_keys.COMPUTE_MS: e.compute_ms,
            stats_keys.ENGRAM_WAIT_MS: wait,
            stats_keys.ENGRAM_WAIT_MS_BY_LAYER: {str(k): v for k, v in
                                                 dict(e.engram_wait_ms_by_layer).items()},
            stats_keys.HASH_MS: e.hash_ms, stats_keys.SAMPLE_MS: e.sample_ms,
            stats_keys.EMIT_MS: e.emit_ms,
            **t,
            stats_keys.DISK_READ_BYTES: read, stats_keys.PAGE_FAULTS_MAJOR: major,
            stats_keys.PAGE_FAULTS_MINOR: minor,
            stats_keys.BLOCKDEV_READS: block.reads if block else None,
            stats_keys.BLOCKDEV_READ_MS: block.read_ms if block else None,
            "blockdev_busy_ms": block.busy_ms if block else None,
            **self.store.residency(),
            "bytes_requested_per_token": per_token(t[stats_keys.BYTES_REQUESTED]),
            "disk_read_bytes_per_token": per_token(disk_since),
            "major_faults_per_token": per_token(major - major0),
            "stall_fraction": wait / e.step_ms if e.step_ms else None,
            "page_hit_rate": hit_rate,
            **self.engine.kv_snapshot(),
            "requests_waiting": self.engine.queue_depth,
            "running_requests": self.engine.running,
            "requests_finished": e.requests_finished,
            "requests_cancelled": e.requests_cancelled,
            "reasoning_tokens": self.serving.reasoning_tokens_sent,
            "latency_histograms": self.serving.latency.snapshot(),
        }

    def prometheus(self) -> bytes:
        return exposition(self.stats())
