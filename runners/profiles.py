"""Device profiles (DESIGN.md): where each device keeps the Engram table and its serving limits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class DeviceProfile:
    name: str
    memory_design: str
    table_placement: str  # device | host | nvme
    io_mode: str  # mmap | direct (nvme only)
    page_cache_budget_gib: float | None
    max_running_requests: int
    default_levels: tuple[int, ...]


PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile("spark", "128 GB unified pool, 273 GB/s", "nvme", "mmap", 8.0, 8,
                      (1, 2, 4, 8)),
        DeviceProfile("rtx-pro-6000",
                      "96 GB GPU + separate host RAM, 1.79 TB/s, PCIe Gen5 x16",
                      "host", "mmap", None, 16, (1, 2, 4, 8, 16, 32)),
        DeviceProfile("b300", "8 GPUs, 8 TB/s each", "device", "mmap", None, 64,
                      (1, 2, 4, 8, 16, 32, 64)),
        DeviceProfile("cpu", "this machine's RAM and disk", "device", "mmap", None, 8,
                      (1, 2, 4, 8)),
    )
}


class UnknownDevice(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown device {name!r}; valid devices: {', '.join(PROFILES)}")


def profile(name: str) -> DeviceProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownDevice(name) from None
