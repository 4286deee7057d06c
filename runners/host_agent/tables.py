"""The table files the agent watches (--table, a file or a folder of them): checked once at
the start, listed again at every sample (a folder's files may change), each with its size,
its disk and its residency.

A folder means its regular files, symlinks to regular files included (a Hugging Face
snapshot folder links its shards), its sub-folders not; a file linked twice counts once.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from runners.host_agent import residency
from runners.host_agent.block_devices import disk_of

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class TableError(ValueError):
    """A --table path the agent refuses; one sentence for the user."""


@dataclass(frozen=True, slots=True)
class TableFile:
    path: str
    size: int
    device: str | None  # the disk that holds it, None where no block device does
    residency: residency.Residency | None  # None: the file could not be opened this sample


def check(text: str) -> str:
    """The absolute path of a --table argument that is a readable regular file or a folder
    holding one; TableError otherwise."""
    path = os.path.abspath(os.path.expanduser(text))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TableError(f"--table {text}: no such file or folder") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TableError(f"--table {text} is a symlink loop, not a file or folder") from None
        raise TableError(f"--table {text} cannot be read: {exc.strerror}") from None
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise TableError(f"--table {text} is {kind}, not a regular file or folder")
    files = list_files(path) if stat.S_ISDIR(st.st_mode) else [path]
    if not files:
        raise TableError(f"--table {text} is a folder with no regular file in it")
    for name in files:
        try:
            os.close(os.open(name, os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            raise TableError(f"--table {text}: {name} cannot be opened: {exc.strerror}") \
                from None
    return path


def list_files(folder: str) -> list[str]:
    """The folder's regular files (symlinks followed), sorted, one path per file."""
    seen: set[tuple[int, int]] = set()
    out = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        try:
            if not entry.is_file():
                continue
            st = entry.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(entry.path)
    return out


class Tables:
    """The checked --table paths, sampled together: their files share mincore's page budget."""

    def __init__(self, paths: list[str], method: str) -> None:
        self.paths = paths
        self.method = method
        self._phase = 0
        self._disks: dict[int, str | None] = {}  # st_dev -> disk name

    def files(self) -> list[str]:
        out: list[str] = []
        for path in self.paths:
            out.extend(list_files(path) if os.path.isdir(path) else [path])
        return list(dict.fromkeys(out))

    def sample(self, whole: bool = False) -> list[TableFile]:
        """Each table file's size and residency: by mincore within PAGE_BUDGET pages a scrape
        (a stride of the pages, moved on each time), or of every page where `whole` (the
        residency a drop or a warm reports, read once, not an estimate)."""
        sized: list[tuple[str, int, str | None]] = []
        for path in self.files():
            try:
                st = os.stat(path)
            except OSError:
                continue  # gone since the listing: no series this sample
            if not stat.S_ISREG(st.st_mode):
                continue  # replaced since the start by what is no file (a FIFO would block)
            if st.st_dev not in self._disks:
                self._disks[st.st_dev] = disk_of(st.st_dev)
            sized.append((path, st.st_size, self._disks[st.st_dev]))
        pages = sum(-(-size // residency.PAGE) for _, size, _ in sized)
        fraction = 1.0 if whole or not pages else min(1.0, residency.PAGE_BUDGET / pages)
        out = [TableFile(path, size, disk,
                         residency.sample(path, size, self.method, fraction, self._phase))
               for path, size, disk in sized]
        if not whole:
            self._phase += 1
        return out
