"""The bundled server's KV pool from the device's published pools, scaled like the table."""

import pytest

from runners.profiles import profile
from runners.sizing import MODELS, bundled_kv_pool_bytes

TABLE = 2**30


def test_spark_on_nvme_gets_the_published_larger_pool():
    spark = profile("spark")
    memory = bundled_kv_pool_bytes(spark, "device", TABLE)
    nvme = bundled_kv_pool_bytes(spark, "nvme", TABLE)
    assert memory == bundled_kv_pool_bytes(spark, "host", TABLE)
    assert nvme > memory
    assert nvme / memory == pytest.approx(spark.kv_pool_nvme_gb / spark.kv_pool_memory_gb,
                                          rel=1e-6)
    # the published deployment: its table share per node gives its own pool back
    table = int(spark.kv_reference_table_gb * 1e9)
    assert bundled_kv_pool_bytes(spark, "nvme", table) == pytest.approx(30e9, rel=1e-6)
    assert bundled_kv_pool_bytes(spark, "device", 2 * TABLE) == pytest.approx(2 * memory, abs=1)


@pytest.mark.parametrize("device", ["cpu", "rtx-pro-6000", "b300"])
def test_a_profile_without_published_pools_gives_none(device):
    assert bundled_kv_pool_bytes(profile(device), "nvme", TABLE) is None
    assert bundled_kv_pool_bytes(profile(device), "device", TABLE) is None


def test_the_bundled_presets_context_matches_the_server():
    from runners.engram.config import preset

    for name in ("qwen-mini", "deepseek-mini"):
        assert MODELS[name].context_limit == preset(name).max_seq
