"""Progress per level on stderr: a rich bar on a terminal, one line per level otherwise."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harness.metrics import LevelStats
from harness.records import RequestRecord


class LevelProgress:
    def __init__(self, enabled: bool = True) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled
        self.live = enabled and self.console.is_terminal
        self._progress: Progress | None = None
        self._task = None
        self._ttft_sum = 0.0
        self._tps_sum = 0.0
        self._ok = 0
        self._errors = 0

    def message(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, highlight=False)

    def start_level(self, concurrency: int, total: int) -> None:
        self._ttft_sum = self._tps_sum = 0.0
        self._ok = self._errors = 0
        if not self.live:
            return
        self._progress = Progress(
            TextColumn(f"C={concurrency:<4}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("level", total=total, figures="")

    def advance(self, record: RequestRecord) -> None:
        if record.ok:
            self._ok += 1
            self._ttft_sum += record.ttft_ms or 0.0
            self._tps_sum += record.tps or 0.0
        else:
            self._errors += 1
        if self._progress is not None and self._task is not None:
            figures = ""
            if self._ok:
                figures = (f"TTFT {self._ttft_sum / self._ok:7.1f} ms  "
                           f"TPS {self._tps_sum / self._ok:6.1f}")
            if self._errors:
                figures += f"  errors {self._errors}"
            self._progress.update(self._task, advance=1, figures=figures)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def end_level(self, stats: LevelStats) -> None:
        if self._progress is not None:
            self.stop()
        elif self.enabled:
            ttft = f"{stats.mean_ttft_ms:.1f}" if stats.mean_ttft_ms is not None else "-"
            tps = f"{stats.mean_tps:.1f}" if stats.mean_tps is not None else "-"
            print(f"C={stats.concurrency}: {stats.requests} requests, mean TTFT {ttft} ms, "
                  f"mean TPS {tps}, errors {stats.errors}", file=sys.stderr, flush=True)
