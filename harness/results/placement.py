"""A placement verdict: what moving the Engram table did, from two runs' summaries and what
their servers and hosts reported. Pure: the summaries (harness.results.report), the bundled
server's /stats snapshots per level and the target's /metrics rows come in as read.

Max C, users and the TTFT intervals are the summaries' own (the capacity rules and the
cluster bootstrap are not redone here). Disk bytes per token are the explorer's /stats figure
(harness.results.stats_counters: the server process's storage reads over the tokens it
processed) and, with host figures, the host agent's reads per output token. The host memory
the table holds is the largest of what was measured: the whole table where /stats says it is
in host RAM, the table's pages resident in the page cache (/stats or the agent), and the
agent's pinned, locked and shared memory; per sustained user it is that over Max C x the chat
factor (the run's chat users)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any, cast
from urllib.parse import urlsplit

from common import stats_keys
from common.readable import size
from harness.results.metrics import level_key
from harness.results.stats_counters import level_counters, number, text
from harness.results.summary import Summary

# what every placement verdict says of itself: two runs are two arms measured one after the
# other, and a machine that drifts between them moves their figures too
NOT_INTERLEAVED = ("The two runs were measured one after the other, not interleaved: drift "
                   "between them counts as a difference; repeats (`run --repeat N`) give each "
                   "level the spread to read a difference against.")


class PlacementError(ValueError):
    """Two runs no placement verdict can be given for; the message is one sentence."""


@dataclass(frozen=True, slots=True)
class Figure:
    """A level's mean with its interval where the project has one (method "bootstrap": 95%
    over (repeat, round) clusters; "range": over repeats; None: no interval)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    method: str | None = None

    def interval(self) -> str:
        """'95% interval 300-325', 'range over repeats 300-325', or '' without one."""
        if self.low is None or self.high is None or self.method is None:
            return ""
        what = "95% interval" if self.method == "bootstrap" else "range over repeats"
        return f"{what} {self.low:,.1f}-{self.high:,.1f}"


@dataclass(frozen=True, slots=True)
class HeldMemory:
    """Host memory the table holds, and which measurement said so."""

    bytes: float | None
    how: str


@dataclass(frozen=True, slots=True)
class KvPool:
    """The KV pool the engine reported: tokens it holds, bytes where told, and where from."""

    tokens: float | None
    bytes: float | None
    source: str | None


@dataclass(frozen=True, slots=True)
class LevelSide:
    """One run at one level: what the verdict quotes."""

    passes: bool
    ttft_ms: Figure
    tpot_ms: Figure
    disk_bytes_per_token: float | None  # /stats: per token processed, prompt and output
    tree_read_bytes_per_output_token: float | None  # host agent: the server's process tree's
    # reads from storage, the table's and any other


@dataclass(frozen=True, slots=True)
class RunSide:
    """One run as the verdict sees it."""

    run_id: str
    placement: str | None
    device: str | None
    model: str | None
    engine: str | None
    server: str | None  # the target's host
    input_tokens: float | None  # measured where known, else asked for
    output_tokens: int | None
    max_c: int
    max_c_high: int | None  # the highest C not ruled out: the lowest failing C above - 1
    agreement: str | None  # repeats: how many found this Max C
    starved: str | None  # the level that decided Max C failed while the server starved
    chat_users: int
    agentic_users: int
    levels: Mapping[int, LevelSide]
    held: HeldMemory
    kv: KvPool

    @property
    def held_per_chat_user(self) -> float | None:
        """Host memory the table costs per sustained chat user: held / (Max C x factor)."""
        if self.held.bytes is None or not self.chat_users:
            return None
        return self.held.bytes / self.chat_users

    def max_c_text(self) -> str:
        """'6 (exact)', '6 (6-7: C=8 fails)' or '6 (at least: no higher level tested)'."""
        if self.max_c_high is None:
            how = "at least: no higher level tested"
        elif self.max_c_high == self.max_c:
            how = "exact"
        else:
            how = f"{self.max_c}-{self.max_c_high}: C={self.max_c_high + 1} fails"
        agree = f"; {self.agreement} repeats agree" if self.agreement else ""
        return f"{self.max_c} ({how}{agree})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Run B against run A: their sides, the levels both ran, the one the paragraph quotes,
    what differs besides the placement, and the paragraph."""

    a: RunSide
    b: RunSide
    shared: tuple[int, ...]
    level: int | None
    other_differences: tuple[str, ...]
    chat_factor: float
    paragraph: str


def run_side(summary: Summary, stats: Sequence[Mapping[str, Any]] = (),
             metric_rows: Sequence[Mapping[str, Any]] = (),
             target_url: str | None = None) -> RunSide:
    """One run's side from its summary, its /stats snapshots per pass (store.server_stats)
    and its /metrics rows (store.server_metrics); PlacementError for a run without Max C."""
    run_id = summary["run_id"]
    key = level_key(summary.get("mode"))
    if key != "C" or summary.get("max_c") is None:
        what = {"U": "a users run (its capacity is Max users)",
                "R": "a rate run (its capacity is a request rate)",
                "X": "a timed trace replay (its capacity is a speedup)"}.get(
            key or "", "a run without Max C")
        raise PlacementError(f"run {run_id} is {what}: a placement verdict compares the Max C "
                             "of two runs keyed by concurrency (closed, burst or trace-closed)")
    levels = [row for row in summary["levels"] if row.get("rate") is None]
    max_c = cast(int, summary["max_c"])
    failing = [row["concurrency"] for row in levels
               if not row["passes"] and row["concurrency"] > max_c]
    agreement = summary.get("max_c_agreement")
    snapshots = _stats_by_level(stats)
    hosts = {row["concurrency"]: cast(Mapping[str, Any], cast(Mapping[str, Any], row).get("host")
                                      or {}) for row in levels}
    sides = {row["concurrency"]: LevelSide(
        passes=row["passes"], ttft_ms=_ttft(row), tpot_ms=Figure(row.get("mean_tpot_ms")),
        disk_bytes_per_token=_mean([level_counters(before, after)["disk_bytes_per_token"]
                                    for before, after in snapshots.get(row["concurrency"], [])]),
        tree_read_bytes_per_output_token=hosts[row["concurrency"]].get(
            "tree_read_bytes_per_output_token")) for row in levels}
    last = _last_after(stats)
    placement = summary.get("table_placement") or text(last, stats_keys.PLACEMENT)
    measured = summary.get("measured_input_tokens")
    return RunSide(
        run_id=run_id, placement=placement, device=summary.get("device"),
        model=summary.get("model"), engine=summary.get("engine"),
        server=urlsplit(target_url).hostname if target_url else None,
        input_tokens=measured if measured is not None else summary.get("input_tokens"),
        output_tokens=summary.get("output_tokens"), max_c=max_c,
        max_c_high=min(failing) - 1 if failing else None,
        agreement=agreement["text"] if agreement else None,
        starved=summary.get("max_c_starved"),
        chat_users=summary.get("chat_users") or 0,
        agentic_users=summary.get("agentic_users") or 0, levels=sides,
        held=held_memory(stats, list(hosts.values())), kv=kv_pool(last, metric_rows))


def held_memory(stats: Sequence[Mapping[str, Any]],
                hosts: Sequence[Mapping[str, Any]]) -> HeldMemory:
    """The largest host memory measured holding the table (module docstring); 0 where /stats
    says the table is in device memory and nothing else was measured."""
    after = [cast(dict, row.get("after") or {}) for row in stats]
    last = after[-1] if after else {}
    found: list[tuple[float, str]] = []
    placement = text(last, stats_keys.PLACEMENT)
    table = number(last, stats_keys.TABLE_BYTES)
    if placement == "host" and table is not None:
        found.append((table, "the whole table in host RAM (/stats)"))
    resident = [v for snap in after for k in (stats_keys.TABLE_RESIDENT_PEAK_BYTES,
                                              stats_keys.TABLE_RESIDENT_BYTES)
                if (v := number(snap, k)) is not None]
    if resident:
        found.append((max(resident), "table pages in the page cache, peak (/stats)"))
    for key, how in (("peak_pinned_bytes", "pinned host memory, peak (host agent)"),
                     ("peak_locked_bytes", "locked host memory, peak (host agent)"),
                     ("table_resident_bytes_end", "table pages in the page cache (host agent)"),
                     ("peak_rss_shmem_bytes", "shared memory, peak (host agent)")):
        values = [v for host in hosts if isinstance(v := host.get(key), int | float)]
        if values and max(values) > 0:
            found.append((float(max(values)), how))
    if found:
        return HeldMemory(*max(found, key=lambda f: f[0]))
    if placement == "device":
        return HeldMemory(0.0, "none: the table is in device memory (/stats)")
    return HeldMemory(None, "not measured: no /stats table figures and no host figures")


def kv_pool(stats: Mapping[str, Any], metric_rows: Sequence[Mapping[str, Any]]) -> KvPool:
    """The KV pool from /stats (tokens and bytes), else vLLM's `vllm:cache_config_info`
    labels in /metrics (num_gpu_blocks x block_size tokens)."""
    tokens, size = number(dict(stats), "kv_pool_tokens"), number(dict(stats), "kv_pool_bytes")
    if tokens is not None:
        return KvPool(tokens, size, "/stats")
    for row in metric_rows:
        if row.get("name") == "vllm:cache_config_info":
            try:
                labels = json.loads(row.get("labels") or "{}")
                pool = int(labels.get("num_gpu_blocks") or 0) * int(labels.get("block_size") or 0)
            except (ValueError, TypeError, AttributeError):
                continue
            if pool:
                return KvPool(float(pool), None, "/metrics vllm:cache_config_info")
    return KvPool(None, None, None)


def verdict(a: RunSide, b: RunSide, chat_factor: float) -> Verdict:
    """Run B (the table moved) against run A, with the paragraph that says what changed;
    PlacementError when both are one run."""
    if a.run_id == b.run_id:
        raise PlacementError(f"both runs are {a.run_id}: compare needs two different runs")
    shared = tuple(sorted(set(a.levels) & set(b.levels)))
    both_pass = [c for c in shared if a.levels[c].passes and b.levels[c].passes]
    level = max(both_pass) if both_pass else (shared[0] if shared else None)
    differences = other_differences(a, b)
    return Verdict(a, b, shared, level, differences, chat_factor,
                   _paragraph(a, b, level, bool(both_pass), differences, chat_factor))


def other_differences(a: RunSide, b: RunSide) -> tuple[str, ...]:
    """What differs between the runs besides the placement, one phrase each."""
    out = []
    for what, x, y in (("device", a.device, b.device), ("model", a.model, b.model),
                       ("engine", a.engine, b.engine), ("server", a.server, b.server),
                       ("output length", a.output_tokens, b.output_tokens)):
        if x != y:
            out.append(f"{what} ({x or 'not recorded'} vs {y or 'not recorded'})")
    if a.input_tokens and b.input_tokens and abs(b.input_tokens / a.input_tokens - 1) > 0.05:
        out.append(f"prompt length ({a.input_tokens:,.0f} vs {b.input_tokens:,.0f} tokens)")
    return tuple(out)


def _paragraph(a: RunSide, b: RunSide, level: int | None, both_pass: bool,
               differences: Sequence[str], chat_factor: float) -> str:
    where_a, where_b = a.placement or "an unnamed placement", b.placement or "an unnamed placement"
    move = (f"Moving the table from {where_a} ({a.run_id}) to {where_b} ({b.run_id})"
            if a.placement != b.placement else
            f"Both runs hold the table on {where_a}, so this compares {a.run_id} and "
            f"{b.run_id}, not two placements: run B")
    change = b.max_c - a.max_c
    moved = ("left Max C where it was" if change == 0 else
             f"{'lowered' if change < 0 else 'raised'} Max C by {abs(change)}")
    sentences = [f"{move} {moved}, from {a.max_c_text()} to {b.max_c_text()}: "
                 f"{a.chat_users} -> {b.chat_users} chat users, {a.agentic_users} -> "
                 f"{b.agentic_users} agentic users."]
    sentences += [f"{side.placement or side.run_id}'s Max C may be this machine's, not the "
                  f"server's: {side.starved}." for side in (a, b) if side.starved]
    if level is not None:
        sentences.append(_latency(a.levels[level], b.levels[level], level, both_pass))
        sentences.append(_disk(a, b, level))
    else:
        sentences.append("The runs share no level, so their latencies are not set side by side.")
    sentences.append(_memory(a, b, chat_factor))
    sentences.append(_kv(a, b))
    if differences:
        sentences.append(f"The runs also differ in {', '.join(differences)}: the verdict is not "
                         "about placement alone.")
    return " ".join(s for s in sentences if s)


def _latency(x: LevelSide, y: LevelSide, level: int, both_pass: bool) -> str:
    why = "the highest level both runs pass" if both_pass else "no level passes in both runs"
    at = f"At C={level} ({why}), "
    if x.ttft_ms.value is None or y.ttft_ms.value is None:
        ttft = "mean TTFT was not measured in both runs"
    else:
        diff = y.ttft_ms.value - x.ttft_ms.value
        ttft = (f"mean TTFT went from {_ms(x.ttft_ms)} to {_ms(y.ttft_ms)} "
                f"({diff:+,.1f} ms{_overlap(x.ttft_ms, y.ttft_ms)})")
    if x.tpot_ms.value is None or y.tpot_ms.value is None:
        return at + ttft + "."
    return (at + ttft + f", and mean TPOT from {x.tpot_ms.value:,.1f} to "
            f"{y.tpot_ms.value:,.1f} ms ({y.tpot_ms.value - x.tpot_ms.value:+,.1f} ms; TPOT has "
            "no interval).")


def _ms(f: Figure) -> str:
    interval = f.interval()
    return f"{f.value:,.1f} ms" + (f" ({interval})" if interval else "")


def _overlap(x: Figure, y: Figure) -> str:
    if None in (x.low, x.high, y.low, y.high) or x.method is None or y.method is None:
        return "; no interval on both sides, so no claim beyond the means"
    apart = cast(float, x.high) < cast(float, y.low) or cast(float, y.high) < cast(float, x.low)
    return ("; the intervals do not overlap" if apart
            else "; the intervals overlap: within noise")


def _disk(a: RunSide, b: RunSide, level: int) -> str:
    parts = []
    for side in (a, b):
        lv = side.levels[level]
        figures = []
        if lv.disk_bytes_per_token is not None:
            figures.append(f"{size(lv.disk_bytes_per_token)} per token (/stats)")
        if lv.tree_read_bytes_per_output_token is not None:
            figures.append(f"{size(lv.tree_read_bytes_per_output_token)} per output token "
                           "(host agent)")
        if figures:
            parts.append(f"{side.placement or side.run_id}: {' and '.join(figures)}")
    if not parts:
        return "Neither run measured reads from storage."
    return (f"Read from storage at C={level} (/stats: the table's bytes; host agent: all the "
            f"server's processes read): {'; '.join(parts)}.")


def _memory(a: RunSide, b: RunSide, chat_factor: float) -> str:
    if a.held.bytes is None and b.held.bytes is None:
        return "Neither run measured the host memory the table holds."
    held = "; ".join(f"{side.placement or side.run_id}: "
                     f"{size(side.held.bytes) if side.held.bytes is not None else 'not measured'}"
                     f" ({side.held.how})" for side in (a, b))
    text = f"Host memory held by the table: {held}."
    if a.held.bytes is not None and b.held.bytes is not None and a.held.bytes != b.held.bytes:
        freed = a.held.bytes - b.held.bytes
        text += f" The move {'freed' if freed > 0 else 'took'} {size(abs(freed))} of host memory."
    per = [f"{size(p)} on {side.placement or side.run_id} ({size(cast(float, side.held.bytes))} "
           f"/ ({side.max_c} x {chat_factor:g}) chat users)"
           for side in (a, b) if (p := side.held_per_chat_user) is not None]
    if per:
        text += f" Per sustained chat user: {' against '.join(per)}."
    if no_user := [side.placement or side.run_id for side in (a, b)
                   if side.held.bytes is not None and not side.chat_users]:
        text += f" {' and '.join(no_user)} sustained no user (Max C 0), so no figure per user."
    return text


def _kv(a: RunSide, b: RunSide) -> str:
    if a.kv.tokens is None and b.kv.tokens is None:
        return "Neither engine reported its KV pool."
    pools = "; ".join(f"{side.placement or side.run_id}: {_pool(side.kv)}" for side in (a, b))
    return f"KV pool as each engine reported it: {pools}."


def _pool(kv: KvPool) -> str:
    if kv.tokens is None:
        return "not reported"
    return (f"{kv.tokens:,.0f} tokens" + (f", {size(kv.bytes)}" if kv.bytes is not None else "")
            + f" ({kv.source})")


def _ttft(row: Mapping[str, Any]) -> Figure:
    ci = row.get("ttft_ci")
    if not ci or ci.get("low") is None or (ci.get("method") == "range"
                                           and (ci.get("repeats") or 0) < 2):
        return Figure(row.get("mean_ttft_ms"))  # one pass of too few rounds: no interval
    return Figure(row.get("mean_ttft_ms"), ci["low"], ci["high"], ci["method"])


def _stats_by_level(stats: Sequence[Mapping[str, Any]]) -> dict[int, list[tuple[dict, dict]]]:
    out: dict[int, list[tuple[dict, dict]]] = {}
    for row in stats:
        if row.get("rate") is None:
            out.setdefault(int(row["concurrency"]), []).append(
                (cast(dict, row.get("before") or {}), cast(dict, row.get("after") or {})))
    return out


def _last_after(stats: Sequence[Mapping[str, Any]]) -> dict:
    return next((cast(dict, row["after"]) for row in reversed(stats)
                 if isinstance(row.get("after"), dict)), {})


def _mean(values: Sequence[float | str | None]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return fmean(numbers) if numbers else None
