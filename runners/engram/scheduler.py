"""Continuous batching, pure Python (no torch): who is prefilled, who decodes, who waits.

Policy (as nano-vllm): a step either prefills one admitted request or decodes every running
one. The head of the waiting queue is admitted only when a running slot (max_running) and its
KV blocks (kv_blocks.py: reserved whole at admission, no preemption) are both free; otherwise
it waits, and so does everyone behind it (FIFO, head of line). The waiting queue is bounded
(full -> caller answers 503).
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
    finish_reason: str | None = None
    cancelled: bool = False

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def reserved_tokens(self) -> int:
        """Positions the request may ever hold: what its KV reservation covers."""
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


class Scheduler:
    def __init__(self, max_running: int, max_waiting: int, blocks: BlockManager) -> None:
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        # waiting requests a free running slot would take but the KV pool cannot hold now
        self.waiting_for_kv = 0

    def add(self, seq: Sequence) -> bool:
        """Queue a request; False when the waiting queue is full."""
        if len(self.waiting) >= self.max_waiting:
            return False
        self.waiting.append(seq)
        return True

    def schedule(self) -> Step:
        self._drop_cancelled()
        self.waiting_for_kv = 0
        free_slots = self.max_running - len(self.running)
        if self.waiting and free_slots > 0:
            head = self.waiting[0]
            got = self.blocks.allocate(head.prompt, head.reserved_tokens)
            if got is not None:
                self.waiting.popleft()
                head.block_table, head.cached_tokens = got.table, got.cached_tokens
                self.running.append(head)
                return Step(prefill=head)
            self.waiting_for_kv = min(len(self.waiting), free_slots)
        return Step(decode=[s for s in self.running if s.output])

    def prefilled(self, seq: Sequence) -> None:
        """The prompt's KV is computed: its full blocks become reusable prefixes."""
        self.blocks.register(seq.block_table, seq.prompt)

    def finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        if seq in self.running:
            self.running.remove(seq)
            if reason not in ("error", "cancelled"):
                # KV exists for every position but the last token's (never fed back)
                self.blocks.register(seq.block_table, (seq.prompt + seq.output)[:-1])
            self.blocks.free(seq.block_table)

    def _drop_cancelled(self) -> None:
        for seq in [s for s in self.running if s.cancelled]:
            self.finish(seq, "cancelled")
        if any(s.cancelled for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.cancelled)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running
