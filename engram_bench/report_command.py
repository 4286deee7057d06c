"""`engram-bench report RUN [RUN ...] -o FILE`: the report to hand over, written whole or not
at all; with --png / --svg each chart as an image too (engram_bench/chart_images.py)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from engram_bench import chart_images
from engram_bench.errors import UserError
from engram_bench.parser import targets
from harness.results.handover import sources
from harness.results.store import Store


def report_paths(args_runs: Sequence[str], db: Path) -> list[tuple[Path, str]]:
    """(results file, run id) for each RUN: a run id or 'latest' in --db, or a results file,
    which stands for every run it holds."""
    out: list[tuple[Path, str]] = []
    for given in args_runs:
        path = Path(given).expanduser()
        if path.is_file() or path.suffix == ".duckdb":
            if not path.exists():
                raise UserError(f"{given} does not exist")
            runs = Store(path).runs()
            if not runs:
                raise UserError(f"{given} holds no runs")
            out += [(path, r.run_id) for r in sorted(runs, key=lambda r: r.started_at)]
        else:
            if not db.exists():
                raise UserError(f"{db} does not exist yet: start a run with `make bench`")
            out.append((db, given))
    return out


def output_path(out: Path, run_ids: Sequence[str]) -> Path:
    """-o as given where it names an .html file; else a folder (made where missing, its
    parent not) holding report-<run>.html (a comparison's: the first run's id and how many
    runs)."""
    if not out.is_dir() and out.suffix.lower() in (".html", ".htm"):
        return out
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot make the folder {out}: {exc.strerror or exc}") from None
    return out / sources.report_name(run_ids)


def write_whole(path: Path, data: bytes) -> None:
    """`data` at `path`, through a temporary file beside it renamed into place: a reader
    never sees half a file, and a failed write leaves nothing behind."""
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    try:
        built = sources.build_report(report_paths(args.runs, args.db), targets(args))
    except sources.MissingChartLibrary as exc:
        raise UserError(str(exc)) from None
    path = output_path(args.out, built.run_ids)
    write_whole(path, built.html.encode("utf-8"))
    for run_id, status in built.unfinished:
        console.print(f"warning: run {run_id} is {status}: the report shows what it stored",
                      highlight=False)
    written = [image for folder, fmt in ((args.png, "png"), (args.svg, "svg"))
               if folder is not None
               for image in chart_images.write(built.figures, sources.plotly_js(), folder, fmt)]
    if args.json:
        print(json.dumps({"report": str(path), "images": [str(p) for p in written]}))
        return 0
    console.print(f"report: {path}", highlight=False)
    for image in written:
        console.print(f"wrote {image}", highlight=False)
    return 0
