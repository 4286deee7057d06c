"""What a level figure is called, measured in and shown where: declared beside its field of
`metrics.LevelStats`, so the summary's `--json` keys, the printed table's headers and the
explorer's level columns all follow one list and a new figure cannot be left out of one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Group = Literal["level", "rate", "trace", "slo"]


@dataclass(slots=True, frozen=True)
class Figure:
    """A figure of a level. `group`: "level" for every level, "rate" for a rate level's own
    (first in its summary row), "trace" for a trace replay's levels, "slo" for those judged
    against an SLO (last, only with one).
    `sql`, `summary`, `explorer`: whether the results file's `levels` view, the summary's
    level rows and the explorer's level tables have it."""

    label: str  # what a reader sees: "mean TTFT"
    unit: str = ""  # "ms", "tok/s"; "" for a count, a share or a yes/no
    header: str = ""  # the printed table's column title, where the terminal shows it
    format: str | None = "%.1f"  # the explorer's number format; None: a yes/no
    group: Group = "level"
    sql: bool = True
    summary: bool = True
    explorer: bool = True

    @property
    def title(self) -> str:
        """'mean TTFT (ms)': the label with its unit."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


def figure(label: str, unit: str = "", header: str = "", format: str | None = "%.1f", *,
           group: Group = "level", sql: bool = True, summary: bool = True,
           explorer: bool = True) -> dict[str, Figure]:
    """A LevelStats field's metadata: `field(metadata=figure("mean TTFT", "ms"))`."""
    return {"figure": Figure(label, unit, header, format, group, sql, summary, explorer)}
