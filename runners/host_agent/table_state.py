"""The table's start state, set from outside the serving process: its files' page cache
dropped (cold) or read in up to a budget (warm), then their residency read again.

Only the files given as --table are touched, never a path from a request. Dropping is
posix_fadvise(DONTNEED) on each file, which the kernel honours for clean pages no process
has mapped: pages another process maps (the engine's own mapping of the table) or locks
(mlock), and dirty pages, stay. So the residency is read after the drop, and a drop that
left more than COLD_SHARE of the table resident says so and is not cold.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from common.host_metrics import COLD_SHARE
from runners.host_agent.tables import TableFile

DROP_TRIES = 3  # writeback may still hold a freshly written page: fadvise again after it
DROP_RETRY_S = 0.1
READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class StateResult:
    """What a drop or a warm did: the files' bytes and residency before and after."""

    action: str  # "drop" or "warm"
    files: int
    table_bytes: int
    resident_before_bytes: int | None  # None: a file's residency could not be read
    resident_after_bytes: int | None
    read_bytes: int  # warm: the bytes read in
    cold: bool | None  # drop: whether the table is cold now; warm: None
    note: str | None  # one sentence where the state is not what was asked

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _resident(files: list[TableFile]) -> int | None:
    if any(f.residency is None for f in files):
        return None
    return sum(f.residency.resident_bytes for f in files if f.residency is not None)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def drop(sample: Callable[[], list[TableFile]]) -> StateResult:
    """Drops every table file's page cache; cold when at most COLD_SHARE stays resident."""
    before = sample()
    after = before
    for _ in range(DROP_TRIES):
        for f in after:
            try:
                fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        after = sample()
        left = _resident(after)
        if left is not None and left <= COLD_SHARE * sum(f.size for f in after):
            break
        time.sleep(DROP_RETRY_S)
    size, left = sum(f.size for f in after), _resident(after)
    cold = left is not None and left <= COLD_SHARE * size
    note = None
    if left is None:
        note = "the table's residency could not be read after the drop, so it is not known cold"
    elif not cold:
        note = (f"{_mib(left)} of the table's {_mib(size)} stay in the page cache after the "
                "drop: another process maps or locks those pages (or they are dirty), which "
                "posix_fadvise cannot evict, so the table is not cold")
    return StateResult("drop", len(after), size, _resident(before), left, 0, cold, note)


def warm(sample: Callable[[], list[TableFile]], budget_bytes: int | None) -> StateResult:
    """Reads the table files in, in order, until `budget_bytes` are read (None: all)."""
    before = sample()
    budget = sum(f.size for f in before) if budget_bytes is None else budget_bytes
    read, buffer = 0, bytearray(READ_CHUNK)
    for f in before:
        if read >= budget:
            break
        try:
            with open(f.path, "rb", buffering=0) as file:
                while read < budget:
                    view = memoryview(buffer)[:min(READ_CHUNK, budget - read)]
                    if not (n := file.readinto(view)):
                        break
                    read += n
        except OSError:
            continue
    after = sample()
    size = sum(f.size for f in after)
    note = (f"read {_mib(read)} of the table's {_mib(size)}: the budget asked for"
            if read < size else None)
    return StateResult("warm", len(after), size, _resident(before), _resident(after), read,
                       None, note)
