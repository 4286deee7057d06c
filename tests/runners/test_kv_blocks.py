"""The paged KV pool's bookkeeping (pure): shared prefixes, refcounts, LRU eviction, refusal,
and head-of-line admission in the scheduler."""

from runners.engram.kv_blocks import BlockManager
from runners.engram.scheduler import SamplingParams, Scheduler, Sequence

PROMPT = list(range(1000, 1040))  # 40 tokens: two full blocks and a partial one


def test_a_prompt_extending_a_registered_one_reuses_its_full_blocks_never_its_last_token():
    m = BlockManager(16)
    a = m.allocate(PROMPT, len(PROMPT) + 8)
    assert a.cached_tokens == 0 and len(a.table) == 3
    m.register(a.table, PROMPT)
    b = m.allocate([*PROMPT, 7, 8, 9], len(PROMPT) + 3 + 8)
    assert b.cached_tokens == 32 and b.table[:2] == a.table[:2]
    assert set(b.table[2:]).isdisjoint(a.table)
    # a prompt that is exactly the two cached blocks recomputes its last block's last token
    c = m.allocate(PROMPT[:32], 40)
    assert c.cached_tokens == 16
    assert (m.queries, m.hits) == (40 + 43 + 32, 32 + 16)


def test_shared_blocks_are_refcounted_and_stay_cached_after_release():
    m = BlockManager(8)
    a = m.allocate(PROMPT, 48)
    m.register(a.table, PROMPT)
    b = m.allocate([*PROMPT, 1], 48)
    shared = b.table[:2]
    m.free(a.table)
    assert m.used_blocks == 3  # b still holds the two shared blocks and its own one
    m.free(b.table)
    assert m.used_blocks == 0 and m.usage == 0
    again = m.allocate([*PROMPT, 2], 48)  # freed but cached: still reusable
    assert again.cached_tokens == 32 and again.table[:2] == shared


def test_free_cached_blocks_are_evicted_least_recently_freed_first_when_room_is_needed():
    m = BlockManager(6)
    old, new = list(range(100, 132)), list(range(200, 232))
    for prompt in (old, new):  # each: 3 blocks, its 2 full prompt blocks named
        got = m.allocate([*prompt, 0], 33)
        m.register(got.table, prompt)
        m.free(got.table)
    assert m.free_blocks == 6 and m.used_blocks == 0
    m.free(m.allocate([5] * 20, 32).table)  # 2 blocks: unnamed free blocks go first
    assert len(m.match([*old, 1])) == len(m.match([*new, 1])) == 2
    m.allocate([6] * 20, 48)  # 3 blocks: 2 unnamed, then the least recently freed named one
    assert len(m.match([*old, 1])) == 1  # old's tail went, its head is still cached
    assert len(m.match([*new, 1])) == 2


def test_a_request_larger_than_the_pool_never_fits_one_that_fits_later_waits():
    m = BlockManager(4)
    assert m.fits_pool(64) and not m.fits_pool(65)
    assert m.allocate([1] * 10, 65) is None
    first = m.allocate([1] * 10, 40)  # 3 blocks
    assert first is not None and not m.can_allocate([2] * 10, 20)  # 2 blocks, 1 free
    m.free(first.table)
    assert m.can_allocate([2] * 10, 20)


def test_prefix_caching_off_shares_nothing():
    m = BlockManager(8, prefix_caching=False)
    a = m.allocate(PROMPT, 48)
    m.register(a.table, PROMPT)
    assert m.allocate([*PROMPT, 1], 48).cached_tokens == 0


def seq(name: str, prompt_len: int, max_tokens: int) -> Sequence:
    return Sequence(name, [len(name)] * prompt_len, SamplingParams(max_tokens=max_tokens))


def test_the_head_waits_for_its_blocks_and_blocks_everyone_behind_it():
    s = Scheduler(max_running=4, max_waiting=8, blocks=BlockManager(4))
    a, big, small = seq("a", 20, 12), seq("big", 30, 18), seq("small", 4, 4)
    for x in (a, big, small):
        assert s.add(x)
    assert s.schedule().prefill is a  # 2 of 4 blocks
    a.output.append(1)
    step = s.schedule()  # big needs 3 blocks, 2 are free; small (1 block) must not jump it
    assert step.prefill is None and step.decode == [a]
    assert s.waiting_for_kv == 2 and list(s.waiting) == [big, small]
    s.finish(a, "length")
    assert s.schedule().prefill is big
    big.output.append(1)
    assert s.schedule().prefill is small and s.waiting_for_kv == 0
