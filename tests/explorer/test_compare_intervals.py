"""Compare: each % difference with its interval from the runs' repeats, and a verdict."""

import json
from pathlib import Path

import pandas as pd

from explorer import data
from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.explorer.apptest import app

T0 = 1_790_000_000.0
LEVELS = (1, 2)
# per run: mean TPS of each repeat (TTFT moves the other way); the baseline drifts +-5%
RUNS = {
    "rep-base": (30.0, 31.5, 28.5),
    "rep-same": (30.6, 29.1, 30.9),  # inside the baseline's drift: within noise
    "rep-slow": (21.0, 21.6, 20.4),  # 30% slower in every repeat: significant
    "rep-single": (29.0,),  # no repeats: the difference only
}


def _records(run: str, tps_by_repeat: tuple[float, ...], rounds: int = 4) -> list[RequestRecord]:
    out, sent = [], T0
    for c in LEVELS:
        for p, tps in enumerate(tps_by_repeat):
            for rnd in range(rounds):
                for w in range(c):
                    tps_w = tps + 0.1 * w - 0.05 * rnd
                    out.append(RequestRecord(
                        f"{run}-c{c}-p{p}-r{rnd}-w{w}", c, rnd, w, sent,
                        ttft_ms=6000.0 / tps_w, latency_ms=128 / tps_w * 1000,
                        output_tokens=128, input_tokens=128, finish_reason="length",
                        http_status=200, repeat=p))
                sent += 10
    return out


def build(path: Path) -> None:
    store = Store(path)
    store.initialise()
    for i, (run, means) in enumerate(RUNS.items()):
        store.create_run(RunRow(run_id=run, model="m", mode="closed", levels=list(LEVELS),
                                rounds=4, input_tokens=128, output_tokens=128,
                                label=run, config=json.dumps({"repeat": len(means)})))
        store.write_requests(run, _records(run, means))
        store.finish_run(run, "complete")
        store.update_run(run, started_at=pd.Timestamp(T0 + i, unit="s"))


def test_differences_have_intervals_and_verdicts(tmp_path):
    db = tmp_path / "rep.duckdb"
    build(db)
    runs = list(RUNS)
    diff = data.differences(data.levels(db, runs), data.cluster_sums(db, runs), "rep-base")
    by = diff.set_index(["run_id", "concurrency"])
    assert set(by["tps_verdict"].xs("rep-same")) == {"within noise"}
    assert set(by["tps_verdict"].xs("rep-slow")) == {"significant"}
    assert set(by["ttft_verdict"].xs("rep-slow")) == {"significant"}
    assert set(by["tps_verdict"].xs("rep-single")) == {"single run"}
    assert by["tps_diff_low"].xs("rep-single").isna().all()
    slow = by.loc[("rep-slow", 1)]
    assert slow["tps_diff_low"] <= slow["tps_diff_pct"] <= slow["tps_diff_high"] < 0
    same = by.loc[("rep-same", 2)]
    assert same["tps_diff_low"] < 0 < same["tps_diff_high"]


def test_compare_page_shows_within_noise_significant_and_single_run(monkeypatch, tmp_path):
    db = tmp_path / "rep.duckdb"
    build(db)
    at = app(monkeypatch, db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(list(RUNS)).run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert {"TPS verdict", "TTFT verdict", "TPS diff low (%)", "TPS diff high (%)"} <= set(
        table.columns)
    verdicts = dict(zip(zip(table["run"], table["C"], strict=True), table["TPS verdict"],
                        strict=True))
    assert verdicts[("rep-same", 1)] == "within noise"
    assert verdicts[("rep-slow", 1)] == "significant"
    assert verdicts[("rep-single", 1)] == "single run"
    assert any("within noise" in c.value for c in at.caption)
