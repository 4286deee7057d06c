"""Every page under AppTest, on an empty database and on the deterministic fixture."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from explorer import data
from harness.results.metrics import Targets
from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.explorer import fixtures
from tests.explorer.apptest import (
    APP,
    app,
    assert_human,
    assert_runs_table,
    config,
    downloads,
    metrics,
)

PAGES = ["views/runs.py", "views/run.py", "views/compare.py", "views/capacity.py",
         "views/sizing.py", "views/reference.py"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_works_on_an_empty_or_missing_database(monkeypatch, tmp_path, page):
    at = app(monkeypatch, tmp_path / "missing.duckdb", page)
    if page in ("views/runs.py",):
        assert "make bench" in at.info[0].value


def test_runs_page_lists_runs_with_max_c_first_and_a_verdict(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db)
    assert metrics(at)["runs shown"] == "2"
    assert_runs_table(at.dataframe[0])
    frame = at.dataframe[0].value.set_index("run")
    assert frame.loc["fixture-mem", "Max C"] == 4 and frame.loc["fixture-nvme", "Max C"] == 2
    assert frame.loc["fixture-mem", "chat users"] == 16
    assert frame.loc["fixture-nvme", "verdict"] == (
        "Max C 2 (exact, found by --search): 8 chat / 3 agentic users")
    assert frame.loc["fixture-mem", "verdict"] == (
        "Max C 4 (lower bound: C=5-7 not tested): 16 chat / 6 agentic users")
    assert frame.loc["fixture-mem", "TPS at C=1 (tok/s)"] == pytest.approx(36, abs=1)
    shown = config(at.dataframe[0])
    assert shown["TTFT at C=1 (ms)"]["type_config"]["format"] == "%.1f"
    assert shown["started (UTC)"]["type_config"]["type"] == "datetime"
    assert downloads(at) == ["Levels CSV (9 rows)", "Requests CSV (330 rows)"]
    at.multiselect(key="runs_engine").set_value(["engram-bench"]).run()
    assert metrics(at)["runs shown"] == "2"


def test_run_page_shows_capacity_levels_and_counters(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-nvme").run()
    shown = metrics(at)
    assert (shown["Max C"], shown["chat users"], shown["agentic users"], shown["levels"]) == (
        "2", "8", "3", "5")
    assert at.subheader[0].value == "Max C 2 (exact, found by --search): 8 chat / 3 agentic users"
    per_level = at.dataframe[0].value
    assert list(per_level["C"]) == [1, 2, 3, 4, 8]
    assert list(per_level["passes"]) == [True, True, False, False, False]
    assert list(per_level["probe"]) == [False, False, True, False, False]
    assert per_level["fails because"][2] == "TPS 19.1 < 20"
    counters = at.dataframe[1].value.set_index("C")
    assert list(counters["requested B/token"]) == [2560.0] * 4
    assert counters.loc[1, "disk B/token"] == 4096 * fixtures.MISSED_PAGES[1] / 1000
    assert counters.loc[1, "page hit rate"] == 0.5 and counters.loc[8, "page hit rate"] == 0.8125
    assert counters["disk read IOPS"].isna().tolist() == [False, False, False, True]
    assert {"resident / budget", "major faults/token", "Engram stall (of step time)",
            "mean read queue depth", "gather CPU ms/token"} <= set(counters.columns)
    assert "Levels CSV (5 rows)" in downloads(at) and "Requests CSV (180 rows)" in downloads(at)
    # TTFT, TPS, TPOT/ITL, E2E, distribution, first round, step time
    charts = at.get("plotly_chart")
    assert len(charts) == 7 and '"barmode":"relative"' in charts[6].proto.spec
    for chart in charts[:2]:  # the probe C=3 (failing) is a hollow diamond, with a legend key
        traces = json.loads(chart.proto.spec)["data"]
        assert traces[0]["marker"]["symbol"] == ["circle", "circle", "diamond-open",
                                                 "circle-open", "circle-open"]
        assert traces[-1]["name"] == "probe level (run --search)"


def test_run_page_per_level_table_reads_at_a_glance(monkeypatch, fixture_db):
    """Human names with units, 1 decimal for ms and tok/s, integers for counts, C pinned."""
    at = app(monkeypatch, fixture_db, "views/run.py")
    table = at.dataframe[0]
    assert_human(table)
    assert list(table.value.columns[:8]) == [
        "C", "passes", "probe", "mean TTFT (ms)", "p99 TTFT (ms)", "mean TPS (tok/s)",
        "TPS p10 (tok/s)", "fails because"]
    shown = config(table)
    assert shown["C"]["pinned"] and not shown["mean TTFT (ms)"]["pinned"]
    formats = {name: c["type_config"].get("format") for name, c in shown.items()}
    assert formats["mean TTFT (ms)"] == formats["mean TPS (tok/s)"] == "%.1f"
    assert formats["requests"] == formats["errors"] == "%d"
    assert shown["probe"]["type_config"]["type"] == "checkbox"


def test_run_page_shows_what_an_older_server_counted(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-mem").run()
    counters = at.dataframe[1].value
    assert list(counters["requested B/token"]) == [2560.0] * 4
    assert list(counters["Engram stall (of step time)"]) == [0.01, 0.02, 0.04, 0.08]
    assert "disk B/token" not in counters and "page hit rate" not in counters


def test_run_page_shows_a_published_run(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/run.py")
    at.selectbox(key="run_id").set_value("qwen3.8-flash-next_1x-rtx-pro-6000_host").run()
    assert metrics(at)["Max C"] == "16" and metrics(at)["chat users"] == "64"
    assert at.subheader[0].value == (
        "Max C 16 (lower bound: C=17-31 not tested): 64 chat / 24 agentic users")
    assert "published run" in at.info[0].value
    # only the published means are shown: no empty percentile or probe columns
    assert list(at.dataframe[0].value.columns) == [
        "C", "passes", "mean TTFT (ms)", "mean TPS (tok/s)", "fails because", "errors"]


def test_compare_page_percent_difference(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(["fixture-mem", "fixture-nvme"]).run()
    assert_human(at.dataframe[0])
    diff = at.dataframe[0].value
    assert list(diff["C"]) == [1, 2, 4, 8]  # the probe C=3 has no baseline level to meet
    assert (diff["TPS vs baseline (%)"] < 0).all()  # NVMe slower than memory at every level
    assert config(at.dataframe[0])["TTFT vs baseline (%)"]["type_config"]["format"] == (
        "%+.1f%%")
    assert_runs_table(at.dataframe[1])
    caps = at.dataframe[1].value.set_index("run")
    assert caps.loc["fixture-mem", "Max C"] == 4 and caps.loc["fixture-nvme", "Max C"] == 2


def test_capacity_page_recomputes_with_the_controls(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/capacity.py")
    assert_runs_table(at.dataframe[0])
    table = at.dataframe[0].value.set_index("run")
    assert table.loc["fixture-mem", "Max C"] == 4
    assert table.loc["qwen3.8-flash-next_1x-spark_nvme", "source"] == "published"
    assert table.loc["qwen3.8-flash-next_1x-spark_nvme", "published Max C"] == 2
    at.number_input[0].set_value(15.0).run()  # TPS target 15: more levels pass
    table = at.dataframe[0].value.set_index("run")
    assert table.loc["fixture-mem", "Max C"] == 4 and table.loc["fixture-nvme", "Max C"] == 4
    assert table.loc["fixture-nvme", "chat users"] == 16
    assert table.loc["fixture-nvme", "verdict"] == (
        "Max C 4 (lower bound: C=5-7 not tested, found by --search): 16 chat / 6 agentic users")
    assert "Capacity CSV (7 rows)" in downloads(at)


def test_sizing_page_verdicts(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/sizing.py")
    assert "Verdict: **fits with offload** (table on nvme)" in at.warning[0].value  # Qwen, 1 Spark
    assert metrics(at)["required per node (GB)"] == "114.1"
    at.selectbox(key="sizing_placement").set_value("device").run()
    assert "Verdict: **does not fit**" in at.error[0].value


def test_reference_page_published_max_c(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/reference.py")
    assert_runs_table(at.dataframe[0])
    table = at.dataframe[0].value.set_index("run")
    full = ["deepseek-v4.1-flash_4x-spark_nvme", "qwen3.8-flash-next_1x-spark_nvme",
            "qwen3.8-flash-next_1x-rtx-pro-6000_host"]
    assert list(table.loc[full, "Max C"]) == [2, 2, 16]
    assert list(table.loc[full, "chat users"]) == [8, 8, 64]
    assert list(table.loc[full, "agentic users"]) == [3, 3, 24]
    assert (table.loc[full, "published Max C"] == table.loc[full, "Max C"]).all()
    assert table.loc[full[0], "verdict"] == (
        "Max C 2 (lower bound: C=3 not tested): 8 chat / 3 agentic users")


def test_downloads_carry_the_rows_they_announce(fixture_db):
    levels = data.levels(fixture_db, ["fixture-mem", "fixture-nvme"])
    assert len(levels) == 9
    assert list(levels.loc[levels["probe"], "concurrency"]) == [3]
    csv = data.to_csv(data.requests_frame(fixture_db, ["fixture-nvme"])).decode()
    assert len(csv.strip().splitlines()) == 1 + 180
    caps = data.capacity_table(levels, Targets())
    assert dict(zip(caps["run_id"], caps["max_c"], strict=True)) == {
        "fixture-mem": 4, "fixture-nvme": 2}


@pytest.mark.parametrize("page", ["views/run.py", "views/compare.py"])
def test_a_run_with_no_finished_round_renders_a_note(monkeypatch, tmp_path, page):
    """A bench has created its run but stored no round yet: the explorer says so."""
    db = tmp_path / "fresh.duckdb"
    store = Store(db)
    store.initialise()
    for run_id in ("20261129-000000-aaaa", "20261129-000001-bbbb"):
        store.create_run(RunRow(run_id=run_id, model="m", levels=[1, 2], rounds=3))
    at = app(monkeypatch, db, page)
    if page == "views/compare.py":
        at.multiselect(key="compare_runs").set_value(
            ["20261129-000000-aaaa", "20261129-000001-bbbb"]).run()
    assert not at.exception
    assert any("no finished round" in info.value for info in at.info)


@pytest.mark.parametrize("kind", ["garbage", "truncated", "folder"])
def test_a_file_that_is_no_results_database_gets_one_sentence(monkeypatch, tmp_path, kind):
    db = tmp_path / "bench.duckdb"
    if kind == "folder":
        db.mkdir()
    elif kind == "garbage":
        db.write_bytes(b"not a database\n" * 100)
    else:
        fixtures.build(db)
        db.write_bytes(db.read_bytes()[:5000])
    monkeypatch.setenv("ENGRAM_BENCH_DB", str(db))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert len(at.error) == 1 and "make explore DB=path" in at.error[0].value
    assert "Traceback" not in at.error[0].value
