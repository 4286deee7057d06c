"""A serving host over a level (`run --host-metrics`): its figures from the scrapes of its
agent or node_exporter, on the harness's clock, put together per level and per token,
stored, upgraded into an older file and shown by the summary."""

from __future__ import annotations

import io
import json

import duckdb
import pytest
from rich.console import Console

from harness.results.clock_offset import best_offset
from harness.results.host_figures import level_host
from harness.results.host_level import HostLevel, Scrape, host_level
from harness.results.host_sample import (
    AGENT,
    NODE_EXPORTER,
    DiskFigures,
    HostSample,
    ProcessFigures,
    SystemFigures,
    TableFileFigures,
)
from harness.results.metrics import Targets, stats_by_level
from harness.results.render import print_summary
from harness.results.report import summarise
from harness.results.run_row import RunRow
from harness.results.schema import SCHEMA_VERSION
from harness.results.store import Store
from tests.harness.fixtures import make_records

URL = "http://10.0.0.5:9477/metrics"
S = 1_000_000_000  # ns


def tree(read: float, major: float, rss_file: float = 0.0, pinned: float = 0.0,
         alive: float = 2, ended: float = 0) -> ProcessFigures:
    return ProcessFigures(alive=alive, ended=ended, io_unreadable=0, minor_faults=10 * major,
                          major_faults=major, read_bytes=read, rss_anon_bytes=0.0,
                          rss_file_bytes=rss_file, rss_shmem_bytes=0.0, locked_bytes=0.0,
                          pinned_bytes=pinned)


def sample(t: float, processes: ProcessFigures | None, resident: float | None = None,
           io_s: float = 0.0, disks: dict[str, tuple[float, float]] | None = None,
           source: str = AGENT, clock_shift: float = 0.0) -> HostSample:
    """The host at its own time t (s) (its monotonic and wall clocks `clock_shift` ahead of
    the harness's, which starts at 100 s wall); disks: name -> (read bytes, io time s)."""
    agent = source == AGENT
    return HostSample(
        source=source, wall_s=100.0 + t + clock_shift if agent else None,
        monotonic_s=t + clock_shift if agent else None, residency="cachestat" if agent else None,
        processes=processes,
        tables=(TableFileFigures("/t/table.bin", 8e9, "nvme0n1", resident, 1.0),)
        if resident is not None else (),
        disks={name: DiskFigures(name, read, read / 4096, 0.0, 0, busy)
               for name, (read, busy) in (disks or {}).items()},
        system=SystemFigures(pgmajfault=1000.0, io_some_s=io_s))


def scrape(at_s: float, got: HostSample | None, round_trip_s: float = 0.002,
           error: str | None = None) -> Scrape:
    """A scrape sent at the harness's `at_s` (s), answered `round_trip_s` later."""
    sent = round(at_s * S)
    return Scrape(sent, sent + round(round_trip_s * S), sent + 100 * S, got, error)


def test_a_level_is_the_growth_between_its_first_and_last_scrape_and_the_peaks_between():
    scrapes = [scrape(0.0, sample(0.0, tree(1000, 5, 10e6), 2e9, 1.0,
                                  {"nvme0n1": (5e6, 3.0), "sda": (0.0, 9.0)})),
               scrape(1.0, sample(1.0, tree(9000, 9, 30e6, 4096), 2.5e9, 1.2,
                                  {"nvme0n1": (9e6, 3.5), "sda": (0.0, 9.1)})),
               scrape(2.0, sample(2.0, tree(21000, 12, 20e6), 3e9, 1.5,
                                  {"nvme0n1": (2.5e7, 4.0), "sda": (0.0, 9.2)}))]
    level, slices = host_level(0, URL, scrapes, None)
    assert level.missing is None and level.source == AGENT and level.scrapes == 3
    assert level.wall_s == pytest.approx(2.0)
    assert (level.read_bytes, level.major_faults, level.minor_faults) == (20000, 7, 70)
    assert (level.table_resident_start_bytes, level.table_resident_end_bytes) == (2e9, 3e9)
    assert (level.peak_rss_file_bytes, level.peak_pinned_bytes) == (30e6, 4096)
    assert level.io_some_s == pytest.approx(0.5)
    assert level.disk == "nvme0n1"  # the busier disk over the level
    assert (level.disk_read_bytes, level.disk_io_time_s) == (2e7, 1.0)
    assert [s.read_bytes for s in slices] == [8000, 12000]
    assert [s.table_resident_bytes for s in slices] == [2.5e9, 3e9]
    assert [s.disk_io_time_s for s in slices] == pytest.approx([0.5, 0.5])


def test_a_node_exporter_gives_the_disk_and_host_figures_and_no_process_tree():
    level, slices = host_level(1, URL, [
        scrape(0.0, sample(0.0, None, disks={"nvme0n1": (0.0, 10.0)}, io_s=2.0,
                           source=NODE_EXPORTER)),
        scrape(1.0, sample(1.0, None, disks={"nvme0n1": (4e6, 10.25)}, io_s=2.1,
                           source=NODE_EXPORTER))], None)
    assert level.missing is None and level.source == NODE_EXPORTER
    assert level.read_bytes is None and level.peak_rss_file_bytes is None
    assert level.table_resident_end_bytes is None and level.clock_offset_ms is None
    assert (level.disk, level.disk_read_bytes, level.disk_io_time_s) == ("nvme0n1", 4e6, 0.25)
    assert level.wall_s == pytest.approx(1.0)  # the harness's clock: no host clock served
    figures = level_host([(0, level)], output_tokens=1000, prompt_tokens=500)
    assert figures["tree_read_bytes_per_output_token"] is None
    assert figures["device_read_bytes_per_output_token"] == 4000
    assert figures["disk_busy_share"] == pytest.approx(0.25)
    assert figures["io_stall_share"] == pytest.approx(0.1)
    assert figures["missing"] is None and len(slices) == 1


@pytest.mark.parametrize(("start", "end", "reason"), [
    (2, 0, "ended during the level (1 of its processes ended)"),
    (0, 0, "had ended before the level began")])
def test_a_tree_that_ended_loses_its_levels_process_figures_with_the_reason(start, end,
                                                                            reason):
    level, slices = host_level(0, URL, [
        scrape(0.0, sample(0.0, tree(1000, 5, alive=start), 2e9, 1.0)),
        scrape(1.0, sample(1.0, tree(1500, 6, alive=end, ended=1), 2e9, 1.1))], None)
    assert level.missing is not None and reason in level.missing
    assert level.read_bytes is None and level.major_faults is None
    assert level.table_resident_end_bytes == 2e9  # what the tree's end does not touch stays
    assert [s.read_bytes for s in slices] == [None]


def test_a_scrape_lost_at_either_end_loses_the_level_with_the_reason():
    ok = sample(0.0, tree(0, 0), 1e9)
    lost_start, _ = host_level(0, URL, [scrape(0.0, None, error="connection refused"),
                                        scrape(1.0, ok)], None)
    assert lost_start.missing == f"{URL} did not answer as the level began (connection refused)"
    lost_end, _ = host_level(0, URL, [scrape(0.0, ok),
                                      scrape(1.0, None, error="no answer within 2 s")], None)
    assert lost_end.missing == f"{URL} did not answer as the level ended (no answer within 2 s)"
    assert lost_end.read_bytes is None and lost_end.wall_s is None and lost_end.scrapes == 1
    restarted, _ = host_level(0, URL, [scrape(0.0, sample(0.0, tree(9000, 50))),
                                       scrape(1.0, sample(1.0, tree(100, 1)))], None)
    assert restarted.missing is not None and "went back" in restarted.missing


def test_an_agents_clock_is_mapped_onto_the_harness_within_the_shortest_round_trip():
    """The agent's clocks run 3,600 s ahead; each sample is read 1 ms into its scrape. Its
    slices land on the harness's clock where it read them, not where its clock says."""
    shift = 3600.0
    at = [0.0, 1.0, 2.0]
    scrapes = [scrape(t, sample(t + 0.001, tree(100 * i, i), clock_shift=shift),
                      round_trip_s=rt) for i, (t, rt) in enumerate(zip(at, (0.2, 0.002, 0.05),
                                                                       strict=True))]
    offset = best_offset([r for s in scrapes if (r := s.reading()) is not None])
    level, slices = host_level(0, URL, scrapes, offset)
    assert offset.round_trip_ns == 2_000_000  # the shortest
    assert level.clock_offset_ms == pytest.approx(shift * 1000, abs=1.0)
    assert level.round_trip_ms == pytest.approx(2.0)
    assert level.wall_s == pytest.approx(2.0)
    assert [s.start_s for s in slices] == pytest.approx([0.001, 1.001], abs=0.001)
    assert [s.width_s for s in slices] == pytest.approx([1.0, 1.0], abs=0.002)
    assert [s.started_at for s in slices] == pytest.approx([100.001, 101.001], abs=0.001)


def _level(node: int, read: float | None, resident: tuple[float, float], wall: float = 10.0,
           io_s: float = 1.0, peak: float = 1e6, missing: str | None = None) -> HostLevel:
    level, _ = host_level(node, f"http://n{node}", [
        scrape(0.0, sample(0.0, tree(0, 0, peak), resident[0], 0.0)),
        scrape(wall, sample(wall, tree(read or 0, 10, peak), resident[1], io_s))], None)
    if read is None:  # as a lost scrape leaves it
        level = HostLevel(**{**{f: getattr(level, f) for f in level.__dataclass_fields__},
                             "read_bytes": None, "missing": missing})
    return level


def test_a_levels_figures_add_over_passes_and_hosts_and_a_host_without_one_leaves_it_out():
    passes = [(0, _level(0, 4000, (1e9, 2e9), io_s=1.0, peak=5e6)),
              (1, _level(0, 6000, (2e9, 3e9), io_s=3.0, peak=7e6)),
              (0, _level(1, 2000, (5e8, 6e8), io_s=0.5, peak=1e6)),
              (1, _level(1, 2000, (6e8, 7e8), io_s=0.5, peak=2e6))]
    figures = level_host(passes, output_tokens=1000, prompt_tokens=4000)
    assert figures["nodes"] == 2 and figures["missing"] is None
    assert figures["tree_read_bytes"] == 14000
    assert figures["tree_read_bytes_per_output_token"] == 14.0
    assert figures["tree_read_bytes_per_prompt_token"] == 3.5
    assert figures["major_faults_per_output_token"] == pytest.approx(40 / 1000)
    # each host at its first pass's start and last pass's end, summed over hosts
    assert figures["table_resident_bytes_start"] == 1e9 + 5e8
    assert figures["table_resident_bytes_end"] == 3e9 + 7e8
    assert figures["peak_rss_file_bytes"] == 7e6 + 2e6
    assert figures["io_stall_share"] == pytest.approx(0.2)  # the worse host: 4 s of 20
    lost = [*passes[:3], (1, _level(1, None, (6e8, 7e8), missing="http://n1 did not answer"))]
    figures = level_host(lost, output_tokens=1000, prompt_tokens=4000)
    assert figures["tree_read_bytes_per_output_token"] is None  # never a sum of the others
    assert figures["missing"] == "http://n1 did not answer"


def test_a_run_stores_each_pass_and_a_file_from_before_host_metrics_is_upgraded(tmp_path):
    path = tmp_path / "old.duckdb"
    Store(path).initialise()
    with duckdb.connect(str(path)) as con:  # as the version before wrote it
        con.execute("DROP TABLE host_levels; DROP TABLE host_slices; "
                    "DELETE FROM schema_version; INSERT INTO schema_version VALUES (4)")
    store = Store(path)
    assert store.host_levels("run-a") == {}
    one = host_level(0, URL, [scrape(0.0, sample(0.0, tree(0, 0), 1e9)),
                              scrape(1.0, sample(1.0, tree(100, 1), 1e9)),
                              scrape(2.0, sample(2.0, tree(300, 2), 2e9))], None)
    store.write_host_levels("run-a", 4, [one], repeat=0)
    store.write_host_levels("run-a", 4, [one], repeat=0)  # a pass measured again replaces
    store.write_host_levels("run-a", 8, [one], rate=None, repeat=1)
    assert store.host_levels("run-a") == {(4, None): [(0, one[0])], (8, None): [(1, one[0])]}
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT version FROM schema_version").fetchone() == (SCHEMA_VERSION,)
        assert con.execute("SELECT count(*), min(width_s) FROM host_slices WHERE "
                           "concurrency = 4").fetchone() == (2, pytest.approx(1.0))


def test_the_summary_shows_each_levels_host_figures_beside_ttft_and_tpot():
    records = make_records()
    stats = stats_by_level(records, 128)
    run = RunRow(run_id="run-a", status="complete", mode="closed", levels=[1, 2, 4],
                 rounds=3, input_tokens=128, output_tokens=128, config="{}")
    tokens = {c: sum(r.output_tokens or 0 for r in records if r.concurrency == c)
              for c in (1, 2, 4)}
    lost = _level(0, None, (1e9, 1e9), missing=f"{URL} did not answer as the level ended")
    host = {(1, None): [(0, _level(0, 128_000, (1e9, 2e9)))],
            (2, None): [(0, _level(0, 256_000, (2e9, 3e9)))], (4, None): [(0, lost)]}
    summary = json.loads(json.dumps(summarise(run, stats, records, Targets(), host=host)))
    rows = {row["concurrency"]: row for row in summary["levels"]}
    assert rows[1]["host"]["tree_read_bytes_per_output_token"] == round(128_000 / tokens[1], 3)
    assert rows[2]["host"]["table_resident_bytes_end"] == 3e9
    assert rows[4]["host"]["tree_read_bytes_per_output_token"] is None
    assert any(w.startswith("C=4: host figures missing: ") for w in summary["warnings"])
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=200))
    text = out.getvalue()
    assert "the serving host per level" in text
    [c2] = [line for line in text.splitlines() if "C=2" in line and "GiB" in line]
    assert f" {round(256_000 / tokens[2])} " in c2 and "1.9 GiB" in c2 and "2.8 GiB" in c2
