"""Turns stored runs and per-level CSVs into the summary object, tables and capacity output."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.metrics import Capacity, LevelPoint, LevelStats, Targets, capacity, point
from harness.records import RequestRecord

SUMMARY_LEVEL_FIELDS = (
    "concurrency", "requests", "errors", "short_outputs", "mean_ttft_ms", "p50_ttft_ms",
    "p90_ttft_ms", "p99_ttft_ms", "mean_tps", "p10_tps", "mean_output_tokens", "throughput_tps",
)


class CapacityCSVError(ValueError):
    """A per-level CSV that cannot be scored; one sentence for the user."""


def summarise(
    run: dict, stats: Sequence[LevelStats], records: Sequence[RequestRecord], targets: Targets
) -> dict:
    """The `--json` object of `run` and `summary`."""
    cap = capacity([point(s, targets.statistic) for s in stats], targets)
    verdicts = {v.concurrency: v for v in cap.levels}
    prompt_tokens = mean_prompt_tokens(records)
    levels = []
    for s in stats:
        row = {k: _round(getattr(s, k)) for k in SUMMARY_LEVEL_FIELDS}
        row["mean_prompt_tokens"] = _round(prompt_tokens.get(s.concurrency))
        row["passes"] = verdicts[s.concurrency].passes
        row["fails_because"] = verdicts[s.concurrency].reason or None
        levels.append(row)
    warnings = list(cap.warnings)
    estimated = sum(1 for r in records if r.ok and r.output_tokens_estimated)
    if estimated:
        warnings.append(f"{estimated} request(s) reported no usage: output tokens are chunk "
                        "counts (estimated)")
    short = sum(s.short_outputs for s in stats)
    if short:
        warnings.append(f"{short} request(s) ended before {run['output_tokens']} output tokens")
    missing = sorted(set(run["levels"]) - {s.concurrency for s in stats})
    if missing:
        warnings.append(f"levels not measured: C={','.join(map(str, missing))}")
    return {
        "run_id": run["run_id"], "status": run["status"], "device": run["device"],
        "engine": run["engine"], "model": run["model"],
        "table_placement": run["table_placement"], "label": run["label"],
        "mode": run["mode"], "rounds": run["rounds"],
        "input_tokens": run["input_tokens"], "measured_input_tokens": run["measured_input_tokens"],
        "output_tokens": run["output_tokens"],
        "targets": asdict(targets), "levels": levels, "max_c": cap.max_c,
        "chat_users": cap.chat_users, "agentic_users": cap.agentic_users, "warnings": warnings,
    }


def mean_prompt_tokens(records: Sequence[RequestRecord]) -> dict[int, float]:
    """Per level, the server-counted prompt tokens of successful requests: what was sent, which
    matters most when prompts keep their own lengths (a --prompts .jsonl file)."""
    counts: dict[int, list[int]] = {}
    for r in records:
        if r.ok and r.input_tokens is not None:
            counts.setdefault(r.concurrency, []).append(r.input_tokens)
    return {c: sum(v) / len(v) for c, v in counts.items()}


def _round(value: object) -> object:
    return round(value, 3) if isinstance(value, float) else value


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_summary(summary: dict, console: Console) -> None:
    title = (f"run {summary['run_id']} ({summary['status']}): {summary['model']} on "
             f"{summary['device'] or 'unlabelled device'}, engine {summary['engine'] or '-'}, "
             f"table {summary['table_placement'] or '-'}")
    table = Table(title=title, title_justify="left")
    for name in ("C", "req", "err", "short", "TTFT mean", "p50", "p90", "p99", "TPS mean",
                 "TPS p10", "in tok", "out tok", "tok/s all", "pass"):
        table.add_column(name, justify="right")
    for lv in summary["levels"]:
        table.add_row(
            str(lv["concurrency"]), str(lv["requests"]), str(lv["errors"]),
            str(lv["short_outputs"]), _fmt(lv["mean_ttft_ms"]), _fmt(lv["p50_ttft_ms"]),
            _fmt(lv["p90_ttft_ms"]), _fmt(lv["p99_ttft_ms"]), _fmt(lv["mean_tps"]),
            _fmt(lv["p10_tps"]), _fmt(lv["mean_prompt_tokens"]), _fmt(lv["mean_output_tokens"]),
            _fmt(lv["throughput_tps"]),
            "[green]yes[/]" if lv["passes"] else "[red]no[/]",
        )
    console.print(table, width=max(console.width, 132))  # a narrow terminal must not hide figures
    t = summary["targets"]
    console.print(
        f"Max C = [bold]{summary['max_c']}[/] ({t['statistic']} TPS >= {t['tps_min']:g} tok/s, "
        f"TTFT <= {t['ttft_max_ms']:g} ms, no errors)  ->  chat users "
        f"[bold]{summary['chat_users']}[/] (x{t['chat_factor']:g}), agentic users "
        f"[bold]{summary['agentic_users']}[/] (x{t['agentic_factor']:g})",
        highlight=False,
    )
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


# -- the bundled server's table, from its /stats -----------------------------------------------

SERVER_TABLE_KEYS = {"table_bytes": (int, float), "placement": str, "io_mode": str,
                     "table_budget_bytes": (int, float), "cache_ratio": (int, float),
                     "cache_state": str, "decode": str}


def server_table(stats: dict | None) -> dict:
    """What /stats says about the table and its start state (stored with the run); keys a
    server does not report, reports as null or in another type are left out."""
    stats = stats or {}
    return {k: stats[k] for k, kind in SERVER_TABLE_KEYS.items() if isinstance(stats.get(k), kind)}


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def describe_server_table(table: dict) -> str:
    """One line, e.g. 'table: 2.0 GiB on nvme (mmap), page-cache budget 343.5 MiB (cache ratio
    0.168), cold start, decode replay', naming only what the server reported."""
    where = []
    if "table_bytes" in table:
        where.append(_size(table["table_bytes"]))
    if "placement" in table:
        where.append(f"on {table['placement']}")
    if "io_mode" in table:
        where.append(f"({table['io_mode']})")
    parts = [" ".join(where)] if where else []
    ratio = f"cache ratio {table['cache_ratio']:.3g}" if "cache_ratio" in table else ""
    if "table_budget_bytes" in table:
        kind = "row-cache" if table.get("io_mode") == "direct" else "page-cache"
        parts.append(f"{kind} budget {_size(table['table_budget_bytes'])}"
                     + (f" ({ratio})" if ratio else ""))
    elif ratio:
        parts.append(ratio)
    if "cache_state" in table:
        parts.append(f"{table['cache_state']} start")
    if "decode" in table:
        parts.append(f"decode {table['decode']}")
    return "table: " + ", ".join(parts)


# -- capacity --csv ----------------------------------------------------------------------------

_REQUIRED = ("run", "concurrency", "mean_ttft_ms", "mean_tps")


def read_level_csv(path: Path) -> dict[str, list[LevelPoint]]:
    """Per-level means measured anywhere; an empty cell is a figure that was not published."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise CapacityCSVError(
                    f"{path} lacks column(s) {', '.join(missing)}; needed: {', '.join(_REQUIRED)}"
                )
            runs: dict[str, list[LevelPoint]] = {}
            for line, row in enumerate(reader, start=2):
                runs.setdefault(row["run"], []).append(_point(row, path, line))
    except OSError as exc:
        raise CapacityCSVError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CapacityCSVError(f"{path} is not a UTF-8 text CSV") from None
    if not runs:
        raise CapacityCSVError(f"{path} has no rows")
    return runs


def _point(row: dict, path: Path, line: int) -> LevelPoint:
    def number(name: str, kind: type = float) -> float | int | None:
        text = (row.get(name) or "").strip()
        if not text:
            return None
        try:
            return kind(float(text)) if kind is int else kind(text)
        except ValueError:
            raise CapacityCSVError(f"{path} line {line}: {name} {text!r} is not a number") from None

    concurrency = number("concurrency", int)
    if concurrency is None or concurrency < 1:
        raise CapacityCSVError(f"{path} line {line}: concurrency must be a positive integer")
    errors = number("errors", int) if "errors" in row else 0
    return LevelPoint(concurrency, number("mean_ttft_ms"), number("mean_tps"), errors)


def capacity_object(runs: dict[str, list[LevelPoint]], targets: Targets) -> dict:
    out = {}
    for name, points in runs.items():
        cap: Capacity = capacity(points, targets)
        out[name] = {
            "max_c": cap.max_c, "chat_users": cap.chat_users, "agentic_users": cap.agentic_users,
            "levels": [
                {"concurrency": v.concurrency, "mean_ttft_ms": v.ttft_ms, "mean_tps": v.tps,
                 "passes": v.passes, "fails_because": v.reason or None}
                for v in cap.levels
            ],
            "warnings": cap.warnings,
        }
    return out


def print_capacity(result: dict, console: Console) -> None:
    table = Table(title="capacity", title_justify="left")
    for name in ("run", "levels passing", "Max C", "chat users", "agentic users"):
        if name == "run":
            table.add_column(name, overflow="fold", min_width=24)
        else:
            table.add_column(name, justify="right")
    for name, r in result.items():
        passing = ",".join(str(lv["concurrency"]) for lv in r["levels"] if lv["passes"]) or "-"
        table.add_row(name, passing, str(r["max_c"]), str(r["chat_users"]),
                      str(r["agentic_users"]))
    console.print(table, width=max(console.width, 132))  # a narrow terminal must not hide figures
    for name, r in result.items():
        for warning in r["warnings"]:
            console.print(f"[yellow]warning[/] {name}: {warning}", highlight=False)
