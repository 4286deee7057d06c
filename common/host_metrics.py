"""The names of the figures `engram-bench agent` serves at /metrics: the agent writes them, the
harness reads them back (beside a node_exporter's names for the same kernel counters). One
list, so a renamed figure cannot leave the reader looking for the old name.

Every figure is kernel truth, read at the scrape: /proc/PID/{stat,io,status} for the serving
process tree, mincore(2) or cachestat(2) for each table file, /proc/diskstats for the block
device under a table file, /proc/vmstat, /proc/meminfo and /proc/pressure for the host. The
names carry their units; `_total` names are counters (read as the growth between two
scrapes), the others gauges (the value now). Each sample carries the agent's wall clock in
ms as its Prometheus timestamp.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "engram_host_"

# Labels
PATH: Final = "path"
"""A table file's path, as the agent was given it (a folder's files: the folder's path and
the file's name)."""
DEVICE: Final = "device"
"""The kernel's name of a whole disk (nvme0n1, not nvme0n1p2), as in /proc/diskstats; on a
table file's series, empty where no block device holds the file (tmpfs, overlay, NFS)."""
RESIDENCY: Final = "residency"
"""On AGENT_INFO: how residency is read, cachestat or mincore."""

# The agent and its clocks
AGENT_INFO: Final = "engram_host_agent_info"
"""Always 1; its labels say how the agent reads (RESIDENCY)."""
CLOCK_MONOTONIC: Final = "engram_host_clock_monotonic_seconds"
"""The agent host's monotonic clock at the scrape (CLOCK_MONOTONIC, seconds since boot)."""
CLOCK_WALL: Final = "engram_host_clock_wall_seconds"
"""The agent host's wall clock, read right after CLOCK_MONOTONIC: the pair maps the host's
clocks to a reader's, as the round trip of the scrape bounds."""
COLLECT_SECONDS: Final = "engram_host_agent_collect_seconds"
"""Wall time this scrape's reads took the agent (its cost, a scrape at a time)."""

# The serving process tree (--pid or --match, children included): counters are totals over
# every member seen, one that ended keeping what it counted when last seen; memory gauges sum
# the living members
PROCESSES: Final = "engram_host_processes"
"""Members of the tree alive now; 0 once the server has ended (the agent goes on serving)."""
PROCESSES_ENDED: Final = "engram_host_processes_ended_total"
"""Members that ended since the agent started."""
PROCESS_IO_UNREADABLE: Final = "engram_host_process_io_unreadable"
"""Living members whose /proc/PID/io the agent may not read (another user's process):
PROCESS_READ_BYTES leaves out what they read since."""
PROCESS_MINOR_FAULTS: Final = "engram_host_process_minor_faults_total"
PROCESS_MAJOR_FAULTS: Final = "engram_host_process_major_faults_total"
"""Faults that waited for storage (/proc/PID/stat majflt)."""
PROCESS_READ_BYTES: Final = "engram_host_process_read_bytes_total"
"""Bytes the tree caused to be read from storage (/proc/PID/io read_bytes: page-fault and
O_DIRECT reads alike; not page-cache hits). Absent when no member's io file was readable."""
PROCESS_RSS_ANON: Final = "engram_host_process_rss_anon_bytes"
PROCESS_RSS_FILE: Final = "engram_host_process_rss_file_bytes"
"""Resident pages of mapped files (a table read through its file mapping shows here)."""
PROCESS_RSS_SHMEM: Final = "engram_host_process_rss_shmem_bytes"
"""Resident shared memory (a table copied into /dev/shm shows here)."""
PROCESS_LOCKED: Final = "engram_host_process_locked_bytes"
"""mlock()ed memory (/proc/PID/status VmLck)."""
PROCESS_PINNED: Final = "engram_host_process_pinned_bytes"
"""Memory pinned through the kernel's pin accounting (VmPin); a driver that pins pages
without it is not counted here."""

# Each table file (--table), labelled PATH
TABLE_FILE_BYTES: Final = "engram_host_table_file_bytes"
"""The file's size; also labelled DEVICE, the disk that holds it."""
TABLE_RESIDENT_BYTES: Final = "engram_host_table_resident_bytes"
"""The file's bytes in the page cache now; scaled from a sample when
TABLE_SAMPLED_FRACTION < 1."""
TABLE_SAMPLED_FRACTION: Final = "engram_host_table_sampled_fraction"
"""The share of the file's pages this scrape asked the kernel about: 1 = exact."""

# Each disk under a table file, labelled DEVICE (/proc/diskstats)
DISK_READ_BYTES: Final = "engram_host_disk_read_bytes_total"
DISK_READS_COMPLETED: Final = "engram_host_disk_reads_completed_total"
DISK_READ_TIME: Final = "engram_host_disk_read_time_seconds_total"
"""The time reads spent in flight, summed over reads (concurrent reads each count)."""
DISK_IO_NOW: Final = "engram_host_disk_io_now"
"""I/Os in flight now."""
DISK_IO_TIME: Final = "engram_host_disk_io_time_seconds_total"
"""Time the disk had any I/O in flight: its growth over a window is the disk's busy share."""

# The host
VMSTAT_PGMAJFAULT: Final = "engram_host_vmstat_pgmajfault_total"
"""Major faults of every process on the host (/proc/vmstat pgmajfault)."""
MEMINFO: Final = {
    "Cached": "engram_host_memory_cached_bytes",
    "AnonHugePages": "engram_host_memory_anon_huge_pages_bytes",
    "ShmemHugePages": "engram_host_memory_shmem_huge_pages_bytes",
    "MemTotal": "engram_host_memory_total_bytes",
    "MemAvailable": "engram_host_memory_available_bytes",
}
"""/proc/meminfo's lines read -> their names (Cached: the page cache, table files included)."""
PRESSURE: Final = {
    ("io", "some"): "engram_host_pressure_io_some_seconds_total",
    ("io", "full"): "engram_host_pressure_io_full_seconds_total",
    ("memory", "some"): "engram_host_pressure_memory_some_seconds_total",
    ("memory", "full"): "engram_host_pressure_memory_full_seconds_total",
}
"""PSI (/proc/pressure/io and memory): time some, or all, non-idle tasks were stalled on the
resource; absent where the kernel has no PSI."""

# The table's start state (`engram-bench agent`'s POST /table/drop, `run --table-state cold`)
COLD_SHARE: Final = 0.02
"""At most this share of the table's bytes resident after a drop, or at a level's start: the
table is cold. More means another process maps or locks its pages, and cold is not claimed."""
