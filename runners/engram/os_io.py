"""What the operating system says about this process and its table file: the ground truth
for I/O, and the calls (madvise, mincore) that steer the page cache.

- disk bytes read: `/proc/self/io` `read_bytes` (every thread of the process, O_DIRECT and
  page-fault reads alike, counted where the block layer submits them);
- page faults: `getrusage(RUSAGE_SELF)`;
- page-cache residency of a mapping: `mincore(2)`; the mapping's own RSS: the pages
  `/proc/self/pagemap` marks present in this process's page tables over the mapping's range;
- the block device under a file: `/sys/dev/block/MAJ:MIN/stat` (device-wide reads and read
  time, so IOPS and queue depth while one server runs).
Each reader returns None where its source is missing: a figure is never invented.
`madvise` and `mincore` go through libc: numpy hands out the mapping's address, and a
call per page range from the gather thread must not allocate.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
from dataclasses import dataclass

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")
PROC_IO = "/proc/self/io"
PROC_PAGEMAP = "/proc/self/pagemap"
_PRESENT = np.uint64(63)  # a pagemap entry's bit: the page is mapped in this process
MADV_WILLNEED = 3
MADV_DONTNEED = 4

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_madvise = _libc.madvise
_mincore = _libc.mincore


def madvise(address: int, length: int, advice: int) -> None:
    if _madvise(address, length, advice) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"madvise({advice}): {os.strerror(err)}")


def madvise_ranges(base: int, starts: np.ndarray, lengths: np.ndarray, advice: int) -> None:
    """One madvise per (start page, page count) range of a mapping at `base`."""
    for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
        _madvise(base + start * PAGE, length * PAGE, advice)


def page_ranges(pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique page numbers -> (first page, page count) of each contiguous run."""
    if pages.size == 0:
        return pages, pages
    breaks = np.flatnonzero(np.diff(pages) != 1) + 1
    starts = pages[np.concatenate(([0], breaks))]
    ends = pages[np.concatenate((breaks - 1, [pages.size - 1]))]
    return starts, ends - starts + 1


def mincore(address: int, length: int) -> np.ndarray | None:
    """Per page of [address, address+length): True where resident in the page cache."""
    pages = (length + PAGE - 1) // PAGE
    vec = np.zeros(pages, dtype=np.uint8)
    if _mincore(address, length, vec.ctypes.data) != 0:
        return None
    return (vec & 1).astype(bool)


def disk_read_bytes() -> int | None:
    """Bytes this process caused to be read from storage (/proc/self/io read_bytes)."""
    try:
        with open(PROC_IO) as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def page_faults() -> tuple[int, int]:
    """(major, minor) page faults of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_majflt, usage.ru_minflt


def mapping_rss_bytes(address: int, length: int) -> int | None:
    """Rss of the mapping [address, address+length): its pages present in this process's page
    tables, one pagemap entry of 8 bytes a page, read for this range alone (the mapping's
    Rss line in /proc/self/smaps is the same count, but reading it walks every mapping before
    it: 47 of the 73 ms the bundled server's /metrics took on a 2 GiB table)."""
    pages = (length + PAGE - 1) // PAGE
    entries = np.empty(pages, dtype=np.uint64)
    view = entries.data.cast("B")
    try:
        with open(PROC_PAGEMAP, "rb", buffering=0) as f:
            f.seek(address // PAGE * 8)
            got = 0
            while got < view.nbytes:
                n = f.readinto(view[got:])
                if not n:
                    return None
                got += n
    except OSError:
        return None
    return int(np.count_nonzero(entries >> _PRESENT)) * PAGE


@dataclass(slots=True, frozen=True)
class BlockReads:
    reads: int  # completed read requests
    read_ms: int  # sum of the time each read spent in flight
    busy_ms: int  # time the device had any I/O in flight


def block_stat_path(path: str) -> str | None:
    """The sysfs stat file of the block device holding `path`, if it has one."""
    st = os.stat(path)
    stat = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"
    return stat if os.path.exists(stat) else None


def block_reads(stat_path: str | None) -> BlockReads | None:
    if stat_path is None:
        return None
    try:
        with open(stat_path) as f:
            fields = f.read().split()
        return BlockReads(reads=int(fields[0]), read_ms=int(fields[3]), busy_ms=int(fields[9]))
    except (OSError, ValueError, IndexError):
        return None
