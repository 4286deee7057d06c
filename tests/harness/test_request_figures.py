"""A per-request figure declared once (harness.results.request_figures): its column, its
upgrade of an older file, and its level statistics in SQL and Python follow the one entry."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import harness.results.request_figures as declared
from harness.results.request_figures import (
    RequestFigure,
    add_columns_sql,
    fill_old_rows_sql,
    in_table,
    level_sql,
    level_values,
    row_type_source,
)

# a declaration of each kind of statistic, standing in for the shipped ones
WAIT = RequestFigure("wait_ms", "DOUBLE", "wait", "ms", old_rows="base_ms",
                     missing_reason="wait_missing")
WHY = RequestFigure("wait_missing", "VARCHAR", "no wait", statistics=("count",))
SOURCE = RequestFigure("source", "VARCHAR", "source", statistics=("values",), announces=True)
FLAGGED = RequestFigure("flagged", "BOOLEAN", "flagged", statistics=("count",))
FIGURES = (WAIT, WHY, SOURCE, FLAGGED)

ROWS = [  # ok, wait_ms, wait_missing, source, flagged
    (True, 10.0, None, "usage", False),
    (True, 30.0, None, "counted", True),
    (True, None, "never answered", "usage", None),
    (True, 20.0, None, None, True),
    (False, 999.0, None, "counted", True),  # a failed request: in no statistic
]


def _table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE requests (ok BOOLEAN, base_ms DOUBLE)")
    con.execute(add_columns_sql(FIGURES))
    con.execute(add_columns_sql(FIGURES))  # safe to run again


def test_the_row_type_file_is_written_from_the_declaration():
    path = Path(declared.__file__).with_name("declared_row.py")
    assert path.read_text(encoding="utf-8") == row_type_source(), (
        "harness/results/declared_row.py is stale: "
        "python -m harness.results.request_figures > harness/results/declared_row.py")


def test_the_row_type_has_each_statistic_typed():
    source = row_type_source(FIGURES)
    for line in ("    mean_wait_ms: float | None", "    p99_wait_ms: float | None",
                 "    count_wait_missing: int", "    values_source: str | None"):
        assert line in source.splitlines()


def test_the_levels_sql_and_python_give_the_same_statistics():
    con = duckdb.connect(":memory:")
    _table(con)
    con.executemany("INSERT INTO requests (ok, wait_ms, wait_missing, source, flagged) "
                    "VALUES (?, ?, ?, ?, ?)", ROWS)
    cursor = con.execute(f"SELECT\n{level_sql('q', FIGURES)}    1 AS one FROM requests q")
    names = [d[0] for d in cursor.description]
    sql = dict(zip(names, cursor.fetchone(), strict=True))
    good = [dict(zip(("wait_ms", "wait_missing", "source", "flagged"), row[1:], strict=True))
            for row in ROWS if row[0]]
    python = level_values(good, FIGURES)
    assert set(python) == set(names) - {"one"}
    for name, value in python.items():
        assert sql[name] == (value if not isinstance(value, float)
                             else pytest.approx(value, rel=1e-12)), name
    assert python["mean_wait_ms"] == pytest.approx(20.0)
    assert python["count_wait_missing"] == 1 and python["count_flagged"] == 2
    assert python["values_source"] == "counted,usage"


def test_an_older_file_gains_the_columns_and_its_rows_read_the_old_value():
    con = duckdb.connect(":memory:")
    con.execute("CREATE TABLE requests (ok BOOLEAN, base_ms DOUBLE)")
    con.execute("INSERT INTO requests VALUES (true, 12.5), (true, NULL)")
    con.execute(add_columns_sql(FIGURES) + fill_old_rows_sql(FIGURES))
    assert con.execute("SELECT base_ms, wait_ms FROM requests ORDER BY base_ms").fetchall() == [
        (12.5, 12.5), (None, None)]
    # a row that says why it has no value keeps none when the upgrade runs again
    con.execute("INSERT INTO requests (ok, base_ms, wait_missing) "
                "VALUES (true, 40.0, 'never answered')")
    con.execute(add_columns_sql(FIGURES) + fill_old_rows_sql(FIGURES))
    assert con.execute("SELECT wait_ms FROM requests WHERE wait_missing IS NOT NULL"
                       ).fetchall() == [(None,)]


def test_a_declaration_without_statistics_of_numbers_has_no_numbers():
    assert level_values([{"wait_ms": None}, {}], (WAIT,))["mean_wait_ms"] is None


def test_a_level_is_in_the_printed_table_where_an_announcing_figure_has_a_value():
    assert in_table({"values_source": "usage", "mean_wait_ms": 5.0}, FIGURES)
    assert not in_table({"values_source": None, "mean_wait_ms": 5.0}, FIGURES)
