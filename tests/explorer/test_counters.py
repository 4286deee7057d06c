"""The server's Engram counters per level: figures derived from /stats snapshots, the
step-time breakdown and its chart."""

import math

import pytest

from explorer import charts, data
from explorer.counters import breakdown_frame, counters_frame, level_counters, step_breakdown
from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.explorer import fixtures


def test_fixture_levels_give_the_figures_of_their_deltas(fixture_db):
    counters = counters_frame(data.server_stats(fixture_db, "fixture-nvme"))
    assert list(counters["concurrency"]) == list(fixtures.LEVELS)
    for row in counters.to_dict("records"):
        c = row["concurrency"]
        grew, gauges, missed = fixtures.nvme_growth(c), fixtures.nvme_gauges(c), \
            fixtures.MISSED_PAGES[c]
        tokens = grew["tokens"]
        assert row["tokens"] == tokens
        assert row["disk_bytes_per_token"] == pytest.approx(4096 * missed / tokens)
        assert row["requested_bytes_per_token"] == pytest.approx(2560)
        assert row["page_hit_rate"] == pytest.approx(1 - missed / grew["pages_requested"])
        assert row["major_faults_per_token"] == pytest.approx(missed / tokens)
        assert row["engram_stall"] == pytest.approx(grew["engram_wait_ms"] / grew["step_ms"])
        assert row["gather_cpu_ms_per_token"] == pytest.approx(grew["gather_cpu_ms"] / tokens)
        assert row["resident_bytes"] == gauges["table_resident_bytes"]
        assert row["resident_of_budget"] == pytest.approx(
            gauges["table_resident_bytes"] / gauges["table_budget_bytes"])
        assert row["peak_of_budget"] == pytest.approx((40 * c + 8) / 344)
        assert (row["placement"], row["io_mode"], row["cache_state"]) == ("nvme", "mmap", "cold")
        if c == 8:  # the block device's counters were null after this level
            assert math.isnan(row["read_iops"]) and math.isnan(row["read_queue_depth"])
        else:
            assert row["read_iops"] == pytest.approx((missed + 500) / grew["uptime_s"])
            assert row["read_queue_depth"] == pytest.approx(
                0.75 * (missed + 500) / (grew["uptime_s"] * 1000))


def test_fixture_step_breakdown_accounts_for_the_whole_step(fixture_db):
    parts = breakdown_frame(data.server_stats(fixture_db, "fixture-nvme"))
    level = parts[parts["concurrency"] == 4].set_index("part")["ms"].to_dict()
    assert level == {"compute": 3000.0, "Engram wait": 400.0, "hash/submit": 200.0,
                     "sample": 300.0, "emit": 100.0, "unaccounted": 1000.0}
    assert parts.groupby("concurrency")["share"].sum().tolist() == pytest.approx([1.0] * 4)


def test_an_old_run_keeps_its_figures_and_invents_none(fixture_db):
    counters = counters_frame(data.server_stats(fixture_db, "fixture-mem"))
    assert list(counters["requested_bytes_per_token"]) == [2560.0] * 4  # engram_bytes_read
    assert list(counters["engram_stall"]) == pytest.approx([0.01, 0.02, 0.04, 0.08])
    assert list(counters["major_faults_per_token"]) == pytest.approx([0.01] * 4)
    assert list(counters["counted_resident_bytes"]) == [1 << 20] * 4
    shown = counters.dropna(axis=1, how="all").columns
    assert not {"disk_bytes_per_token", "page_hit_rate", "resident_bytes", "read_iops",
                "gather_cpu_ms_per_token"} & set(shown)


def snapshots(**after: object) -> tuple[dict, dict]:
    before = {"tokens": 1000, "step_ms": 100.0, "disk_read_bytes": 0, "pages_requested": 0,
              "engram_wait_ms": 10.0}
    return before, {"tokens": 2000, "step_ms": 1100.0, "disk_read_bytes": 4096 * 400,
                    "pages_requested": 1600, "engram_wait_ms": 260.0, **after}


def test_per_token_and_hit_rate_from_known_deltas():
    figures = level_counters(*snapshots())
    assert figures["disk_bytes_per_token"] == pytest.approx(4096 * 400 / 1000)
    assert figures["page_hit_rate"] == pytest.approx(0.75)
    assert figures["engram_stall"] == pytest.approx(0.25)


@pytest.mark.parametrize("after, nulls", [
    ({"disk_read_bytes": None}, {"disk_bytes_per_token", "page_hit_rate"}),
    ({"pages_requested": 0}, {"page_hit_rate"}),  # nothing requested: no rate, not 100 %
    ({"tokens": 500}, {"disk_bytes_per_token", "requested_bytes_per_token"}),  # restarted
    ({"engram_wait_ms": float("nan")}, {"engram_stall"}),
])
def test_a_null_missing_or_reset_source_gives_null_never_zero(after, nulls):
    figures = level_counters(*snapshots(**after))
    for key in nulls:
        assert figures[key] is None, key
    assert figures["major_faults_per_token"] is None  # never reported: not 0


def test_hit_rate_is_clamped_when_readahead_reads_more_than_requested():
    assert level_counters(*snapshots(disk_read_bytes=4096 * 5000))["page_hit_rate"] == 0.0


def test_a_null_new_key_does_not_fall_back_to_the_old_one():
    before, after = {"bytes_requested": None, "engram_bytes_read": 0, "tokens": 0}, {
        "bytes_requested": None, "engram_bytes_read": 2560, "tokens": 1}
    assert level_counters(before, after)["requested_bytes_per_token"] is None
    del before["bytes_requested"], after["bytes_requested"]
    assert level_counters(before, after)["requested_bytes_per_token"] == 2560


def test_resident_against_a_missing_budget_is_blank():
    figures = level_counters({}, {"table_resident_bytes": 1 << 20})
    assert figures["resident_bytes"] == 1 << 20 and figures["resident_of_budget"] is None
    assert figures["tokens"] is None  # no snapshot before the level: no delta


def test_breakdown_splits_the_engram_wait_per_layer_in_layer_order():
    before = {"step_ms": 0.0, "compute_ms": 0.0, "engram_wait_ms": 0.0,
              "engram_wait_ms_by_layer": {"14": 0.0, "2": 0.0}}
    after = {"step_ms": 1000.0, "compute_ms": 600.0, "engram_wait_ms": 300.0,
             "engram_wait_ms_by_layer": {"14": 200.0, "2": 100.0}}
    assert step_breakdown(before, after) == {
        "compute": 600.0, "Engram wait L2": 100.0, "Engram wait L14": 200.0,
        "unaccounted": 100.0}
    after["engram_wait_ms_by_layer"] = {"2": 300.0}  # one layer: the total says it all
    assert list(step_breakdown(before, after)) == ["compute", "Engram wait", "unaccounted"]


def test_breakdown_needs_the_step_time_and_a_part():
    assert step_breakdown({"compute_ms": 0.0}, {"compute_ms": 5.0}) == {}
    assert step_breakdown({"step_ms": 0.0}, {"step_ms": 5.0}) == {}


def test_levels_without_any_figure_are_left_out():
    stats = [(1, 0, {}, {"version": "0.4", "placement": "gpu"}), (2, 0, *snapshots())]
    assert list(counters_frame(stats)["concurrency"]) == [2]
    assert counters_frame([]).empty and breakdown_frame([]).empty


def test_breakdown_chart_stacks_each_part_to_the_whole_step(fixture_db):
    parts = breakdown_frame(data.server_stats(fixture_db, "fixture-nvme"))
    fig = charts.step_breakdown(parts)
    assert [t.name for t in fig.data] == ["compute", "Engram wait", "hash/submit", "sample",
                                          "emit", "unaccounted"]
    assert fig.layout.barmode == "relative"
    assert list(fig.layout.xaxis.categoryarray) == ["1", "2", "4", "8"]
    totals = [sum(t.y[i] for t in fig.data) for i in range(4)]
    assert totals == pytest.approx([100.0] * 4)


def test_a_level_run_in_several_passes_shows_each_pass_and_their_mean(tmp_path):
    """`--repeat`: the counters table keeps a row per pass; the /metrics figures are the mean
    of the passes' figures, and the step breakdown the mean of their parts."""
    store = Store(tmp_path / "r.duckdb")
    store.initialise()
    store.create_run(RunRow(run_id="rep", model="m", levels=[2], rounds=1, output_tokens=4))
    running = ("vllm:num_requests_running", "{}", "gauge", "mean")
    for repeat, mean in ((0, 1.0), (1, 2.0)):
        store.write_server_metrics("rep", 2, [(*running, mean)], repeat=repeat)
        before, after = snapshots(compute_ms=400.0 * (repeat + 1))
        store.write_server_stats("rep", 2, {**before, "compute_ms": 0.0}, after, repeat=repeat)
    figures = data.server_figures(store.path, ["rep"])
    assert figures[["concurrency", "running_mean"]].to_dict("records") == [
        {"concurrency": 2, "running_mean": 1.5}]
    stats = data.server_stats(store.path, "rep")
    assert list(counters_frame(stats)["repeat"]) == [0, 1]
    parts = breakdown_frame(stats)
    assert parts.set_index("part").loc["compute", "ms"] == pytest.approx(600.0)
    assert parts["share"].sum() == pytest.approx(1.0)
