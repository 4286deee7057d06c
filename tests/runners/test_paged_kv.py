"""The engine on the paged KV pool (tiny preset): a prefix-cached prefill gives exactly the
tokens of an uncached one, and a request the pool cannot hold yet waits for the one running."""

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

CPU = torch.device(os.environ.get("ENGRAM_TEST_DEVICE", "cpu"))
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    cfg = preset("tiny")
    root = tmp_path_factory.mktemp("paged")
    geometry = EngramGeometry(cfg.engram_layers, cfg.engram_orders, cfg.engram_heads,
                              cfg.engram_row_values, 4 * 2**20)
    table = table_file.create(root / "t.bin", geometry)
    store = open_store(table, "device", "mmap", CPU, budget_bytes=0, cache_state="cold")
    yield geometry, store, load_model(cfg, root / "weights", CPU)
    store.close()


def engine(parts, **kw) -> Engine:
    geometry, store, model = parts
    options = dict(max_running=2, max_waiting=8, decode="sample") | kw
    return Engine(model, geometry, store, eos_id=0, **options)


def submit(eng: Engine, seq: Sequence, log: list | None = None) -> threading.Event:
    done = threading.Event()

    def on_token(token, reason):
        if log is not None:
            log.append((seq.request_id, reason, eng.scheduler.waiting_for_kv,
                        len(eng.scheduler.waiting)))
        if reason is not None:
            done.set()

    eng.submit(seq, on_token)
    return done


def one_after_another(parts, prompts, prefix_caching):
    eng = engine(parts, prefix_caching=prefix_caching)
    eng.start()
    seqs = []
    try:
        for prompt in prompts:
            prompt = prompt(seqs) if callable(prompt) else prompt
            seq = Sequence(f"r{len(seqs)}", prompt, GREEDY)
            assert submit(eng, seq).wait(30)
            seqs.append(seq)
    finally:
        eng.stop()
    return [s.output for s in seqs], [s.cached_tokens for s in seqs], eng.kv_snapshot()


def test_a_prefix_cached_prompt_gives_exactly_the_uncached_tokens(parts):
    first = [(7 * i + 3) % 5000 + 10 for i in range(40)]
    prompts = [
        first,
        first + list(range(300, 330)),  # extends the first prompt
        lambda seqs: first + seqs[0].output + [42] * 5,  # the next turn: prompt + answer
    ]
    plain, plain_cached, plain_stats = one_after_another(parts, prompts, False)
    cached, hits, stats = one_after_another(parts, prompts, True)
    assert cached == plain and all(len(o) == GREEDY.max_tokens for o in cached)
    assert plain_cached == [0, 0, 0] and plain_stats["prefix_cache_hits"] == 0
    assert hits[0] == 0 and hits[1] >= 32 and hits[2] > hits[1]  # finished output is reused
    assert stats["prefix_cache_hits"] == sum(hits) < stats["prefix_cache_queries"]
    assert stats["kv_blocks_used"] == 0  # everything released at the end


def test_a_pool_for_one_request_makes_the_second_wait_until_the_first_finishes(parts):
    a = Sequence("a", list(range(500, 520)), SamplingParams(max_tokens=44, ignore_eos=True))
    b = Sequence("b", list(range(600, 620)), SamplingParams(max_tokens=44, ignore_eos=True))
    eng = engine(parts, kv_blocks=4)  # 64 tokens: exactly one 20 + 44 request
    log: list = []
    done = [submit(eng, a, log), submit(eng, b, log)]
    eng.start()
    try:
        assert all(d.wait(30) for d in done)
    finally:
        eng.stop()
    names = [entry[0] for entry in log]
    a_end = names.index("a") + names.count("a") - 1
    assert log[a_end][1] == "length" and names[a_end + 1 :] == ["b"] * 44  # b starts after a
    assert all(waiting_for_kv == 1 and waiting == 1 for _, _, waiting_for_kv, waiting
               in log[1:a_end])  # meanwhile b waited for KV, with a running slot free
    assert eng.kv_snapshot()["requests_waiting_for_kv"] == 0
    assert len(a.output) == len(b.output) == 44


def test_a_request_larger_than_the_pool_is_refused_at_submit(parts):
    eng = engine(parts, kv_blocks=2)
    with pytest.raises(ValueError, match="KV pool of 32 tokens"):
        eng.submit(Sequence("x", [1] * 20, SamplingParams(max_tokens=13)), lambda *_: None)
