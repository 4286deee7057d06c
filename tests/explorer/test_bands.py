"""Confidence bands on the TTFT/TPS charts: drawn for runs with repeats (the 95% bootstrap
interval, or the range over repeats with fewer than 20 clusters), never for runs without."""

import json
from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from explorer import charts, data
from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.explorer.apptest import app

T0 = 1_790_000_000.0
LEVELS = (1, 2, 4)
# run: (mean TPS per repeat, rounds); 3 repeats x 8 rounds = 24 clusters (bootstrap),
# 3 x 2 = 6 (range over repeats), one repeat: no band
RUNS = {"rep-boot": ((30.0, 31.5, 28.5), 8), "rep-few": ((30.0, 32.0, 28.0), 2),
        "single": ((30.0,), 8)}


def _records(run: str, tps_by_repeat: tuple[float, ...], rounds: int) -> list[RequestRecord]:
    out, sent = [], T0
    for c in LEVELS:
        for p, tps in enumerate(tps_by_repeat):
            for rnd in range(rounds):
                for w in range(c):
                    tps_w = tps / c ** 0.3 + 0.2 * w - 0.1 * rnd
                    out.append(RequestRecord(
                        f"{run}-c{c}-p{p}-r{rnd}-w{w}", c, rnd, w, sent,
                        ttft_ms=6000.0 / tps_w, latency_ms=128 / tps_w * 1000,
                        output_tokens=128, input_tokens=128, finish_reason="length",
                        http_status=200, repeat=p if len(tps_by_repeat) > 1 else None))
                sent += 10
    return out


def build(path: Path) -> None:
    store = Store(path)
    store.initialise()
    for i, (run, (means, rounds)) in enumerate(RUNS.items()):
        store.create_run(RunRow(run_id=run, model="m", mode="closed", levels=list(LEVELS),
                                rounds=rounds, input_tokens=128, output_tokens=128,
                                label=run, config=json.dumps({"repeat": len(means)})))
        store.write_requests(run, _records(run, means, rounds))
        store.finish_run(run, "complete")
        store.update_run(run, started_at=pd.Timestamp(T0 + i, unit="s"))


def _traces(at: AppTest) -> list[list[dict]]:
    return [json.loads(chart.proto.spec)["data"] for chart in at.get("plotly_chart")[:2]]


def test_level_bands_hold_the_mean_and_say_how_they_were_made(tmp_path):
    db = tmp_path / "bands.duckdb"
    build(db)
    bands = data.level_bands(data.cluster_sums(db, list(RUNS)))
    assert set(bands["run_id"]) == {"rep-boot", "rep-few"}  # no band without repeats
    assert set(bands.loc[bands["run_id"] == "rep-boot", "method"]) == {"bootstrap"}
    assert set(bands.loc[bands["run_id"] == "rep-few", "method"]) == {"range"}
    assert (bands["low"] <= bands["mean"]).all() and (bands["mean"] <= bands["high"]).all()
    assert (bands["low"] < bands["high"]).all()
    levels = data.levels(db, list(RUNS)).set_index(["run_id", "concurrency"])
    for row in bands.itertuples():  # the band is around the line the chart draws
        column = {"ttft": "mean_ttft_ms", "tps": "mean_tps"}[row.metric]
        assert abs(levels.loc[(row.run_id, row.concurrency), column] - row.mean) < 1e-6


def test_a_chart_without_bands_is_unchanged():
    levels = pd.DataFrame({"run_id": ["a", "a"], "concurrency": [1, 2],
                           "mean_tps": [30.0, 25.0]})
    empty = pd.DataFrame(columns=data.BAND_COLUMNS)
    plain = charts.metric_vs_c(levels, "mean_tps", 20, "t", set(), "TPS", {})
    assert charts.metric_vs_c(levels, "mean_tps", 20, "t", set(), "TPS", {}, empty) == plain


def test_run_page_draws_a_band_only_for_a_run_with_repeats(monkeypatch, tmp_path):
    db = tmp_path / "bands.duckdb"
    build(db)
    at = app(monkeypatch, db, "views/run.py")
    for run, kind in (("rep-boot", "95% interval"), ("rep-few", "range over repeats")):
        at.selectbox(key="run_id").set_value(run).run()
        assert not at.exception, at.exception
        for traces in _traces(at):
            filled = [t for t in traces if t.get("fill")]
            assert len(filled) == 1 and filled[0]["name"] == f"{run}: {kind}"
            assert len(filled[0]["customdata"]) == len(LEVELS)
            assert kind in filled[0]["hovertemplate"] or kind in str(filled[0]["customdata"])
        assert any("95% bootstrap interval" in c.value for c in at.caption)
    at.selectbox(key="run_id").set_value("single").run()
    assert not at.exception, at.exception
    for traces in _traces(at):
        assert not [t for t in traces if t.get("fill")]
        assert len(traces) == 1  # the line alone, as before repeats existed


def test_compare_page_draws_a_band_per_run_with_repeats(monkeypatch, tmp_path):
    db = tmp_path / "bands.duckdb"
    build(db)
    at = app(monkeypatch, db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(list(RUNS)).run()
    assert not at.exception, at.exception
    for traces in _traces(at):
        names = sorted(t["name"] for t in traces if t.get("fill"))
        assert names == ["rep-boot: 95% interval", "rep-few: range over repeats"]
