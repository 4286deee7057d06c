"""The paged KV pool's bookkeeping, pure Python (no torch): blocks, refcounts, prefix cache.

The pool is `num_blocks` blocks of BLOCK_SIZE (16) token positions. Blocks are taken as they are
needed, as vLLM does: a request's prefill takes the blocks of the tokens it computes, minus the
cached prefix blocks it reuses (`allocate`), and its table grows by one block whenever decoding
crosses into a new one (`grow`). Who waits and who is preempted when blocks run short is the
scheduler's policy (scheduler.py). A request whose prompt and max_tokens exceed the whole pool
could never finish, and is refused before it is queued (`fits_pool`).

Prefix caching (as vLLM's): a full block of a prompt is named by a hash chain, the hash of its
parent block's hash and its own 16 token ids, so one name stands for the whole prefix up to
that block. After a request's prefill its full prompt blocks are registered; at its end (or
preemption), the full blocks of prompt and output whose KV was computed. A new request reuses
the longest chain of registered blocks of its prompt (refcounted, shared read-only), never the
whole prompt: at least its last token is computed again, so the prefill has logits. A block
nobody references stays cached and reusable; it is evicted, least recently freed first, only
when an allocation needs the room. Blocks that hold no registered prefix are handed out before
cached ones.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK_SIZE = 16


def blocks_for(tokens: int, block_size: int = BLOCK_SIZE) -> int:
    return -(-tokens // block_size)


def chain_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The name of a full block: its parent's name and its own token ids."""
    return hashlib.blake2b(parent + array("q", tokens).tobytes(), digest_size=16).digest()


@dataclass(slots=True)
class Allocation:
    table: list[int]  # block ids, position p lives in table[p // 16] at p % 16
    cached_tokens: int  # leading tokens whose KV is already in the table's blocks


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int = BLOCK_SIZE,
                 prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("the KV pool needs at least one block")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._refs = [0] * num_blocks
        self._hash: list[bytes | None] = [None] * num_blocks
        self._by_hash: dict[bytes, int] = {}
        self._free_plain = list(range(num_blocks - 1, -1, -1))  # free, no cached prefix
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # free, cached; LRU first
        self.queries = 0  # prompt tokens looked up in the prefix cache (first admissions)
        self.hits = 0  # of those, tokens found cached

    # -- capacity -----------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        return len(self._free_plain) + len(self._free_cached)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    @property
    def usage(self) -> float:
        return self.used_blocks / self.num_blocks

    @property
    def pool_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def fits_pool(self, tokens: int) -> bool:
        """Whether a request of this many tokens (prompt + max_tokens) could ever run."""
        return blocks_for(tokens, self.block_size) <= self.num_blocks

    # -- prefix cache -------------------------------------------------------------------
    def _hashes(self, tokens: Sequence[int], full_blocks: int) -> list[bytes]:
        out, parent, bs = [], b"", self.block_size
        for i in range(full_blocks):
            parent = chain_hash(parent, tokens[i * bs : (i + 1) * bs])
            out.append(parent)
        return out

    def match(self, prompt: Sequence[int]) -> list[int]:
        """The longest chain of cached blocks of the prompt, leaving its last token out."""
        if not self.prefix_caching:
            return []
        blocks = []
        for h in self._hashes(prompt, (len(prompt) - 1) // self.block_size):
            block = self._by_hash.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def _new_needed(self, hits: list[int], total_tokens: int) -> int:
        return max(blocks_for(total_tokens, self.block_size) - len(hits), 0)

    def _available(self, hits: list[int]) -> int:
        """Free blocks left for new allocations once the hits are taken out of the free pool."""
        return self.free_blocks - sum(1 for b in hits if self._refs[b] == 0)

    def allocate(self, prompt: Sequence[int], total_tokens: int, keep_free: int = 0,
                 count: bool = True) -> Allocation | None:
        """Blocks for `total_tokens` positions, the prompt's cached prefix first; None unless
        they are free with `keep_free` blocks left over. `count`: the lookup counts in
        `queries` and `hits` (a prompt's first admission, not a preempted request's)."""
        hits = self.match(prompt)
        need = self._new_needed(hits, total_tokens)
        if need + keep_free > self._available(hits):
            return None
        for block in hits:
            if self._refs[block] == 0:
                del self._free_cached[block]
            self._refs[block] += 1
        table = hits + [self._take() for _ in range(need)]
        cached = len(hits) * self.block_size
        if count:
            self.queries += len(prompt)
            self.hits += cached
        return Allocation(table, cached)

    def grow(self, table: list[int], tokens: int) -> bool:
        """Extend a request's table to cover `tokens` positions; False, leaving it as it was,
        when there are not enough free blocks."""
        need = blocks_for(tokens, self.block_size) - len(table)
        if need > self.free_blocks:
            return False
        table.extend(self._take() for _ in range(need))
        return True

    def _take(self) -> int:
        if self._free_plain:
            block = self._free_plain.pop()
        else:  # evict the least recently freed cached block
            block, _ = self._free_cached.popitem(last=False)
            del self._by_hash[self._hash[block]]  # type: ignore[arg-type]
            self._hash[block] = None
        self._refs[block] = 1
        return block

    def register(self, table: list[int], tokens: Sequence[int]) -> None:
        """Name the table's full blocks of `tokens` (whose KV is computed) for reuse."""
        if not self.prefix_caching:
            return
        full = min(len(tokens) // self.block_size, len(table))
        for block, h in zip(table[:full], self._hashes(tokens, full), strict=True):
            if self._hash[block] is not None or h in self._by_hash:
                continue  # already named (a reused block), or another block holds this prefix
            self._hash[block] = h
            self._by_hash[h] = block

    def free(self, table: list[int]) -> None:
        """A finished or cancelled request gives its blocks back; named ones stay cached."""
        for block in reversed(table):  # a chain's tail is evicted before its head
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if self._hash[block] is not None:
                    self._free_cached[block] = None
                else:
                    self._free_plain.append(block)
        table.clear()
