"""Engram table geometry and hashing: which table rows a token reads. Pure (numpy, no I/O).

For each Engram layer, n-gram order n and head h, the row of position t is
    mix = XOR_{i<n} (id[t-i] * M[layer, n, i])       (uint64, wrapping)
    row = offset[layer, n, h] + mix mod P[layer, n, h]
with odd multipliers M and a distinct prime P per (layer, order, head). All blocks live in one
table. Token ids go through the tokenizer's compression map first (runners.engram.compression:
ids that normalise alike share one id), passed in so this module stays pure. The map decides
only which rows are read, never what a row holds, so the table header does not record it.

A row is `row_bytes` FP8 values; with `scale_bytes` it also has that many ue8m0 exponents,
stored in their own region (as the published vLLM port of DeepSeek-V4.1 does): two accesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PAD_ID = 0xFFFF_FFFF  # stands for "before the first token" in short n-grams


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def primes_below(limit: int, count: int) -> list[int]:
    """The `count` largest distinct primes <= limit, descending."""
    out: list[int] = []
    n = limit
    while len(out) < count and n >= 2:
        if is_prime(n):
            out.append(n)
        n -= 1
    if len(out) < count:
        raise ValueError(f"the table is too small: fewer than {count} primes below {limit}")
    return out


@dataclass(slots=True, frozen=True)
class EngramGeometry:
    layers: tuple[int, ...]
    orders: tuple[int, ...]
    heads: int
    row_bytes: int  # FP8 values per row, one byte each
    table_bytes: int
    seed: int = 0
    scale_bytes: int = 0  # ue8m0 exponents per row, in the scales region
    compression: np.ndarray | None = field(default=None, repr=False, compare=False)  # [vocab]
    primes: np.ndarray = field(init=False, repr=False)  # [layers, orders, heads]
    offsets: np.ndarray = field(init=False, repr=False)  # [layers, orders, heads]
    multipliers: np.ndarray = field(init=False, repr=False)  # [layers, orders, max_order]

    def __post_init__(self) -> None:
        if not self.layers or not self.orders or min(self.orders) < 2:
            raise ValueError("Engram needs at least one layer and n-gram orders >= 2")
        if self.scale_bytes < 0 or (self.scale_bytes and self.row_bytes % self.scale_bytes):
            raise ValueError("Engram scales must each cover an equal block of a row's values")
        if self.compression is not None and (
                self.compression.ndim != 1 or self.compression.dtype.kind not in "iu"):
            raise ValueError("the compression map must be one integer id per vocabulary id")
        blocks = len(self.layers) * len(self.orders) * self.heads
        rows_per_block = self.table_bytes // self.row_width // blocks
        primes = np.array(primes_below(rows_per_block, blocks), dtype=np.uint64)
        primes = primes.reshape(len(self.layers), len(self.orders), self.heads)
        offsets = np.concatenate([[0], np.cumsum(primes.ravel())[:-1]]).astype(np.int64)
        rng = np.random.default_rng(self.seed)
        mult = rng.integers(1, 2**63, size=(len(self.layers), len(self.orders),
                                            max(self.orders)), dtype=np.uint64)
        object.__setattr__(self, "primes", primes)
        object.__setattr__(self, "offsets", offsets.reshape(primes.shape))
        object.__setattr__(self, "multipliers", mult | np.uint64(1))  # odd

    @property
    def total_rows(self) -> int:
        return int(self.primes.sum())

    @property
    def rows_per_token(self) -> int:
        return len(self.layers) * len(self.orders) * self.heads

    @property
    def row_width(self) -> int:
        """Bytes a gathered row carries to the model: values, then scales."""
        return self.row_bytes + self.scale_bytes

    @property
    def bytes_per_token(self) -> int:
        return self.rows_per_token * self.row_width

    @property
    def accesses_per_row(self) -> int:
        """Separate reads per row: the values, and the scales when they exist."""
        return 2 if self.scale_bytes else 1

    @property
    def history(self) -> int:
        """Token ids a sequence must keep to hash its next token: max order - 1."""
        return max(self.orders) - 1

    def row_ids(self, context: np.ndarray, new: int) -> np.ndarray:
        """Rows read by the last `new` tokens of `context` (ids, oldest first).

        Returns int64 [new, layers, orders * heads], order-major within a layer.
        """
        ids = np.asarray(context)
        if self.compression is not None:
            ids = self.compression[ids]
        ids = ids.astype(np.uint64)
        n = ids.shape[0]
        pad = np.full(self.history, PAD_ID, dtype=np.uint64)
        padded = np.concatenate([pad, ids])
        start = self.history + n - new  # index in `padded` of the first new token
        out = np.empty((new, len(self.layers), len(self.orders) * self.heads), dtype=np.int64)
        with np.errstate(over="ignore"):
            for li in range(len(self.layers)):
                for oi, order in enumerate(self.orders):
                    mix = np.zeros(new, dtype=np.uint64)
                    for i in range(order):
                        window = padded[start - i : start - i + new]
                        mix ^= window * self.multipliers[li, oi, i]
                    rows = mix[:, None] % self.primes[li, oi][None, :]
                    out[:, li, oi * self.heads : (oi + 1) * self.heads] = (
                        rows.astype(np.int64) + self.offsets[li, oi][None, :]
                    )
        return out

    def params(self) -> dict:
        """What the table file header records, so a file built otherwise is refused.

        `scale_bytes` appears only when set, so table files written before scales existed
        (every unscaled geometry) keep verifying."""
        params = {"layers": list(self.layers), "orders": list(self.orders), "heads": self.heads,
                  "row_bytes": self.row_bytes, "table_bytes": self.table_bytes, "seed": self.seed,
                  "primes": [int(p) for p in self.primes.ravel()],
                  "multipliers": [int(m) for m in self.multipliers.ravel()]}
        if self.scale_bytes:
            params["scale_bytes"] = self.scale_bytes
        return params
