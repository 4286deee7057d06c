"""The engine on the paged KV pool (tiny preset): a prefix-cached prefill gives exactly the
tokens of an uncached one, and a request preempted for KV blocks gets exactly its own tokens."""

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


def two_requests() -> tuple[Sequence, Sequence]:
    return tuple(Sequence(name, list(range(start, start + 20)),
                          SamplingParams(max_tokens=44, ignore_eos=True))
                 for name, start in (("a", 500), ("b", 600)))


def test_requests_outgrowing_the_pool_preempt_the_newest_which_keeps_its_tokens(parts):
    """4 blocks (64 tokens) hold both 20-token prompts but one request at its full 64: when a
    outgrows its share, b (the newer) is preempted, waits for KV while a runs on, and is
    prefilled again over its prompt and output once a ends; each gets exactly the tokens it
    gets alone."""
    alone = []
    for seq in two_requests():
        eng = engine(parts)
        eng.start()
        try:
            assert submit(eng, seq).wait(30)
        finally:
            eng.stop()
        alone.append(seq.output)
    a, b = two_requests()
    eng = engine(parts, kv_blocks=4)
    log: list = []
    done = [submit(eng, a, log), submit(eng, b, log)]
    eng.start()
    try:
        assert all(d.wait(30) for d in done)
    finally:
        eng.stop()
    assert [a.output, b.output] == alone and len(b.output) == 44
    assert (a.preemptions, b.preemptions, eng.kv_snapshot()["preemptions"]) == (0, 1, 1)
    names = [entry[0] for entry in log]
    a_end = len(names) - 1 - names[::-1].index("a")
    b_before = names[:a_end].count("b")  # b's tokens before it was preempted
    assert 0 < b_before < 44 and names[a_end + 1 :] == ["b"] * (44 - b_before)
    preempted = [i for i, name in enumerate(names) if name == "b"][b_before - 1]
    assert names[preempted + 1 : a_end + 1] == ["a"] * (a_end - preempted)  # a alone
    # meanwhile b waits for KV, with a running slot free
    assert all(waiting_for_kv == 1 and waiting == 1
               for _, _, waiting_for_kv, waiting in log[preempted + 1 : a_end])
    assert eng.kv_snapshot()["requests_waiting_for_kv"] == 0


def test_a_request_larger_than_the_pool_is_refused_at_submit(parts):
    eng = engine(parts, kv_blocks=2)
    with pytest.raises(ValueError, match="KV pool of 32 tokens"):
        eng.submit(Sequence("x", [1] * 20, SamplingParams(max_tokens=13)), lambda *_: None)
