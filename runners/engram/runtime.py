"""Assembles a running server from its options: table, store, model, engine, counters."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from runners.engram import table_file
from runners.engram.config import ModelConfig, preset
from runners.engram.engine import Engine
from runners.engram.geometry import EngramGeometry
from runners.engram.model import load_model
from runners.engram.serving import Serving
from runners.engram.table_store import IO_MODES, PLACEMENTS, TableStore, open_store
from runners.engram.tokenizer import EngramTokenizer
from runners.sizing import fits_placement

GIB = 2**30


class ServerConfigError(ValueError):
    """Options the server cannot run with; one sentence for the user."""


@dataclass(slots=True, frozen=True)
class ServerOptions:
    preset: str = "qwen-mini"
    placement: str = "device"
    io_mode: str = "mmap"
    table_gib: float = 2.0
    table_path: Path | None = None
    memory_budget_gib: float | None = None  # default: free RAM
    page_cache_gib: float | None = None  # nvme: resident budget of the table
    max_running: int = 8
    max_waiting: int = 256
    prefetch: bool = True
    results_dir: Path = Path("results")

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ServerConfigError(f"--placement must be one of {', '.join(PLACEMENTS)}")
        if self.io_mode not in IO_MODES:
            raise ServerConfigError(f"--io must be one of {', '.join(IO_MODES)}")
        if self.table_gib <= 0:
            raise ServerConfigError("--table-size-gb must be positive")
        if self.max_running < 1:
            raise ServerConfigError("max running requests must be at least 1")


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
        self.geometry = EngramGeometry(self.cfg.engram_layers, self.cfg.engram_orders,
                                       self.cfg.engram_heads, self.cfg.engram_row_values,
                                       table_bytes, seed=self.cfg.seed)
        path = options.table_path or (
            options.results_dir / "tables" / f"{self.cfg.name}-{options.table_gib:g}gib.bin")
        try:
            self.table = table_file.open_or_create(path, self.geometry)
        except table_file.TableFileError as exc:
            raise ServerConfigError(str(exc)) from None
        resident = budget
        if options.page_cache_gib is not None:
            resident = min(resident, int(options.page_cache_gib * GIB))
        self.store: TableStore = open_store(self.table, options.placement, options.io_mode,
                                            self.device, resident)
        self.resident_budget = resident
        model = load_model(self.cfg, options.results_dir / "weights", self.device)
        self.tokenizer = EngramTokenizer()
        self.engine = Engine(model, self.geometry, self.store, self.tokenizer.eos_id,
                             options.max_running, options.max_waiting, options.prefetch)
        self.serving = Serving(self.engine, self.tokenizer, self.cfg.name)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def start(self) -> None:
        self.engine.start()

    def close(self) -> None:
        self.engine.stop()
        self.store.close()

    def stats(self) -> dict:
        t = self.store.stats.as_dict()
        e = self.engine.stats
        tokens = e.prefill_tokens + e.decode_tokens
        usage = resource.getrusage(resource.RUSAGE_SELF)
        gather = t["gather_ms"]
        return {
            "model": self.cfg.name, "device": str(self.device),
            "placement": self.options.placement,
            "io_mode": self.options.io_mode if self.options.placement == "nvme" else None,
            "prefetch": self.options.prefetch, "table_bytes": self.table.data_bytes,
            "table_path": str(self.table.path), "resident_budget_bytes": self.resident_budget,
            "weight_bytes": self.weight_bytes,
            "tokens": tokens, "prefill_tokens": e.prefill_tokens,
            "decode_tokens": e.decode_tokens, "steps": e.steps, "step_ms": e.step_ms,
            "engram_rows_read": t["rows_requested"],
            "engram_bytes_read": t["rows_requested"] * self.geometry.row_bytes,
            "engram_rows_fetched": t["rows_fetched"], "engram_bytes_fetched": t["bytes_fetched"],
            "bytes_per_token": (t["rows_requested"] * self.geometry.row_bytes / tokens
                                if tokens else None),
            "gather_ms": gather, "copy_ms": t["copy_ms"], "stall_ms": t["stall_ms"],
            "stall_fraction": t["stall_ms"] / e.step_ms if e.step_ms else None,
            "hidden_fraction": max(0.0, 1 - t["stall_ms"] / gather) if gather else None,
            "page_faults_major": usage.ru_majflt, "page_faults_minor": usage.ru_minflt,
            "mapping_resident_bytes": t["resident_bytes"],
            "row_cache_hits": t["cache_hits"], "row_cache_misses": t["cache_misses"],
            "evictions": t["evictions"],
            "queue_depth": self.engine.queue_depth, "running_requests": self.engine.running,
            "requests_finished": e.requests_finished, "requests_cancelled": e.requests_cancelled,
        }

    def prometheus(self) -> str:
        info = self.stats()
        lines = []
        for key, value in info.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            name = f"engram_{key}"
            lines += [f"# TYPE {name} gauge", f"{name} {value}"]
        lines.append(f'engram_info{{placement="{info["placement"]}",model="{info["model"]}",'
                     f'device="{info["device"]}"}} 1')
        return "\n".join(lines) + "\n"
