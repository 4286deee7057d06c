"""Server metrics (/metrics) on the Run and Compare pages, from the fixture database: run `mem`
has them, run `nvme` has none."""

import base64
import json

import duckdb
import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.explorer import fixtures
from tests.explorer.apptest import app

OFFLOAD = "offload: vllm:kv_offload_total_bytes{transfer_type=GPU_to_CPU}"


def traces(at: AppTest, index: int = -1) -> dict[str, list[float]]:
    """A chart's lines by name, their y values decoded (plotly ships arrays as binary)."""
    spec = json.loads(at.get("plotly_chart")[index].proto.spec)
    return {trace["name"]: _values(trace["y"]) for trace in spec["data"]}


def _values(y: list | dict) -> list[float]:
    if isinstance(y, dict):
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]).tolist()
    return y


def captions(at: AppTest) -> str:
    return " ".join(c.value for c in at.caption)


def test_run_page_shows_the_servers_figures_beside_the_clients_ttft(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-mem").run()
    table = at.dataframe[2].value.set_index("C")
    server_mean = [fixtures.PROFILES["mem"][c][0] - fixtures.SERVER_TTFT_GAP_MS
                   for c in fixtures.LEVELS]
    assert list(table["server TTFT mean (ms)"]) == pytest.approx(server_mean)
    gap = table["client TTFT mean (ms)"] - table["server TTFT mean (ms)"]
    assert ((gap > fixtures.SERVER_TTFT_GAP_MS - 20) & (gap < fixtures.SERVER_TTFT_GAP_MS + 20)
            ).all()
    assert list(table["server queue time mean (ms)"]) == pytest.approx([10, 20, 40, 80])
    # vLLM's running gauge, not added to the bundled server's own name for the same figure
    assert list(table["running requests max"]) == [1, 2, 4, 8]
    assert list(table["KV-cache usage max"]) == pytest.approx([0.06, 0.12, 0.24, 0.48])
    assert list(table["preemptions"]) == [0, 0, 0, 2]
    assert list(table["prefix-cache hit rate"]) == [0.125] * 4
    assert list(table[OFFLOAD]) == [4096 * c for c in fixtures.LEVELS]
    assert list(table["offload: engram_disk_read_bytes"]) == [65536 * c for c in fixtures.LEVELS]
    assert not any("process_cpu" in column for column in table.columns)
    chart = traces(at)
    assert {"client TTFT mean", "server TTFT mean", "server TTFT p50",
            "server queue time mean"} <= set(chart)
    assert chart["server TTFT mean"] == pytest.approx(server_mean)


def test_run_page_says_when_a_run_has_no_server_metrics(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-nvme").run()
    assert "No server metrics for this run" in captions(at)
    assert not any("server TTFT" in str(f.value.columns) for f in at.dataframe)


def test_compare_overlays_a_chosen_server_metric(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(["fixture-mem", "fixture-nvme"]).run()
    chooser = at.selectbox(key="compare_server_metric")
    assert chooser.value == "ttft_mean_ms" and OFFLOAD in chooser.options
    assert "Not recorded for: fixture-nvme" in captions(at)
    chooser.set_value("kv_usage_max").run()
    ((name, values),) = traces(at).items()  # only the run that recorded it
    assert name.startswith("fixture-mem") and values == pytest.approx([0.06, 0.12, 0.24, 0.48])


def test_compare_says_when_no_chosen_run_has_server_metrics(monkeypatch, fixture_db):
    at = app(monkeypatch, fixture_db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(
        ["fixture-nvme", "qwen3.8-flash-next_1x-rtx-pro-6000_host"]).run()
    assert "None of the chosen runs recorded server metrics" in captions(at)
    assert not [s for s in at.selectbox if s.key == "compare_server_metric"]


def test_a_results_file_from_before_server_metrics_gets_the_table(monkeypatch, tmp_path):
    db = tmp_path / "old.duckdb"
    fixtures.build(db)
    with duckdb.connect(str(db)) as con:
        con.execute("DROP TABLE server_metrics")
    at = app(monkeypatch, db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-mem").run()
    assert "No server metrics for this run" in captions(at)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM server_metrics").fetchone() == (0,)
