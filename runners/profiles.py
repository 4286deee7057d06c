"""Device profiles, read from data/devices.toml: memory design, bandwidth, link, where the
table goes, serving limits and default levels. The sizing arithmetic uses the same records."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

DEVICES_FILE = Path(__file__).parent / "data" / "devices.toml"


@dataclass(slots=True, frozen=True)
class DeviceProfile:
    name: str
    description: str
    memory_design: str
    memory_gb: float  # per node: GPU memory, or the unified pool
    unified: bool  # CPU and GPU share the pool (OS, page cache and model compete)
    bandwidth_gbs: float
    link: str  # to the offload tier
    link_gbs: float
    host_ram_gb: float  # separate system RAM (0 for unified memory)
    table_placement: str  # device | host | nvme
    io_mode: str  # mmap | direct (nvme only)
    max_running_requests: int
    default_levels: tuple[int, ...]
    page_cache_budget_gib: float | None = None  # published page cache of the nvme table
    published_table_gib: float | None = None  # the table that page cache served
    # Published KV pool per node with the table in memory / on NVMe, and that deployment's
    # table share per node (GB): the bundled server scales its KV pool like its table.
    kv_pool_memory_gb: float | None = None
    kv_pool_nvme_gb: float | None = None
    kv_reference_table_gb: float | None = None
    os_reserve_gb: float = 0.0
    runtime_overhead_gb: float = 2.0
    activations_gb: float = 1.5


    @property
    def cache_ratio(self) -> float:
        """Share of the table the device keeps in its page cache (1: all of it).

        The bundled server emulates this ratio, not the absolute size: its 2 GiB table on
        `spark` gets the share that 8 GiB is of the published 47.7 GiB table.
        """
        if self.page_cache_budget_gib and self.published_table_gib:
            return min(self.page_cache_budget_gib / self.published_table_gib, 1.0)
        return 1.0


def load_profiles(path: Path = DEVICES_FILE) -> dict[str, DeviceProfile]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    known = {f.name for f in fields(DeviceProfile)}
    profiles = {}
    for name, entry in data.items():
        unknown = set(entry) - known
        if unknown:
            raise ValueError(f"{path}: profile {name} has unknown keys {sorted(unknown)}")
        entry = {**entry, "default_levels": tuple(entry["default_levels"])}
        profiles[name] = DeviceProfile(name=name, **entry)
    return profiles


PROFILES: dict[str, DeviceProfile] = load_profiles()


class UnknownDevice(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown device {name!r}; valid devices: {', '.join(PROFILES)}")


def profile(name: str) -> DeviceProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownDevice(name) from None
