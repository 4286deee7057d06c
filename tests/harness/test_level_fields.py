"""Every figure of `metrics.LevelStats` reaches each place that lists a level's figures (the
results file's `levels` view, the summary's level rows and `--json`, the explorer's level
tables) unless its declaration (harness.results.figure) says it does not; a failure names it."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from explorer import tables
from harness.results.figure import Figure
from harness.results.goodput import Slo
from harness.results.metrics import LEVEL_FIGURES, LEVEL_KEYS, LevelStats, Targets, stats_by_level
from harness.results.report import summarise
from harness.results.run_row import RunRow
from harness.results.store import Store
from harness.results.summary import LevelRow
from harness.run.modes import MODES
from tests.harness.fixtures import make_records

TARGETS = Targets(slo=Slo(ttft_ms=1000.0))


def _declared(where: str) -> list[str]:
    return [name for name, fig in LEVEL_FIGURES.items() if getattr(fig, where)]


def test_every_field_declares_its_figure():
    undeclared = [f.name for f in dataclasses.fields(LevelStats) if f.name != "declared"
                  and not isinstance(f.metadata.get("figure"), Figure)]
    assert not undeclared, f"LevelStats fields without a figure(...) declaration: {undeclared}"


def test_the_levels_view_has_every_sql_figure(tmp_path):
    store = Store(tmp_path / "fresh.duckdb")
    store.initialise()
    with store.read_only() as con:
        columns = {row[0] for row in con.execute("DESCRIBE levels").fetchall()}
    for name in _declared("sql"):
        assert name in columns, f"LevelStats.{name} is not a column of the `levels` view"


def _level_keys(mode: str, records: list) -> set[str]:
    run = RunRow(run_id="run-a", status="complete", mode=mode, levels=[1, 2, 4], rounds=3,
                 input_tokens=128, output_tokens=128, config="{}")
    stats = stats_by_level(records, 128, TARGETS.slo)
    summary = summarise(run, stats, records, TARGETS)
    return {key for row in summary["levels"] for key in row}


def _rate_records() -> list:
    records = make_records(levels=(2,))
    for r in records:
        r.concurrency, r.rate, r.scheduled_at = 0, 2.0, r.sent_at - 0.001
    return records


def _trace_records() -> list:
    records = _rate_records()
    for r in records:
        r.speedup, r.input_tokens_requested, r.trace_prefix_tokens = 4.0, 100, 50
    return records


@pytest.mark.parametrize("group", ["level", "rate", "trace", "slo"])
def test_summary_level_rows_have_every_summary_figure(group):
    keys = (_level_keys("closed", make_records()) | _level_keys("rate", _rate_records())
            | _level_keys("trace", _trace_records()))
    for name, fig in LEVEL_FIGURES.items():
        if fig.group == group and fig.summary:
            assert name in keys, f"LevelStats.{name} is not a key of the summary's level rows"


def test_level_row_types_every_summary_figure():
    typed = typing.get_type_hints(LevelRow)
    for name in _declared("summary"):
        assert name in typed, f"LevelStats.{name} is not typed in summary.LevelRow"


def test_the_explorer_level_tables_have_every_explorer_figure():
    shown = {*tables.LEVEL_COLUMNS, *tables.GOODPUT_COLUMNS}
    for name in _declared("explorer"):
        assert name in shown, f"LevelStats.{name} is in none of the explorer's level tables"
        assert tables.COLUMNS[name].label == LEVEL_FIGURES[name].title, name


def test_each_mode_takes_its_level_key_from_the_one_list():
    assert {name: mode.key for name, mode in MODES.items() if mode.key != "C"} == LEVEL_KEYS
