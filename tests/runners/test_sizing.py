"""The published fit verdicts, reproduced by the sizing arithmetic."""

import json

import pytest

from runners.sizing import size
from tests.helpers import run_cli


def test_full_qwen_checkpoint_fits_neither_spark_nor_rtx_in_memory():
    for device in ("spark", "rtx-pro-6000"):
        report = size("qwen3.8-flash-next", device, placement="device")
        assert report["verdict"] == "does_not_fit"
        assert report["required_gb"] > report["memory_gb_per_node"]


def test_qwen_fits_both_with_its_51_gb_table_offloaded():
    spark = size("qwen3.8-flash-next", "spark")
    assert (spark["verdict"], spark["placement"]) == ("fits_with_offload", "nvme")
    rtx = size("qwen3.8-flash-next", "rtx-pro-6000")
    assert (rtx["verdict"], rtx["placement"]) == ("fits_with_offload", "host")
    for report in (spark, rtx):
        assert report["offload_items_gb"]["Engram table"] == pytest.approx(51.2)
        assert report["offload_bytes_per_token"] == 2560
    assert spark["required_items_gb"]["cached table pages"] == pytest.approx(8.59, abs=0.01)


def test_deepseek_needs_offload_on_4_sparks_and_fits_8_in_memory():
    four = size("deepseek-v4.1-flash", "spark", nodes=4)
    assert four["verdict"] == "fits_with_offload" and four["placement"] == "nvme"
    assert four["in_memory_required_gb"] > 128
    assert four["offload_bytes_per_token"] == 48 * (256 + 8)  # FP8 values and ue8m0 scales
    # two accesses per row on NVMe (values and scales in separate regions): twice the pages
    qwen = size("qwen3.8-flash-next", "spark")
    assert four["offload_tier_bytes_per_token"] == 2 * 48 * 4096
    assert qwen["offload_tier_bytes_per_token"] == 16 * 4096
    eight = size("deepseek-v4.1-flash", "spark", nodes=8)
    assert (eight["verdict"], eight["placement"]) == ("fits", "device")
    assert size("deepseek-v4.1-flash", "spark", nodes=8, placement="nvme")["verdict"] == (
        "fits_with_offload")


def test_every_figure_can_be_overridden():
    tight = size("qwen3.8-flash-next", "rtx-pro-6000", overrides={"kv_pool_gb": 40})
    assert tight["verdict"] == "does_not_fit"
    small_host = size("qwen3.8-flash-next", "rtx-pro-6000", placement="host",
                      overrides={"host_ram_gb": 32})
    assert small_host["verdict"] == "does_not_fit"  # the table needs >= 51 GB of host RAM
    with pytest.raises(ValueError, match="unknown sizing figure"):
        size("qwen3.8-flash-next", "spark", overrides={"colour": 1})


def test_kv_from_context_and_concurrency_when_per_token_bytes_are_given():
    report = size("qwen3.8-flash-next", "spark", context=100_000, concurrency=4,
                  overrides={"kv_bytes_per_token": 50_000})
    assert report["required_items_gb"]["KV + recurrent pools"] == pytest.approx(20.0)


def test_decode_ceiling_is_bandwidth_over_active_bytes():
    report = size("qwen3.8-flash-next", "spark")
    assert report["decode_ceiling_tps_upper_bound"] == pytest.approx(273e9 / (6e9 * 0.7), 0.01)


def test_cli_json_and_bad_names():
    proc = run_cli("sizing", "--model", "deepseek-v4.1-flash", "--device", "spark", "--nodes",
                   "4", "--json")
    report = json.loads(proc.stdout)
    assert {"model", "device", "nodes", "placement", "required_gb", "offload_gb",
            "verdict"} <= set(report)
    assert report["verdict"] == "fits_with_offload"
    bad = run_cli("sizing", "--model", "gpt-9", "--device", "spark")
    assert bad.returncode == 2 and "valid: qwen3.8-flash-next" in bad.stderr
