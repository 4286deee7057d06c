"""The block device under a table file and its read counters (/proc/diskstats).

A file's st_dev names the device its filesystem sits on; /sys/dev/block/MAJ:MIN is that
device, and a partition's figures are read from its whole disk (the queue a busy share and
the reads in flight belong to). A filesystem with no block device of its own (tmpfs,
overlay, NFS; btrfs, whose st_dev is a per-subvolume number) has none: its files get no
device series, never a guessed one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DISKSTATS = "/proc/diskstats"
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size
MS_PER_S = 1e3


@dataclass(frozen=True, slots=True)
class DiskStats:
    read_bytes: int
    reads_completed: int
    read_time_s: float  # time reads spent in flight, summed over reads
    io_now: int  # I/Os in flight now
    io_time_s: float  # time the disk had any I/O in flight


def disk_of(st_dev: int, sys_dev_block: str = "/sys/dev/block") -> str | None:
    """The whole disk's kernel name for a file's st_dev, None where no block device holds it."""
    link = f"{sys_dev_block}/{os.major(st_dev)}:{os.minor(st_dev)}"
    if not os.path.exists(link):
        return None
    device = os.path.realpath(link)
    if os.path.exists(os.path.join(device, "partition")):
        device = os.path.dirname(device)
    return os.path.basename(device)


def parse_diskstats(text: str) -> dict[str, DiskStats]:
    """Each line: major, minor, name, then the kernel's fields (Documentation/admin-guide/
    iostats.rst): reads completed, merged, sectors read, ms reading, writes ..., I/Os in
    flight (9th), ms doing I/O (10th)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        f = [int(x) for x in parts[3:14]]
        out[parts[2]] = DiskStats(read_bytes=f[2] * SECTOR, reads_completed=f[0],
                                  read_time_s=f[3] / MS_PER_S, io_now=f[8],
                                  io_time_s=f[9] / MS_PER_S)
    return out


def read_diskstats() -> dict[str, DiskStats]:
    """Every device's figures now; none where /proc/diskstats cannot be read."""
    try:
        with open(DISKSTATS) as f:
            return parse_diskstats(f.read())
    except OSError:
        return {}
