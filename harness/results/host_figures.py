"""A level's host figures as the summary, `--json` and the explorer show them: the stored
passes of every serving host (harness.results.host_level) put together and divided by the
tokens the level's requests reported.

The rules: growths (bytes read, faults, stall and busy time) add up over a level's passes
and its hosts; the table's residency is the hosts' sum at the level's first pass's start
and its last pass's end; a peak is each host's highest, summed over hosts (what they held
together at most); a share is each host's growth over its wall time, the worst host's
shown. A figure is given only where every host has it at every pass: one host or pass
without it (a node_exporter has no process tree, a lost scrape) leaves it None, never a sum
of the others. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import cast

from harness.records import RequestRecord
from harness.results import cold_start
from harness.results.host_level import HostLevel
from harness.results.summary import HostDict

Pass = tuple[int, HostLevel]  # (repeat, the host's figures over it)


def _all(values: Iterable[float | None]) -> list[float] | None:
    """The values, or None when any is missing (or there are none)."""
    found = list(values)
    if not found or any(v is None for v in found):
        return None
    return [v for v in found if v is not None]


def _total(passes: Sequence[Pass], read: Callable[[HostLevel], float | None]) -> float | None:
    values = _all(read(h) for _, h in passes)
    return sum(values) if values is not None else None


def _per(value: float | None, tokens: float) -> float | None:
    return value / tokens if value is not None and tokens > 0 else None


def _by_node(passes: Sequence[Pass]) -> dict[int, list[Pass]]:
    nodes: dict[int, list[Pass]] = {}
    for repeat, h in sorted(passes, key=lambda p: (p[1].node, p[0])):
        nodes.setdefault(h.node, []).append((repeat, h))
    return nodes


def _over_nodes(passes: Sequence[Pass], one: Callable[[list[Pass]], float | None],
                combine: Callable[[list[float]], float]) -> float | None:
    values = _all(one(node) for node in _by_node(passes).values())
    return combine(values) if values is not None else None


def _share(node: list[Pass], read: Callable[[HostLevel], float | None]) -> float | None:
    """A host's growth over its passes' wall time."""
    spent, wall = _total(node, read), _total(node, lambda h: h.wall_s)
    return spent / wall if spent is not None and wall else None


def _peak(node: list[Pass], read: Callable[[HostLevel], float | None]) -> float | None:
    values = _all(read(h) for _, h in node)
    return max(values) if values is not None else None


def level_host(passes: Sequence[Pass], output_tokens: float, prompt_tokens: float) -> HostDict:
    """The host figures of one level, from every stored (repeat, host) pass of it."""
    read_bytes = _total(passes, lambda h: h.read_bytes)
    missing = list(dict.fromkeys(h.missing for _, h in passes if h.missing))
    disks = sorted({h.disk for _, h in passes if h.disk})
    return {
        "source": ", ".join(sorted({h.source for _, h in passes if h.source})) or "-",
        "nodes": len(_by_node(passes)),
        "missing": "; ".join(missing) or None,
        "tree_read_bytes": read_bytes,
        "tree_read_bytes_per_output_token": _per(read_bytes, output_tokens),
        "tree_read_bytes_per_prompt_token": _per(read_bytes, prompt_tokens),
        "major_faults_per_output_token": _per(_total(passes, lambda h: h.major_faults),
                                              output_tokens),
        "table_bytes": _over_nodes(passes, lambda n: n[-1][1].table_bytes, sum),
        "table_resident_bytes_start": _over_nodes(
            passes, lambda n: n[0][1].table_resident_start_bytes, sum),
        "table_resident_bytes_end": _over_nodes(
            passes, lambda n: n[-1][1].table_resident_end_bytes, sum),
        "peak_rss_file_bytes": _over_nodes(
            passes, lambda n: _peak(n, lambda h: h.peak_rss_file_bytes), sum),
        "peak_rss_shmem_bytes": _over_nodes(
            passes, lambda n: _peak(n, lambda h: h.peak_rss_shmem_bytes), sum),
        "peak_pinned_bytes": _over_nodes(
            passes, lambda n: _peak(n, lambda h: h.peak_pinned_bytes), sum),
        "peak_locked_bytes": _over_nodes(
            passes, lambda n: _peak(n, lambda h: h.peak_locked_bytes), sum),
        "io_stall_share": _over_nodes(passes, lambda n: _share(n, lambda h: h.io_some_s), max),
        "disk_busy_share": _over_nodes(passes, lambda n: _share(n, lambda h: h.disk_io_time_s),
                                       max),
        "disks": ", ".join(disks) or None,
        "device_read_bytes_per_output_token": _per(_total(passes, lambda h: h.disk_read_bytes),
                                                   output_tokens),
        "host_major_faults_per_output_token": _per(
            _total(passes, lambda h: h.host_major_faults), output_tokens),
        "table_state": None, "table_state_ttft_ms": None, "table_state_requests": None,
    }


def levels_host(by_level: Mapping[tuple[int, float | None], Sequence[Pass]],
                tokens: Mapping[tuple[int, float | None], tuple[float, float]],
                table_state: str, records: Sequence[RequestRecord],
                ) -> dict[tuple[int, float | None], HostDict]:
    """Each level's host figures (level_host over its stored passes, per the output and
    prompt tokens its requests reported), the level of the run's first pass with the start
    state `run --table-state` set (cold_start: `records` are the run's, needed only then):
    what the summary and the explorer show alike."""
    first = cold_start.first_level(records) if table_state else None
    out = {}
    for key, passes in by_level.items():
        host = level_host(passes, *tokens.get(key, (0.0, 0.0)))
        if key == first:
            host.update(cast(HostDict, cold_start.figures(
                table_state, host["table_bytes"], host["table_resident_bytes_start"], records,
                first)))
        out[key] = host
    return out
