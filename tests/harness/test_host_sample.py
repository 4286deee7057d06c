"""A host's scrape read as a typed sample: the agent's names and a node_exporter's."""

from __future__ import annotations

import pytest

from harness.results.host_sample import (
    AGENT,
    NODE_EXPORTER,
    DiskFigures,
    NotHostMetrics,
    SystemFigures,
    parse_host_sample,
)

# As node_exporter 1.x writes them (collector/diskstats, meminfo, vmstat, pressure): its
# disk figures are labelled by device, vmstat's are untyped, PSI's some/full are
# waiting/stalled.
NODE_EXPORTER_TEXT = """\
# HELP node_disk_io_now The number of I/Os currently in progress.
# TYPE node_disk_io_now gauge
node_disk_io_now{device="nvme0n1"} 3
node_disk_io_now{device="sda"} 0
# HELP node_disk_io_time_seconds_total Total seconds spent doing I/Os.
# TYPE node_disk_io_time_seconds_total counter
node_disk_io_time_seconds_total{device="nvme0n1"} 812.5
# HELP node_disk_read_bytes_total The total number of bytes read successfully.
# TYPE node_disk_read_bytes_total counter
node_disk_read_bytes_total{device="nvme0n1"} 9.8304e+10
node_disk_read_bytes_total{device="sda"} 4096
# HELP node_disk_read_time_seconds_total The total number of seconds spent by all reads.
# TYPE node_disk_read_time_seconds_total counter
node_disk_read_time_seconds_total{device="nvme0n1"} 1523.25
# HELP node_disk_reads_completed_total The total number of reads completed successfully.
# TYPE node_disk_reads_completed_total counter
node_disk_reads_completed_total{device="nvme0n1"} 2.4e+07
# HELP node_memory_AnonHugePages_bytes Memory information field AnonHugePages_bytes.
# TYPE node_memory_AnonHugePages_bytes gauge
node_memory_AnonHugePages_bytes 2.097152e+09
# HELP node_memory_Cached_bytes Memory information field Cached_bytes.
# TYPE node_memory_Cached_bytes gauge
node_memory_Cached_bytes 6.4e+10
# HELP node_memory_MemAvailable_bytes Memory information field MemAvailable_bytes.
# TYPE node_memory_MemAvailable_bytes gauge
node_memory_MemAvailable_bytes 7.0e+10
# HELP node_memory_ShmemHugePages_bytes Memory information field ShmemHugePages_bytes.
# TYPE node_memory_ShmemHugePages_bytes gauge
node_memory_ShmemHugePages_bytes 0
# HELP node_pressure_io_stalled_seconds_total Total time in seconds no process could make progress due to IO congestion
# TYPE node_pressure_io_stalled_seconds_total counter
node_pressure_io_stalled_seconds_total 12.5
# HELP node_pressure_io_waiting_seconds_total Total time in seconds that processes have waited due to IO congestion
# TYPE node_pressure_io_waiting_seconds_total counter
node_pressure_io_waiting_seconds_total 30.25
# HELP node_pressure_memory_stalled_seconds_total Total time in seconds no process could make progress due to memory congestion
# TYPE node_pressure_memory_stalled_seconds_total counter
node_pressure_memory_stalled_seconds_total 0.5
# HELP node_pressure_memory_waiting_seconds_total Total time in seconds that processes have waited for memory
# TYPE node_pressure_memory_waiting_seconds_total counter
node_pressure_memory_waiting_seconds_total 1.5
# HELP node_vmstat_pgmajfault /proc/vmstat information field pgmajfault.
# TYPE node_vmstat_pgmajfault untyped
node_vmstat_pgmajfault 123456
"""  # noqa: E501 (node_exporter's HELP lines as it writes them)

AGENT_TEXT = """\
# HELP engram_host_agent_info How the agent reads
# TYPE engram_host_agent_info gauge
engram_host_agent_info{residency="mincore"} 1.0 1796619548991
# TYPE engram_host_clock_monotonic_seconds gauge
engram_host_clock_monotonic_seconds 519.296623403 1796619548991
# TYPE engram_host_clock_wall_seconds gauge
engram_host_clock_wall_seconds 1.7966195489918983e+09 1796619548991
# TYPE engram_host_processes gauge
engram_host_processes 3.0 1796619548992
# TYPE engram_host_processes_ended counter
engram_host_processes_ended_total 1.0 1796619548992
# TYPE engram_host_process_io_unreadable gauge
engram_host_process_io_unreadable 0.0 1796619548992
# TYPE engram_host_process_minor_faults counter
engram_host_process_minor_faults_total 141.0 1796619548992
# TYPE engram_host_process_major_faults counter
engram_host_process_major_faults_total 17.0 1796619548992
# TYPE engram_host_process_read_bytes counter
engram_host_process_read_bytes_total 8192.0 1796619548992
# TYPE engram_host_process_rss_file_bytes gauge
engram_host_process_rss_file_bytes 1.662976e+06 1796619548992
# TYPE engram_host_process_pinned_bytes gauge
engram_host_process_pinned_bytes 4096.0 1796619548992
# TYPE engram_host_table_file_bytes gauge
engram_host_table_file_bytes{device="nvme0n1",path="/models/engram/table.bin"} 6.7108864e+07 1796619548993
engram_host_table_file_bytes{device="",path="/dev/shm/table.bin"} 4096.0 1796619548993
# TYPE engram_host_table_resident_bytes gauge
engram_host_table_resident_bytes{path="/models/engram/table.bin"} 3.3554432e+07 1796619548993
engram_host_table_resident_bytes{path="/dev/shm/table.bin"} 4096.0 1796619548993
# TYPE engram_host_table_sampled_fraction gauge
engram_host_table_sampled_fraction{path="/models/engram/table.bin"} 0.25 1796619548993
engram_host_table_sampled_fraction{path="/dev/shm/table.bin"} 1.0 1796619548993
# TYPE engram_host_disk_read_bytes counter
engram_host_disk_read_bytes_total{device="nvme0n1"} 2.448643072e+09 1796619548993
# TYPE engram_host_disk_reads_completed counter
engram_host_disk_reads_completed_total{device="nvme0n1"} 220398.0 1796619548993
# TYPE engram_host_disk_read_time_seconds counter
engram_host_disk_read_time_seconds_total{device="nvme0n1"} 338.671 1796619548993
# TYPE engram_host_disk_io_now gauge
engram_host_disk_io_now{device="nvme0n1"} 2.0 1796619548993
# TYPE engram_host_disk_io_time_seconds counter
engram_host_disk_io_time_seconds_total{device="nvme0n1"} 18.548 1796619548993
# TYPE engram_host_vmstat_pgmajfault counter
engram_host_vmstat_pgmajfault_total 638.0 1796619548993
# TYPE engram_host_memory_cached_bytes gauge
engram_host_memory_cached_bytes 2.092662784e+09 1796619548993
# TYPE engram_host_pressure_io_some_seconds counter
engram_host_pressure_io_some_seconds_total 8.924722 1796619548993
"""  # noqa: E501


def test_a_node_exporter_scrape_gives_the_disk_and_host_figures():
    sample = parse_host_sample(NODE_EXPORTER_TEXT)
    assert sample.source == NODE_EXPORTER
    assert sample.processes is None and sample.tables == () and sample.wall_s is None
    assert sample.disks["nvme0n1"] == DiskFigures(
        device="nvme0n1", read_bytes=9.8304e10, reads_completed=2.4e7, read_time_s=1523.25,
        io_now=3, io_time_s=812.5)
    assert sample.disks["sda"].read_bytes == 4096 and sample.disks["sda"].io_time_s is None
    assert sample.system == SystemFigures(
        pgmajfault=123456, cached_bytes=6.4e10, anon_huge_pages_bytes=2.097152e9,
        shmem_huge_pages_bytes=0, memory_total_bytes=None, memory_available_bytes=7e10,
        io_some_s=30.25, io_full_s=12.5, memory_some_s=1.5, memory_full_s=0.5)


def test_an_agent_scrape_gives_the_tree_the_tables_and_the_clocks():
    sample = parse_host_sample(AGENT_TEXT)
    assert sample.source == AGENT and sample.residency == "mincore"
    assert sample.wall_s == pytest.approx(1796619548.9918983)
    assert sample.monotonic_s == 519.296623403
    tree = sample.processes
    assert tree is not None
    assert (tree.alive, tree.ended, tree.major_faults, tree.read_bytes) == (3, 1, 17, 8192)
    assert (tree.rss_file_bytes, tree.pinned_bytes, tree.rss_anon_bytes) == (1662976, 4096, 0)
    nvme, shm = sample.tables
    assert (nvme.device, nvme.resident_bytes, nvme.sampled_fraction) == \
        ("nvme0n1", 33554432, 0.25)
    assert (shm.path, shm.device, shm.resident_bytes) == ("/dev/shm/table.bin", None, 4096)
    assert list(sample.disks) == ["nvme0n1"]
    assert sample.disks["nvme0n1"].read_time_s == 338.671
    assert sample.system.pgmajfault == 638 and sample.system.io_full_s is None  # absent: None


def test_a_tree_whose_io_was_never_readable_has_no_read_bytes():
    text = "\n".join(line for line in AGENT_TEXT.splitlines()
                     if "process_read_bytes" not in line)
    sample = parse_host_sample(text)
    assert sample.processes is not None and sample.processes.read_bytes is None


@pytest.mark.parametrize(("text", "message"), [
    ("<html>not found</html>\n", "not Prometheus text"),
    ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n",
     "neither engram-bench agent's figures"),
])
def test_a_scrape_that_is_no_host_sample_is_refused(text, message):
    with pytest.raises(NotHostMetrics, match=message):
        parse_host_sample(text)
