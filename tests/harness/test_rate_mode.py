"""`run --mode rate`: open-loop levels at a request rate, their send lag and sustainable rate."""

import itertools
import json
from collections import Counter

import duckdb
import pytest

from harness.config import ConfigError, RunConfig
from harness.mock_server import MockConfig
from harness.records import RequestRecord
from harness.results.metrics import Targets, rate_capacity, stats_by_level
from harness.results.store import Store
from harness.run import modes
from harness.run.arrivals import schedule
from tests.helpers import run_cli

DEAD_URL = "http://127.0.0.1:9/v1"  # never reached: these runs stop before the target


def _gaps(times):
    return [b - a for a, b in itertools.pairwise(times)]


def _rate_run(sweep, mock, rates, arrival="constant", seed=0, name="r.duckdb",
              run_id="20261129-000000-4a7e"):
    swept = sweep(mock, levels=(), mode="rate", rates=rates, arrival=arrival, duration_s=1.0,
                  seed=seed, output_tokens=8, server_metrics=False, db=name, run_id=run_id)
    return swept.store, swept.run_id


def test_a_rate_run_sends_open_loop_and_stores_both_send_times(sweep):
    # each request outlives the 50 ms gap at 20 req/s
    store, run_id = _rate_run(sweep, {"ttft_ms": 200}, (5.0, 20.0))
    records = store.requests(run_id)
    by_rate = {rate: [r for r in records if r.rate == rate] for rate in (5.0, 20.0)}
    assert {rate: len(rs) for rate, rs in by_rate.items()} == {5.0: 5, 20.0: 20}
    assert all(r.ok and r.concurrency == 0 and r.scheduled_at is not None for r in records)
    sends = sorted(r.sent_at for r in by_rate[20.0])
    assert max(_gaps(sends)) < 0.1  # sent on schedule, never waiting for the 200 ms answers
    stats = {s.rate: s for s in stats_by_level(records, 8)}
    # late by well under a millisecond as a rule (a shared 2-core test box has rare spikes)
    assert all(0 <= s.p50_send_lag_ms < 5 for s in stats.values())
    view = {row["rate"]: row for row in store.levels(run_id)}
    assert view[20.0]["requests"] == 20 and view[20.0]["concurrency"] == 0
    assert view[20.0]["p99_send_lag_ms"] == pytest.approx(stats[20.0].p99_send_lag_ms, abs=0.01)


def test_poisson_arrivals_with_a_seed_repeat_the_same_schedule(sweep, mock_server):
    def gaps(seed, name):
        store, run_id = _rate_run(sweep, mock_server, (10.0,), "poisson", seed, name)
        scheduled = sorted(r.scheduled_at for r in store.requests(run_id))
        return _gaps(scheduled)

    first, again, other = gaps(7, "a.duckdb"), gaps(7, "b.duckdb"), gaps(8, "c.duckdb")
    planned = _gaps(schedule(10.0, 1.0, "poisson", 7))
    assert first == pytest.approx(planned, abs=2e-6)
    assert again == pytest.approx(planned, abs=2e-6)
    assert len(other) != len(first) or other != pytest.approx(first, abs=2e-6)


def test_capacity_is_the_highest_rate_that_meets_the_targets(tmp_path, start_mock):
    db = tmp_path / "cap.duckdb"
    # 20 ms between tokens x requests in flight: 2 req/s keeps ~1 in flight (~50 tok/s),
    # 20 req/s piles them up until each crawls below the 20 tok/s target
    server = start_mock(MockConfig(ttft_ms=2, itl_ms=20, shared_decode=True))
    proc = run_cli("run", "--url", server.url, "--mode", "rate", "--rates", "2,20",
                   "--arrival", "constant", "--duration", "1", "--output-tokens", "8",
                   "--no-server-metrics", "--no-progress", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["max_rate"] == 2 and out["max_c"] is None and out["chat_users"] is None
    assert "users are counted from Max C" in out["users_note"]
    assert [(lv["rate"], lv["passes"]) for lv in out["levels"]] == [(2, True), (20, False)]
    assert all(lv["p99_send_lag_ms"] is not None for lv in out["levels"])
    text = run_cli("summary", out["run_id"], "--db", str(db))
    assert "Sustainable rate = 2 requests/s" in text.stdout


def test_a_level_whose_sender_fell_behind_is_flagged():
    late = [RequestRecord(f"q-{k}", 0, 0, k, sent_at=100.03 + k, rate=1.0,  # 30 ms late
                          scheduled_at=100.0 + k, ttft_ms=5.0, latency_ms=50.0, output_tokens=8)
            for k in range(10)]
    [stats] = stats_by_level(late, 8)
    assert stats.p99_send_lag_ms == pytest.approx(30.0, abs=0.01)
    assert "the load generator, not the server, was the limit" in stats.lag_warning
    assert any("R=1 req/s" in w for w in rate_capacity([stats], Targets()).warnings)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mode", "rate", "--rates", "0"], "--rates must be numbers of requests/s above 0"),
        (["--mode", "rate", "--rates", "1,-2"], "--rates must be numbers of requests/s above 0"),
        (["--mode", "rate", "--rates", "fast"], "--rates must be numbers of requests/s above 0"),
        (["--mode", "rate", "--rates", "1", "--duration", "0"], "must be a positive number"),
        (["--mode", "rate", "--rates", "1", "--duration", "-5"], "must be a positive number"),
        (["--rates", "1,2"], "--rates needs --mode rate"),
        (["--mode", "rate"], "--mode rate needs --rates"),
        (["--mode", "rate", "--rates", "1", "--levels", "1,2"], "--mode rate takes --rates"),
        (["--mode", "rate", "--rates", "1", "--search"], "does not apply to --mode rate"),
    ],
)
def test_bad_rate_input_is_refused_and_nothing_is_stored(tmp_path, flags, message):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", DEAD_URL, "--db", str(db), *flags)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not db.exists()


def test_a_rate_config_round_trips_through_storage():
    config = RunConfig(url=DEAD_URL, model="m", levels=(), mode="rate", rates=(0.5, 2.0),
                       arrival="constant", duration_s=30.0)
    assert RunConfig.from_json_dict(json.loads(json.dumps(config.to_json_dict()))) == config
    with pytest.raises(ConfigError, match="--arrival must be one of poisson, constant"):
        modes.check(RunConfig(url=DEAD_URL, model="m", levels=(), mode="rate", rates=(1.0,),
                              arrival="x"))


# The schema as engram-bench wrote it before rate mode: no rate or scheduled_at anywhere.
BEFORE_RATES = """
CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, started_at TIMESTAMP, finished_at TIMESTAMP,
    status VARCHAR, device VARCHAR, engine VARCHAR, model VARCHAR, table_placement VARCHAR,
    target_url VARCHAR, api VARCHAR, mode VARCHAR, levels INTEGER[], rounds INTEGER,
    input_tokens INTEGER, output_tokens INTEGER, measured_input_tokens DOUBLE, label VARCHAR,
    config VARCHAR, host VARCHAR, version VARCHAR, error VARCHAR);
CREATE TABLE requests (run_id VARCHAR, concurrency INTEGER, round INTEGER, worker INTEGER,
    request_id VARCHAR, sent_at TIMESTAMP, ttft_ms DOUBLE, latency_ms DOUBLE,
    output_tokens INTEGER, output_tokens_estimated BOOLEAN, input_tokens INTEGER,
    chunks INTEGER, max_gap_ms DOUBLE, finish_reason VARCHAR, ok BOOLEAN, error_kind VARCHAR,
    error_message VARCHAR, http_status INTEGER, retried VARCHAR);
CREATE TABLE server_stats (run_id VARCHAR, concurrency INTEGER, before VARCHAR, after VARCHAR,
    recorded_at TIMESTAMP);
CREATE TABLE server_metrics (run_id VARCHAR, concurrency INTEGER, name VARCHAR,
    labels VARCHAR, kind VARCHAR, stat VARCHAR, value DOUBLE);
CREATE TABLE probes (run_id VARCHAR, concurrency INTEGER, ordinal INTEGER);
CREATE VIEW levels AS SELECT run_id, concurrency, count(*) AS requests FROM requests GROUP BY ALL;
INSERT INTO runs (run_id, status, mode, levels, rounds, output_tokens, config)
    VALUES ('old', 'complete', 'closed', [1], 1, 128, '{}');
INSERT INTO requests VALUES ('old', 1, 0, 0, 'old-c1-r0-w0', TIMESTAMP '2026-01-01 00:00:00',
    50.0, 900.0, 128, false, 141, 128, 9.0, 'length', true, NULL, NULL, 200, NULL);
INSERT INTO server_metrics VALUES ('old', 1, 'm', '{}', 'gauge', 'mean', 1.0);
"""


def test_a_database_from_before_rate_mode_is_migrated_when_opened(tmp_path):
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(BEFORE_RATES)
    store = Store(path)
    [old] = store.requests("old")
    assert (old.rate, old.scheduled_at, old.concurrency) == (None, None, 1)
    [level] = store.levels("old")
    assert (level["concurrency"], level["rate"], level["p99_send_lag_ms"]) == (1, None, None)
    assert store.server_metrics("old")[0]["rate"] is None
    store.write_server_stats("old", 0, {}, {}, rate=2.0)
    store.write_server_metrics("old", 0, [("m", "{}", "gauge", "mean", 2.0)], rate=2.0)
    assert store.server_stats("old")[0]["rate"] == 2.0
    assert [(r["concurrency"], r["rate"]) for r in store.server_metrics("old")] == [
        (0, 2.0), (1, None)]


def test_a_resume_runs_only_the_rates_not_yet_stored(sweep, mock_server):
    store, run_id = _rate_run(sweep, mock_server, (5.0, 20.0))
    with duckdb.connect(str(store.path)) as con:  # as if killed during the 20 req/s level
        con.execute("DELETE FROM requests WHERE rate = 20")
    store.update_run(run_id, status="aborted")
    config = RunConfig.from_json_dict(json.loads(store.run(run_id).config))
    sweep(mock_server, config=config, store=store, run_id=run_id, resume=True)
    records = store.requests(run_id)
    assert Counter(r.rate for r in records) == {5.0: 5, 20.0: 20}
    assert len({r.request_id for r in records}) == 25
