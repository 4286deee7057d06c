"""Sizing arithmetic of the published deployment checklist. Pure: no I/O, no torch.

Per node (one GPU or one unified-memory system):
  required (GPU or unified memory) = other weights + table (only if kept in memory)
      + KV cache and recurrent-state pools + activations + offload load buffers
      + cached table pages (NVMe on a unified pool: the page cache lives in the same memory)
      + runtime overhead + OS reserve (unified memory only: the OS shares the pool)
  extra host RAM or NVMe = offloaded table + load buffers
Verdict: `fits` (the whole model in memory), `fits_with_offload` (only with the table moved
to host RAM or NVMe), `does_not_fit`. Every figure is a field the user can override.
Published facts come from results/reference/models_and_devices.md; figures marked
"default" below are this project's estimates, shown in every result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from runners.profiles import PROFILES, DeviceProfile, profile

T = TypeVar("T", bound=Any)
GB = 1e9
GIB = 2**30


@dataclass(slots=True, frozen=True)
class ModelSpec:
    name: str
    checkpoint_gb: float
    table_gb: float
    table_bytes_per_token: int  # rows read per token x row bytes
    table_rows_per_token: int
    active_params_b: float  # billions of parameters read per decoded token
    bytes_per_param: float  # default: mixed precision estimate (FP4 experts, BF16/FP8 rest)
    context_limit: int
    table_accesses_per_row: int = 1  # 2 where scales live in their own region (DeepSeek)

    @property
    def other_weights_gb(self) -> float:
        return self.checkpoint_gb - self.table_gb


@dataclass(slots=True, frozen=True)
class Workload:
    """KV + recurrent pools per node (published figures), or derived from context x C."""

    kv_pool_gb: float
    page_cache_gb: float = 0.0  # NVMe table pages kept resident (8 GiB in the Qwen config)
    load_buffers_gb: float = 0.5  # default estimate: staging for offloaded rows
    kv_bytes_per_token: float | None = None  # user's figure, to scale with context x C


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("qwen3.8-flash-next", 132.7, 51.2, 2560, 16, 6.0, 0.7, 262_144),
        # 48 rows of 256 FP8 values + 8 ue8m0 scale bytes each (scales in their own region).
        ModelSpec("deepseek-v4.1-flash", 510.3, 196.6, 12_672, 48, 16.0, 0.75, 1_048_576, 2),
        # The bundled presets (fp32 on the CPU, 2 GiB default table).
        ModelSpec("qwen-mini", 0.26 + 2 * GIB / GB, 2 * GIB / GB, 2560, 16, 0.065, 4.0, 8192),
        ModelSpec("deepseek-mini", 0.34 + 2 * GIB / GB, 2 * GIB / GB, 12_672, 48, 0.084, 4.0,
                  8192, 2),
    )
}

DEVICES = PROFILES  # one record per device, shared with the bench (devices.toml)

# Published serving pools (KV + recurrent state per node), keyed by (model, device).
PUBLISHED_POOLS_GB = {
    ("qwen3.8-flash-next", "spark"): 12.0,  # "12-18 GB left for KV + recurrent pools"
    ("qwen3.8-flash-next", "rtx-pro-6000"): 8.3 * GIB / GB,  # "8.3 GiB KV + recurrent pools"
    ("deepseek-v4.1-flash", "spark"): 8.7,  # 8x Spark, table in memory: 8.7 GB KV per node
}
DEFAULT_POOL_GB = 8.0
PUBLISHED_PAGE_CACHE_GB = {("qwen3.8-flash-next", "spark"): 8 * GIB / GB}


class SizingError(ValueError):
    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        super().__init__(f"unknown {kind} {name!r}; valid: {', '.join(valid)}")


def model_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise SizingError("model", name, list(MODELS))
    return MODELS[name]


device_spec = profile  # UnknownDevice (a ValueError) lists the valid names


def default_workload(model: ModelSpec, device: DeviceProfile) -> Workload:
    pool = PUBLISHED_POOLS_GB.get((model.name, device.name), DEFAULT_POOL_GB)
    cache = PUBLISHED_PAGE_CACHE_GB.get((model.name, device.name), 0.0)
    if device.unified and not cache and device.page_cache_budget_gib:
        cache = min(device.page_cache_budget_gib * GIB / GB, model.table_gb)
    return Workload(kv_pool_gb=pool, page_cache_gb=cache)


@dataclass(slots=True, frozen=True)
class Budget:
    """One placement's memory per node, itemised (GB)."""

    placement: str
    items: dict[str, float]
    offload_items: dict[str, float]

    @property
    def required_gb(self) -> float:
        return sum(self.items.values())

    @property
    def offload_gb(self) -> float:
        return sum(self.offload_items.values())


def budget(model: ModelSpec, device: DeviceProfile, nodes: int, placement: str,
           work: Workload, context: int | None = None,
           concurrency: int | None = None) -> Budget:
    if placement not in ("device", "host", "nvme"):
        raise ValueError("placement must be device, host or nvme")
    kv = work.kv_pool_gb
    if work.kv_bytes_per_token and context and concurrency:
        kv = work.kv_bytes_per_token * context * concurrency / nodes / GB
    items = {
        "other weights": model.other_weights_gb / nodes,
        "KV + recurrent pools": kv,
        "activations": device.activations_gb,
        "runtime overhead": device.runtime_overhead_gb,
    }
    if device.unified:
        items["OS reserve"] = device.os_reserve_gb
    offload: dict[str, float] = {}
    if placement == "device":
        items["Engram table"] = model.table_gb / nodes
    else:
        items["offload load buffers"] = work.load_buffers_gb
        if placement == "nvme" and device.unified:
            items["cached table pages"] = work.page_cache_gb
        offload = {"Engram table": model.table_gb / nodes, "load buffers": work.load_buffers_gb}
    return Budget(placement, items, offload)


def _override(obj: T, overrides: dict) -> T:
    mine = {k: v for k, v in overrides.items() if k in obj.__dataclass_fields__}
    return replace(obj, **mine) if mine else obj


def _offload_tier_holds(device: DeviceProfile, b: Budget) -> bool:
    if b.placement == "host":
        return not device.unified and device.host_ram_gb >= b.offload_gb
    return True  # nvme: disks are sized in TB; checked at run time by the server


def size(model_name: str, device_name: str, nodes: int = 1, placement: str | None = None,
         context: int | None = None, concurrency: int | None = None,
         overrides: dict | None = None) -> dict:
    """The sizing report (what `engram-bench sizing --json` prints)."""
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    model = model_spec(model_name)
    device = device_spec(device_name)
    work = default_workload(model, device)
    overrides = overrides or {}
    known = {*model.__dataclass_fields__, *device.__dataclass_fields__,
             *work.__dataclass_fields__} - {"name"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown sizing figure(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    model = _override(model, overrides)
    device = _override(device, overrides)
    work = _override(work, overrides)

    def holds(b: Budget) -> bool:
        return b.required_gb <= device.memory_gb and (
            b.placement == "device" or _offload_tier_holds(device, b))

    in_memory = budget(model, device, nodes, "device", work, context, concurrency)
    default_offload = device.table_placement if device.table_placement != "device" else "host"
    offload_placement = placement if placement in ("host", "nvme") else default_offload
    offloaded = budget(model, device, nodes, offload_placement, work, context, concurrency)
    if placement is None:
        chosen = in_memory if holds(in_memory) else offloaded
        verdict = ("fits" if holds(in_memory) else
                   "fits_with_offload" if holds(offloaded) else "does_not_fit")
    else:
        chosen = in_memory if placement == "device" else offloaded
        verdict = "does_not_fit"
        if holds(chosen):
            verdict = "fits" if placement == "device" else "fits_with_offload"
    read_bytes = model.table_bytes_per_token
    # NVMe reads whole 4 KiB pages: one per access (values, and scales where separate)
    page_bytes = model.table_rows_per_token * model.table_accesses_per_row * 4096
    tier_bytes = page_bytes if chosen.placement == "nvme" else read_bytes
    active_bytes = model.active_params_b * 1e9 * model.bytes_per_param
    return {
        "model": model.name, "device": device.name, "nodes": nodes,
        "placement": chosen.placement,
        "memory_gb_per_node": device.memory_gb, "unified_memory": device.unified,
        "required_gb": round(chosen.required_gb, 2),
        "required_items_gb": {k: round(v, 2) for k, v in chosen.items.items()},
        "offload_gb": round(chosen.offload_gb, 2),
        "offload_items_gb": {k: round(v, 2) for k, v in chosen.offload_items.items()},
        "verdict": verdict,
        "in_memory_required_gb": round(in_memory.required_gb, 2),
        "offloaded_required_gb": round(offloaded.required_gb, 2),
        "offload_bytes_per_token": read_bytes if chosen.placement != "device" else 0,
        "offload_tier_bytes_per_token": tier_bytes if chosen.placement != "device" else 0,
        "offload_link": device.link,
        "offload_us_per_token": (round(tier_bytes / (device.link_gbs * 1e9) * 1e6, 3)
                                 if chosen.placement != "device" else 0.0),
        "decode_ceiling_tps_upper_bound": round(device.bandwidth_gbs * 1e9 * nodes / active_bytes,
                                                1),
        "assumptions": {"model": asdict(model), "device": asdict(device),
                        "workload": asdict(work)},
    }


def fits_placement(placement: str, table_bytes: int, budget_bytes: int) -> bool:
    """The bundled server's check: a table kept in memory must fit the memory budget."""
    return placement == "nvme" or table_bytes <= budget_bytes


def bundled_kv_pool_bytes(device: DeviceProfile, placement: str, table_bytes: int) -> int | None:
    """The bundled server's KV pool on a device with published pool figures: the device's
    pool scaled like the table, table_bytes x (pool / the published table per node), the
    in-memory pool for placement device or host, the NVMe one for nvme. None without figures."""
    if placement not in ("device", "host", "nvme"):
        raise ValueError("placement must be device, host or nvme")
    pool = device.kv_pool_nvme_gb if placement == "nvme" else device.kv_pool_memory_gb
    if pool is None or not device.kv_reference_table_gb:
        return None
    return int(table_bytes * pool / device.kv_reference_table_gb)
