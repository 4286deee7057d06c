"""The engine on the `tiny` preset: identical greedy tokens under every placement."""

import os
import threading

import pytest
import torch

from runners.engram import table_file
from runners.engram.config import preset
from runners.engram.engine import Engine
from runners.engram.geometry import EngramGeometry
from runners.engram.model import load_model
from runners.engram.scheduler import SamplingParams, Sequence
from runners.engram.table_store import open_store

# `make cuda-check` runs these on CUDA; everywhere else they run on the CPU.
CPU = torch.device(os.environ.get("ENGRAM_TEST_DEVICE", "cpu"))


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    cfg = preset("tiny")
    root = tmp_path_factory.mktemp("engram")
    geometry = EngramGeometry(cfg.engram_layers, cfg.engram_orders, cfg.engram_heads,
                              cfg.engram_row_values, 4 * 2**20)
    return cfg, geometry, table_file.create(root / "t.bin", geometry), load_model(
        cfg, root / "weights", CPU)


def generate(parts, placement, io, prefetch=True, n=3, max_tokens=10, params=None):
    _, geometry, table, model = parts
    store = open_store(table, placement, io, CPU, budget_bytes=256 * 1024)
    engine = Engine(model, geometry, store, eos_id=0, max_running=2, max_waiting=8,
                    prefetch=prefetch)
    engine.start()
    results: dict[str, tuple[list[int], str]] = {}
    done = threading.Event()

    def collector(name):
        tokens: list[int] = []

        def on_token(token, reason):
            if token is not None:
                tokens.append(token)
            if reason is not None:
                results[name] = (tokens, reason)
                if len(results) == n:
                    done.set()
        return on_token

    for i in range(n):  # 3 requests, 2 slots: one waits, batches change mid-flight
        p = params or SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        engine.submit(Sequence(f"r{i}", list(range(100 + i, 120 + 3 * i)), p), collector(f"r{i}"))
    assert done.wait(60)
    engine.stop()
    store.close()
    return results, store.stats, engine.stats


def test_greedy_outputs_are_bit_identical_across_placements(parts):
    reference, _, _ = generate(parts, "device", "mmap")
    assert all(len(t) == 10 and r == "length" for t, r in reference.values())
    for placement, io, prefetch in [("host", "mmap", True), ("nvme", "mmap", True),
                                    ("nvme", "direct", True), ("nvme", "mmap", False)]:
        got, _, _ = generate(parts, placement, io, prefetch)
        assert got == reference, (placement, io, prefetch)


def test_bytes_per_token_is_the_engram_geometry(parts):
    cfg, geometry, _, _ = parts
    _, table_stats, engine_stats = generate(parts, "nvme", "mmap")
    tokens = engine_stats.prefill_tokens + engine_stats.decode_tokens
    per_token = table_stats.rows_requested * geometry.row_bytes / tokens
    assert per_token == cfg.engram_bytes_per_token == 2 * 8 * 160


def test_seeded_sampling_is_reproducible(parts):
    params = SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=42, ignore_eos=True)
    a, _, _ = generate(parts, "device", "mmap", params=params)
    b, _, _ = generate(parts, "host", "mmap", params=params)
    assert a == b
    greedy, _, _ = generate(parts, "device", "mmap")
    assert a != greedy
