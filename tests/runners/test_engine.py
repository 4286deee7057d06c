"""The engine on the tiny presets: identical tokens under every placement, one gather per
Engram layer, each step's time accounted in full, replayed natural text."""

import dataclasses
import os
import threading
import time

import numpy as np
import pytest
import torch

from common.corpus import text
from runners.engram import table_file
from runners.engram.compression import compression_map
from runners.engram.config import preset
from runners.engram.engine import Engine
from runners.engram.geometry import EngramGeometry
from runners.engram.model import load_model
from runners.engram.scheduler import SamplingParams, Sequence
from runners.engram.table_store import open_store
from runners.engram.tokenizer import EngramTokenizer

# `make cuda-check` runs these on CUDA; everywhere else they run on the CPU.
CPU = torch.device(os.environ.get("ENGRAM_TEST_DEVICE", "cpu"))
PROMPTS = [list(range(100 + i, 120 + 3 * i)) for i in range(3)]  # 3 requests, 2 slots
GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """Model, geometry and table file of a preset, built once per module."""
    built = {}

    def parts(name):
        if name not in built:
            cfg = preset(name)
            root = tmp_path_factory.mktemp(name)
            geometry = EngramGeometry(cfg.engram_layers, cfg.engram_orders, cfg.engram_heads,
                                      cfg.engram_row_values, 4 * 2**20,
                                      scale_bytes=cfg.engram_scale_bytes)
            built[name] = (cfg, geometry, table_file.create(root / "t.bin", geometry),
                           load_model(cfg, root / "weights", CPU))
        return built[name]

    return parts


def run(parts, store, prompts=PROMPTS, params=GREEDY, model=None, **engine_options):
    """Every request is queued before the engine starts, so each run takes the same steps."""
    _, geometry, _, lm = parts
    engine = Engine(model or lm, geometry, store, eos_id=0, max_running=2, max_waiting=8,
                    **engine_options)
    results: dict[int, tuple[list[int], str]] = {}
    done = threading.Event()
    for i, prompt in enumerate(prompts):
        tokens: list[int] = []

        def on_token(token, reason, i=i, tokens=tokens):
            if token is not None:
                tokens.append(token)
            if reason is not None:
                results[i] = (tokens, reason)
                if len(results) == len(prompts):
                    done.set()

        engine.submit(Sequence(f"r{i}", prompt, params), on_token)
    engine.start()
    assert done.wait(60)
    engine.stop()
    return [results[i] for i in range(len(prompts))], engine.stats


def generate(parts, placement, io="mmap", ratio=None, state="cold", **options):
    budget = int(parts[2].data_bytes * ratio) if ratio else 256 * 1024
    store = open_store(parts[2], placement, io, CPU, budget_bytes=budget, cache_state=state)
    try:
        outputs, stats = run(parts, store, **options)
        return outputs, store.counters.snapshot(), stats
    finally:
        store.close()


class FakeGather:
    def __init__(self, table: torch.Tensor, rows: np.ndarray, layer: int, delay: float) -> None:
        self.rows, self.layer = rows, layer
        self.submitted = time.perf_counter()
        self.ready_at = self.submitted + delay
        self.returned = 0.0
        self._table = table

    def wait(self) -> torch.Tensor:
        time.sleep(max(0.0, self.ready_at - time.perf_counter()))
        self.returned = time.perf_counter()
        return self._table[torch.from_numpy(self.rows).to(self._table.device)]


class FakeStore:
    """An in-memory table whose gathers for one Engram layer complete `delay` s after their
    submit; every gather is logged in submit order."""

    def __init__(self, geometry: EngramGeometry, slow_layer: int | None = None,
                 delay: float = 0.0) -> None:
        gen = torch.Generator().manual_seed(1)
        table = torch.randint(0, 256, (geometry.total_rows, geometry.row_width),
                              generator=gen, dtype=torch.uint8)
        table[:, : geometry.row_bytes] &= 0xBF  # finite e4m3 values
        table[:, geometry.row_bytes :] = 124 + table[:, geometry.row_bytes :] % 7  # 2**-3..2**3
        self.device = CPU
        self.log: list[FakeGather] = []
        self._table, self._geometry = table.to(CPU), geometry
        self._slow_layer, self._delay = slow_layer, delay

    def submit(self, rows: np.ndarray, phase: str) -> FakeGather:
        assert phase in ("prefill", "decode")
        layer_starts = self._geometry.offsets[:, 0, 0]
        layer = self._geometry.layers[int(np.searchsorted(layer_starts, rows.min(), "right")) - 1]
        gather = FakeGather(self._table, rows, layer,
                            self._delay if layer == self._slow_layer else 0.0)
        self.log.append(gather)
        return gather


class Recording:
    """The model, keeping each step's logits."""

    def __init__(self, model) -> None:
        self.model, self.cfg, self.logits = model, model.cfg, []

    def __call__(self, *args):
        logits = self.model(*args)
        self.logits.append(logits.clone())
        return logits


@pytest.mark.parametrize("name", ["tiny", "tiny-scaled"])
def test_greedy_outputs_are_bit_identical_across_placements(build, name):
    parts = build(name)
    reference, _, _ = generate(parts, "device")
    assert all(len(t) == 10 and r == "length" for t, r in reference)
    for placement, io, prefetch, ratio, state in [
            ("host", "mmap", True, None, "cold"), ("nvme", "mmap", True, None, "cold"),
            ("nvme", "direct", True, None, "cold"), ("nvme", "mmap", False, None, "cold"),
            ("nvme", "mmap", True, 1 / 32, "cold"), ("nvme", "mmap", True, 1 / 6, "warm"),
            ("nvme", "mmap", True, 1.0, "warm")]:
        got, _, _ = generate(parts, placement, io, ratio, state, prefetch=prefetch)
        assert got == reference, (placement, io, prefetch, ratio, state)


def test_bytes_per_token_is_the_engram_geometry_values_and_scales(build):
    cfg, geometry, _, _ = parts = build("tiny-scaled")
    _, counters, stats = generate(parts, "nvme")
    tokens = stats.prefill_tokens + stats.decode_tokens
    assert counters["bytes_requested"] / tokens == cfg.engram_bytes_per_token
    assert cfg.engram_bytes_per_token == geometry.rows_per_token * (
        cfg.engram_row_values + cfg.engram_scale_bytes)


def test_seeded_sampling_is_reproducible(build):
    parts = build("tiny")
    params = SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=42, ignore_eos=True)
    a, _, _ = generate(parts, "device", params=params)
    b, _, _ = generate(parts, "host", params=params)
    assert a == b
    greedy, _, _ = generate(parts, "device")
    assert a != greedy


def test_each_engram_layer_waits_only_for_its_own_rows(build):
    parts = build("tiny-scaled")
    first, last = parts[1].layers
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    expected, _ = run(parts, FakeStore(parts[1]), PROMPTS[:2], params)
    slow = FakeStore(parts[1], slow_layer=last, delay=0.05)
    got, stats = run(parts, slow, PROMPTS[:2], params)
    assert got == expected
    steps = list(zip(slow.log[::2], slow.log[1::2], strict=True))
    assert len(steps) == stats.steps
    # both submitted before layer 0; the first layer's rows are used before the last's arrive
    assert all((a.layer, b.layer) == (first, last) and a.returned < b.ready_at
               for a, b in steps)
    waits = stats.engram_wait_ms_by_layer
    assert waits[last] > 0.5 * stats.steps * 50
    assert waits[first] < waits[last] / 10


def test_without_prefetch_each_layer_submits_at_its_own_layer(build):
    parts = build("tiny-scaled")
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    expected, _ = run(parts, FakeStore(parts[1]), PROMPTS[:2], params)
    store = FakeStore(parts[1])
    got, _ = run(parts, store, PROMPTS[:2], params, prefetch=False)
    assert got == expected
    assert all(b.submitted > a.returned for a, b in zip(store.log[::2], store.log[1::2],
                                                         strict=True))


def test_step_time_is_accounted_in_full(build):
    _, _, stats = generate(build("tiny-scaled"), "device")
    segments = [stats.hash_ms, stats.compute_ms, *stats.engram_wait_ms_by_layer.values(),
                stats.sample_ms, stats.emit_ms]
    assert min(segments) >= 0
    assert 0.9 * stats.step_ms <= sum(segments) <= stats.step_ms * 1.0001
    assert (stats.prefill_steps, stats.decode_steps) == (3, stats.steps - 3)
    assert stats.prefill_step_ms + stats.decode_step_ms == pytest.approx(stats.step_ms)
    assert stats.prefill_tokens == sum(map(len, PROMPTS))
    assert stats.decode_tokens == 9 * len(PROMPTS)  # the first token of each comes from prefill


def test_replay_emits_natural_text_with_the_same_logits_on_every_placement(build):
    parts = build("tiny")
    tok = EngramTokenizer()
    prompts = [tok.encode("Tell me about lists."), tok.encode("Tell me about lists."),
               tok.encode("What is a generator?")]
    params = SamplingParams(max_tokens=12)  # EOS allowed: replay never emits it
    runs = []
    for placement, io, ratio, state in [("device", "mmap", None, "cold"),
                                        ("host", "mmap", None, "cold"),
                                        ("nvme", "mmap", 1 / 32, "cold"),
                                        ("nvme", "mmap", 1 / 6, "warm"),
                                        ("nvme", "direct", 1 / 32, "cold")]:
        recording = Recording(parts[3])
        outputs, _, _ = generate(parts, placement, io, ratio, state, prompts=prompts,
                                 params=params, model=recording, decode="replay")
        runs.append((outputs, recording.logits))
    (outputs, logits), *others = runs
    for other_outputs, other_logits in others:
        assert outputs == other_outputs
        assert len(logits) == len(other_logits)
        assert all(torch.equal(a, b) for a, b in zip(logits, other_logits, strict=True))
    assert all(len(tokens) == 12 and reason == "length" for tokens, reason in outputs)
    texts = [tok.decode(tokens) for tokens, _ in outputs]
    corpus = text() + text()  # a replay may wrap around the end
    assert all(t in corpus and len(t.split()) >= 4 for t in texts)
    assert texts[0] == texts[1] != texts[2]
    sampled, _, _ = generate(parts, "device", prompts=prompts, params=params)
    assert sampled != outputs


def test_engine_hashes_compressed_ids(build):
    _, geometry, _, _ = parts = build("tiny")
    tok = EngramTokenizer()
    upper, lower = tok.encode("The cat sat on the mat"), tok.encode("the cat sat on the mat")
    assert upper != lower and len(upper) == len(lower)
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    compressed = dataclasses.replace(geometry, compression=compression_map(tok))
    for geom, merged in ((geometry, False), (compressed, True)):
        stores = [FakeStore(geom), FakeStore(geom)]
        for store, prompt in zip(stores, (upper, lower), strict=True):
            run((None, geom, None, parts[3]), store, [prompt], params)
        assert np.array_equal(stores[0].log[0].rows, stores[1].log[0].rows) == merged
