"""Replayed output: each request emits natural English instead of the dummy model's choice.

The bundled model has seeded dummy weights, so what it samples is not language, and Engram
rows are addressed by n-grams of what it emits: benchmarks need natural text out (docs/design.md,
"the token stream matters"). With `decode="replay"` the model still computes every step's
logits, but the token emitted is the next one of a fixed text: common.corpus (CPython's
documentation prose) in the bundled tokenizer's ids. A request starts at an offset given by a
stable hash of its prompt ids, so the same request replays the same text on every placement,
run and machine. Replay never emits EOS (the text holds none): a request ends at max_tokens
or at the context limit.
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from collections.abc import Sequence

from common.corpus import text
from runners.engram.tokenizer import EngramTokenizer


@functools.cache
def corpus_ids() -> tuple[int, ...]:
    """The corpus in the bundled tokenizer's ids, encoded once per process (~0.1 s)."""
    return tuple(EngramTokenizer().encode(text()))


class ReplayText:
    def __init__(self, ids: Sequence[int], eos_id: int) -> None:
        if not ids or eos_id in ids:
            raise ValueError("replay text must be non-empty and free of the EOS token")
        self._ids = ids

    @classmethod
    def corpus(cls, eos_id: int) -> ReplayText:
        return cls(corpus_ids(), eos_id)

    def offset(self, prompt: Sequence[int]) -> int:
        """Where a prompt's replay starts: blake2b of its ids, so stable across processes."""
        digest = hashlib.blake2b(array("q", prompt).tobytes(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % len(self._ids)

    def next_token(self, prompt: Sequence[int], k: int) -> int:
        """Output token k (0-based) of the request with this prompt."""
        return self._ids[(self.offset(prompt) + k) % len(self._ids)]
