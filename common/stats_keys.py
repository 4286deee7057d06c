"""The names of the bundled server's GET /stats figures that are read outside the server: the
server builds its snapshot with them, the harness stores the table's part with a run and the
explorer derives per-level figures from two snapshots. One list, so a renamed figure cannot
leave a reader looking for the old name.

Each name says whether its figure is kernel truth (counted by the kernel: /proc/self/io,
getrusage, the block device's sysfs stat, mincore, smaps) or the server's own arithmetic and
clocks (`*_requested`: what the code asked for, rows x row width, not what storage read)."""

from __future__ import annotations

from typing import Final

# How the table is served (text; None where it does not apply)
PLACEMENT: Final = "placement"
"""Where the Engram table lives: device, host or nvme."""
IO_MODE: Final = "io_mode"
"""nvme only: how rows are read, mmap (page cache) or direct (O_DIRECT and a row cache)."""
CACHE_STATE: Final = "cache_state"
"""nvme only: how the table's cache started, cold (dropped) or warm."""
TABLE_PATH: Final = "table_path"
"""The table file's path on the server's host."""
DECODE: Final = "decode"
"""How generated tokens are chosen: sample, or replay (a natural text; logits still
computed)."""

# Sizes (gauges: the value now)
TABLE_BYTES: Final = "table_bytes"
"""The Engram table's size, values and scales (the file's arithmetic)."""
TABLE_BUDGET_BYTES: Final = "table_budget_bytes"
"""nvme only: the page-cache (mmap) or row-cache (direct) budget of the table."""
CACHE_RATIO: Final = "cache_ratio"
"""nvme only: table_budget_bytes / table_bytes."""
TABLE_RESIDENT_BYTES: Final = "table_resident_bytes"
"""Kernel truth: table bytes resident in the page cache now (mincore); nvme mmap only."""
TABLE_RESIDENT_PEAK_BYTES: Final = "table_resident_peak_bytes"
"""Kernel truth: the highest sampled table_resident_bytes."""
TABLE_MAPPING_RSS_BYTES: Final = "table_mapping_rss_bytes"
"""Kernel truth: the RSS of the table's mapping in the server process (/proc/self/smaps)."""

# Clocks and counts since the server started serving (counters: grow, read as deltas)
UPTIME_S: Final = "uptime_s"
"""Seconds since the server started serving."""
TOKENS: Final = "tokens"
"""Prompt and generated tokens the engine processed (computed: a prompt's prefix found in
the prefix cache is not)."""
PREFILL_TOKENS: Final = "prefill_tokens"
"""... of them, prompt tokens."""
DECODE_TOKENS: Final = "decode_tokens"
"""... of them, generated tokens."""
STEP_MS: Final = "step_ms"
"""Wall time of engine steps; the parts below are the step's timed parts."""
COMPUTE_MS: Final = "compute_ms"
"""Step time in the forward pass, Engram waits excluded."""
ENGRAM_WAIT_MS: Final = "engram_wait_ms"
"""Step time blocked waiting for Engram rows (the stall), all layers."""
ENGRAM_WAIT_MS_BY_LAYER: Final = "engram_wait_ms_by_layer"
"""engram_wait_ms per Engram layer: a dict keyed by the layer's number as text."""
HASH_MS: Final = "hash_ms"
"""Step time computing row ids and submitting gathers."""
SAMPLE_MS: Final = "sample_ms"
"""Step time choosing the next tokens."""
EMIT_MS: Final = "emit_ms"
"""Step time handing tokens to the HTTP layer."""
GATHER_CPU_MS: Final = "gather_cpu_ms"
"""CPU time of the gather threads."""
BYTES_REQUESTED: Final = "bytes_requested"
"""The server's arithmetic: Engram bytes requested, rows x row width."""
PAGES_REQUESTED: Final = "pages_requested"
"""The server's arithmetic: distinct table file pages the gathers touched, summed (nvme mmap)."""
DISK_READ_BYTES: Final = "disk_read_bytes"
"""Kernel truth: bytes the server process read from storage (/proc/self/io read_bytes)."""
PAGE_FAULTS_MAJOR: Final = "page_faults_major"
"""Kernel truth: major page faults of the server process (getrusage)."""
PAGE_FAULTS_MINOR: Final = "page_faults_minor"
"""Kernel truth: minor page faults of the server process (getrusage)."""
BLOCKDEV_READS: Final = "blockdev_reads"
"""Kernel truth: reads completed by the table's block device, all processes (sysfs)."""
BLOCKDEV_READ_MS: Final = "blockdev_read_ms"
"""Kernel truth: time the table's block device spent on reads, summed per read (sysfs)."""

# Names older bundled servers sent; runs recorded with them keep their figures
LEGACY_ENGRAM_BYTES_READ: Final = "engram_bytes_read"
"""What bytes_requested was called before."""
LEGACY_STALL_MS: Final = "stall_ms"
"""What engram_wait_ms was called before."""
LEGACY_MAPPING_RESIDENT_BYTES: Final = "mapping_resident_bytes"
"""The table's resident bytes as the server once counted them itself (not the kernel)."""
