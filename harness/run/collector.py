"""Python's garbage collector kept from a timing loop's full passes while a level is measured.

A full collection walks every object the process holds and stops the loop meanwhile: here (2
cores) ~20 ms for what a run holds once imported, 25-30 ms at C=512 with the level's
connections and records, about once a level; every chunk that arrives meanwhile is
timestamped that much late.
A measured request leaves no cyclic garbage (none found after a 1,024-request level with the
collector off), so holding the full passes back costs no memory; the young generations are
still collected (sub-millisecond, bounded by what is young), which frees any cycle an error
leaves. Between levels the collector runs as before.
"""

from __future__ import annotations

import gc

_NEVER = 2**31 - 1  # collections of the generation below before a full one: never, in effect
_held: list[int] = []  # the full generation's threshold while held (a pass that failed
# before its release leaves it here, and the next hold keeps it)


def hold() -> None:
    """Hold back full collections until `release`."""
    young, middle, full = gc.get_threshold()
    if not _held:
        _held.append(full)
    gc.set_threshold(young, middle, _NEVER)


def release() -> None:
    """Full collections run again, as often as before `hold`."""
    if _held:
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, _held.pop())
