"""Prompts of a trace's lengths whose shared blocks are shared exactly.

A Mooncake trace names each block of a prompt by a hash id: equal ids, equal blocks, so a
prompt sharing its first ids with an earlier one shares that prefix. Here each id becomes a
block of natural text (runs of words of the project's corpus, drawn from a generator seeded by
the run's seed, the pass and the id), as many pieces (words and punctuation marks) as the
block's tokens need; a prompt is its blocks in order, the last cut where the prompt's length
ends. Nothing is put in front of the blocks, so equal ids are equal text at the same offset. A
request's text past its ids (all of it, for one without ids) is drawn the same way from a
generator of its own, seeded apart from the ids', so no hash id (a negative one included)
names another request's text.

How many pieces make a token is the server's to say: a `TokenLine` (harness.run.workload)
is fitted to what it counts, a prompt's tokens being a fixed part (the chat template's) plus
so many per piece.

Every pass (a trace's level, a repeat) draws its blocks anew: a level replayed after another
would otherwise find every prefix in the server's cache from the level before.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Sequence

from common import corpus
from harness.run.prompts import pieces, spread

RUN_WORDS = 12  # consecutive corpus words a block takes from one place before it jumps


@functools.cache
def corpus_words() -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The corpus's words and each one's pieces, read once per process."""
    words = tuple(corpus.text().split())
    return words, tuple(pieces(w) for w in words)


def _seed(seed: int, epoch: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{epoch}".encode()).digest()[:8], "big")


class BlockText:
    """The blocks of one pass (`epoch`), each id's text the same wherever it is sent."""

    def __init__(self, seed: int, epoch: str) -> None:
        self.seed = _seed(seed, epoch)
        self.own_seed = _seed(seed, f"{epoch}:own")  # a request's own text: no id draws it
        self._block = functools.lru_cache(maxsize=4096)(self._draw)

    def _draw(self, seed: int, block_id: int, count: int
              ) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """`count` pieces' worth of words (a word may end a little past it) for `block_id`
        of the space `seed` draws, and each word's pieces: runs of RUN_WORDS corpus words,
        the first run's start distinct for consecutive ids."""
        words, sizes = corpus_words()
        n = len(words)
        rng = random.Random(seed ^ (block_id * 0x9E3779B97F4A7C15 & (2**64 - 1)))
        start = spread(seed, block_id, n)
        out: list[int] = []
        total = 0
        while total < count:
            for k in range(RUN_WORDS):
                out.append((start + k) % n)
                total += sizes[(start + k) % n]
                if total >= count:
                    break
            start = rng.randrange(n)
        return tuple(words[i] for i in out), tuple(sizes[i] for i in out)

    def prompt(self, ids: Sequence[int], block_pieces: int, content_pieces: int,
               own_id: int) -> str:
        """Blocks `ids` in order (each `block_pieces` long), cut at `content_pieces`; past the
        last block, the request's own text (`own_id`, its own whatever ids other requests
        give) fills what the ids do not cover."""
        out: list[str] = []
        left = content_pieces
        for block_id in ids:
            if left <= 0:
                break
            left = _cut(*self._block(self.seed, block_id, block_pieces), left, out)
        if left > 0:
            _cut(*self._block(self.own_seed, own_id, left), left, out)
        return " ".join(out)


def _cut(words: tuple[str, ...], sizes: tuple[int, ...], budget: int, out: list[str]) -> int:
    """Append words until `budget` pieces are reached (all of them, if they fit); the budget
    left (<= 0 once reached)."""
    for word, size in zip(words, sizes, strict=True):
        if budget <= 0:
            break
        out.append(word)
        budget -= size
    return budget
