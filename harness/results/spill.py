"""Rows a run measured but could not store (a full disk, a broken results file), kept in a
JSON-lines file until `run --resume` imports them.

The file sits beside the database when there is room there, else in the temporary folder
under a name drawn from the database's path; `pending` looks in both places.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from pathlib import Path

import orjson

from harness.records import RequestRecord

_STORED_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord) if f.name != "reply")


class SpillError(OSError):
    """No place could hold the unstored rows; the message is one sentence."""


def places(db: Path, run_id: str) -> list[Path]:
    """Where a run's unstored rows may be: beside the database, else the temporary folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    beside = db.with_name(f"{db.name}.{safe}.unstored.jsonl")
    digest = hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:12]
    return [beside, Path(tempfile.gettempdir()) / f"engram-bench-{digest}-{safe}.unstored.jsonl"]


def write(db: Path, run_id: str, records: list[RequestRecord]) -> Path:
    """Append `records` to the first place that takes them all; SpillError if none does."""
    lines = b"".join(orjson.dumps({name: getattr(r, name) for name in _STORED_FIELDS}) + b"\n"
                     for r in records)
    reasons = []
    for path in places(db, run_id):
        try:
            with open(path, "ab") as f:
                start = f.tell()
                try:
                    f.write(lines)
                    f.flush()
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(start)  # no half line for the import to trip on
                    if not start:
                        path.unlink()
                    raise
            return path
        except OSError as exc:
            reasons.append(f"{path}: {exc.strerror or exc}")
    raise SpillError(f"the {len(records)} unstored rows could not be kept anywhere "
                     f"({'; '.join(reasons)})")


def pending(db: Path, run_id: str) -> list[tuple[Path, list[RequestRecord]]]:
    """Every spill file of the run, with its rows (a line cut short by a crash is skipped)."""
    found = []
    for path in places(db, run_id):
        if not path.exists():
            continue
        rows = []
        for line in path.read_bytes().splitlines():
            try:
                rows.append(RequestRecord(**orjson.loads(line)))
            except (orjson.JSONDecodeError, TypeError):
                continue
        found.append((path, rows))
    return found
