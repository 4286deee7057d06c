"""The results file's layout: its tables and views (sql/*.sql, shipped as package data), the
version stamped in it, and what tells that a file an older version wrote needs upgrading."""

from __future__ import annotations

from importlib.resources import files

import duckdb

# the layout of the tables and views in sql/, stamped in the file's schema_version table: one
# more whenever they change, so an older engram-bench refuses a file a newer one has written
# (its views would be replaced by older ones) instead of reading it wrong
SCHEMA_VERSION = 1


def _sql(name: str) -> str:
    return (files("harness.results") / "sql" / name).read_text(encoding="utf-8")


SCHEMA = _sql("tables.sql") + _sql("views.sql")  # every statement is safe to run again
# what brings the tables of a file an older version wrote up to today's; SCHEMA then replaces
# its views and adds the index
MIGRATIONS = _sql("migrations.sql")
STAMP = f"DELETE FROM schema_version; INSERT INTO schema_version VALUES ({SCHEMA_VERSION});"

# (table, column, type) that only today's schema has: a file without one is upgraded
CURRENT = {("runs", "measured_input_tokens", "DOUBLE"), ("requests", "retried", "VARCHAR"),
           ("levels", "mean_prompt_tokens", "DOUBLE"), ("server_metrics", "value", "DOUBLE"),
           ("levels", "probe", "BOOLEAN"), ("requests", "rate", "DOUBLE"),
           ("requests", "scheduled_at", "TIMESTAMP"), ("server_stats", "rate", "DOUBLE"),
           ("server_metrics", "rate", "DOUBLE"), ("levels", "rate", "DOUBLE"),
           ("requests", "repeat", "INTEGER"), ("requests", "think_ms", "DOUBLE"),
           ("requests", "turn", "INTEGER"), ("requests", "cached_tokens", "INTEGER"),
           ("levels", "duty_cycle", "DOUBLE"), ("turns", "mean_cached_tokens", "DOUBLE"),
           ("server_stats", "repeat", "INTEGER"), ("server_metrics", "repeat", "INTEGER"),
           ("request_figures", "tps", "DOUBLE"), ("levels", "busy_s", "DOUBLE"),
           ("request_figures", "tpot_ms", "DOUBLE"), ("levels", "p99_e2e_ms", "DOUBLE"),
           ("requests", "itl_counts", "INTEGER[]"), ("levels", "p99_itl_ms", "DOUBLE"),
           ("chunk_times", "tokens", "INTEGER"), ("client_checks", "client_bound", "BOOLEAN"),
           ("levels", "client_bound", "BOOLEAN"), ("client_checks", "cpu_wait_share", "DOUBLE"),
           ("user_levels", "lead_in_requests", "INTEGER"),
           ("schema_version", "version", "INTEGER"),
           ("user_levels", "lead_in_settled", "BOOLEAN"),
           ("user_levels", "lead_in_duty", "DOUBLE")}


def outdated(con: duckdb.DuckDBPyConnection) -> bool:
    """The file holds results from an older version: a runs table, but not today's columns
    or not the index that keeps request ids unique."""
    have = set(con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = current_database()"
    ).fetchall())
    if not any(t == "runs" for t, _, _ in have):
        return False
    indexed = con.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() "
        "AND index_name = 'requests_unique_id'").fetchone()
    return not have >= CURRENT or not (indexed and indexed[0])


def has_schema(con: duckdb.DuckDBPyConnection, table: str = "runs") -> bool:
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? "
                        "AND database_name = current_database()", [table]).fetchone()
    return bool(found and found[0])


def file_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version stamped in the file; 0 for one written before versions."""
    if not has_schema(con, "schema_version"):
        return 0
    found = con.execute("SELECT max(version) FROM schema_version").fetchone()
    return found[0] if found and found[0] is not None else 0
