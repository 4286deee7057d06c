"""The bundled server's table as its /stats reports it: the part stored with a run, and the
one line `run` prints about it."""

from __future__ import annotations

from common import stats_keys
from common.readable import size

SERVER_TABLE_KEYS: dict[str, type | tuple[type, ...]] = {
    stats_keys.TABLE_BYTES: (int, float), stats_keys.PLACEMENT: str, stats_keys.IO_MODE: str,
    stats_keys.TABLE_BUDGET_BYTES: (int, float), stats_keys.CACHE_RATIO: (int, float),
    stats_keys.CACHE_STATE: str, stats_keys.DECODE: str}


def server_table(stats: dict | None) -> dict:
    """What /stats says about the table and its start state (stored with the run); keys a
    server does not report, reports as null or in another type are left out."""
    stats = stats or {}
    return {k: stats[k] for k, kind in SERVER_TABLE_KEYS.items() if isinstance(stats.get(k), kind)}


def describe_server_table(table: dict) -> str:
    """One line, e.g. 'table: 2.0 GiB on nvme (mmap), page-cache budget 343.5 MiB (cache ratio
    0.168), cold start, decode replay', naming only what the server reported."""
    where = []
    if stats_keys.TABLE_BYTES in table:
        where.append(size(table[stats_keys.TABLE_BYTES], ".1f"))
    if stats_keys.PLACEMENT in table:
        where.append(f"on {table[stats_keys.PLACEMENT]}")
    if stats_keys.IO_MODE in table:
        where.append(f"({table[stats_keys.IO_MODE]})")
    parts = [" ".join(where)] if where else []
    ratio = (f"cache ratio {table[stats_keys.CACHE_RATIO]:.3g}"
             if stats_keys.CACHE_RATIO in table else "")
    if stats_keys.TABLE_BUDGET_BYTES in table:
        kind = "row-cache" if table.get(stats_keys.IO_MODE) == "direct" else "page-cache"
        parts.append(f"{kind} budget {size(table[stats_keys.TABLE_BUDGET_BYTES], '.1f')}"
                     + (f" ({ratio})" if ratio else ""))
    elif ratio:
        parts.append(ratio)
    if stats_keys.CACHE_STATE in table:
        parts.append(f"{table[stats_keys.CACHE_STATE]} start")
    if stats_keys.DECODE in table:
        parts.append(f"decode {table[stats_keys.DECODE]}")
    return "table: " + ", ".join(parts)
