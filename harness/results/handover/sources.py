"""What a report reads: each run's summary and the rest from the results file, the published
reference curves, and the chart library from the plotly package (the explorer extra)."""

from __future__ import annotations

import csv
import importlib.util
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from harness.records import RequestRecord
from harness.results.handover import document
from harness.results.handover.model import ReferencePoint, RunReport
from harness.results.metrics import Targets, level_label
from harness.results.placement import PlacementError
from harness.results.run_row import RunRow
from harness.results.stats_counters import level_counters
from harness.results.store import Store
from harness.results.stored_summary import stored_summary, stored_verdict

# a device profile's name -> the device the published runs name (results/reference/)
PUBLISHED_DEVICES = {"spark": "dgx-spark", "rtx-pro-6000": "rtx-pro-6000", "b300": "dgx-b300"}
REFERENCE_FILE = Path(__file__).resolve().parents[3] / "results" / "reference" / \
    "published_runs.csv"
NEEDS_PLOTLY = ("the report inlines plotly.js from the plotly package, which this install "
                "lacks: pip install 'engram-bench[explorer]'")


class MissingChartLibrary(Exception):
    """plotly is not installed (one sentence: how to install it)."""


def plotly_js() -> str:
    """plotly.js, minified, as the installed plotly package ships it."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise MissingChartLibrary(NEEDS_PLOTLY)
    path = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        raise MissingChartLibrary(NEEDS_PLOTLY) from None


def published(path: Path = REFERENCE_FILE) -> list[dict[str, str]]:
    """The published per-level rows (results/reference/published_runs.csv); none where the
    file is absent (an install without the repository's results folder)."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def reference_curves(rows: Sequence[Mapping[str, str]], device: str | None,
                     placement: str | None) -> dict[str, list[ReferencePoint]]:
    """The published curves of a run's device: those of its table placement where any are
    published, else all of the device's."""
    name = PUBLISHED_DEVICES.get(device or "")
    mine = [r for r in rows if r.get("device") == name]
    placed = [r for r in mine if r.get("table_placement") == placement]
    curves: dict[str, list[ReferencePoint]] = {}
    for r in placed or mine:
        curves.setdefault(r["run"], []).append({
            "concurrency": float(r["concurrency"]),
            "mean_ttft_ms": float(r["mean_ttft_ms"]) if r.get("mean_ttft_ms") else None,
            "mean_tps": float(r["mean_tps"]) if r.get("mean_tps") else None})
    return curves


def errors_by_kind(records: Sequence[RequestRecord]) -> dict[str, dict[str, int]]:
    """Failed requests per kind, then per level name."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        if r.error_kind is not None:
            level = level_label(r.concurrency, r.rate, r.speedup, rate_unit="")
            per_level = out.setdefault(r.error_kind, {})
            per_level[level] = per_level.get(level, 0) + 1
    return out


def _counters(store: Store, run: RunRow) -> list[tuple[str, dict[str, float]]]:
    """Per level pass, the server's /stats figures over it (stats_counters), numbers only."""
    out = []
    passes = store.server_stats(run.run_id)
    several = len({(p["concurrency"], p.get("rate")) for p in passes}) < len(passes)
    for p in passes:
        figures = level_counters(_snapshot(p["before"]), _snapshot(p["after"]))
        numbers = {k: v for k, v in figures.items() if isinstance(v, int | float)}
        if numbers:
            name = level_label(p["concurrency"], p.get("rate"), None, rate_unit="")
            out.append((f"{name} pass {p['repeat'] + 1}" if several else name, numbers))
    return out


def _snapshot(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def run_report(store: Store, run_id: str, targets: Targets,
               reference: Sequence[Mapping[str, str]] = ()) -> RunReport:
    """Run `run_id` ('latest': the newest) as its report shows it; StoreError for a run the
    file does not hold."""
    run = store.run(run_id)
    summary = stored_summary(store, run.run_id, targets)
    return RunReport(run, summary, _counters(store, run),
                     errors_by_kind(store.requests(run.run_id)),
                     reference_curves(reference, run.device, run.table_placement))


def generated_now() -> str:
    """When a report is written, as its footer says it (UTC, to the second)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def build_report(runs: Sequence[tuple[Path, str]], targets: Targets) -> document.Built:
    """The report of runs given as (results file, run id or 'latest'), each once, in the
    order given: what `engram-bench report` writes and the explorer's button downloads.
    StoreError for a run not there, MissingChartLibrary without plotly."""
    library = plotly_js()
    reference = published()
    stores: dict[Path, Store] = {}
    reports: list[tuple[Store, RunReport]] = []
    for path, run_id in runs:
        store = stores.setdefault(path, Store(path, lock_timeout_s=10))
        report = run_report(store, run_id, targets, reference)
        if all(r.run.run_id != report.run.run_id for _, r in reports):
            reports.append((store, report))
    return document.build([r for _, r in reports], library, generated_now(),
                          placement_paragraph(reports, targets))


def placement_paragraph(reports: Sequence[tuple[Store, RunReport]], targets: Targets
                        ) -> str | None:
    """`compare`'s placement verdict (harness.results.placement) of two runs of one results
    file that differ only in where the table is; None otherwise."""
    if len(reports) != 2 or reports[0][0] is not reports[1][0]:
        return None
    (store, a), (_, b) = reports
    if a.run.table_placement == b.run.table_placement:
        return None
    try:
        found = stored_verdict(store, a.run.run_id, b.run.run_id, targets)
    except PlacementError:
        return None
    return None if found.other_differences else found.paragraph


def report_name(run_ids: Sequence[str]) -> str:
    """report-<run>.html, or for a comparison the first run's id and how many more."""
    more = f"-and-{len(run_ids) - 1}-more" if len(run_ids) > 1 else ""
    return f"report-{run_ids[0]}{more}.html"
