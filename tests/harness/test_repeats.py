"""`run --repeat N`: one run, repeats interleaved per level, intervals and Max C agreement."""

import json

import duckdb
import pytest

from harness.config import ConfigError, RunConfig
from harness.records import RequestRecord
from harness.results.metrics import Targets
from harness.results.report import level_intervals, repeat_agreement
from harness.results.run_row import RunRow
from harness.results.store import Store
from harness.run import modes
from tests.helpers import run_cli

RUN_ID = "20261129-000000-4e9e"


def _run(sweep, mock=None, store: Store | None = None, resume: bool = False,
         server_metrics: bool = False):
    return sweep(mock, levels=(1, 2), rounds=2, mode="closed", output_tokens=4,
                 server_metrics=server_metrics, repeat=3, db="r.duckdb", store=store,
                 run_id=RUN_ID, resume=resume)


def _rows(store: Store) -> list[tuple]:
    with store.read_only() as con:
        return con.execute(
            "SELECT concurrency, repeat, round, worker, request_id, epoch_us(sent_at) "
            "FROM requests WHERE run_id = ? ORDER BY sent_at", [RUN_ID]).fetchall()


def test_repeats_are_stored_interleaved_per_level(sweep):
    store = _run(sweep).store
    rows = _rows(store)
    assert len(rows) == (1 + 2) * 2 * 3
    assert len({r[4] for r in rows}) == len(rows)  # request ids stay unique
    assert any("-c2-p1-r0-w1" in r[4] for r in rows)
    # level 1 (all its repeats) before level 2; inside a level, repeat 0, then 1, then 2
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    for c in (1, 2):
        assert [r[1] for r in rows if r[0] == c] == sorted(r[1] for r in rows if r[0] == c)
        assert {r[1] for r in rows if r[0] == c} == {0, 1, 2}
    assert store.done_clusters(RUN_ID) == {(c, p, r): c for c in (1, 2) for p in range(3)
                                          for r in range(2)}  # each round's C requests


def test_every_pass_of_a_level_keeps_the_servers_figures(sweep):
    """The target's /metrics and /stats are stored per pass, not overwritten by the last."""
    store = _run(sweep, {"metrics": True}, server_metrics=True).store
    passes = {(r["concurrency"], r["repeat"]) for r in store.server_metrics(RUN_ID)}
    assert passes == {(c, p) for c in (1, 2) for p in range(3)}
    requests = {(r["concurrency"], r["repeat"]): r["value"] for r in store.server_metrics(RUN_ID)
                if r["name"] == "vllm:request_success_total" and r["stat"] == "delta"}
    assert requests == {(c, p): 2 * c for c in (1, 2) for p in range(3)}  # rounds x C each


def test_resume_runs_only_the_missing_level_repeat_rounds(sweep):
    first = _run(sweep)
    store = first.store
    before = {r[4]: r[5] for r in _rows(store)}
    missing = {(2, 1, 0), (2, 2, 1), (1, 0, 1)}
    with duckdb.connect(str(store.path)) as con:
        for c, p, r in missing:
            con.execute("DELETE FROM requests WHERE run_id = ? AND concurrency = ? AND "
                        "repeat = ? AND round = ?", [RUN_ID, c, p, r])
    store.finish_run(RUN_ID, "aborted", "test")
    _run(sweep, first.server, store, resume=True)
    after = _rows(store)
    assert len(after) == len(before)  # nothing twice
    rerun = {(c, p, r) for c, p, r, _, rid, sent in after if before[rid] != sent}
    assert rerun == missing  # only those were sent again; the rest kept their send times
    assert store.run(RUN_ID).status == "complete"


def test_json_has_intervals_per_level_and_text_says_how_many_repeats_agree(mock_server,
                                                                           tmp_path):
    db = tmp_path / "cli.duckdb"
    base = ("--url", mock_server.url, "--levels", "1,2", "--rounds", "2", "--output-tokens",
            "4", "--no-server-metrics", "--no-progress", "--db", str(db), "--repeat", "3")
    proc = run_cli("run", *base, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["repeats"] == 3
    for level in out["levels"]:
        for key in ("ttft_ci", "tps_ci"):
            ci = level[key]
            assert ci["method"] == "range"  # 6 clusters < 20: the range over repeats
            assert ci["low"] <= ci["mean"] <= ci["high"]
            assert "range over 3 repeat(s), not an interval" in ci["note"]
    agree = out["max_c_agreement"]
    assert agree == {"max_c": 2, "agree": 3, "repeats": 3, "text": "3 of 3"}
    text = run_cli("summary", out["run_id"], "--db", str(db))
    assert text.returncode == 0, text.stderr
    assert "Max C 2 (3 of 3 repeats agree)" in text.stdout
    assert "C=1: TTFT" in text.stdout and "range" in text.stdout


def _records(repeats: int, rounds: int, ttft) -> list[RequestRecord]:
    return [RequestRecord(f"x-{p}-{r}-{w}", 1, r, w, 0.0, ttft_ms=ttft(p, r, w),
                          latency_ms=1000.0, output_tokens=100, repeat=p)
            for p in range(repeats) for r in range(rounds) for w in range(2)]


def test_twenty_clusters_or_more_give_a_bootstrap_interval():
    ttft, tps = level_intervals(_records(2, 10, lambda p, r, w: 100.0 + r + 3 * w))
    assert ttft[1].method == "bootstrap" and ttft[1].clusters == 20
    assert ttft[1].low < ttft[1].mean < ttft[1].high
    assert tps[1].mean == pytest.approx(100.0)


def test_agreement_counts_repeats_with_the_same_max_c():
    # C=1 passes in repeats 0 and 1, fails on TTFT in repeat 2
    records = _records(3, 2, lambda p, r, w: 2000.0 if p == 2 else 100.0)
    agree = repeat_agreement(records, 100, Targets())
    assert (agree.max_c, agree.agree, agree.repeats) == (1, 2, 3)
    assert repeat_agreement(_records(1, 2, lambda p, r, w: 1.0), 100, Targets()) is None


def test_repeat_below_one_is_refused_and_nothing_is_stored(tmp_path):
    db = tmp_path / "none.duckdb"
    proc = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--repeat", "0", "--db", str(db))
    assert proc.returncode == 2
    assert "--repeat must be from 1 to " in proc.stderr and "not 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not db.exists() or not Store(db).runs()


def test_repeat_with_rate_mode_is_refused():
    with pytest.raises(ConfigError, match="--repeat does not apply to --mode rate"):
        modes.check(RunConfig(url="http://127.0.0.1:1/v1", model="m", levels=(), mode="rate",
                              rates=(1.0,), repeat=2))


@pytest.mark.parametrize(("flags", "says"), [
    (("--tps-min", "0"), "--search needs a TPS target above 0"),
    (("--statistic", "p99"), "--search judges --statistic p99, which needs at least 100"),
    (("--ttft-max-ms", "0"), "the TTFT target a number > 0"),
])
def test_search_that_no_level_can_be_judged_on_is_refused(tmp_path, flags, says):
    db = tmp_path / "none.duckdb"
    proc = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--levels", "1,2", "--rounds", "2",
                   "--search", *flags, "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not db.exists() or not Store(db).runs()


def test_a_database_from_before_repeats_is_migrated_as_one_repeat(tmp_path):
    db = tmp_path / "old.duckdb"
    store = Store(db)
    store.initialise()
    store.create_run(RunRow(run_id="old", model="m", mode="closed", levels=[1], rounds=2,
                            output_tokens=4))
    store.write_requests("old", [RequestRecord(f"old-c1-r{r}-w0", 1, r, 0, 1.0e9 + r,
                                               ttft_ms=5.0, latency_ms=50.0, output_tokens=4)
                                 for r in range(2)])
    with duckdb.connect(str(db)) as con:  # as an older version wrote it: no index either
        con.execute("DROP INDEX requests_unique_id")
        con.execute("ALTER TABLE requests DROP COLUMN repeat")
    fresh = Store(db)
    assert fresh.done_clusters("old") == {(1, 0, 0): 1, (1, 0, 1): 1}
    assert {r.repeat for r in fresh.requests("old")} == {0}
    with fresh.read_only() as con:
        assert con.execute("SELECT count(*) FROM requests WHERE repeat IS NULL").fetchone() == (2,)
