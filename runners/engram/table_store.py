"""Where the Engram table lives and how a step's rows reach the compute device.

Placements (DESIGN.md):
- `device`: the whole table in compute memory; a gather is one index_select.
- `host`: the table in host RAM (pinned when CUDA is present); rows are gathered into a
  staging buffer and copied to the device (non-blocking, on a side stream under CUDA).
- `nvme`: the table file stays on disk. `mmap`: a read-only mapping with MADV_RANDOM,
  WILLNEED for large gathers and a resident-size budget; `direct`: O_DIRECT reads from a thread
  pool behind a byte-bounded row cache.
`submit(rows)` starts a gather and returns at once (row addresses come from token ids alone,
so the engine submits before layer 0); `Gather.wait()` blocks at the Engram layer and the
time it blocks is the stall. Duplicate rows in one step are fetched once.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from runners.engram.table_file import TableFile

PLACEMENTS = ("device", "host", "nvme")
IO_MODES = ("mmap", "direct")
PAGE = 4096
WILLNEED_ROWS = 256  # gathers with more unique rows than this ask the kernel to read ahead
Fetched = tuple[torch.Tensor, "torch.cuda.Event | None"]  # unique rows, copy-done event


@dataclass(slots=True)
class TableStats:
    """Counters the server exposes on /stats and /metrics."""

    gathers: int = 0
    rows_requested: int = 0  # every row every token read (duplicates included)
    rows_fetched: int = 0  # unique rows actually fetched from the table's placement
    bytes_fetched: int = 0
    gather_ms: float = 0.0
    copy_ms: float = 0.0
    stall_ms: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    evictions: int = 0
    resident_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "lock"}


class Gather:
    """A step's rows in flight; `wait()` returns uint8 [*shape, row_bytes] on the device."""

    def __init__(self, future: Future, inverse: np.ndarray, shape: tuple, stats: TableStats,
                 device: torch.device) -> None:
        self._future = future
        self._inverse = torch.from_numpy(inverse.reshape(-1)).to(device)
        self._shape = shape
        self._stats = stats

    def wait(self) -> torch.Tensor:
        start = time.perf_counter()
        unique_rows, event = self._future.result()
        if event is not None:
            torch.cuda.current_stream().wait_event(event)
        stall = (time.perf_counter() - start) * 1000
        with self._stats.lock:
            self._stats.stall_ms += stall
        rows = unique_rows.index_select(0, self._inverse)
        return rows.view(*self._shape, unique_rows.shape[-1])


class TableStore:
    """Base: dedup, the worker thread that hides fetch latency, counters."""

    placement = ""

    def __init__(self, table: TableFile, device: torch.device) -> None:
        self.table = table
        self.row_bytes = table.row_bytes
        self.device = device
        self.stats = TableStats()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engram-gather")

    def submit(self, rows: np.ndarray) -> Gather:
        unique, inverse = np.unique(rows.reshape(-1), return_inverse=True)
        with self.stats.lock:
            self.stats.gathers += 1
            self.stats.rows_requested += rows.size
            self.stats.rows_fetched += unique.size
            self.stats.bytes_fetched += unique.size * self.row_bytes
        future = self._worker.submit(self._fetch_timed, unique)
        return Gather(future, inverse, rows.shape, self.stats, self.device)

    def _fetch_timed(self, unique: np.ndarray) -> Fetched:
        start = time.perf_counter()
        result = self._fetch(unique)
        with self.stats.lock:
            self.stats.gather_ms += (time.perf_counter() - start) * 1000
        return result

    def _fetch(self, unique: np.ndarray) -> Fetched:
        raise NotImplementedError

    def close(self) -> None:
        self._worker.shutdown(wait=True)



def _read_table(table: TableFile, pin: bool) -> torch.Tensor:
    """The whole table as a uint8 [rows, row_bytes] tensor in host memory."""
    data = torch.empty((table.rows, table.row_bytes), dtype=torch.uint8, pin_memory=pin)
    flat = data.view(-1).numpy()
    with open(table.path, "rb") as f:
        f.seek(table.data_offset)
        got = 0
        while got < flat.size:
            n = f.readinto(memoryview(flat[got:]))
            if not n:
                raise OSError(f"{table.path} ended early")
            got += n
    return data


class DeviceTable(TableStore):
    placement = "device"

    def __init__(self, table: TableFile, device: torch.device) -> None:
        super().__init__(table, device)
        self._data = _read_table(table, pin=False).to(device)
        self.stats.resident_bytes = table.data_bytes

    def _fetch(self, unique: np.ndarray) -> Fetched:
        return self._data.index_select(0, torch.from_numpy(unique).to(self.device)), None


class HostTable(TableStore):
    placement = "host"

    def __init__(self, table: TableFile, device: torch.device) -> None:
        super().__init__(table, device)
        self._cuda = device.type == "cuda"
        self._data = _read_table(table, pin=self._cuda)
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        self.stats.resident_bytes = table.data_bytes

    def _fetch(self, unique: np.ndarray) -> Fetched:
        staging = torch.empty((unique.size, self.row_bytes), dtype=torch.uint8,
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
            result = (rows, event)
        else:  # CPU compute: the copy into compute memory is a real copy all the same
            result = (staging.clone(), None)
        with self.stats.lock:
            self.stats.copy_ms += (time.perf_counter() - start) * 1000
        return result


class MmapTable(TableStore):
    """nvme/mmap: page faults read rows; a resident budget drops pages when exceeded."""

    placement = "nvme"

    def __init__(self, table: TableFile, device: torch.device, budget_bytes: int) -> None:
        super().__init__(table, device)
        self._file = open(table.path, "rb")  # noqa: SIM115 (lives as long as the mapping)
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self._map.madvise(mmap.MADV_RANDOM)
        self._rows = np.frombuffer(self._map, dtype=np.uint8, count=table.data_bytes,
                                   offset=table.data_offset).reshape(table.rows, table.row_bytes)
        self._budget_pages = max(budget_bytes // PAGE, 1)
        self._touched: set[int] = set()

    def _fetch(self, unique: np.ndarray) -> Fetched:
        first = (self.table.data_offset + unique * self.row_bytes) // PAGE
        last = (self.table.data_offset + (unique + 1) * self.row_bytes - 1) // PAGE
        pages = np.union1d(first, last)
        if unique.size > WILLNEED_ROWS:
            for page in pages:
                self._map.madvise(mmap.MADV_WILLNEED, int(page) * PAGE, PAGE)
        new_pages = [p for p in pages.tolist() if p not in self._touched]
        if len(self._touched) + len(new_pages) > self._budget_pages:
            self._evict()
        self._touched.update(new_pages)
        rows = torch.from_numpy(self._rows[unique])  # numpy copies: page faults happen here
        if len(self._touched) > self._budget_pages:  # one gather larger than the budget
            self._evict()
        with self.stats.lock:
            self.stats.cache_misses += len(new_pages)
            self.stats.cache_hits += pages.size - len(new_pages)
            self.stats.resident_bytes = len(self._touched) * PAGE
        return rows.to(self.device), None

    def _evict(self) -> None:
        """Drop the whole mapping's pages (and their page cache): the budget holds."""
        self._map.madvise(mmap.MADV_DONTNEED)
        os.posix_fadvise(self._file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        self._touched.clear()
        with self.stats.lock:
            self.stats.evictions += 1

    def close(self) -> None:
        super().close()
        del self._rows
        self._map.close()
        self._file.close()


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
        self._cache_rows = max(cache_bytes // self.row_bytes, 1)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="engram-pread")
        self._local = threading.local()

    def _read_row(self, row: int) -> bytes:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = mmap.mmap(-1, 2 * PAGE)  # page-aligned, as O_DIRECT needs
        start = self.table.data_offset + row * self.row_bytes
        aligned = start - start % PAGE
        span = PAGE if (start + self.row_bytes - aligned) <= PAGE else 2 * PAGE
        view = memoryview(buf)[:span]
        os.preadv(self._fd, [view], aligned)
        return bytes(buf[start - aligned : start - aligned + self.row_bytes])

    def _fetch(self, unique: np.ndarray) -> Fetched:
        out = np.empty((unique.size, self.row_bytes), dtype=np.uint8)
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
        evicted = 0
        while len(self._cache) > self._cache_rows:
            self._cache.popitem(last=False)
            evicted += 1
        with self.stats.lock:
            self.stats.cache_hits += unique.size - len(missing)
            self.stats.cache_misses += len(missing)
            self.stats.evictions += evicted
            self.stats.resident_bytes = len(self._cache) * self.row_bytes
        return torch.from_numpy(out).to(self.device), None

    def close(self) -> None:
        super().close()
        self._pool.shutdown(wait=True)
        os.close(self._fd)


def open_store(table: TableFile, placement: str, io_mode: str, device: torch.device,
               budget_bytes: int) -> TableStore:
    if placement == "device":
        return DeviceTable(table, device)
    if placement == "host":
        return HostTable(table, device)
    if placement == "nvme":
        if io_mode == "direct":
            return DirectTable(table, device, cache_bytes=budget_bytes)
        return MmapTable(table, device, budget_bytes)
    raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}")
