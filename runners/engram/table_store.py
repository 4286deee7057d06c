"""Where the Engram table lives and how a step's rows reach the compute device.

Placements (docs/design.md):
- `device`: the whole table in compute memory; a gather is one index_select.
- `host`: the table in host RAM (pinned when CUDA is present); rows are gathered into a
  staging buffer and copied to the device (non-blocking, on a side stream under CUDA).
- `nvme`: the table file stays on disk. `mmap`: a read-only mapping (MADV_RANDOM) whose page
  cache is held to a budget by page-granular LRU eviction in a background thread; the missing
  pages of a gather are all requested at once (MADV_WILLNEED), so their reads overlap.
  `direct`: O_DIRECT reads from a thread pool behind a byte-bounded row cache.
`submit(rows, phase)` starts a gather and returns at once (row addresses come from token ids
alone, so the engine submits before layer 0); `Gather.wait()` blocks at the Engram layer, and
the engine times that wait. Duplicate rows in one gather are fetched once. A row is its FP8
values followed by its scale bytes when the table has a scales region (two reads per row).
"""

from __future__ import annotations

import io
import mmap
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import cast

import numpy as np
import torch

from common import stats_keys
from runners.engram import os_io
from runners.engram.page_lru import PageLRU
from runners.engram.stats import ResidencyDict, TableCountersDict
from runners.engram.table_file import TableFile

PLACEMENTS = ("device", "host", "nvme")
IO_MODES = ("mmap", "direct")
CACHE_STATES = ("cold", "warm")
PAGE_READS = ("parallel", "faults")  # nvme mmap: how a gather's missing pages are read
PHASES = ("prefill", "decode")
PAGE = 4096
Fetched = tuple[torch.Tensor, "torch.cuda.Event | None"]  # unique rows, copy-done event


class TableCacheError(RuntimeError):
    """The page cache could not be put in the state asked for; one sentence for the user."""


@dataclass(slots=True)
class TableCounters:
    """The store's own arithmetic (`*_requested`) and clocks; kernel truth is in os_io.py."""

    gathers: int = 0
    rows_requested: int = 0  # every row every token asked for (duplicates included)
    unique_rows_requested: int = 0  # after de-duplication within each gather
    bytes_requested: int = 0  # rows_requested x row width (values and scales)
    pages_requested: int = 0  # distinct file pages each gather touched, summed (mmap)
    prefill_gather_ms: float = 0.0  # wall time of gathers in the worker, by phase
    decode_gather_ms: float = 0.0
    gather_cpu_ms: float = 0.0  # CPU time of the threads that gather (worker, readers)
    copy_ms: float = 0.0  # host placement: staging -> compute device
    row_cache_hits: int = 0  # nvme/direct's own row cache
    row_cache_misses: int = 0
    pages_evicted: int = 0  # nvme/mmap: pages the LRU dropped from mapping and page cache
    evictions: int = 0  # eviction batches
    evict_cpu_ms: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: float) -> None:
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def snapshot(self) -> TableCountersDict:
        with self.lock:
            return cast(TableCountersDict, {f.name: getattr(self, f.name) for f in fields(self)
                                            if f.name != "lock"})


class Gather:
    """A gather in flight; `wait()` returns uint8 [*shape, row width] on the device."""

    def __init__(self, future: Future, inverse: np.ndarray, shape: tuple,
                 device: torch.device) -> None:
        self._future = future
        self._inverse = torch.from_numpy(inverse.reshape(-1)).to(device)
        self._shape = shape

    def wait(self) -> torch.Tensor:
        unique_rows, event = self._future.result()
        if event is not None:
            torch.cuda.current_stream().wait_event(event)
        rows = unique_rows.index_select(0, self._inverse)
        return rows.view(*self._shape, unique_rows.shape[-1])


class TableStore:
    """Base: de-duplication, the worker thread that hides fetch latency, counters."""

    placement = ""

    def __init__(self, table: TableFile, device: torch.device) -> None:
        self.table = table
        self.row_width = table.row_bytes + table.scale_bytes
        self.device = device
        self.counters = TableCounters()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engram-gather")

    def submit(self, rows: np.ndarray, phase: str = "decode") -> Gather:
        unique, inverse = np.unique(rows.reshape(-1), return_inverse=True)
        self.counters.add(gathers=1, rows_requested=rows.size, unique_rows_requested=unique.size,
                          bytes_requested=rows.size * self.row_width)
        future = self._worker.submit(self._fetch_timed, unique, phase)
        return Gather(future, inverse, rows.shape, self.device)

    def _fetch_timed(self, unique: np.ndarray, phase: str) -> Fetched:
        start, cpu = time.perf_counter(), time.thread_time()
        result = self._fetch(unique)
        self.counters.add(**{f"{phase}_gather_ms": (time.perf_counter() - start) * 1000,
                             "gather_cpu_ms": (time.thread_time() - cpu) * 1000})
        return result

    def _fetch(self, unique: np.ndarray) -> Fetched:
        raise NotImplementedError

    def drop_cache(self) -> None:
        """Bring the offload tier back to its cold state (nvme only)."""
        raise TableCacheError(f"the table is held in memory (placement {self.placement}); "
                              "only --placement nvme has a cache to drop")

    def residency(self) -> ResidencyDict:
        """Kernel-measured residency of the table file; None where it means nothing."""
        return {stats_keys.TABLE_RESIDENT_BYTES: None, stats_keys.TABLE_RESIDENT_PEAK_BYTES: None,
                stats_keys.TABLE_MAPPING_RSS_BYTES: None}

    def close(self) -> None:
        self._worker.shutdown(wait=True)


def read_rows(table: TableFile, pin: bool) -> torch.Tensor:
    """The whole table as uint8 [rows, row width] (values, then scales) in host memory."""
    data = torch.empty((table.rows, table.row_bytes + table.scale_bytes), dtype=torch.uint8,
                       pin_memory=pin)
    with open(table.path, "rb") as f:
        _read_region(f, table.data_offset, data[:, : table.row_bytes])
        if table.scale_bytes:
            _read_region(f, table.scale_offset, data[:, table.row_bytes :])
    return data


def _read_region(f: io.BufferedIOBase, offset: int, out: torch.Tensor) -> None:
    """Read a [rows, width] region of the file into `out` (a column slice of the table)."""
    region = np.empty(tuple(out.shape), dtype=np.uint8)
    flat = region.reshape(-1)
    f.seek(offset)
    got = 0
    while got < flat.size:
        n = f.readinto(flat[got:].data)  # .data: the slice's memoryview
        if not n:
            raise OSError("the table file ended early")
        got += n
    out.copy_(torch.from_numpy(region))


class DeviceTable(TableStore):
    placement = "device"

    def __init__(self, table: TableFile, device: torch.device) -> None:
        super().__init__(table, device)
        self._data = read_rows(table, pin=False).to(device)

    def _fetch(self, unique: np.ndarray) -> Fetched:
        return self._data.index_select(0, torch.from_numpy(unique).to(self.device)), None


class HostTable(TableStore):
    placement = "host"

    def __init__(self, table: TableFile, device: torch.device) -> None:
        super().__init__(table, device)
        self._cuda = device.type == "cuda"
        self._data = read_rows(table, pin=self._cuda)
        self._stream = torch.cuda.Stream(device) if self._cuda else None

    def _fetch(self, unique: np.ndarray) -> Fetched:
        staging = torch.empty((unique.size, self.row_width), dtype=torch.uint8,
                              pin_memory=self._cuda)
        torch.index_select(self._data, 0, torch.from_numpy(unique), out=staging)
        start = time.perf_counter()
        if self._cuda:
            assert self._stream is not None
            with torch.cuda.stream(self._stream):
                rows = staging.to(self.device, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._stream)
            rows.record_stream(torch.cuda.current_stream(self.device))  # used on the main stream
            result: Fetched = (rows, event)
        else:  # CPU compute: the copy into compute memory is a real copy all the same
            result = (staging.clone(), None)
        self.counters.add(copy_ms=(time.perf_counter() - start) * 1000)
        return result


class DirectTable(TableStore):
    """nvme/direct: O_DIRECT preads in parallel behind an LRU row cache bounded in bytes."""

    placement = "nvme"

    def __init__(self, table: TableFile, device: torch.device, cache_bytes: int,
                 threads: int = 16) -> None:
        super().__init__(table, device)
        try:
            self._fd = os.open(table.path, os.O_RDONLY | os.O_DIRECT)
        except OSError as exc:
            raise OSError(f"O_DIRECT is not supported for {table.path}: {exc.strerror}") from None
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_rows = max(cache_bytes // self.row_width, 1)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="engram-pread")
        self._local = threading.local()

    def _pread(self, offset: int, length: int) -> bytes:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = mmap.mmap(-1, 2 * PAGE)  # page-aligned, as O_DIRECT needs
        aligned = offset - offset % PAGE
        span = PAGE if (offset + length - aligned) <= PAGE else 2 * PAGE
        os.preadv(self._fd, [memoryview(buf)[:span]], aligned)
        return bytes(buf[offset - aligned : offset - aligned + length])

    def _read_row(self, row: int) -> bytes:
        """One row: its values, then (a second read) its scales."""
        cpu = time.thread_time()
        t = self.table
        data = self._pread(t.data_offset + row * t.row_bytes, t.row_bytes)
        if t.scale_bytes:
            data += self._pread(t.scale_offset + row * t.scale_bytes, t.scale_bytes)
        self.counters.add(gather_cpu_ms=(time.thread_time() - cpu) * 1000)
        return data

    def _fetch(self, unique: np.ndarray) -> Fetched:
        out = np.empty((unique.size, self.row_width), dtype=np.uint8)
        missing = []
        for i, row in enumerate(unique.tolist()):
            data = self._cache.get(row)
            if data is None:
                missing.append((i, row))
            else:
                self._cache.move_to_end(row)
                out[i] = np.frombuffer(data, dtype=np.uint8)
        for (i, row), data in zip(missing, self._pool.map(self._read_row,
                                                          [r for _, r in missing]), strict=True):
            out[i] = np.frombuffer(data, dtype=np.uint8)
            self._cache[row] = data
        while len(self._cache) > self._cache_rows:
            self._cache.popitem(last=False)
        self.counters.add(row_cache_hits=unique.size - len(missing),
                          row_cache_misses=len(missing))
        return torch.from_numpy(out).to(self.device), None

    def drop_cache(self) -> None:
        self._worker.submit(self._cache.clear).result()  # between gathers, never inside one

    def close(self) -> None:
        super().close()
        self._pool.shutdown(wait=True)
        os.close(self._fd)


class MmapTable(TableStore):
    """nvme/mmap: page faults read rows; the table's page cache is held to a budget.

    Bookkeeping (PageLRU) decides which pages go; the kernel decides what is resident, and
    residency is measured with mincore, never taken from the bookkeeping. Eviction runs in
    its own thread between a high and a low watermark; a gather waits only when the budget
    itself would be exceeded.
    """

    placement = "nvme"
    HIGH, LOW = 0.95, 0.85  # evict from HIGH x budget down to LOW x budget
    SAMPLE_S = 0.2  # mincore sampling period while gathers run

    def __init__(self, table: TableFile, device: torch.device, budget_bytes: int,
                 cache_state: str = "cold", page_reads: str = "parallel") -> None:
        super().__init__(table, device)
        self._parallel = page_reads == "parallel"
        self._file = open(table.path, "rb")  # noqa: SIM115 (lives as long as the mapping)
        self._fd = self._file.fileno()
        self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
        self._map.madvise(mmap.MADV_RANDOM)
        whole = np.frombuffer(self._map, dtype=np.uint8)
        self._base = whole.ctypes.data
        self._values = whole[table.data_offset : table.data_offset + table.values_bytes]
        self._values = self._values.reshape(table.rows, table.row_bytes)
        self._scales = None
        if table.scale_bytes:
            end = table.scale_offset + table.rows * table.scale_bytes
            self._scales = whole[table.scale_offset : end].reshape(table.rows, table.scale_bytes)
        self._span = (table.data_offset, len(self._map) - table.data_offset)  # data pages
        self.budget_bytes = budget_bytes
        self._lru = PageLRU(-(-len(self._map) // PAGE), max(budget_bytes // PAGE, 1))
        self._lock = threading.Condition()
        self._evicting = 0  # pages chosen for eviction, not dropped yet
        self._wake = threading.Event()
        self._closed = False
        self._peak = 0
        self._sampled_gathers = -1
        if cache_state == "cold":
            self._drop_all(check=True)
        else:
            self._adopt_resident()
        self._evictor = threading.Thread(target=self._evict_loop, name="engram-evict",
                                         daemon=True)
        self._evictor.start()

    def _pages_of(self, unique: np.ndarray) -> np.ndarray:
        t = self.table
        spans = [(t.data_offset, t.row_bytes)]
        if t.scale_bytes:
            spans.append((t.scale_offset, t.scale_bytes))
        ends = []
        for offset, width in spans:
            start = offset + unique * width
            ends += [start // PAGE, (start + width - 1) // PAGE]
        return np.unique(np.concatenate(ends))

    def _fetch(self, unique: np.ndarray) -> Fetched:
        pages = self._pages_of(unique)
        budget = self._lru.budget_pages
        with self._lock:
            new = self._lru.touch(pages)
            while (self._lru.held_pages + self._evicting > budget and not self._closed
                   and self._lru.held_pages > pages.size):
                self._wake.set()
                self._lock.wait(0.05)
            if self._lru.held_pages > self.HIGH * budget:
                self._wake.set()
        self.counters.add(pages_requested=pages.size)
        if self._parallel:  # all missing pages asked for at once: their reads overlap
            starts, lengths = os_io.page_ranges(new)
            os_io.madvise_ranges(self._base, starts, lengths, os_io.MADV_WILLNEED)
        rows = self._values[unique]  # else each missing page is a major fault, one at a time
        if self._scales is not None:
            rows = np.concatenate([rows, self._scales[unique]], axis=1)
        return torch.from_numpy(rows).to(self.device), None

    def _evict_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.SAMPLE_S)
            self._wake.clear()
            if self._closed:
                return
            if self._lru.held_pages > self.HIGH * self._lru.budget_pages:
                self._evict(int(self.LOW * self._lru.budget_pages))
            gathers = self.counters.gathers
            if gathers != self._sampled_gathers:
                self._sampled_gathers = gathers
                self._sample(reconcile=True)

    def _evict(self, target_pages: int) -> None:
        cpu = time.thread_time()
        with self._lock:
            victims = self._lru.victims(target_pages)
            self._evicting = victims.size
        self._drop_pages(victims)
        with self._lock:
            self._evicting = 0
            self._lock.notify_all()
        self.counters.add(pages_evicted=victims.size, evictions=1,
                          evict_cpu_ms=(time.thread_time() - cpu) * 1000)

    def _drop_pages(self, pages: np.ndarray) -> None:
        """Unmap each range, then drop it from the page cache at once: the kernel keeps a
        page that is mapped, and a fault nearby maps cached neighbours again (fault-around)."""
        starts, lengths = os_io.page_ranges(pages)
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
            os_io.madvise(self._base + start * PAGE, length * PAGE, os_io.MADV_DONTNEED)
            os.posix_fadvise(self._fd, start * PAGE, length * PAGE, os.POSIX_FADV_DONTNEED)

    def _resident_pages(self) -> np.ndarray | None:
        offset, length = self._span
        resident = os_io.mincore(self._base + offset, length)
        return None if resident is None else np.flatnonzero(resident) + offset // PAGE

    def _sample(self, reconcile: bool = False) -> int | None:
        """Residency from mincore; with `reconcile`, resident pages the LRU does not hold
        (one that a race with fault-around kept) are dropped again."""
        pages = self._resident_pages()
        if pages is None:
            return None
        resident = pages.size * PAGE
        if reconcile:
            with self._lock:
                strays = pages[~self._lru.held(pages)]
            self._drop_pages(strays)
        self._peak = max(self._peak, resident)
        return resident

    def _drop_all(self, check: bool) -> None:
        """fdatasync, unmap, drop the file's page cache, and check with mincore."""
        with self._lock:
            self._lru.clear()
        os.fdatasync(self._fd)  # a freshly written, dirty file is not dropped otherwise
        for _ in range(3):
            os_io.madvise(self._base, len(self._map), os_io.MADV_DONTNEED)
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
            left = self._resident_pages()
            if left is None or left.size == 0:
                return
            time.sleep(0.1)
        assert left is not None  # the loop returns when mincore cannot tell
        if check:
            raise TableCacheError(
                f"{left.size * PAGE / 2**20:.1f} MiB of {self.table.path} stay in the page "
                "cache after dropping it; another process maps or writes the file")

    def _adopt_resident(self) -> None:
        """Warm: keep what the kernel holds, up to the budget, in page-sized folios.

        A freshly written file sits in large folios, which cannot be dropped page by page;
        the kept pages are dropped and read back one page each so the LRU can evict them.
        """
        pages = self._resident_pages()
        if pages is None or pages.size == 0:
            return
        keep = int(self.LOW * self._lru.budget_pages)
        if pages.size > keep:
            pages = pages[np.linspace(0, pages.size - 1, keep).astype(np.int64)]
        self._drop_all(check=False)
        starts, lengths = os_io.page_ranges(pages)
        os_io.madvise_ranges(self._base, starts, lengths, os_io.MADV_WILLNEED)  # async reads
        with self._lock:
            self._lru.adopt(pages)

    def drop_cache(self) -> None:
        self._worker.submit(self._drop_all, True).result()  # between gathers, never inside one

    def residency(self) -> ResidencyDict:
        resident = self._sample()
        return {stats_keys.TABLE_RESIDENT_BYTES: resident,
                stats_keys.TABLE_RESIDENT_PEAK_BYTES: self._peak if resident is not None else None,
                stats_keys.TABLE_MAPPING_RSS_BYTES: os_io.mapping_rss_bytes(
                    self._base, len(self._map))}

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        super().close()
        self._evictor.join(5)
        del self._values, self._scales
        self._map.close()
        self._file.close()


def open_store(table: TableFile, placement: str, io_mode: str, device: torch.device,
               budget_bytes: int, cache_state: str = "cold",
               page_reads: str = "parallel") -> TableStore:
    if placement == "device":
        return DeviceTable(table, device)
    if placement == "host":
        return HostTable(table, device)
    if placement == "nvme":
        if io_mode == "direct":
            return DirectTable(table, device, cache_bytes=budget_bytes)
        return MmapTable(table, device, budget_bytes, cache_state, page_reads)
    raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}")
