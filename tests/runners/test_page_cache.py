"""The nvme/mmap page cache as the kernel sees it: budget, LRU, cold and warm starts, scales.

Residency is read with mincore (the kernel's page cache) and /proc/self/pagemap (the mapping's
RSS), never from the store's bookkeeping.
"""

import numpy as np
import pytest
import torch

from runners.engram import os_io, table_file
from runners.engram.geometry import EngramGeometry
from runners.engram.page_lru import PageLRU
from runners.engram.table_store import DirectTable, open_store

QWEN = dict(layers=(2,), orders=(2, 3), heads=8, row_bytes=160)
SCALED = dict(layers=(1, 3), orders=(2, 3, 4), heads=8, row_bytes=256, scale_bytes=8)
CPU = torch.device("cpu")


def test_lru_chooses_the_least_recently_used_pages_and_spares_the_latest():
    lru = PageLRU(n_pages=100, budget_pages=4)
    assert list(lru.touch(np.array([1, 2, 3]))) == [1, 2, 3]
    assert list(lru.touch(np.array([3, 4, 5]))) == [4, 5]  # 3 was held already
    lru.touch(np.array([1]))  # 1 is now the most recent
    assert lru.held_pages == 5
    assert list(lru.victims(3)) == [2, 3]  # oldest first: 2, 3 (stamp 1 and 2)
    assert lru.held_pages == 3 and list(lru.held(np.array([1, 2, 4]))) == [True, False, True]
    lru.touch(np.array([7, 8, 9]))
    assert set(lru.victims(0)) == {1, 4, 5}  # the latest touch (7, 8, 9) is being read


def written_table(tmp_path, geometry_args: dict, mib: int) -> tuple:
    geometry = EngramGeometry(**geometry_args, table_bytes=mib * 2**20)
    return geometry, table_file.create(tmp_path / "table.bin", geometry)


def decode_like_gathers(geometry: EngramGeometry, steps: int, running: int = 8):
    """C=8 decode steps over natural-ish ids: each step, 8 new tokens' rows."""
    rng = np.random.default_rng(0)
    ids = rng.zipf(1.3, size=steps * running + 8) % 30_000
    for step in range(steps):
        yield np.concatenate([geometry.row_ids(ids[step * running + i: step * running + i + 4], 1)
                              for i in range(running)])


@pytest.mark.parametrize("state", ["cold", "warm"])
def test_residency_stays_within_the_budget_on_a_table_six_times_larger(tmp_path, state):
    """Right after the file was written (large folios in the page cache) too."""
    geometry, table = written_table(tmp_path, QWEN, 24)
    budget = table.data_bytes // 6
    store = open_store(table, "nvme", "mmap", CPU, budget, state)
    try:
        start = store.residency()["table_resident_bytes"]
        assert start == 0 if state == "cold" else start <= budget * 1.05
        read_before = os_io.disk_read_bytes()
        peaks = []
        for i, rows in enumerate(decode_like_gathers(geometry, 600)):
            store.submit(rows).wait()
            if i % 25 == 0:
                r = store.residency()
                peaks.append((r["table_resident_bytes"], r["table_mapping_rss_bytes"]))
        assert max(p[0] for p in peaks) <= budget * 1.05  # page cache (mincore)
        assert max(p[1] for p in peaks) <= budget * 1.05  # this process's RssFile share
        counters = store.counters.snapshot()
        assert counters["pages_evicted"] > 0
        # page by page, never the whole file: residency stays near the budget once full
        assert min(p[0] for p in peaks[len(peaks) // 2:]) > budget * 0.5
        if read_before is not None:
            assert os_io.disk_read_bytes() > read_before  # the rows came from disk
    finally:
        store.close()


def test_cold_start_leaves_nothing_resident_and_the_first_gather_reads_the_disk(tmp_path):
    geometry, table = written_table(tmp_path, QWEN, 8)  # just written: dirty, in the cache
    store = open_store(table, "nvme", "mmap", CPU, table.data_bytes, "cold")
    try:
        assert store.residency()["table_resident_bytes"] == 0
        faults = os_io.page_faults()[0]
        read = os_io.disk_read_bytes()
        store.submit(geometry.row_ids(np.arange(64), 64)).wait()
        assert store.residency()["table_resident_bytes"] > 0
        assert os_io.page_faults()[0] >= faults
        if read is not None:
            assert os_io.disk_read_bytes() - read >= 4096
    finally:
        store.close()


def test_a_scaled_row_is_two_reads_in_two_regions(tmp_path, monkeypatch):
    """Counted from the store's own reads: preads (direct) and resident pages (mmap)."""
    _, table = written_table(tmp_path, SCALED, 8)
    assert table.scale_bytes == 8 and table.scale_offset >= table.data_offset + table.values_bytes
    reads = []
    real_preadv = os_io.os.preadv

    def counting_preadv(fd, buffers, offset):
        reads.append(offset)
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr("runners.engram.table_store.os.preadv", counting_preadv)
    direct = DirectTable(table, CPU, cache_bytes=2**20)
    try:
        rows = np.array([[5, 900, 5000]])
        got = direct.submit(rows).wait()
        assert got.shape == (1, 3, 264) and len(reads) == 2 * 3  # two accesses per row
        values = [o for o in reads if o < table.scale_offset]
        assert len(values) == 3 and len(reads) - len(values) == 3
    finally:
        direct.close()
    mapped = open_store(table, "nvme", "mmap", CPU, table.data_bytes, "cold")
    try:
        mapped.submit(np.array([[7]])).wait()
        whole = os_io.mincore(mapped._base, table.file_bytes)
        resident = np.flatnonzero(whole) * 4096
        assert (resident < table.scale_offset).sum() >= 1  # the values' page
        assert (resident >= table.scale_offset).sum() >= 1  # and the scales' page
        device = open_store(table, "device", "mmap", CPU, 0)
        assert torch.equal(mapped.submit(rows).wait(), device.submit(rows).wait())
        device.close()
    finally:
        mapped.close()


@pytest.mark.parametrize("page_reads", ["parallel", "faults"])
def test_missing_pages_are_read_in_parallel_or_by_their_own_faults(tmp_path, page_reads):
    """parallel: the reads are asked for up front, so the copy finds them and faults minor;
    faults: every missing page is a major fault (queue depth 1), as in a plain mmap'd table."""
    geometry, table = written_table(tmp_path, QWEN, 8)
    store = open_store(table, "nvme", "mmap", CPU, table.data_bytes, "cold", page_reads)
    try:
        major = os_io.page_faults()[0]
        read = os_io.disk_read_bytes()
        store.submit(geometry.row_ids(np.arange(1, 200, 3), 60)).wait()
        pages = store.counters.snapshot()["pages_requested"]
        faults = os_io.page_faults()[0] - major
        if page_reads == "faults":
            assert faults >= pages // 2
        else:
            assert faults < pages // 2
        if read is not None:
            assert os_io.disk_read_bytes() - read >= pages // 2 * 4096
    finally:
        store.close()


def _smaps_rss(address: int) -> int:
    """The Rss line of the mapping that starts at `address` in /proc/self/smaps."""
    with open("/proc/self/smaps") as f:
        lines = iter(f)
        for line in lines:
            if line.startswith(f"{address:x}-"):
                for rest in lines:
                    if rest.startswith("Rss:"):
                        return int(rest.split()[1]) * 1024
    raise AssertionError(f"no mapping at {address:x}")


def test_a_mappings_rss_is_the_count_smaps_gives(tmp_path):
    """The mapping's Rss read from pagemap's present bits over its range alone is the Rss
    that smaps gives for it, as pages are faulted in and dropped."""
    import mmap

    path = tmp_path / "f.bin"
    path.write_bytes(b"\1" * (64 * os_io.PAGE))
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        pages = np.frombuffer(mapped, dtype=np.uint8)
        address = pages.ctypes.data
        seen = []
        for touched in (range(0), range(0, 64, 3), range(64)):
            for page in touched:
                assert pages[page * os_io.PAGE] == 1  # a fault maps the page
            seen.append((os_io.mapping_rss_bytes(address, len(mapped)), _smaps_rss(address)))
        os_io.madvise(address, len(mapped), os_io.MADV_DONTNEED)
        seen.append((os_io.mapping_rss_bytes(address, len(mapped)), _smaps_rss(address)))
        assert all(ours == smaps for ours, smaps in seen), seen
        assert seen[-2][0] == 64 * os_io.PAGE and seen[-1][0] == 0
        del pages
    finally:
        mapped.close()
