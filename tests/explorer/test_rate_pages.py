"""Open-loop rate runs (`run --mode rate`) in the explorer: the Run page judges them by the
sustainable request rate and plots against the rate; the Runs table lists that rate."""

import json
from pathlib import Path

import pandas as pd
import pytest

from explorer import charts, rate
from harness.results.metrics import Targets
from harness.results.verdicts import USERS_NEED_C, rate_verdict
from tests.explorer import fixtures
from tests.explorer.apptest import app, assert_human, assert_runs_table, config, metrics


@pytest.fixture(scope="module")
def rate_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("explorer_rate") / "bench.duckdb"
    fixtures.build_with_rate(path)
    return path


def test_run_page_shows_the_sustainable_rate_against_rate(monkeypatch, rate_db):
    at = app(monkeypatch, rate_db, "views/run.py")
    at.selectbox(key="run_id").set_value(fixtures.RATE_RUN).run()
    assert not at.exception, at.exception
    shown = metrics(at)
    assert shown["sustainable rate (req/s)"] == "2"
    assert shown["rate levels"] == "4"
    assert shown["worst p99 send lag (ms)"] == "15.00"
    assert "Max C" not in shown and "chat users" not in shown
    assert at.subheader[0].value == "sustainable 2 req/s (4 req/s fails)"
    assert any(USERS_NEED_C in c.value for c in at.caption)  # the summary's own sentence
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("R=4 req/s: p99 send lag 15.0 ms > 10 ms") for w in warnings)

    per_level = at.dataframe[0].value
    assert_human(at.dataframe[0])
    assert per_level.columns[0] == "rate (req/s)" and "C" not in per_level
    assert list(per_level["rate (req/s)"]) == list(fixtures.RATES)
    assert list(per_level["passes"]) == [True, True, True, False]
    assert list(per_level["p99 send lag (ms)"]) == pytest.approx([0.4, 0.6, 1.2, 15.0])
    assert list(per_level["send lag > 10 ms"]) == [False, False, False, True]
    assert config(at.dataframe[0])["rate (req/s)"]["pinned"] is True

    charts_ = at.get("plotly_chart")  # TTFT, TPS against rate; distribution per rate
    assert len(charts_) == 3
    for chart in charts_[:2]:
        spec = json.loads(chart.proto.spec)
        assert spec["layout"]["xaxis"]["title"]["text"] == "request rate (req/s)"
        assert spec["data"][0]["x"] == list(fixtures.RATES)
        assert spec["data"][0]["marker"]["symbol"] == ["circle", "circle", "circle", "x-open"]
        assert spec["layout"]["shapes"][0]["line"]["dash"] == "dash"  # the target
    box = json.loads(charts_[2].proto.spec)
    assert box["layout"]["xaxis"]["title"]["text"] == "request rate (req/s)"
    assert [t["x"][0] for t in box["data"]] == ["0.5", "1", "2", "4"]


def test_closed_runs_keep_their_run_page_beside_a_rate_run(monkeypatch, rate_db):
    at = app(monkeypatch, rate_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-nvme").run()
    assert not at.exception
    assert metrics(at)["Max C"] == "2"
    assert list(at.dataframe[0].value["C"]) == [1, 2, 3, 4, 8]


def test_runs_page_lists_the_rate_run_with_its_sustainable_rate(monkeypatch, rate_db):
    at = app(monkeypatch, rate_db)
    assert metrics(at)["runs shown"] == "3"
    assert_runs_table(at.dataframe[0])
    frame = at.dataframe[0].value.set_index("run")
    assert frame.loc[fixtures.RATE_RUN, "verdict"] == "sustainable 2 req/s (4 req/s fails)"
    assert frame.loc[fixtures.RATE_RUN, "max rate (req/s)"] == 2.0
    assert pd.isna(frame.loc[fixtures.RATE_RUN, "Max C"])
    assert pd.isna(frame.loc[fixtures.RATE_RUN, "chat users"])
    assert frame.loc["fixture-mem", "Max C"] == 4 and frame.loc["fixture-nvme", "Max C"] == 2
    assert pd.isna(frame.loc["fixture-mem", "max rate (req/s)"])
    assert any("rate run" in c.value for c in at.caption)


def levels_frame(rows: list[tuple[float, float, float, float | None]]) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": "r", "concurrency": 0, "rate": r, "requests": 10,
                          "errors": 0, "short_outputs": 0, "mean_ttft_ms": ttft, "mean_tps": tps,
                          "p50_send_lag_ms": lag, "p99_send_lag_ms": lag}
                         for r, ttft, tps, lag in rows])


def test_rate_verdicts():
    targets = Targets()
    cap = rate.capacity(levels_frame([(1, 300, 30, 0.5), (2, 400, 25, 1.0)]), targets)
    assert rate_verdict(cap) == "sustainable 2 req/s (lower bound: no higher rate tested)"
    cap = rate.capacity(levels_frame([(1, 1300, 30, 0.5), (2, 400, 25, 1.0)]), targets)
    assert rate_verdict(cap) == "sustainable 2 req/s (lower bound: no higher rate tested; " \
                                "1 req/s fails below it)"
    cap = rate.capacity(levels_frame([(1, 1300, 30, None)]), targets)
    assert rate_verdict(cap) == "sustainable 0 req/s (no rate meets the targets)"
    assert rate_verdict(rate.capacity(levels_frame([]).reindex(
        columns=["run_id", "rate"]), targets)) == "no rate levels to judge"
    assert rate.rate_table(pd.DataFrame(), targets).empty
    assert rate.lag_warning(None) is None and rate.lag_warning(9.9) is None
    assert "load generator" in rate.lag_warning(10.5)


def test_metric_vs_rate_marks_passes_and_lag():
    frame = levels_frame([(0.5, 300, 30, 0.5), (1, 900, 15, 12.0)])
    fig = charts.metric_vs_rate(frame, "mean_tps", 20, "TPS target 20", {("r", 0.5)},
                                "TPS", {}, {("r", 1.0)})
    assert list(fig.data[0].marker.symbol) == ["circle", "x-open"]
    assert fig.data[1].name == charts.LAG_LIMITED_NAME
    assert fig.layout.xaxis.title.text == "request rate (req/s)"
