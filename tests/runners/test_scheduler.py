from runners.engram.kv_blocks import BlockManager
from runners.engram.scheduler import SamplingParams, Scheduler, Sequence


def seq(name: str) -> Sequence:
    return Sequence(name, [1, 2, 3], SamplingParams(max_tokens=4))


def test_prefill_one_at_a_time_then_decode_together():
    s = Scheduler(max_running=2, max_waiting=4, blocks=BlockManager(8))
    a, b, c = seq("a"), seq("b"), seq("c")
    assert all(s.add(x) for x in (a, b, c))
    step = s.schedule()
    assert step.prefill is a and not step.decode
    a.output.append(7)
    assert s.schedule().prefill is b
    b.output.append(7)
    step = s.schedule()  # c waits: no free slot
    assert step.prefill is None and step.decode == [a, b]
    s.finish(a, "length")
    assert s.schedule().prefill is c and c.block_table


def test_bounded_queue_and_cancel_frees_the_slot_at_once():
    s = Scheduler(max_running=1, max_waiting=1, blocks=BlockManager(8))
    a, b, c = seq("a"), seq("b"), seq("c")
    assert s.add(a)
    assert s.schedule().prefill is a
    assert s.add(b) and not s.add(c)  # queue of one is full
    a.cancelled = True
    step = s.schedule()
    assert a.finish_reason == "cancelled" and step.prefill is b
    b.cancelled = True
    s.schedule()
    assert s.idle


def test_context_keeps_the_last_ids():
    x = seq("x")
    x.output += [4, 5]
    assert x.context(3) == [3, 4, 5] and x.context(1) == [5]
