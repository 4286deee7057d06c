"""Least-recently-used bookkeeping of the table's file pages. Pure (numpy, no I/O).

The nvme/mmap store holds the table's page cache to a budget the way a device with less
memory would: pages are stamped when a gather uses them, and when more pages are held than
the budget allows, the least recently used ones are chosen for eviction, page by page (not
the whole file). Stamps are one int64 per page, so choosing victims among millions of pages
is one vectorised partition, not a Python loop.
"""

from __future__ import annotations

import numpy as np


class PageLRU:
    def __init__(self, n_pages: int, budget_pages: int) -> None:
        if budget_pages < 1:
            raise ValueError("the page budget must be at least one page")
        self.budget_pages = budget_pages
        self._stamp = np.zeros(n_pages, dtype=np.int64)
        self._held = np.zeros(n_pages, dtype=bool)
        self._tick = 0
        self.held_pages = 0

    def touch(self, pages: np.ndarray) -> np.ndarray:
        """Mark `pages` (unique) as just used; returns those not held before."""
        self._tick += 1
        self._stamp[pages] = self._tick
        new = pages[~self._held[pages]]
        self._held[new] = True
        self.held_pages += new.size
        return new

    def victims(self, target_pages: int) -> np.ndarray:
        """The least recently used pages to drop so that `target_pages` stay held, sorted.

        Pages of the latest touch are never chosen: that gather is still reading them.
        """
        excess = self.held_pages - max(target_pages, 0)
        if excess <= 0:
            return np.empty(0, dtype=np.int64)
        held = np.flatnonzero(self._held)
        held = held[self._stamp[held] < self._tick]
        if held.size > excess:
            held = held[np.argpartition(self._stamp[held], excess - 1)[:excess]]
        self._held[held] = False
        self.held_pages -= held.size
        return np.sort(held)

    def held(self, pages: np.ndarray) -> np.ndarray:
        """Per page: True where the LRU holds it."""
        return self._held[pages]

    def adopt(self, pages: np.ndarray) -> None:
        """Pages found resident at start: held, and older than anything used since."""
        self._held[pages] = True
        self._stamp[pages] = 0
        self.held_pages = int(self._held.sum())

    def clear(self) -> None:
        self._held[:] = False
        self.held_pages = 0
