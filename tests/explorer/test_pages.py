"""Every page under AppTest, on an empty database and on the deterministic fixture."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from explorer import data
from harness.metrics import Targets
from harness.store import Store
from tests.explorer import fixtures

APP = str(Path(__file__).resolve().parents[2] / "explorer" / "app.py")


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("explorer") / "bench.duckdb"
    fixtures.build(path)
    return path


def app(monkeypatch, db: Path, page: str | None = None) -> AppTest:
    monkeypatch.setenv("ENGRAM_BENCH_DB", str(db))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def downloads(at: AppTest) -> list[str]:
    return [b.label for b in at.download_button]


PAGES = ["views/runs.py", "views/run.py", "views/compare.py", "views/capacity.py",
         "views/sizing.py", "views/reference.py"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_works_on_an_empty_or_missing_database(monkeypatch, tmp_path, page):
    at = app(monkeypatch, tmp_path / "missing.duckdb", page)
    if page in ("views/runs.py",):
        assert "make bench" in at.info[0].value


def test_runs_page_lists_runs_with_max_c(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db)
    assert metrics(at)["runs shown"] == "2"
    frame = at.dataframe[0].value.set_index("run_id")
    assert frame.loc["fixture-mem", "max_c"] == 4 and frame.loc["fixture-nvme", "max_c"] == 2
    assert frame.loc["fixture-mem", "chat_users"] == 16
    assert downloads(at) == ["Levels CSV (8 rows)", "Requests CSV (300 rows)"]
    at.multiselect(key="runs_engine").set_value(["engram-bench"]).run()
    assert metrics(at)["runs shown"] == "2"


def test_run_page_shows_capacity_levels_and_counters(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-nvme").run()
    shown = metrics(at)
    assert (shown["Max C"], shown["chat users"], shown["agentic users"], shown["levels"]) == (
        "2", "8", "3", "4")
    per_level = at.dataframe[0].value
    assert list(per_level["concurrency"]) == [1, 2, 4, 8]
    assert list(per_level["passes"]) == [True, True, False, False]
    counters = at.dataframe[1].value.set_index("C")
    assert list(counters["requested B/token"]) == [2560.0] * 4
    assert counters.loc[1, "disk B/token"] == 4096 * fixtures.MISSED_PAGES[1] / 1000
    assert counters.loc[1, "page hit rate"] == 0.5 and counters.loc[8, "page hit rate"] == 0.8125
    assert counters["disk read IOPS"].isna().tolist() == [False, False, False, True]
    assert {"resident / budget", "major faults/token", "Engram stall (of step time)",
            "mean read queue depth", "gather CPU ms/token"} <= set(counters.columns)
    assert "Levels CSV (4 rows)" in downloads(at) and "Requests CSV (150 rows)" in downloads(at)
    charts = at.get("plotly_chart")  # TTFT, TPS, distribution, first round, step time
    assert len(charts) == 5 and '"barmode":"relative"' in charts[4].proto.spec


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
    assert "published run" in at.info[0].value


def test_compare_page_percent_difference(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(["fixture-mem", "fixture-nvme"]).run()
    diff = at.dataframe[0].value
    assert list(diff["concurrency"]) == [1, 2, 4, 8]
    assert (diff["tps_diff_pct"] < 0).all()  # NVMe slower than memory at every level
    caps = at.dataframe[1].value.set_index("run_id")
    assert caps.loc["fixture-mem", "max_c"] == 4 and caps.loc["fixture-nvme", "max_c"] == 2


def test_capacity_page_recomputes_with_the_controls(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/capacity.py")
    table = at.dataframe[0].value.set_index("run_id")
    assert table.loc["fixture-mem", "max_c"] == 4
    assert table.loc["qwen3.8-flash-next_1x-spark_nvme", "source"] == "published"
    at.number_input[0].set_value(15.0).run()  # TPS target 15: more levels pass
    table = at.dataframe[0].value.set_index("run_id")
    assert table.loc["fixture-mem", "max_c"] == 4 and table.loc["fixture-nvme", "max_c"] == 4
    assert table.loc["fixture-nvme", "chat_users"] == 16
    assert "Capacity CSV (7 rows)" in downloads(at)


def test_sizing_page_verdicts(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/sizing.py")
    assert "Verdict: **fits with offload** (table on nvme)" in at.warning[0].value  # Qwen, 1 Spark
    assert metrics(at)["required per node (GB)"] == "114.1"
    at.selectbox(key="sizing_placement").set_value("device").run()
    assert "Verdict: **does not fit**" in at.error[0].value


def test_reference_page_published_max_c(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/reference.py")
    table = at.dataframe[0].value.set_index("run_id")
    full = ["deepseek-v4.1-flash_4x-spark_nvme", "qwen3.8-flash-next_1x-spark_nvme",
            "qwen3.8-flash-next_1x-rtx-pro-6000_host"]
    assert list(table.loc[full, "max_c"]) == [2, 2, 16]
    assert list(table.loc[full, "chat_users"]) == [8, 8, 64]
    assert list(table.loc[full, "agentic_users"]) == [3, 3, 24]
    assert (table.loc[full, "published_max_c"] == table.loc[full, "max_c"]).all()


def test_downloads_carry_the_rows_they_announce(fixture_db):
    levels = data.levels(fixture_db, ["fixture-mem", "fixture-nvme"])
    assert len(levels) == 8
    csv = data.to_csv(data.requests_frame(fixture_db, ["fixture-nvme"])).decode()
    assert len(csv.strip().splitlines()) == 1 + 150
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
        store.create_run(run_id, {"model": "m", "levels": [1, 2], "rounds": 3})
    at = app(monkeypatch, db, page)
    if page == "views/compare.py":
        at.multiselect(key="compare_runs").set_value(
            ["20261129-000000-aaaa", "20261129-000001-bbbb"]).run()
    assert not at.exception
    assert any("no finished round" in info.value for info in at.info)
