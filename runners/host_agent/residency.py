"""How much of a table file is in the page cache now, without ever reading it in.

Two kernel calls answer, and neither touches a page of the file:
- `cachestat(2)` (Linux 6.5+): the file's cached pages over a byte range, from its page cache
  alone: one call per file, exact, its cost grows with the cached pages (8 us for a 64 GiB
  sparse file, 0.16 ms for a 2 GiB file half cached, on the 2-core VM of docs/host-agent.md);
- `mincore(2)` on a private read-only mapping (PROT_READ, MAP_PRIVATE: pages are never
  faulted in, nor could they be written): one byte a page, its cost grows with the pages
  asked about (17-32 ms a GiB there). So it is asked about at most PAGE_BUDGET pages a sample,
  mapped 1 GiB at most at a time; a larger table is sampled in strides, a run of pages from
  each 1 GiB window whose place in the window moves on at every sample, and its resident
  bytes are the sampled share scaled to the file (`sampled_fraction` says how much was read).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")
WINDOW_PAGES = (1 << 30) // PAGE  # the largest mapping and mincore vector: 1 GiB of file
PAGE_BUDGET = 1 << 16  # pages mincore is asked about per sample, all files together
CACHESTAT, MINCORE = "cachestat", "mincore"
METHODS = (CACHESTAT, MINCORE)
_SYS_CACHESTAT = 451  # one number on every architecture (the syscall came after the merge)
_MAP_FAILED = ctypes.c_void_p(-1).value
_RESIDENT_BIT = bytes(b & 1 for b in range(256))  # mincore's other bits are reserved

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_libc.syscall.restype = ctypes.c_long


class _Range(ctypes.Structure):
    _fields_ = (("off", ctypes.c_uint64), ("len", ctypes.c_uint64))


class _CacheStat(ctypes.Structure):
    _fields_ = tuple((name, ctypes.c_uint64) for name in (
        "nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted"))


@dataclass(frozen=True, slots=True)
class Residency:
    resident_bytes: int  # scaled from the sampled pages when sampled_fraction < 1
    sampled_fraction: float  # the share of the file's pages asked about: 1 = exact


def cachestat_pages(fd: int, length: int) -> int | None:
    """Cached pages of the open file's first `length` bytes; None where the kernel has no
    cachestat (older than 6.5) or refuses it for this file (hugetlbfs)."""
    span, stat = _Range(0, length), _CacheStat()
    if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat), 0) != 0:
        return None
    return int(stat.nr_cache)


def has_cachestat(path: str) -> bool:
    """Whether this kernel answers cachestat for `path` (a file it can open)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return cachestat_pages(fd, PAGE) is not None
    finally:
        os.close(fd)


def stride_runs(pages: int, fraction: float, phase: int) -> list[tuple[int, int]]:
    """(first page, page count) of the runs mincore is asked about: the whole file in 1 GiB
    windows when fraction >= 1, else a run of fraction x a window from each window, at a
    place that moves on by one run each sample (`phase`), so successive samples cover the
    file."""
    runs = []
    run = WINDOW_PAGES if fraction >= 1 else max(1, int(fraction * WINDOW_PAGES))
    for start in range(0, pages, WINDOW_PAGES):
        width = min(WINDOW_PAGES, pages - start)
        if run >= width:
            runs.append((start, width))
            continue
        offset = (phase * run) % width
        runs.append((start + offset, min(run, width - offset)))
    return runs


def mincore_pages(fd: int, runs: list[tuple[int, int]]) -> int | None:
    """Resident pages among `runs` of the open file, each mapped private and read-only for
    the call and unmapped after; None if a mapping or mincore fails."""
    vector = ctypes.create_string_buffer(min(WINDOW_PAGES, max((n for _, n in runs), default=1)))
    resident = 0
    for first, count in runs:
        length = count * PAGE
        address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, first * PAGE)
        if address in (None, _MAP_FAILED):
            return None
        try:
            if _libc.mincore(address, length, vector) != 0:
                return None
        finally:
            _libc.munmap(address, length)
        resident += vector.raw[:count].translate(_RESIDENT_BIT).count(1)
    return resident


def sample(path: str, size: int, method: str, fraction: float, phase: int) -> Residency | None:
    """The residency of the file at `path` (of `size` bytes) by `method`; cachestat falls back
    to mincore for a file it refuses. None when the file cannot be opened or mapped now."""
    if size <= 0:
        return Residency(0, 1.0)
    pages = -(-size // PAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if method == CACHESTAT and (cached := cachestat_pages(fd, size)) is not None:
            return Residency(min(size, cached * PAGE), 1.0)
        runs = stride_runs(pages, fraction, phase)
        if (resident := mincore_pages(fd, runs)) is None:
            return None
        asked = sum(n for _, n in runs)
        return Residency(min(size, round(resident * pages / asked) * PAGE), asked / pages)
    finally:
        os.close(fd)
