"""One row of the results file's `runs` table: what a run was started with and how it ended."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


def utc_now() -> datetime:
    """Now, as the results file's TIMESTAMP columns hold it (UTC, naive)."""
    return datetime.fromtimestamp(time.time(), UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class RunRow:
    """A run as stored, its fields in the table's column order; a new run starts running,
    now, and a column not given is NULL."""

    run_id: str
    started_at: datetime = field(default_factory=utc_now)
    finished_at: datetime | None = None
    status: str = "running"
    device: str | None = None
    engine: str | None = None
    model: str | None = None
    table_placement: str | None = None
    target_url: str | None = None
    api: str | None = None
    mode: str | None = None
    levels: list[int] | None = None
    rounds: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    measured_input_tokens: float | None = None  # mean usage.prompt_tokens of the prompts sent
    label: str | None = None
    config: str | None = None  # harness.config.StoredRun as JSON
    host: str | None = None
    version: str | None = None
    error: str | None = None

    @classmethod
    def from_mapping(cls, row: Mapping[str, object]) -> RunRow:
        """A row from a mapping that holds some of the columns (a query's, a frame's): the
        others NULL, any other key left out."""
        values = {f.name: row.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**values)  # type: ignore[arg-type]
