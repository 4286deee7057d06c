"""The table-tier flags of `engram-bench serve`: the device's ratio, and refusals of nonsense."""

import pytest

from runners.engram.runtime import Runtime, ServerConfigError, ServerOptions
from runners.profiles import profile
from tests.runners.fixtures import serve


@pytest.mark.parametrize(("flags", "says"), [
    (("--placement", "nvme", "--cache-ratio", "0"), "--cache-ratio must be in (0, 1]"),
    (("--placement", "nvme", "--cache-ratio", "1.5"), "--cache-ratio must be in (0, 1]"),
    (("--placement", "device", "--cache-state", "cold"), "--cache-state means nothing"),
    (("--placement", "nvme", "--page-cache-gb", "0.0001"), "smaller than one decode step"),
])
def test_nonsense_is_refused_in_one_sentence(tmp_path, flags, says):
    proc = serve(*flags, cwd=tmp_path)
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    if "decode step" not in says:  # refused before any table file is made
        assert not (tmp_path / "results").exists()


def test_the_budget_is_the_devices_share_of_this_table(tmp_path):
    spark = profile("spark")
    runtime = Runtime(ServerOptions(preset="tiny", placement="nvme", table_gib=0.004,
                                    cache_ratio=spark.cache_ratio, results_dir=tmp_path,
                                    max_running=2))
    try:
        published = spark.page_cache_budget_gib / spark.published_table_gib
        assert runtime.table_budget == pytest.approx(runtime.table.data_bytes * published, 1e-6)
        assert "page-cache budget" in runtime.describe_table()
        stats = runtime.stats()
        assert stats["cache_ratio"] == pytest.approx(published, 1e-6)
        assert stats["cache_state"] == "cold" and stats["table_resident_bytes"] == 0
    finally:
        runtime.store.close()


def test_placements_in_memory_keep_the_whole_table():
    for name in ("rtx-pro-6000", "b300"):
        assert profile(name).cache_ratio == 1.0
        assert profile(name).table_placement in ("host", "device")
    with pytest.raises(ServerConfigError, match="only nvme has a page cache"):
        ServerOptions(placement="host", cache_state="warm")
