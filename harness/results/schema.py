"""The results file's layout: its tables and views (sql/*.sql, shipped as package data), the
version stamped in it, and what tells that a file an older version wrote needs upgrading."""

from __future__ import annotations

import functools
from importlib.resources import files

import duckdb

from harness.results.request_figures import (
    COLUMN_FIGURES,
    add_columns_sql,
    derived_sql,
    fill_old_rows_sql,
    level_sql,
)

# the layout of the tables and views in sql/, stamped in the file's schema_version table: one
# more whenever they change, so an older engram-bench refuses a file a newer one has written
# (its views would be replaced by older ones) instead of reading it wrong; each declared
# per-request figure with a column of its own (harness.results.request_figures) is a column
# more, so counts as one
SCHEMA_VERSION = 5 + len(COLUMN_FIGURES)


def _sql(name: str) -> str:
    return (files("harness.results") / "sql" / name).read_text(encoding="utf-8")


# where the `request_figures` view takes the derived figures, and the `levels` view the
# declared figures' statistics
_DERIVED_COLUMNS = "    -- derived per-request figures (harness.results.request_figures)\n"
_DECLARED_LEVEL_COLUMNS = "    -- declared per-request figures (harness.results.request_figures)\n"
# every statement is safe to run again
SCHEMA = (_sql("tables.sql") + add_columns_sql()
          + _sql("views.sql").replace(_DERIVED_COLUMNS, derived_sql())
          .replace(_DECLARED_LEVEL_COLUMNS, level_sql()))
# what brings the tables of a file an older version wrote up to today's (the declared
# columns too, with what its rows read for them); SCHEMA then replaces its views and adds the
# index
MIGRATIONS = _sql("migrations.sql") + add_columns_sql() + fill_old_rows_sql()
STAMP = f"DELETE FROM schema_version; INSERT INTO schema_version VALUES ({SCHEMA_VERSION});"

# every connection's: DuckDB extensions are never loaded or fetched (DuckDB would download one
# over plain http to open a SQLite file, and a crafted file's view could call on any other)
NO_EXTENSIONS = {"autoload_known_extensions": False, "autoinstall_known_extensions": False}


@functools.cache
def current_columns() -> frozenset[tuple[str, str, str]]:
    """(table or view, column, type) of today's layout, read from an empty in-memory database
    that tables.sql and views.sql were run on: a file lacking one is upgraded."""
    con = duckdb.connect(":memory:", config=dict(NO_EXTENSIONS))
    try:
        con.execute(SCHEMA)
        return frozenset(_columns(con))
    finally:
        con.close()


def _columns(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str, str]]:
    return set(con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = current_database()"
    ).fetchall())


def outdated(con: duckdb.DuckDBPyConnection) -> bool:
    """The file holds results from an older version: a runs table, but not today's columns
    or not the index that keeps request ids unique."""
    have = _columns(con)
    if not any(t == "runs" for t, _, _ in have):
        return False
    indexed = con.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() "
        "AND index_name = 'requests_unique_id'").fetchone()
    return not have >= current_columns() or not (indexed and indexed[0])


def has_schema(con: duckdb.DuckDBPyConnection, table: str = "runs") -> bool:
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? "
                        "AND database_name = current_database()", [table]).fetchone()
    return bool(found and found[0])


class UnknownVersion(ValueError):
    """The file's schema_version table holds no version an engram-bench writes; the message
    says what it holds, to follow "its schema_version table"."""


def file_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version stamped in the file; 0 for one written before versions.
    UnknownVersion for a stamp that is not a whole number (a VARCHAR '4', say)."""
    if not has_schema(con, "schema_version"):
        return 0
    try:
        found = con.execute("SELECT max(version), typeof(max(version)) "
                            "FROM schema_version").fetchone()
    except duckdb.BinderException:
        raise UnknownVersion("has no column named version") from None
    version, kind = found if found else (None, None)
    if version is None:
        return 0
    if not isinstance(version, int) or isinstance(version, bool):
        raise UnknownVersion(f"holds {version!r} ({kind}), not a whole number")
    return version
