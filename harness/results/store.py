"""DuckDB results file: short write transactions, queries, CSV/Parquet export.

Each write opens the file, commits and closes it again, so a reader (the explorer, a
`summary` in another shell) can open it between writes; a locked file is retried.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from harness.records import LoadHost, RequestRecord
from harness.results.client_check import ClientCheck
from harness.results.host_level import HostLevel, HostPass, HostSlice
from harness.results.request_figures import insert_columns, row_values
from harness.results.results_file import ResultsFile, StoreError
from harness.results.run_row import RunRow
from harness.results.server_cpu import ServerCpu, most_starved
from harness.results.token_timing import StreamTiming, stream_timing
from harness.results.users import LeadIn, worst_lead_in

DEFAULT_DB = Path("results/bench.duckdb")
RUN_STATUSES = ("running", "complete", "aborted", "failed")

_REQUEST_COLUMNS = (
    "run_id, concurrency, round, worker, request_id, sent_at, ttft_ms, latency_ms, "
    "output_tokens, output_tokens_estimated, input_tokens, chunks, max_gap_ms, finish_reason, "
    "ok, error_kind, error_message, http_status, retried, rate, scheduled_at, repeat, turn, "
    "cached_tokens, think_ms, tokens_per_chunk, tokens_per_chunk_estimated, chunk_gap_mean_ms, "
    "chunk_gap_p50_ms, chunk_gap_p90_ms, chunk_gap_p99_ms, itl_mean_ms, itl_p50_ms, itl_p90_ms, "
    "itl_p99_ms, itl_bins, itl_counts, speedup, trace_line, trace_input_tokens, "
    "trace_output_tokens, input_tokens_requested, output_tokens_requested, trace_prefix_tokens"
)
_DECLARED_COLUMNS = insert_columns()  # the declared figures' (harness.results.request_figures)
_INSERT_COLUMNS = ", ".join((_REQUEST_COLUMNS, *_DECLARED_COLUMNS))
_RUN_COLUMNS = ", ".join(f.name for f in dataclasses.fields(RunRow))

_HOST_LEVEL_COLUMNS = ", ".join(f.name for f in dataclasses.fields(HostLevel))
_HOST_SLICE_FIELDS = tuple(f.name for f in dataclasses.fields(HostSlice))
_HOST_SLICE_COLUMNS = ", ".join(_HOST_SLICE_FIELDS)
_TIMING_FIELDS = tuple(f.name for f in dataclasses.fields(StreamTiming))


def fill_token_timing(record: RequestRecord) -> None:
    """A record's inter-token figures from the chunk arrivals it carries (the client leaves
    this work to the writer's process, off the timing loop); a record without them, or
    filled already, is left as it is."""
    if record.chunk_offsets_ns is None or record.tokens_per_chunk is not None:
        return
    offsets = record.chunk_offsets_ns
    timing = stream_timing(offsets, record.chunk_tokens, record.output_tokens)
    for name in _TIMING_FIELDS:
        setattr(record, name, getattr(timing, name))
    if len(offsets) > 1:
        record.max_gap_ms = max(b - a for a, b in itertools.pairwise(offsets)) / 1e6


def _server_stats_row(row: dict) -> dict:
    """/stats before and after one level, parsed; `rate` only on a rate level's row."""
    rate = row.pop("rate")
    parsed = {**row, "before": json.loads(row["before"]), "after": json.loads(row["after"])}
    return parsed if rate is None else {**parsed, "rate": rate}


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


def _insert(con: duckdb.DuckDBPyConnection, verb: str, columns: str,
            rows: Sequence[Sequence[object]]) -> None:
    """`rows` in one statement, each column one list unnested in SQL: executemany runs one
    per row (~6 ms each), and rows of placeholders cost DuckDB ~0.25 s of CPU per 512 rows
    here, against ~0.03 s so, on the cores the level's next round runs on."""
    if rows:
        con.execute(f"{verb} ({columns}) SELECT " + ", ".join("unnest(?)" for _ in rows[0]),
                    [list(column) for column in zip(*rows, strict=True)])


def _drop_pass(con: duckdb.DuckDBPyConnection, table: str, key: list) -> None:
    """Delete one pass's rows of a per-pass table (key: run_id, concurrency, rate, repeat), so
    a resumed pass's rows replace the earlier try's."""
    con.execute(f"DELETE FROM {table} WHERE run_id = ? AND concurrency = ? "
                "AND rate IS NOT DISTINCT FROM ? AND repeat = ?", key)


class Store(ResultsFile):
    """The results database at `path`: runs, their requests and what was measured beside them."""

    # -- writes ------------------------------------------------------------------------------

    def create_run(self, row: RunRow) -> None:
        values = list(dataclasses.astuple(row))
        marks = ", ".join("?" for _ in values)
        with self._connect() as con:
            con.execute(f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES ({marks})", values)

    def update_run(self, run_id: str, **fields: object) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._connect() as con:
            con.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", [*fields.values(), run_id])

    def finish_run(self, run_id: str, status: str, error: str | None = None) -> None:
        assert status in RUN_STATUSES
        self.update_run(run_id, status=status, finished_at=_utc(time.time()), error=error)

    def write_requests(self, run_id: str, records: Sequence[RequestRecord],
                       token_times: bool = False) -> None:
        """Store rows (a row already stored is left as it is); with `token_times`, every
        chunk of each in `chunk_times` too."""
        for r in records:
            fill_token_timing(r)
        rows = [
            (run_id, r.concurrency, r.round, r.worker, r.request_id, _utc(r.sent_at), r.ttft_ms,
             r.latency_ms, r.output_tokens, r.output_tokens_estimated, r.input_tokens, r.chunks,
             r.max_gap_ms, r.finish_reason, r.ok, r.error_kind, r.error_message, r.http_status,
             r.retried, r.rate, None if r.scheduled_at is None else _utc(r.scheduled_at),
             r.repeat, r.turn, r.cached_tokens, r.think_ms, r.tokens_per_chunk,
             r.tokens_per_chunk_estimated, r.chunk_gap_mean_ms, r.chunk_gap_p50_ms,
             r.chunk_gap_p90_ms, r.chunk_gap_p99_ms, r.itl_mean_ms, r.itl_p50_ms, r.itl_p90_ms,
             r.itl_p99_ms, r.itl_bins, r.itl_counts, r.speedup, r.trace_line,
             r.trace_input_tokens, r.trace_output_tokens, r.input_tokens_requested,
             r.output_tokens_requested, r.trace_prefix_tokens, *row_values(r.figures))
            for r in records
        ]
        if not rows:
            return
        timed = [(run_id, r.request_id, r.chunk_offsets_ns, r.chunk_tokens)
                 for r in records if r.chunk_offsets_ns] if token_times else []
        with self._connect() as con:
            con.execute("BEGIN")
            _insert(con, "INSERT OR IGNORE INTO requests", _INSERT_COLUMNS, rows)
            if timed:
                self._write_chunk_times(con, timed)
            con.execute("COMMIT")

    @staticmethod
    def _write_chunk_times(con: duckdb.DuckDBPyConnection,
                           timed: list[tuple[str, str, list[int], list[int] | None]]) -> None:
        """`--token-times` rows: one list per request, unnested in SQL (a row per chunk from
        Python would cost the writer ~10x more); a batch sent again replaces its rows."""
        con.execute("CREATE TEMP TABLE IF NOT EXISTS chunk_lists "
                    "(run_id VARCHAR, request_id VARCHAR, t BIGINT[], k INTEGER[])")
        con.execute("DELETE FROM chunk_lists")
        con.executemany("INSERT INTO chunk_lists VALUES (?, ?, ?, ?)", timed)
        con.execute("DELETE FROM chunk_times USING chunk_lists c WHERE chunk_times.run_id = "
                    "c.run_id AND chunk_times.request_id = c.request_id")
        con.execute("INSERT INTO chunk_times SELECT run_id, request_id, i - 1, t[i], k[i] "
                    "FROM (SELECT *, unnest(range(1, len(t) + 1)) AS i FROM chunk_lists)")

    def write_server_stats(
        self, run_id: str, concurrency: int, before: dict | None, after: dict | None,
        rate: float | None = None, repeat: int = 0,
    ) -> None:
        """/stats around one pass of a level; a resumed pass adds a row beside the first."""
        with self._connect() as con:
            con.execute(
                "INSERT INTO server_stats (run_id, concurrency, before, after, recorded_at, rate, "
                "repeat) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [run_id, concurrency, json.dumps(before), json.dumps(after), _utc(time.time()),
                 rate, repeat],
            )

    def write_server_metrics(
        self, run_id: str, concurrency: int, rows: Sequence[tuple[str, str, str, str, float]],
        rate: float | None = None, repeat: int = 0,
    ) -> None:
        """One pass of a level: its rows (name, labels, kind, stat, value), replacing any an
        earlier try of the same pass stored (a resumed pass is measured again); each pass of
        `--repeat` keeps its own."""
        with self._connect() as con:
            con.execute("BEGIN")
            con.execute("DELETE FROM server_metrics WHERE run_id = ? AND concurrency = ? "
                        "AND rate IS NOT DISTINCT FROM ? AND coalesce(repeat, 0) = ?",
                        [run_id, concurrency, rate, repeat])
            if rows:
                con.executemany(
                    "INSERT INTO server_metrics (run_id, concurrency, name, labels, kind, stat, "
                    "value, rate, repeat) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(run_id, concurrency, *row, rate, repeat) for row in rows])
            con.execute("COMMIT")

    def write_client_check(self, run_id: str, concurrency: int, c: ClientCheck | None,
                           rate: float | None = None, repeat: int = 0) -> None:
        """The timing loop's self-check over one pass of a level (replacing an earlier try)."""
        if c is None:
            return
        with self._connect() as con:
            con.execute("BEGIN")
            _drop_pass(con, "client_checks", [run_id, concurrency, rate, repeat])
            con.execute("INSERT INTO client_checks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, concurrency, rate, repeat, c.loop_lag_p50_ms, c.loop_lag_p99_ms,
                         c.loop_lag_max_ms, c.cpu_share, c.unread_bytes_max, c.client_bound,
                         c.cpu_wait_share, c.read_lag_mean_ms])
            con.execute("COMMIT")

    def write_server_cpu(self, run_id: str, concurrency: int, c: ServerCpu,
                         rate: float | None = None, repeat: int = 0) -> None:
        """A started server's CPU and others' over one pass of a level (replacing an earlier
        try)."""
        with self._connect() as con:
            con.execute("BEGIN")
            _drop_pass(con, "server_cpu", [run_id, concurrency, rate, repeat])
            con.execute("INSERT INTO server_cpu VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, concurrency, rate, repeat, c.wall_s, c.cpus, c.server_cpu_s,
                         c.own_cpu_s, c.others_cpu_s, c.server_starved])
            con.execute("COMMIT")

    def write_host_levels(self, run_id: str, concurrency: int, hosts: Sequence[HostPass],
                          rate: float | None = None, repeat: int = 0) -> None:
        """Each serving host over one pass of a level, with its time slices (replacing an
        earlier try's)."""
        levels = [dataclasses.astuple(h) for h, _ in hosts]
        slices = [tuple(_utc(v) if name == "started_at" else v for name, v in
                        zip(_HOST_SLICE_FIELDS, dataclasses.astuple(s), strict=True))
                  for _, found in hosts for s in found]
        key = [run_id, concurrency, rate, repeat]
        with self._connect() as con:
            con.execute("BEGIN")
            for table in ("host_levels", "host_slices"):
                _drop_pass(con, table, key)
            for table, columns, rows in (("host_levels", _HOST_LEVEL_COLUMNS, levels),
                                         ("host_slices", _HOST_SLICE_COLUMNS, slices)):
                _insert(con, f"INSERT INTO {table}",
                        f"run_id, concurrency, rate, repeat, {columns}",
                        [(*key, *row) for row in rows])
            con.execute("COMMIT")

    def write_user_level(self, run_id: str, concurrency: int, repeat: int,
                         think_mean_s: float | None, think_dist: str, lead_in: LeadIn) -> None:
        """A users pass's mean think Z and lead-in (a resumed pass's replace the earlier
        try's)."""
        with self._connect() as con:
            con.execute("BEGIN")
            con.execute("DELETE FROM user_levels WHERE run_id = ? AND concurrency = ? "
                        "AND repeat = ?", [run_id, concurrency, repeat])
            con.execute("INSERT INTO user_levels VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, concurrency, repeat,
                         None if think_mean_s is None else think_mean_s * 1000, think_dist,
                         lead_in.requests, lead_in.settled, lead_in.paced_duty])
            con.execute("COMMIT")

    # -- reads -------------------------------------------------------------------------------

    def runs(self) -> list[RunRow]:
        return [RunRow(**r) for r in
                self._query(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at, run_id")]

    def run(self, run_id: str) -> RunRow:
        """One run by id, or the newest for 'latest'; StoreError when there is none."""
        if run_id == "latest":
            rows = self._query(f"SELECT {_RUN_COLUMNS} FROM runs "
                               "ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if not rows:
                raise StoreError(f"{self.path} holds no runs yet: start one with `make bench`")
        else:
            rows = self._query(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id])
            if not rows:
                raise StoreError(f"there is no run {run_id!r} in {self.path}")
        return RunRow(**rows[0])

    def requests(self, run_id: str) -> list[RequestRecord]:
        rows = self._query(
            f"SELECT {_INSERT_COLUMNS}, epoch_us(sent_at) AS sent_us, "
            "epoch_us(scheduled_at) AS scheduled_us FROM requests "
            "WHERE run_id = ? ORDER BY concurrency, rate, repeat, round, worker",
            [run_id],
        )
        records = []
        for row in rows:
            row.pop("run_id")
            row.pop("ok")
            row["repeat"] = row["repeat"] or 0
            row["turn"] = row["turn"] or 1
            row["sent_at"] = row.pop("sent_us") / 1e6
            scheduled = row.pop("scheduled_us")
            row["scheduled_at"] = None if scheduled is None else scheduled / 1e6
            # as the client sets them: only the figures a request has
            declared = {name: row.pop(name) for name in _DECLARED_COLUMNS}
            row["figures"] = {k: v for k, v in declared.items() if v is not None}
            records.append(RequestRecord(**row))
        return records

    def chunk_times(self, run_id: str) -> list[dict]:
        """`--token-times` rows of a run: request, chunk index, arrival (ns after the send)
        and tokens; empty for a run stored without them."""
        return self._query("SELECT request_id, idx, t_ns, tokens FROM chunk_times "
                           "WHERE run_id = ? ORDER BY request_id, idx", [run_id])

    def client_checks(self, run_id: str) -> dict[tuple[int, float | None], ClientCheck]:
        """Per level, the worst pass's self-check (highest loop lag p99)."""
        rows = self._query("SELECT * EXCLUDE (run_id, repeat, client_bound) FROM client_checks "
                           "WHERE run_id = ? ORDER BY loop_lag_p99_ms NULLS FIRST", [run_id])
        return {(r.pop("concurrency"), r.pop("rate")): ClientCheck(**r) for r in rows}

    def server_cpu(self, run_id: str) -> dict[tuple[int, float | None], ServerCpu]:
        """Per level of a run against a server it started, the pass whose server was most
        starved; empty for any other run."""
        rows = self._query("SELECT * EXCLUDE (run_id, repeat, server_starved) FROM server_cpu "
                           "WHERE run_id = ?", [run_id])
        passes: dict[tuple[int, float | None], list[ServerCpu]] = {}
        for r in rows:
            passes.setdefault((r.pop("concurrency"), r.pop("rate")), []).append(ServerCpu(**r))
        return {level: most_starved(found) for level, found in passes.items()}

    def host_levels(self, run_id: str) -> dict[tuple[int, float | None],
                                               list[tuple[int, HostLevel]]]:
        """Per level, each serving host's figures over each pass: (repeat, figures); empty
        for a run without host metrics."""
        rows = self._query(f"SELECT concurrency, rate, coalesce(repeat, 0) AS repeat, "
                           f"{_HOST_LEVEL_COLUMNS} FROM host_levels WHERE run_id = ? "
                           "ORDER BY concurrency, rate, repeat, node", [run_id])
        out: dict[tuple[int, float | None], list[tuple[int, HostLevel]]] = {}
        for r in rows:
            level = (r.pop("concurrency"), r.pop("rate"))
            out.setdefault(level, []).append((r.pop("repeat"), HostLevel(**r)))
        return out

    def lead_ins(self, run_id: str) -> dict[int, LeadIn]:
        """Users mode: per level, its passes' lead-ins (harness.results.users.worst_lead_in)."""
        rows = self._query("SELECT concurrency, lead_in_requests AS requests, lead_in_settled "
                           "AS settled, lead_in_duty AS paced_duty FROM user_levels WHERE "
                           "run_id = ? ORDER BY concurrency, repeat", [run_id])
        by_level: dict[int, list[LeadIn]] = {}
        for r in rows:
            by_level.setdefault(r.pop("concurrency"), []).append(LeadIn(**r))
        return {c: worst_lead_in(passes) for c, passes in by_level.items()}

    def user_levels(self, run_id: str) -> dict[int, float]:
        """Users mode: per level, the mean think Z in ms (over its passes)."""
        rows = self._query("SELECT concurrency, avg(think_mean_ms) AS z FROM user_levels "
                           "WHERE run_id = ? GROUP BY concurrency", [run_id])
        return {r["concurrency"]: r["z"] for r in rows if r["z"] is not None}

    def stored_count(self, run_id: str, concurrency: int, repeat: int) -> tuple[int, int | None]:
        """Requests stored for one pass of a level, and its highest round (None: none)."""
        rows = self._query("SELECT count(*) AS n, max(round) AS last FROM requests WHERE "
                           "run_id = ? AND concurrency = ? AND rate IS NULL AND "
                           "coalesce(repeat, 0) = ?", [run_id, concurrency, repeat])
        return (rows[0]["n"], rows[0]["last"]) if rows else (0, None)

    def done_rounds(self, run_id: str) -> set[tuple[int, int]]:
        """(concurrency, round) pairs already stored: a resume runs only the others."""
        rows = self._query(
            "SELECT DISTINCT concurrency, round FROM requests WHERE run_id = ? AND rate IS NULL",
            [run_id],
        )
        return {(r["concurrency"], r["round"]) for r in rows}

    def done_clusters(self, run_id: str) -> dict[tuple[int, int, int], int]:
        """(concurrency, repeat, round) already stored, with how many requests each holds: a
        resume of a `--repeat` run runs only the others, and a round stored in part (a worker
        process died) again (a run stored before repeats has repeat 0 throughout)."""
        rows = self._query(
            "SELECT concurrency, coalesce(repeat, 0) AS repeat, round, count(*) AS n FROM "
            "requests WHERE run_id = ? AND rate IS NULL GROUP BY ALL", [run_id],
        )
        return {(r["concurrency"], r["repeat"], r["round"]): r["n"] for r in rows}

    def done_rates(self, run_id: str) -> set[float]:
        """Rate levels already stored (each is written whole): a resume runs the others."""
        rows = self._query(
            "SELECT DISTINCT rate FROM requests WHERE run_id = ? AND rate IS NOT NULL", [run_id]
        )
        return {r["rate"] for r in rows}

    def levels(self, run_id: str) -> list[dict]:
        return self._query(
            "SELECT * FROM levels WHERE run_id = ? ORDER BY concurrency, rate", [run_id]
        )

    def turns(self, run_id: str) -> list[dict]:
        """Per level and turn of a multi-turn run: prompt and cached tokens, TTFT, TPS."""
        return self._query("SELECT * FROM turns WHERE run_id = ? ORDER BY concurrency, turn",
                           [run_id])

    def delete_rounds(self, run_id: str, concurrency: int, repeat: int,
                      rounds: Sequence[int]) -> None:
        """Forget stored rounds of a level (a resumed multi-turn run runs a conversation
        it had begun again from its first turn, since the replies it built on are gone)."""
        if not rounds:
            return
        marks = ", ".join("?" for _ in rounds)
        with self._connect() as con:
            con.execute(f"DELETE FROM requests WHERE run_id = ? AND concurrency = ? AND rate IS "
                        f"NULL AND coalesce(repeat, 0) = ? AND round IN ({marks})",
                        [run_id, concurrency, repeat, *rounds])

    def forget_level(self, run_id: str, concurrency: int) -> None:
        """Forget every stored request of a concurrency or users level (and their chunk
        times), to measure it again; the level's other tables are replaced as it stores."""
        with self._connect() as con:
            con.execute("BEGIN")
            con.execute("DELETE FROM chunk_times WHERE run_id = ? AND request_id IN (SELECT "
                        "request_id FROM requests WHERE run_id = ? AND concurrency = ? AND "
                        "rate IS NULL)", [run_id, run_id, concurrency])
            con.execute("DELETE FROM requests WHERE run_id = ? AND concurrency = ? AND rate IS "
                        "NULL", [run_id, concurrency])
            con.execute("COMMIT")

    def server_stats(self, run_id: str) -> list[dict]:
        rows = self._query(
            "SELECT concurrency, coalesce(repeat, 0) AS repeat, rate, before, after "
            "FROM server_stats WHERE run_id = ? ORDER BY concurrency, rate, repeat, recorded_at",
            [run_id],
        )
        return [_server_stats_row(r) for r in rows]

    def add_probe(self, run_id: str, concurrency: int) -> None:
        """Record a level the Max C search adds (before it runs, so a resume finds it)."""
        with self._connect() as con:
            if con.execute("SELECT 1 FROM probes WHERE run_id = ? AND concurrency = ?",
                           [run_id, concurrency]).fetchone() is None:
                con.execute("INSERT INTO probes SELECT ?, ?, count(*) FROM probes "
                            "WHERE run_id = ?", [run_id, concurrency, run_id])

    def write_load_host(self, run_id: str, host: LoadHost) -> None:
        """A `--ray` load worker's actor as it started: where, and its host's clock."""
        with self._connect() as con:
            con.execute("INSERT INTO load_hosts VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [run_id, host.worker, host.node_id, host.hostname, host.clock_offset_ms,
                         host.round_trip_ms, datetime.now(UTC).replace(tzinfo=None)])

    def load_hosts(self, run_id: str) -> list[LoadHost]:
        """The run's `--ray` load workers as they started, the latest per worker."""
        rows = self._query("SELECT * EXCLUDE (run_id, started_at) FROM load_hosts "
                           "WHERE run_id = ? QUALIFY row_number() OVER (PARTITION BY worker "
                           "ORDER BY started_at DESC) = 1 ORDER BY worker", [run_id])
        return [LoadHost(**r) for r in rows]

    def probes(self, run_id: str) -> list[int]:
        """The search's levels of a run, in the order they were probed."""
        rows = self._query("SELECT concurrency FROM probes WHERE run_id = ? ORDER BY ordinal",
                           [run_id])
        return [r["concurrency"] for r in rows]

    def server_metrics(self, run_id: str) -> list[dict]:
        """The target's own /metrics, per pass of a level: one row per (name, labels, stat)."""
        return self._query(
            "SELECT concurrency, coalesce(repeat, 0) AS repeat, rate, name, labels, kind, stat, "
            "value FROM server_metrics WHERE run_id = ? "
            "ORDER BY concurrency, rate, repeat, name, labels, stat", [run_id])

    # -- export ------------------------------------------------------------------------------

    def export(self, out_dir: Path, run_id: str | None, fmt: str) -> list[Path]:
        """Write per-level and per-request files (columns fit `capacity --csv`)."""
        if fmt not in ("csv", "parquet"):
            raise StoreError(f"export format must be csv or parquet, not {fmt!r}")
        if run_id is not None:
            run_id = self.run(run_id).run_id
        elif not self.runs():
            raise StoreError(f"{self.path} holds no runs yet: start one with `make bench`")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {out_dir}: {exc.strerror}") from None
        # a run id names the files: only its safe characters, so no id can leave out_dir
        prefix = f"{re.sub(r'[^A-Za-z0-9._-]', '_', run_id)}_" if run_id else ""
        where = "WHERE run_id = ?" if run_id else ""
        params = [run_id] if run_id else []
        queries = {
            "levels": (
                "SELECT l.run_id AS run, runs.device, runs.engine, runs.model, "
                "runs.table_placement, runs.label, l.* EXCLUDE (run_id) "
                f"FROM levels l JOIN runs USING (run_id) {where.replace('run_id', 'l.run_id')} "
                "ORDER BY run, concurrency, rate"
            ),
            "requests": (
                f"SELECT * FROM requests {where} "
                "ORDER BY run_id, concurrency, rate, round, worker"
            ),
        }
        written = []
        with self._connect(read_only=True) as con:
            for name, sql in queries.items():
                path = out_dir / f"{prefix}{name}.{fmt}"
                rel = con.sql(sql, params=params)
                if fmt == "csv":
                    rel.write_csv(str(path), header=True)
                else:
                    rel.write_parquet(str(path))
                written.append(path)
        return written
