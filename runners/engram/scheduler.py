"""Continuous batching, pure Python (no torch): who is prefilled, who decodes, who waits, and
who is preempted.

Policy (as nano-vllm, with vLLM's handling of KV blocks): a step either prefills one admitted
request or decodes every running one. KV blocks are taken as needed (kv_blocks.py). The head of
the waiting queue is admitted when a running slot is free and the blocks of the tokens it must
compute are free with a watermark left over for the running requests' growth (1 % of the pool,
as vLLM's block manager; none when nothing runs); otherwise it waits, and so does everyone
behind it (FIFO, head of line). When a decode step needs a block and none is free, the newest
running request is preempted (as vLLM: last in, first out, by recompute): its blocks go back
(their full blocks stay in the prefix cache) and it returns to the head of the queue, to be
prefilled again over its prompt and the tokens it already generated. The waiting queue is
bounded (full -> caller answers 503).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from runners.engram.kv_blocks import BlockManager


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


@dataclass(slots=True, eq=False)
class Sequence:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    output: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # leading prompt tokens whose KV came from the prefix cache
    reused_tokens: int = 0  # leading tokens of this admission's prefill already in its blocks
    preemptions: int = 0
    finish_reason: str | None = None
    cancelled: bool = False

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def tokens(self) -> list[int]:
        """Prompt and output: what a prefill computes (the prompt alone unless preempted)."""
        return self.prompt + self.output

    @property
    def max_length(self) -> int:
        """Positions the request may ever hold: its KV blocks at the longest."""
        return len(self.prompt) + self.params.max_tokens

    def context(self, tokens: int) -> list[int]:
        """The last `tokens` ids (prompt and output), for the Engram hash."""
        ids = self.prompt + self.output if len(self.output) < tokens else self.output
        return ids[-tokens:]


@dataclass(slots=True)
class Step:
    prefill: Sequence | None = None
    decode: list[Sequence] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.prefill is None and not self.decode


WATERMARK = 0.01  # share of the pool an admission leaves free for running requests to grow


class Scheduler:
    def __init__(self, max_running: int, max_waiting: int, blocks: BlockManager) -> None:
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.blocks = blocks
        self.watermark_blocks = int(WATERMARK * blocks.num_blocks)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in order of admission
        # waiting requests a free running slot would take but the KV pool cannot hold now
        self.waiting_for_kv = 0
        self.preemptions = 0

    def add(self, seq: Sequence) -> bool:
        """Queue a request; False when the waiting queue is full (of new requests: the
        preempted ones back in it were admitted before and do not count)."""
        if sum(not s.preemptions for s in self.waiting) >= self.max_waiting:
            return False
        self.waiting.append(seq)
        return True

    def schedule(self) -> Step:
        self._drop_cancelled()
        self.waiting_for_kv = 0
        if self.waiting and len(self.running) < self.max_running:
            head = self.waiting[0]
            tokens = head.tokens
            keep_free = self.watermark_blocks if self.running else 0
            # a preempted request's lookup is not a prompt's: the prefix-cache counters
            # (vLLM's names) count each prompt once, as its usage reports it
            first = not head.preemptions
            got = self.blocks.allocate(tokens, len(tokens), keep_free, count=first)
            if got is not None:
                self.waiting.popleft()
                head.block_table, head.reused_tokens = got.table, got.cached_tokens
                if first:
                    head.cached_tokens = got.cached_tokens
                self.running.append(head)
                return Step(prefill=head)
        decode = self._grow_running()
        if self.waiting:  # the head did not fit, or was just preempted
            self.waiting_for_kv = min(len(self.waiting), self.max_running - len(self.running))
        return Step(decode=decode)

    def _grow_running(self) -> list[Sequence]:
        """The running requests that decode this step, each with a block for the position it
        writes; while blocks run short, the newest running request is preempted."""
        decode = []
        i = 0
        while i < len(self.running):  # oldest first: a victim is always `seq` or newer
            seq = self.running[i]
            while seq.output and not self.blocks.grow(seq.block_table, seq.length):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            else:
                if seq.output:
                    decode.append(seq)
                i += 1
        return decode

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._release(seq)
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def prefilled(self, seq: Sequence) -> None:
        """The prefill's KV is computed: its full blocks become reusable prefixes."""
        self.blocks.register(seq.block_table, seq.tokens)

    def finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        if seq in self.running:
            self.running.remove(seq)
            self._release(seq, keep_prefix=reason not in ("error", "cancelled"))

    def _release(self, seq: Sequence, keep_prefix: bool = True) -> None:
        """Give a request's blocks back; with `keep_prefix` its full computed blocks stay in
        the prefix cache (KV exists for every position but the last token's, never fed back)."""
        if keep_prefix:
            self.blocks.register(seq.block_table, seq.tokens[:-1])
        self.blocks.free(seq.block_table)

    def _drop_cancelled(self) -> None:
        for seq in [s for s in self.running if s.cancelled]:
            self.finish(seq, "cancelled")
        if any(s.cancelled for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.cancelled)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running
