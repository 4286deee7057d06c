import csv
import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace

import duckdb
import pytest

from harness.results.metrics import figure_names, level_stats, stats_by_level
from harness.results.quantiles import busy_seconds
from harness.results.run_row import RunRow
from harness.results.store import Store, StoreError
from harness.results.users import duty_cycle
from tests.harness.fixtures import make_records


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "bench.duckdb")
    s.initialise()
    s.create_run(RunRow(run_id="run-a", model="m", device="cpu", levels=[1, 2, 4], rounds=3,
                        output_tokens=128, config=json.dumps({"prompt_words": 90})))
    return s


def test_requests_round_trip(store):
    records = make_records()
    store.write_requests("run-a", records)
    back = store.requests("run-a")
    assert len(back) == len(records)
    first = back[0]
    assert first == records[0]  # every field, sent_at to the microsecond
    assert store.done_rounds("run-a") == {(c, r) for c in (1, 2, 4) for r in range(3)}


def test_levels_view_matches_metrics(store):
    records = make_records()
    for i, r in enumerate(records):
        r.input_tokens = 110 + i % 37  # prompt means that differ per level
        # a trace's figures, some requests without them
        r.input_tokens_requested, r.trace_prefix_tokens = 100 + i % 5, 16 * (i % 3)
        r.cached_tokens = None if i % 4 == 0 else 32 + i
    store.write_requests("run-a", records)
    view = store.levels("run-a")
    expected = stats_by_level(records, 128)
    assert [v["concurrency"] for v in view] == [s.concurrency for s in expected]
    for row, stats in zip(view, expected, strict=True):
        # every figure the view holds
        for name in (*figure_names("level", "sql"), *figure_names("trace", "sql")):
            value = stats.value(name)
            assert row[name] == (value if value is None or isinstance(value, bool)
                                 else pytest.approx(value, rel=1e-6)), name


def test_request_figures_view_is_the_python_tps_of_every_request(store):
    records = make_records()
    records[0].error_kind, records[1].latency_ms = "http_error", 0.0  # neither has a TPS
    store.write_requests("run-a", records)
    with store.read_only() as con:
        rows = con.execute("SELECT request_id, tps, tpot_ms FROM request_figures").fetchall()
    sql = {rid: (tps, tpot) for rid, tps, tpot in rows}
    assert sql.keys() == {r.request_id for r in records}
    for r in records:
        for got, want in zip(sql[r.request_id], (r.tps, r.tpot_ms), strict=True):
            assert (got is None) == (want is None), r.request_id
            if want is not None:
                assert got == pytest.approx(want, rel=1e-12)


def test_levels_view_duty_cycle_and_turns_match_python(store):
    records = make_records()
    for i, r in enumerate(records):
        r.think_ms = None if r.round == 2 else 40.0 + 7 * i  # the last round: no think
        r.turn = r.round + 1
        r.cached_tokens = 16 * r.round
    failed = next(r for r in records if r.concurrency == 4 and r.round == 0)
    failed.latency_ms = None  # a connect failure: a think followed, no request ran
    store.write_requests("run-a", records)
    by_level = {row["concurrency"]: row for row in store.levels("run-a")}
    for c in (1, 2, 4):
        mine = [r for r in records if r.concurrency == c]
        assert by_level[c]["duty_cycle"] == pytest.approx(duty_cycle(mine), rel=1e-9)
    rows = store.turns("run-a")
    assert {(t["concurrency"], t["turn"]) for t in rows} == {(c, t) for c in (1, 2, 4)
                                                             for t in (1, 2, 3)}
    ok = [r for r in records if r.ok and r.concurrency == 4 and r.turn == 3]
    row = next(t for t in rows if (t["concurrency"], t["turn"]) == (4, 3))
    assert row["mean_cached_tokens"] == pytest.approx(
        sum(r.cached_tokens for r in ok) / len(ok))
    back = {r.request_id: r for r in store.requests("run-a")}
    assert all(back[r.request_id].think_ms == r.think_ms for r in records)


def test_run_lifecycle_and_latest(store):
    store.finish_run("run-a", "complete")
    run = store.run("latest")
    assert run.run_id == "run-a" and run.status == "complete" and run.finished_at
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.run("nope")


def test_server_stats_round_trip(store):
    store.write_server_stats("run-a", 2, {"tokens": 1}, {"tokens": 9})
    assert store.server_stats("run-a") == [{"concurrency": 2, "repeat": 0,
                                            "before": {"tokens": 1}, "after": {"tokens": 9}}]


def test_each_pass_of_a_level_keeps_its_server_figures(store):
    """Under --repeat a level runs several passes: each keeps its /stats and /metrics rows,
    and measuring a pass again (a resume) replaces only that pass's metrics."""
    row = ("vllm:num_requests_running", "{}", "gauge", "mean")
    store.write_server_metrics("run-a", 2, [(*row, 1.0)], repeat=0)
    store.write_server_metrics("run-a", 2, [(*row, 2.0)], repeat=1)
    store.write_server_metrics("run-a", 2, [(*row, 3.0)], repeat=1)
    assert [(r["repeat"], r["value"]) for r in store.server_metrics("run-a")] == [(0, 1.0),
                                                                                 (1, 3.0)]
    store.write_server_stats("run-a", 2, {"tokens": 0}, {"tokens": 5}, repeat=0)
    store.write_server_stats("run-a", 2, {"tokens": 5}, {"tokens": 9}, repeat=1)
    assert [(r["repeat"], r["after"]["tokens"]) for r in store.server_stats("run-a")] == [
        (0, 5), (1, 9)]


def test_export_csv_and_parquet(store, tmp_path):
    store.write_requests("run-a", make_records())
    paths = store.export(tmp_path / "out", "run-a", "csv")
    assert [p.name for p in paths] == ["run-a_levels.csv", "run-a_requests.csv"]
    with open(paths[0]) as f:
        levels = list(csv.DictReader(f))
    assert [int(r["concurrency"]) for r in levels] == [1, 2, 4]
    assert {"run", "mean_ttft_ms", "mean_tps", "errors"} <= set(levels[0])
    with open(paths[1]) as f:
        assert sum(1 for _ in csv.DictReader(f)) == 1 * 3 + 2 * 3 + 4 * 3
    parquet = store.export(tmp_path / "pq", None, "parquet")
    count = duckdb.execute(f"SELECT count(*) FROM '{parquet[1]}'").fetchall()[0][0]
    assert count == 21


def test_a_crafted_run_id_cannot_write_outside_the_export_folder(store, tmp_path):
    crafted = "../../../../x"
    store.create_run(RunRow(run_id=crafted, model="m", levels=[1], rounds=1, output_tokens=128,
                            config="{}"))
    out = tmp_path / "deep" / "er" / "out"
    paths = store.export(out, crafted, "csv")
    assert [p.parent for p in paths] == [out, out]
    assert all(p.exists() for p in paths)
    assert not list(tmp_path.glob("x_*")) and not list((tmp_path / "deep").glob("x_*"))


def test_unwritable_path_is_one_sentence(tmp_path, monkeypatch):
    locked = tmp_path / "ro"
    locked.mkdir()
    os.chmod(locked, 0o500)
    access = os.access

    def by_the_mode_bits(path, mode, **kwargs):
        """As the kernel answers the folder's owner; root (as CI runs) passes every check."""
        if mode & os.W_OK and not os.stat(path).st_mode & stat.S_IWUSR:
            return False
        return access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", by_the_mode_bits)
    try:
        with pytest.raises(StoreError, match="not writable"):
            Store(locked / "x.duckdb").initialise()
    finally:
        os.chmod(locked, 0o700)


def test_path_under_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create the folder"):
        Store(blocker / "sub" / "x.duckdb").initialise()


def test_write_waits_for_a_lock_held_by_another_process(store):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True);"
         " time.sleep(1.0); c.close()", str(store.path)],
        stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    start = time.monotonic()
    store.write_requests("run-a", make_records(levels=(1,)))
    assert time.monotonic() - start > 0.3  # it waited for the other writer, then wrote
    holder.wait(5)
    assert len(store.requests("run-a")) == 3


# The schema as engram-bench wrote it before measured_input_tokens became a mean (DOUBLE) and
# requests gained `retried`.
OLD_SCHEMA = """
CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, started_at TIMESTAMP, finished_at TIMESTAMP,
    status VARCHAR, device VARCHAR, engine VARCHAR, model VARCHAR, table_placement VARCHAR,
    target_url VARCHAR, api VARCHAR, mode VARCHAR, levels INTEGER[], rounds INTEGER,
    input_tokens INTEGER, output_tokens INTEGER, measured_input_tokens INTEGER, label VARCHAR,
    config VARCHAR, host VARCHAR, version VARCHAR, error VARCHAR);
CREATE TABLE requests (run_id VARCHAR, concurrency INTEGER, round INTEGER, worker INTEGER,
    request_id VARCHAR, sent_at TIMESTAMP, ttft_ms DOUBLE, latency_ms DOUBLE,
    output_tokens INTEGER, output_tokens_estimated BOOLEAN, input_tokens INTEGER,
    chunks INTEGER, max_gap_ms DOUBLE, finish_reason VARCHAR, ok BOOLEAN, error_kind VARCHAR,
    error_message VARCHAR, http_status INTEGER);
CREATE TABLE server_stats (run_id VARCHAR, concurrency INTEGER, before VARCHAR, after VARCHAR,
    recorded_at TIMESTAMP);
CREATE VIEW levels AS SELECT run_id, concurrency, count(*) AS requests FROM requests GROUP BY ALL;
INSERT INTO runs (run_id, status, levels, rounds, output_tokens, measured_input_tokens, config)
    VALUES ('old', 'complete', [1], 1, 128, 127, '{}');
INSERT INTO requests VALUES ('old', 1, 0, 0, 'old-c1-r0-w0', TIMESTAMP '2026-01-01 00:00:00',
    50.0, 900.0, 128, false, 141, 128, 9.0, 'length', true, NULL, NULL, 200);
-- a second writer (no run lock yet) stored the same request again
INSERT INTO requests SELECT * FROM requests;
"""


@pytest.mark.parametrize("first_use", ["read", "write"])
def test_a_database_of_the_old_schema_is_upgraded_when_opened(tmp_path, first_use):
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(OLD_SCHEMA)
    store = Store(path)
    if first_use == "read":  # `summary`, `export` and the explorer only read
        assert store.run("old").measured_input_tokens == 127
    else:  # `run` initialises the file first
        store.initialise()
    [old] = store.requests("old")  # the duplicate is gone, and the index forbids another
    assert old.input_tokens == 141 and old.ok and old.retried is None
    assert store.levels("old")[0]["mean_prompt_tokens"] == 141
    store.update_run("old", measured_input_tokens=140.25)  # a mean keeps its fraction
    assert store.run("old").measured_input_tokens == 140.25
    store.write_requests("old", [replace(old, request_id="old-c1-r1-w0", round=1), old])
    assert len(Store(path).requests("old")) == 2


def test_a_request_id_is_stored_once_however_often_it_is_written(store):
    """A writer restarted after a crash sends its unacknowledged rounds again."""
    records = make_records(levels=(2,))
    store.write_requests("run-a", records[:4])
    store.write_requests("run-a", records)
    assert sorted(r.request_id for r in store.requests("run-a")) == sorted(
        r.request_id for r in records)
    with store.read_only() as con, pytest.raises(duckdb.Error):
        con.execute("INSERT INTO requests (run_id, request_id) VALUES ('run-a', ?)",
                    [records[0].request_id])


def test_a_silent_resend_is_stored_and_exported(store, tmp_path):
    records = make_records(levels=(1,))
    records[1].retried = "dropped"
    store.write_requests("run-a", records)
    assert [r.retried for r in store.requests("run-a")] == [None, "dropped", None]
    [_, path] = store.export(tmp_path / "out", "run-a", "csv")
    with open(path) as f:
        assert [row["retried"] for row in csv.DictReader(f)] == ["", "dropped", ""]


def test_connections_never_draw_duckdbs_progress_bar(store):
    """DuckDB draws a bar on stdout for queries past 2 s; under a loaded CI it landed in a
    `run --json` summary. Checked in a fresh process: inside pytest DuckDB starts with the bar
    off, and lowering the bar's delay to provoke it turns it back on."""
    script = ("import sys; from harness.results.store import Store\n"
              "with Store(sys.argv[1]).read_only() as con:\n"
              "    query = \"SELECT current_setting('enable_progress_bar')\"\n"
              "    print(con.execute(query).fetchone())")
    proc = subprocess.run([sys.executable, "-c", script, str(store.path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "(False,)", proc.stderr


def test_throughput_leaves_out_the_time_a_level_was_down(store):
    """kill -9 after round 0, `--resume` an hour later: the level's tokens over the time its
    requests were in flight, not over the outage (175 tok/s read as 49 before)."""
    records = [r for r in make_records() if r.concurrency == 2 and r.ok]
    first = {r.round for r in records}
    resumed = [replace(r, sent_at=r.sent_at + 3600) for r in records if r.round != min(first)]
    kept = [r for r in records if r.round == min(first)] + resumed
    store.write_requests("run-a", kept)
    together = level_stats(2, records, 128).throughput_tps
    apart = level_stats(2, kept, 128).throughput_tps
    assert apart == pytest.approx(together, rel=1e-9)  # the same requests, an hour apart
    assert store.levels("run-a")[0]["throughput_tps"] == pytest.approx(apart, rel=1e-6)
    spans = [(r.sent_at, r.sent_at + r.latency_ms / 1000) for r in kept]
    assert store.levels("run-a")[0]["busy_s"] == pytest.approx(busy_seconds(spans), rel=1e-6)


def test_busy_time_is_the_union_of_the_spans():
    assert busy_seconds([(0, 2), (1, 3), (10, 11), (10.5, 10.7)]) == pytest.approx(4.0)
    assert busy_seconds([(5, 5)]) == 0.0 and busy_seconds([]) == 0.0


def test_a_file_created_before_its_schema_reads_as_holding_no_runs(tmp_path):
    """A run stopped while it created its results file leaves an empty DuckDB file."""
    path = tmp_path / "empty.duckdb"
    duckdb.connect(str(path)).close()
    assert Store(path).runs() == []
    with pytest.raises(StoreError, match="holds no runs yet"):
        Store(path).run("latest")
