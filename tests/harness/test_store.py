import csv
import json
import os
import subprocess
import sys
import time

import duckdb
import pytest

from harness.metrics import stats_by_level
from harness.store import Store, StoreError
from tests.harness.fixtures import make_records


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "bench.duckdb")
    s.initialise()
    s.create_run("run-a", {"model": "m", "device": "cpu", "levels": [1, 2, 4], "rounds": 3,
                           "output_tokens": 128, "config": json.dumps({"prompt_words": 90})})
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
    store.write_requests("run-a", records)
    view = store.levels("run-a")
    expected = stats_by_level(records, 128)
    assert [v["concurrency"] for v in view] == [s.concurrency for s in expected]
    for row, stats in zip(view, expected, strict=True):
        for name in ("requests", "errors", "short_outputs"):
            assert row[name] == getattr(stats, name), name
        for name in ("mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tps",
                     "p50_tps", "p10_tps", "p1_tps", "mean_output_tokens", "throughput_tps"):
            assert row[name] == pytest.approx(getattr(stats, name), rel=1e-6), name


def test_run_lifecycle_and_latest(store):
    store.finish_run("run-a", "complete")
    run = store.run("latest")
    assert run["run_id"] == "run-a" and run["status"] == "complete" and run["finished_at"]
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.run("nope")


def test_server_stats_round_trip(store):
    store.write_server_stats("run-a", 2, {"tokens": 1}, {"tokens": 9})
    assert store.server_stats("run-a") == [{"concurrency": 2, "before": {"tokens": 1},
                                            "after": {"tokens": 9}}]


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


def test_unwritable_path_is_one_sentence(tmp_path):
    locked = tmp_path / "ro"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if os.access(locked, os.W_OK):  # root ignores permissions
            pytest.skip("running as a user who can write anywhere")
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
