import json

import pytest

from runners import recipes
from runners.profiles import PROFILES, profile
from tests.conftest import run_cli


def test_profiles_hold_the_design_table():
    assert list(PROFILES) == ["spark", "rtx-pro-6000", "b300", "cpu"]
    expected = {"spark": ("nvme", 8, (1, 2, 4, 8)), "rtx-pro-6000": ("host", 16,
                (1, 2, 4, 8, 16, 32)), "b300": ("device", 64, (1, 2, 4, 8, 16, 32, 64)),
                "cpu": ("device", 8, (1, 2, 4, 8))}
    for name, (placement, running, levels) in expected.items():
        p = profile(name)
        assert (p.table_placement, p.max_running_requests, p.default_levels) == (
            placement, running, levels)
    assert profile("spark").page_cache_budget_gib == 8 and profile("spark").unified


def test_devices_cli_lists_every_profile():
    out = json.loads(run_cli("devices", "--json").stdout)
    assert set(out) == set(PROFILES) and out["spark"]["bandwidth_gbs"] == 273


@pytest.mark.parametrize(("engine", "model", "device", "nodes", "flags"), [
    ("sglang", "qwen3.8-flash-next", "spark", None, ["--tp 1", "--speculative-num-steps 3",
                                                     "--speculative-num-draft-tokens 4"]),
    ("vllm", "deepseek-v4.1-flash", "spark", 4, ["--tensor-parallel-size 4", "ray start"]),
    ("vllm", "deepseek-v4.1-flash", "spark", 8, ["--tensor-parallel-size 8"]),
])
def test_recipes_render_the_published_configurations(engine, model, device, nodes, flags):
    text = recipes.render(recipes.find(engine, model, device, nodes))
    assert text.startswith("# engine-version dependent")
    for flag in flags:
        assert flag in text
    assert f"MODEL={model}" in text


def test_unknown_recipe_lists_the_published_ones():
    proc = run_cli("recipe", "--engine", "vllm", "--model", "qwen3.8-flash-next", "--device",
                   "spark")
    assert proc.returncode == 2 and "published: --engine sglang --model qwen3.8" in proc.stderr
