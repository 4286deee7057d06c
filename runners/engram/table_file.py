"""The Engram table file: written once (seeded FP8 rows), verified by its header, reused.

Layout: a 16 KiB header (magic, then JSON: shape, dtype, hash parameters, checksum), then
rows * row_bytes FP8 values, starting page-aligned so O_DIRECT reads work. A geometry with
scales (deepseek-mini) adds a second, page-aligned region of rows * scale_bytes ue8m0
exponents after the values, as the published vLLM port of DeepSeek-V4.1 keeps them in their
own array: reading a row is then two accesses. The checksum covers
the header fields and 1,024 evenly spaced 4 KiB blocks plus the last one, so verifying a
32 GiB file takes well under a second while a changed, truncated or foreign file is caught.
A file that fails verification is refused, never silently rebuilt over.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runners.engram.geometry import EngramGeometry

MAGIC = b"ENGRAMT1"
HEADER_BYTES = 16 * 1024
DTYPE = "float8_e4m3fn"
_SAMPLES = 1024
_BLOCK = 4096
_WRITE_CHUNK = 64 * 1024 * 1024


class TableFileError(RuntimeError):
    """The table file cannot be used; the message is one sentence for the user."""


@dataclass(slots=True, frozen=True)
class TableFile:
    path: Path
    rows: int
    row_bytes: int  # FP8 values per row
    scale_bytes: int = 0  # ue8m0 exponents per row, in their own region (0: none)
    data_offset: int = HEADER_BYTES

    @property
    def values_bytes(self) -> int:
        return self.rows * self.row_bytes

    @property
    def scale_offset(self) -> int:
        """Start of the scales region: page-aligned after the values."""
        end = self.data_offset + self.values_bytes
        return -(-end // _BLOCK) * _BLOCK

    @property
    def data_bytes(self) -> int:
        """Table bytes: values and scales."""
        return self.rows * (self.row_bytes + self.scale_bytes)

    @property
    def file_bytes(self) -> int:
        if not self.scale_bytes:
            return self.data_offset + self.values_bytes
        return self.scale_offset + self.rows * self.scale_bytes


def _fp8_chunks(seed: int, nbytes: int) -> Iterator[np.ndarray]:
    """Seeded e4m3 bytes with the top exponent bit clear (|x| < 1, never NaN).

    One 64 MiB random pool, rotated and XORed differently per chunk: a 2 GiB table is written
    in seconds instead of spending most of its time in the random generator.
    """
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, size=min(nbytes, _WRITE_CHUNK), dtype=np.uint8)
    left = nbytes
    while left:
        n = min(left, pool.size)
        chunk = np.roll(pool, int(rng.integers(pool.size)))[:n]
        yield (chunk ^ np.uint8(rng.integers(256))) & np.uint8(0xBF)
        left -= n


def _ue8m0_chunks(seed: int, nbytes: int) -> Iterator[np.ndarray]:
    """Seeded power-of-two scales near 1 (exponent bytes 124..130, i.e. 2**-3 .. 2**3)."""
    rng = np.random.default_rng(seed + 1)
    left = nbytes
    while left:
        n = min(left, _WRITE_CHUNK)
        yield rng.integers(124, 131, size=n, dtype=np.uint8)
        left -= n


def _checksum(path: Path, header_fields: dict, data_offset: int, data_bytes: int) -> str:
    """Blocks sampled evenly over [data_offset, data_offset + data_bytes)."""
    digest = hashlib.blake2b(json.dumps(header_fields, sort_keys=True).encode(), digest_size=16)
    with open(path, "rb") as f:
        last = max(data_bytes - _BLOCK, 0)
        for i in range(_SAMPLES + 1):
            pos = last if i == _SAMPLES else (last * i) // _SAMPLES
            f.seek(data_offset + pos)
            digest.update(f.read(_BLOCK))
    return digest.hexdigest()


def _header_fields(geometry: EngramGeometry, fill_seed: int) -> dict:
    return {"version": 1, "rows": geometry.total_rows, "row_bytes": geometry.row_bytes,
            "dtype": DTYPE, "fill_seed": fill_seed, "geometry": geometry.params()}


def create(path: Path, geometry: EngramGeometry, fill_seed: int = 0) -> TableFile:
    """Write a new table file (to a temporary name, renamed when complete)."""
    fields = _header_fields(geometry, fill_seed)
    table = _layout(path, geometry)
    path.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path.parent).free
    if free < table.file_bytes:
        raise TableFileError(
            f"{path.parent} has {free / 2**30:.1f} GiB free; the table needs "
            f"{table.file_bytes / 2**30:.1f} GiB"
        )
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(b"\0" * HEADER_BYTES)
        for chunk in _fp8_chunks(fill_seed, table.values_bytes):
            f.write(chunk.data)
        if table.scale_bytes:
            f.write(b"\0" * (table.scale_offset - f.tell()))
            for chunk in _ue8m0_chunks(fill_seed, table.rows * table.scale_bytes):
                f.write(chunk.data)
    fields["checksum"] = _file_checksum(tmp, fields, table)
    _write_header(tmp, fields)
    os.replace(tmp, path)
    return table


def _layout(path: Path, geometry: EngramGeometry) -> TableFile:
    return TableFile(path, geometry.total_rows, geometry.row_bytes, geometry.scale_bytes)


def _file_checksum(path: Path, fields: dict, table: TableFile) -> str:
    """The values region as in version 1 files; the scales region, if any, sampled too."""
    digest = _checksum(path, fields, table.data_offset, table.values_bytes)
    if table.scale_bytes:
        scales = _checksum(path, {}, table.scale_offset, table.rows * table.scale_bytes)
        digest = hashlib.blake2b((digest + scales).encode(), digest_size=16).hexdigest()
    return digest


def _write_header(path: Path, fields: dict) -> None:
    blob = MAGIC + json.dumps(fields, sort_keys=True).encode()
    if len(blob) > HEADER_BYTES:
        raise TableFileError("table geometry too large for the file header")
    with open(path, "r+b") as f:
        f.write(blob.ljust(HEADER_BYTES, b"\0"))


def open_verified(path: Path, geometry: EngramGeometry, fill_seed: int = 0) -> TableFile:
    """Check magic, shape, dtype, hash parameters, size and checksum; refuse any mismatch."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except OSError as exc:
        raise TableFileError(f"cannot read the table file {path}: {exc.strerror}") from None
    if not head.startswith(MAGIC):
        raise TableFileError(f"{path} is not an Engram table file (bad magic); move it away "
                             "or pass another --table-path")
    try:
        fields = json.loads(head[len(MAGIC):].rstrip(b"\0"))
    except ValueError:
        raise TableFileError(f"{path} has a damaged header") from None
    expected = _header_fields(geometry, fill_seed)
    for key in ("version", "rows", "row_bytes", "dtype", "fill_seed", "geometry"):
        if fields.get(key) != expected[key]:
            raise TableFileError(
                f"{path} was built for another table ({key} differs); pass the same preset and "
                "--table-size-gb, or another --table-path"
            )
    table = _layout(path, geometry)
    size = path.stat().st_size
    if size != table.file_bytes:
        raise TableFileError(f"{path} is truncated or padded: {size} bytes, expected "
                             f"{table.file_bytes}")
    if _file_checksum(path, expected, table) != fields.get("checksum"):
        raise TableFileError(f"{path} fails its checksum: the file was changed after it was "
                             "written")
    return table


def open_or_create(path: Path, geometry: EngramGeometry, fill_seed: int = 0) -> TableFile:
    """The table at `path`, written first where there is none. Servers that start at once
    write it once: each takes a lock beside it, and one that waited finds it written (two
    writers of one temporary file left a wrong checksum, or none to rename)."""
    if path.exists():
        return open_verified(path, geometry, fill_seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return open_verified(path, geometry, fill_seed)
        return create(path, geometry, fill_seed)
