"""DuckDB results file: schema, short write transactions, queries, CSV/Parquet export.

Each write opens the file, commits and closes it again, so a reader (the explorer, a
`summary` in another shell) can open it between writes; a locked file is retried.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import json
import os
import re
import time
import zlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from harness.records import RequestRecord
from harness.results.client_check import ClientCheck
from harness.results.token_timing import StreamTiming, stream_timing

DEFAULT_DB = Path("results/bench.duckdb")
RUN_STATUSES = ("running", "complete", "aborted", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    status VARCHAR,
    device VARCHAR,
    engine VARCHAR,
    model VARCHAR,
    table_placement VARCHAR,
    target_url VARCHAR,
    api VARCHAR,
    mode VARCHAR,
    levels INTEGER[],
    rounds INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    measured_input_tokens DOUBLE,  -- mean usage.prompt_tokens of the prompts sent
    label VARCHAR,
    config VARCHAR,
    host VARCHAR,
    version VARCHAR,
    error VARCHAR
);
CREATE TABLE IF NOT EXISTS requests (
    run_id VARCHAR,
    concurrency INTEGER,
    round INTEGER,
    worker INTEGER,
    request_id VARCHAR,
    sent_at TIMESTAMP,
    ttft_ms DOUBLE,
    latency_ms DOUBLE,
    output_tokens INTEGER,
    output_tokens_estimated BOOLEAN,
    input_tokens INTEGER,
    chunks INTEGER,
    max_gap_ms DOUBLE,
    finish_reason VARCHAR,
    ok BOOLEAN,
    error_kind VARCHAR,
    error_message VARCHAR,
    http_status INTEGER,
    retried VARCHAR,  -- error kind of a first try that was silently re-sent, else NULL
    rate DOUBLE,  -- mode rate: the level's requests/s (concurrency 0); NULL in other modes
    scheduled_at TIMESTAMP,  -- mode rate: when the open-loop schedule said to send
    repeat INTEGER,  -- `run --repeat N`: the pass over the sweep, 0-based; NULL (older runs) = 0
    turn INTEGER,  -- `--turns N`: turn of the user's conversation, 1-based; NULL (older) = 1
    cached_tokens INTEGER,  -- usage.prompt_tokens_details.cached_tokens; NULL: not reported
    think_ms DOUBLE,  -- `--mode users`: think time after this request; NULL: none followed
    -- inter-token figures (harness.results.token_timing): chunk gaps, one value per content
    -- chunk, apart from the token-weighted ITL (a chunk of k tokens g after the one before is
    -- k gaps of g / k); tokens per chunk from per-chunk usage unless flagged estimated
    tokens_per_chunk DOUBLE,
    tokens_per_chunk_estimated BOOLEAN,
    chunk_gap_mean_ms DOUBLE,
    chunk_gap_p50_ms DOUBLE,
    chunk_gap_p90_ms DOUBLE,
    chunk_gap_p99_ms DOUBLE,
    itl_mean_ms DOUBLE,
    itl_p50_ms DOUBLE,
    itl_p90_ms DOUBLE,
    itl_p99_ms DOUBLE,
    itl_bins SMALLINT[],  -- the token gaps' histogram: bin b holds gaps of ~1.01^b us
    itl_counts INTEGER[]  -- ... and how many token gaps each bin holds
);
-- one row per request: a batch the writer sends again after a crash adds nothing
CREATE UNIQUE INDEX IF NOT EXISTS requests_unique_id ON requests (run_id, request_id);
CREATE TABLE IF NOT EXISTS server_stats (
    run_id VARCHAR,
    concurrency INTEGER,
    before VARCHAR,
    after VARCHAR,
    recorded_at TIMESTAMP,
    rate DOUBLE,
    repeat INTEGER  -- `run --repeat N`: the pass over the level, 0-based; NULL (older runs) = 0
);
-- a target's Prometheus /metrics over each level (harness.results.server_metrics):
-- counters "delta";
-- gauges "mean", "max"; histograms "p50", "p90", "p99", "count", "mean" (seconds as exposed)
CREATE TABLE IF NOT EXISTS server_metrics (
    run_id VARCHAR,
    concurrency INTEGER,
    name VARCHAR,
    labels VARCHAR,  -- JSON object
    kind VARCHAR,
    stat VARCHAR,
    value DOUBLE,
    rate DOUBLE,
    repeat INTEGER  -- as in server_stats
);
-- `run --token-times`: every content chunk of a request, its arrival after the request was
-- sent and its tokens (NULL where the server streamed no per-chunk usage)
CREATE TABLE IF NOT EXISTS chunk_times (
    run_id VARCHAR,
    request_id VARCHAR,
    idx INTEGER,
    t_ns BIGINT,
    tokens INTEGER
);
-- each pass of a level: was the harness the limit? its timing loop's lag (how late a 20 ms
-- timer fired), its CPU seconds per second, and the received bytes left unread in its sockets
-- (harness.results.client_check)
CREATE TABLE IF NOT EXISTS client_checks (
    run_id VARCHAR,
    concurrency INTEGER,
    rate DOUBLE,
    repeat INTEGER,
    loop_lag_p50_ms DOUBLE,
    loop_lag_p99_ms DOUBLE,
    loop_lag_max_ms DOUBLE,
    cpu_share DOUBLE,
    unread_bytes_max BIGINT,
    client_bound BOOLEAN,
    cpu_wait_share DOUBLE  -- the loop's thread runnable without a CPU, per wall second
);
-- users mode, per pass of a level: the mean think Z its stored thinks were drawn around
-- (harness.run.think), how thinks spread around it, and the unstored requests before them
CREATE TABLE IF NOT EXISTS user_levels (
    run_id VARCHAR,
    concurrency INTEGER,
    repeat INTEGER,
    think_mean_ms DOUBLE,
    think_dist VARCHAR,
    lead_in_requests INTEGER
);
-- levels that `run --search` added after the sweep, in the order they were probed
CREATE TABLE IF NOT EXISTS probes (
    run_id VARCHAR,
    concurrency INTEGER,
    ordinal INTEGER
);
-- each request with what its row implies: TPS = output tokens / the whole request time, TTFT
-- included, and TPOT = the time per output token after the first (the SQL forms of
-- harness.records.RequestRecord.tps and .tpot_ms), and when it ended
CREATE OR REPLACE VIEW request_figures AS
SELECT r.*,
    CASE WHEN r.ok AND r.latency_ms > 0
         THEN r.output_tokens / (r.latency_ms / 1000.0) END AS tps,
    CASE WHEN r.ok AND r.output_tokens > 1 AND r.ttft_ms IS NOT NULL
         THEN (r.latency_ms - r.ttft_ms) / (r.output_tokens - 1) END AS tpot_ms,
    r.sent_at + to_microseconds(CAST(round(r.latency_ms * 1000) AS BIGINT)) AS ended_at
FROM requests r;
-- a level is (concurrency, rate): rate levels have concurrency 0, the others rate NULL
-- throughput divides by the level's busy time, the union of its requests' spans (an outage
-- between resumed rounds is not in it): each request adds what it reaches past every one that
-- started before it (harness.results.quantiles.busy_seconds)
CREATE OR REPLACE VIEW levels AS
WITH spans AS (
    SELECT *, epoch_us(sent_at) AS start_us, epoch_us(coalesce(ended_at, sent_at)) AS end_us
    FROM request_figures
), q AS (
    SELECT *, greatest(0, end_us - greatest(start_us, coalesce(max(end_us) OVER (
        PARTITION BY run_id, concurrency, rate ORDER BY start_us, request_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), start_us))) AS busy_us
    FROM spans
), itl_bins AS (  -- a level's token gaps, pooled from its requests' histograms
    SELECT run_id, concurrency, rate, unnest(itl_bins) AS bin, unnest(itl_counts) AS n
    FROM requests WHERE ok AND itl_mean_ms IS NOT NULL
), itl_hist AS (
    SELECT run_id, concurrency, rate, bin, sum(n) AS n FROM itl_bins
    GROUP BY run_id, concurrency, rate, bin
), itl_cum AS (
    SELECT *, sum(n) OVER (PARTITION BY run_id, concurrency, rate ORDER BY bin) AS cum,
        sum(n) OVER (PARTITION BY run_id, concurrency, rate) AS total
    FROM itl_hist
), itl AS (  -- nearest rank over the merged bins (harness.results.token_timing.pooled_itl)
    SELECT run_id, concurrency, rate,
        pow(1.01, min(bin) FILTER (WHERE cum >= 0.5 * total)) / 1000.0 AS p50_itl_ms,
        pow(1.01, min(bin) FILTER (WHERE cum >= 0.9 * total)) / 1000.0 AS p90_itl_ms,
        pow(1.01, min(bin) FILTER (WHERE cum >= 0.99 * total)) / 1000.0 AS p99_itl_ms
    FROM itl_cum GROUP BY run_id, concurrency, rate
), client AS (  -- the worst pass of each level
    SELECT run_id, concurrency, rate, max(loop_lag_p99_ms) AS loop_lag_p99_ms,
        max(cpu_share) AS client_cpu_share, bool_or(client_bound) AS client_bound
    FROM client_checks GROUP BY run_id, concurrency, rate
)
SELECT
    q.run_id,
    q.concurrency,
    q.rate,
    count(*) AS requests,
    count(*) FILTER (WHERE NOT q.ok) AS errors,
    count(*) FILTER (WHERE q.ok AND q.output_tokens < runs.output_tokens) AS short_outputs,
    avg(q.ttft_ms) FILTER (WHERE q.ok) AS mean_ttft_ms,
    quantile_cont(q.ttft_ms, 0.5) FILTER (WHERE q.ok) AS p50_ttft_ms,
    quantile_cont(q.ttft_ms, 0.9) FILTER (WHERE q.ok) AS p90_ttft_ms,
    quantile_cont(q.ttft_ms, 0.99) FILTER (WHERE q.ok) AS p99_ttft_ms,
    avg(q.tps) AS mean_tps,
    quantile_cont(q.tps, 0.5) AS p50_tps,
    quantile_cont(q.tps, 0.1) AS p10_tps,
    quantile_cont(q.tps, 0.01) AS p1_tps,
    avg(q.tpot_ms) AS mean_tpot_ms,
    quantile_cont(q.tpot_ms, 0.5) AS p50_tpot_ms,
    quantile_cont(q.tpot_ms, 0.9) AS p90_tpot_ms,
    quantile_cont(q.tpot_ms, 0.99) AS p99_tpot_ms,
    -- token-weighted: each request's mean ITL weighted by its token gaps
    sum(q.itl_mean_ms * list_sum(q.itl_counts)) FILTER (WHERE q.ok)
        / sum(list_sum(q.itl_counts)) FILTER (WHERE q.ok AND q.itl_mean_ms IS NOT NULL)
        AS mean_itl_ms,
    any_value(itl.p50_itl_ms) AS p50_itl_ms,
    any_value(itl.p90_itl_ms) AS p90_itl_ms,
    any_value(itl.p99_itl_ms) AS p99_itl_ms,
    avg(q.tokens_per_chunk) FILTER (WHERE q.ok) AS mean_tokens_per_chunk,
    bool_or(q.tokens_per_chunk_estimated) FILTER (WHERE q.ok) AS tokens_per_chunk_estimated,
    quantile_cont(q.latency_ms, 0.5) FILTER (WHERE q.ok) AS p50_e2e_ms,
    quantile_cont(q.latency_ms, 0.9) FILTER (WHERE q.ok) AS p90_e2e_ms,
    quantile_cont(q.latency_ms, 0.99) FILTER (WHERE q.ok) AS p99_e2e_ms,
    avg(q.output_tokens) FILTER (WHERE q.ok) AS mean_output_tokens,
    avg(q.input_tokens) FILTER (WHERE q.ok) AS mean_prompt_tokens,
    CASE WHEN count(*) FILTER (WHERE q.ok) > 0 AND sum(q.busy_us) > 0
         THEN sum(q.output_tokens) FILTER (WHERE q.ok) / sum(q.busy_us) * 1e6 END
        AS throughput_tps,
    sum(q.busy_us) / 1e6 AS busy_s,
    max(p.ordinal) IS NOT NULL AS probe,
    quantile_cont(epoch_us(q.sent_at) - epoch_us(q.scheduled_at), 0.5) / 1000.0
        AS p50_send_lag_ms,
    quantile_cont(epoch_us(q.sent_at) - epoch_us(q.scheduled_at), 0.99) / 1000.0
        AS p99_send_lag_ms,
    avg(q.cached_tokens) FILTER (WHERE q.ok) AS mean_cached_tokens,
    -- users mode: the share of each user's time with a request running (busy / busy + think)
    -- over the requests a think followed (harness.results.users.duty_cycle)
    CASE WHEN count(q.think_ms) FILTER (WHERE q.latency_ms IS NOT NULL) > 0
         THEN sum(q.latency_ms) FILTER (WHERE q.think_ms IS NOT NULL)
              / (sum(q.latency_ms) FILTER (WHERE q.think_ms IS NOT NULL)
                 + sum(q.think_ms) FILTER (WHERE q.latency_ms IS NOT NULL)) END
        AS duty_cycle,
    any_value(client.loop_lag_p99_ms) AS loop_lag_p99_ms,
    any_value(client.client_cpu_share) AS client_cpu_share,
    any_value(client.client_bound) AS client_bound
FROM q JOIN runs USING (run_id)
LEFT JOIN probes p ON p.run_id = q.run_id AND p.concurrency = q.concurrency AND q.rate IS NULL
LEFT JOIN itl ON itl.run_id = q.run_id AND itl.concurrency = q.concurrency
    AND itl.rate IS NOT DISTINCT FROM q.rate
LEFT JOIN client ON client.run_id = q.run_id AND client.concurrency = q.concurrency
    AND client.rate IS NOT DISTINCT FROM q.rate
GROUP BY q.run_id, q.concurrency, q.rate;
-- multi-turn runs: per level and turn, the context each turn sent and what the server reused
CREATE OR REPLACE VIEW turns AS
SELECT
    run_id,
    concurrency,
    coalesce(turn, 1) AS turn,
    count(*) AS requests,
    count(*) FILTER (WHERE NOT ok) AS errors,
    avg(input_tokens) FILTER (WHERE ok) AS mean_prompt_tokens,
    avg(cached_tokens) FILTER (WHERE ok) AS mean_cached_tokens,
    avg(ttft_ms) FILTER (WHERE ok) AS mean_ttft_ms,
    avg(tps) AS mean_tps
FROM request_figures
WHERE rate IS NULL
GROUP BY run_id, concurrency, coalesce(turn, 1);
"""

_REQUEST_COLUMNS = (
    "run_id, concurrency, round, worker, request_id, sent_at, ttft_ms, latency_ms, "
    "output_tokens, output_tokens_estimated, input_tokens, chunks, max_gap_ms, finish_reason, "
    "ok, error_kind, error_message, http_status, retried, rate, scheduled_at, repeat, turn, "
    "cached_tokens, think_ms, tokens_per_chunk, tokens_per_chunk_estimated, chunk_gap_mean_ms, "
    "chunk_gap_p50_ms, chunk_gap_p90_ms, chunk_gap_p99_ms, itl_mean_ms, itl_p50_ms, itl_p90_ms, "
    "itl_p99_ms, itl_bins, itl_counts"
)
_ROWS_PER_INSERT = 256  # rows per INSERT statement: a whole round, or a rate level in steps

# Databases written by older versions: brought up to the schema above when first opened.
# _CURRENT: (table, column, type) that only today's schema has.
_CURRENT = {("runs", "measured_input_tokens", "DOUBLE"), ("requests", "retried", "VARCHAR"),
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
            ("user_levels", "lead_in_requests", "INTEGER")}
_MIGRATIONS = """
ALTER TABLE runs ALTER COLUMN measured_input_tokens SET DATA TYPE DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS retried VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS rate DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS scheduled_at TIMESTAMP;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS repeat INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS turn INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS cached_tokens INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS think_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS tokens_per_chunk DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS tokens_per_chunk_estimated BOOLEAN;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_mean_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_p50_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_p90_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_p99_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_mean_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_p50_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_p90_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_p99_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_bins SMALLINT[];
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_counts INTEGER[];
ALTER TABLE IF EXISTS client_checks ADD COLUMN IF NOT EXISTS cpu_wait_share DOUBLE;
ALTER TABLE IF EXISTS server_stats ADD COLUMN IF NOT EXISTS rate DOUBLE;
ALTER TABLE IF EXISTS server_metrics ADD COLUMN IF NOT EXISTS rate DOUBLE;
ALTER TABLE IF EXISTS server_stats ADD COLUMN IF NOT EXISTS repeat INTEGER;
ALTER TABLE IF EXISTS server_metrics ADD COLUMN IF NOT EXISTS repeat INTEGER;
-- two writers of one run could store a request twice before runs were locked: keep the first
DELETE FROM requests WHERE rowid NOT IN
    (SELECT min(rowid) FROM requests GROUP BY run_id, request_id);
"""


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


class StoreError(RuntimeError):
    """The results file cannot be used; the message is one sentence for the user."""


def _outdated(con: duckdb.DuckDBPyConnection) -> bool:
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
    return not have >= _CURRENT or not (indexed and indexed[0])


def _has_schema(con: duckdb.DuckDBPyConnection) -> bool:
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'runs' "
                        "AND database_name = current_database()").fetchone()
    return bool(found and found[0])


def _server_stats_row(row: dict) -> dict:
    """/stats before and after one level, parsed; `rate` only on a rate level's row."""
    rate = row.pop("rate")
    parsed = {**row, "before": json.loads(row["before"]), "after": json.loads(row["after"])}
    return parsed if rate is None else {**parsed, "rate": rate}


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


class Store:
    """The results database at `path` (created with its schema on first use)."""

    def __init__(self, path: str | os.PathLike = DEFAULT_DB, lock_timeout_s: float = 60.0):
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self._upgraded = False

    def initialise(self) -> None:
        """Create the folder and schema; refuse an unwritable path with one sentence."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for {self.path}: {exc.strerror}") from None
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise StoreError(f"the results file {self.path} is not writable")
        if not os.access(self.path.parent, os.W_OK):
            raise StoreError(f"the folder {self.path.parent} is not writable")
        with self._connect() as con:
            con.execute(_SCHEMA)

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.02
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    reason = str(exc).splitlines()[0]
                    raise StoreError(f"cannot open {self.path}: {reason}") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            except duckdb.Error as exc:
                raise StoreError(f"cannot open {self.path}: {str(exc).splitlines()[0]}") from None
            else:
                # DuckDB draws a progress bar on stdout for any query past 2 s, which would
                # corrupt `--json` output and CSV written to stdout.
                con.execute("SET enable_progress_bar = false")
                return con

    @contextlib.contextmanager
    def _connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short connection; the first one of this Store upgrades a file an older version
        wrote (briefly opening it for writing when a reader found it outdated)."""
        try:
            with self._connection(read_only) as con:
                yield con
        except RuntimeError as exc:  # DuckDB turns a signal handler's exception into this
            if str(exc) == "Query interrupted":
                raise KeyboardInterrupt from None
            raise

    @contextlib.contextmanager
    def _connection(self, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self._open(read_only)
        try:
            if not self._upgraded:
                if _outdated(con):
                    if read_only:
                        con.close()
                        writer = self._open(read_only=False)
                        try:
                            self._upgrade(writer)
                        finally:
                            writer.close()
                        con = self._open(read_only=True)
                    else:
                        self._upgrade(con)
                self._upgraded = True
            try:
                yield con
            except (duckdb.IOException, duckdb.FatalException,
                    duckdb.TransactionException) as exc:  # a full disk, say (at commit)
                verb = "read" if read_only else "written"
                raise StoreError(f"{self.path} could not be {verb}: "
                                 f"{str(exc).splitlines()[0]}") from None
        finally:
            con.close()

    def _upgrade(self, con: duckdb.DuckDBPyConnection) -> None:
        try:
            con.execute("BEGIN")
            con.execute(_MIGRATIONS)
            con.execute("COMMIT")  # a unique index sees the duplicates' deletion only after it
            con.execute("BEGIN")
            con.execute(_SCHEMA)  # the views again, with today's columns, and the index
            con.execute("COMMIT")
        except duckdb.Error as exc:
            raise StoreError(f"cannot upgrade {self.path}, written by an older engram-bench: "
                             f"{str(exc).splitlines()[0]}") from None

    @contextlib.contextmanager
    def run_lock(self, run_id: str) -> Iterator[None]:
        """Held while a run is measured, so one run has one writer: a second process that
        resumes it meanwhile is refused. A byte-range lock beside the file, one byte per run
        id; the kernel drops a dead process's locks, so a resume after a crash takes over."""
        path = self.path.with_name(self.path.name + ".runs.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc.strerror}") from None
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, zlib.crc32(run_id.encode()))
            except OSError:
                raise StoreError(f"run {run_id} is being measured by another engram-bench "
                                 "process: let it finish, or stop it, before resuming") from None
            yield
        finally:
            os.close(fd)

    def read_only(self) -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A short read-only connection (retried while a writer holds the file)."""
        return self._connect(read_only=True)

    # -- writes ------------------------------------------------------------------------------

    def create_run(self, run_id: str, fields: dict) -> None:
        row = {"run_id": run_id, "status": "running", "started_at": _utc(time.time()), **fields}
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._connect() as con:
            con.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", list(row.values()))

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
             r.itl_p99_ms, r.itl_bins, r.itl_counts)
            for r in records
        ]
        if not rows:
            return
        timed = [(run_id, r.request_id, r.chunk_offsets_ns, r.chunk_tokens)
                 for r in records if r.chunk_offsets_ns] if token_times else []
        row_marks = "(" + ", ".join("?" for _ in rows[0]) + ")"
        with self._connect() as con:
            con.execute("BEGIN")
            # one statement per batch of rows: executemany runs one per row, ~6 ms each, which
            # left the writer behind a C=32 run of short requests (and a stop waiting for it)
            for i in range(0, len(rows), _ROWS_PER_INSERT):
                batch = rows[i:i + _ROWS_PER_INSERT]
                con.execute(f"INSERT OR IGNORE INTO requests ({_REQUEST_COLUMNS}) VALUES "
                            + ", ".join(row_marks for _ in batch),
                            [value for row in batch for value in row])
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
            con.execute("DELETE FROM client_checks WHERE run_id = ? AND concurrency = ? "
                        "AND rate IS NOT DISTINCT FROM ? AND repeat = ?",
                        [run_id, concurrency, rate, repeat])
            con.execute("INSERT INTO client_checks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, concurrency, rate, repeat, c.loop_lag_p50_ms, c.loop_lag_p99_ms,
                         c.loop_lag_max_ms, c.cpu_share, c.unread_bytes_max, c.client_bound,
                         c.cpu_wait_share])
            con.execute("COMMIT")

    def write_user_level(self, run_id: str, concurrency: int, repeat: int,
                         think_mean_s: float | None, think_dist: str, lead_in: int) -> None:
        """A users pass's mean think Z (a resumed pass's replaces the earlier try's)."""
        with self._connect() as con:
            con.execute("BEGIN")
            con.execute("DELETE FROM user_levels WHERE run_id = ? AND concurrency = ? "
                        "AND repeat = ?", [run_id, concurrency, repeat])
            con.execute("INSERT INTO user_levels VALUES (?, ?, ?, ?, ?, ?)",
                        [run_id, concurrency, repeat,
                         None if think_mean_s is None else think_mean_s * 1000, think_dist,
                         lead_in])
            con.execute("COMMIT")

    # -- reads -------------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[dict]:
        if not self.path.exists():
            return []
        with self._connect(read_only=True) as con:
            try:
                cur = con.execute(sql, list(params))
            except duckdb.CatalogException:
                if _has_schema(con):
                    raise
                return []  # a file a stopped run created before its schema: holds nothing
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def runs(self) -> list[dict]:
        return self._query("SELECT * FROM runs ORDER BY started_at, run_id")

    def run(self, run_id: str) -> dict:
        """One run by id, or the newest for 'latest'; StoreError when there is none."""
        if run_id == "latest":
            rows = self._query("SELECT * FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if not rows:
                raise StoreError(f"{self.path} holds no runs yet: start one with `make bench`")
        else:
            rows = self._query("SELECT * FROM runs WHERE run_id = ?", [run_id])
            if not rows:
                raise StoreError(f"there is no run {run_id!r} in {self.path}")
        return rows[0]

    def requests(self, run_id: str) -> list[RequestRecord]:
        rows = self._query(
            f"SELECT {_REQUEST_COLUMNS}, epoch_us(sent_at) AS sent_us, "
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

    def done_clusters(self, run_id: str) -> set[tuple[int, int, int]]:
        """(concurrency, repeat, round) already stored: a resume of a `--repeat` run runs only
        the others (a run stored before repeats has repeat 0 throughout)."""
        rows = self._query(
            "SELECT DISTINCT concurrency, coalesce(repeat, 0) AS repeat, round FROM requests "
            "WHERE run_id = ? AND rate IS NULL", [run_id],
        )
        return {(r["concurrency"], r["repeat"], r["round"]) for r in rows}

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
            run_id = self.run(run_id)["run_id"]
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
