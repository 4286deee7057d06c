"""`capacity --csv`: per-level figures measured anywhere, read from a CSV and judged by the
Max C rules into the `capacity --json` object."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from harness.results.metrics import FIGURE_FIELDS, STATISTIC_FIELDS, LevelPoint, Targets, capacity
from harness.results.summary import judged


class CapacityCSVError(ValueError):
    """A per-level CSV that cannot be scored; one sentence for the user."""


def read_level_csv(path: Path, statistic: str = "mean") -> dict[str, list[dict]]:
    """Per-level figures measured anywhere: per run, rows of concurrency, errors and every
    FIGURE_FIELDS column the file has; an empty cell is a figure that was not published. The
    columns the chosen statistic judges are required."""
    required = ("run", "concurrency", *STATISTIC_FIELDS[statistic])
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise CapacityCSVError(
                    f"{path} lacks column(s) {', '.join(missing)}; --statistic {statistic} "
                    f"needs: {', '.join(required)}"
                )
            runs: dict[str, list[dict]] = {}
            for line, row in enumerate(reader, start=2):
                runs.setdefault(row["run"], []).append(_level(row, path, line))
    except OSError as exc:
        raise CapacityCSVError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CapacityCSVError(f"{path} is not a UTF-8 text CSV") from None
    if not runs:
        raise CapacityCSVError(f"{path} has no rows")
    return runs


def _level(row: dict, path: Path, line: int) -> dict:
    def number(name: str, kind: type = float) -> float | int | None:
        text = (row.get(name) or "").strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise CapacityCSVError(f"{path} line {line}: {name} {text!r} is not a number") from None
        if not 0 <= value < math.inf:  # NaN fails too
            raise CapacityCSVError(f"{path} line {line}: {name} {text!r} is not a finite "
                                   "number >= 0")
        return int(value) if kind is int else value

    concurrency = number("concurrency", int)
    if concurrency is None or concurrency < 1:
        raise CapacityCSVError(f"{path} line {line}: concurrency must be a positive integer")
    errors = number("errors", int) if "errors" in row else 0
    return {"concurrency": concurrency, "errors": errors,
            **{name: number(name) for name in FIGURE_FIELDS}}


def capacity_object(runs: dict[str, list[dict]], targets: Targets) -> dict:
    """The `capacity --json` object: per run, Max C and users, and per level every figure
    with its verdict under the named statistic."""
    ttft, tps = STATISTIC_FIELDS[targets.statistic]
    out = {}
    for name, rows in runs.items():
        rows = sorted(rows, key=lambda r: r["concurrency"])  # the order capacity judges in
        cap = capacity([LevelPoint(r["concurrency"], r[ttft], r[tps], r["errors"]) for r in rows],
                       targets)
        out[name] = {
            "max_c": cap.max_c, "chat_users": cap.chat_users, "agentic_users": cap.agentic_users,
            "statistic": targets.statistic, "judged": judged(targets.statistic),
            "levels": [{**r, "passes": v.passes, "fails_because": v.reason or None}
                       for r, v in zip(rows, cap.levels, strict=True)],
            "warnings": cap.warnings,
        }
    return out
