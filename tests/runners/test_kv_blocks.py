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
    assert first is not None and m.allocate([2] * 10, 20) is None  # 2 blocks, 1 free
    m.free(first.table)
    assert m.allocate([2] * 10, 20) is not None


def test_prefix_caching_off_shares_nothing():
    m = BlockManager(8, prefix_caching=False)
    a = m.allocate(PROMPT, 48)
    m.register(a.table, PROMPT)
    assert m.allocate([*PROMPT, 1], 48).cached_tokens == 0


def seq(name: str, prompt_len: int, max_tokens: int) -> Sequence:
    return Sequence(name, [len(name)] * prompt_len, SamplingParams(max_tokens=max_tokens))


def test_the_head_waits_for_its_blocks_and_blocks_everyone_behind_it():
    s = Scheduler(max_running=4, max_waiting=8, blocks=BlockManager(4))
    a, big, small = seq("a", 40, 8), seq("big", 30, 18), seq("small", 4, 4)
    for x in (a, big, small):
        assert s.add(x)
    assert s.schedule().prefill is a  # its prompt: 3 of 4 blocks
    a.output.append(1)
    step = s.schedule()  # big's prompt needs 2 blocks, 1 is free; small (1) must not jump it
    assert step.prefill is None and step.decode == [a]
    assert s.waiting_for_kv == 2 and list(s.waiting) == [big, small]
    s.finish(a, "length")
    assert s.schedule().prefill is big
    big.output.append(1)
    assert s.schedule().prefill is small and s.waiting_for_kv == 0


def grow_to(s: Scheduler, x: Sequence, length: int) -> None:
    """Decode steps for `x` alone (others keep their length) until it holds `length` tokens."""
    while x.length < length:
        x.output.append(9)
        assert x in s.schedule().decode


def test_blocks_are_taken_as_decoding_needs_them():
    s = Scheduler(max_running=2, max_waiting=8, blocks=BlockManager(8))
    a = seq("a", 20, 40)
    s.add(a)
    assert s.schedule().prefill is a and len(a.block_table) == 2  # the prompt's blocks only
    grow_to(s, a, 32)
    assert len(a.block_table) == 2
    a.output.append(9)  # position 32 is written by the next decode step: a third block
    assert s.schedule().decode == [a] and len(a.block_table) == 3


def test_running_requests_that_outgrow_the_pool_preempt_the_newest_which_recomputes_later():
    s = Scheduler(max_running=3, max_waiting=8, blocks=BlockManager(4))
    a, b = seq("a", 30, 34), seq("b", 30, 34)  # 2 blocks each at admission, 4 at full length
    for x in (a, b):
        s.add(x)
        assert s.schedule().prefill is x
        x.output.append(9)
    grow_to(s, a, 32)
    a.output.append(9)  # a needs a third block; none is free: b, the newest, is preempted
    step = s.schedule()
    assert step.decode == [a] and list(s.waiting) == [b] and s.running == [a]
    assert (b.preemptions, s.preemptions, b.block_table) == (1, 1, [])
    assert s.blocks.used_blocks == 3  # b's blocks went back; a holds three
    assert s.waiting_for_kv == 1  # b waits for KV from this step on
    s.finish(a, "length")
    assert s.schedule().prefill is b  # back at the head, prefilled over prompt and output
    assert len(b.block_table) * 16 >= b.length
    assert b.reused_tokens == 16  # b's first block, named when it was preempted, survived
    assert b.cached_tokens == 0  # what its usage reports: its first admission found nothing
    assert (s.blocks.queries, s.blocks.hits) == (60, 0)  # each prompt looked up once


def test_preempted_requests_do_not_fill_the_waiting_queue_for_new_ones():
    s = Scheduler(max_running=3, max_waiting=1, blocks=BlockManager(4))
    a, b = seq("a", 30, 34), seq("b", 30, 34)
    for x in (a, b):
        assert s.add(x)
        assert s.schedule().prefill is x
        x.output.append(9)
    grow_to(s, a, 33)
    assert list(s.waiting) == [b]
    assert s.add(seq("c", 4, 4)) and not s.add(seq("d", 4, 4))


def test_a_request_needing_a_block_when_it_is_the_newest_preempts_itself():
    s = Scheduler(max_running=3, max_waiting=8, blocks=BlockManager(4))
    a, b = seq("a", 30, 34), seq("b", 30, 34)
    for x in (a, b):
        s.add(x)
        assert s.schedule().prefill is x
        x.output.append(9)
    grow_to(s, b, 32)
    b.output.append(9)
    step = s.schedule()
    assert step.decode == [a] and list(s.waiting) == [b] and b.preemptions == 1


def test_an_admission_leaves_the_watermark_free_unless_nothing_runs():
    s = Scheduler(max_running=3, max_waiting=8, blocks=BlockManager(200))  # watermark: 2
    a, b = seq("a", 199 * 16, 16), seq("b", 16, 16)
    s.add(a)
    assert s.schedule().prefill is a  # nothing runs: a may leave fewer than 2 blocks free
    a.output.append(9)
    s.add(b)
    assert s.schedule().prefill is None  # 1 block free, b needs it and the 2 left over: waits
    s.finish(a, "length")
    assert s.schedule().prefill is b
