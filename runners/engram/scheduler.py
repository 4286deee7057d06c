"""Continuous batching, pure Python (no torch): who is prefilled, who decodes, who waits.

Policy (as nano-vllm): a step either prefills one admitted request or decodes every running
one; admission needs a free KV slot; the waiting queue is bounded (full -> caller answers 503).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


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
    slot: int = -1
    finish_reason: str | None = None
    cancelled: bool = False

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)

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
    def __init__(self, max_running: int, max_waiting: int) -> None:
        self.max_running = max_running
        self.max_waiting = max_waiting
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._free_slots = list(range(max_running - 1, -1, -1))

    def add(self, seq: Sequence) -> bool:
        """Queue a request; False when the waiting queue is full."""
        if len(self.waiting) >= self.max_waiting:
            return False
        self.waiting.append(seq)
        return True

    def schedule(self) -> Step:
        self._drop_cancelled()
        if self.waiting and self._free_slots:
            seq = self.waiting.popleft()
            seq.slot = self._free_slots.pop()
            self.running.append(seq)
            return Step(prefill=seq)
        return Step(decode=[s for s in self.running if s.output])

    def finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        if seq in self.running:
            self.running.remove(seq)
            self._free_slots.append(seq.slot)

    def _drop_cancelled(self) -> None:
        for seq in [s for s in self.running if s.cancelled]:
            self.finish(seq, "cancelled")
        if any(s.cancelled for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.cancelled)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running
