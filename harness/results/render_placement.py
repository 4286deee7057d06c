"""Prints a placement verdict (harness.results.placement) on the terminal: its paragraph, then
one table of the figures it rests on, run A against run B, and the `--json` object of both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from common.readable import size
from harness.results.placement import NOT_INTERLEAVED, Figure, LevelSide, RunSide, Verdict


def print_verdict(v: Verdict, console: Console) -> None:
    console.print(f"placement verdict: {v.a.run_id} (A) -> {v.b.run_id} (B)", highlight=False)
    console.print(v.paragraph, highlight=False)
    table = Table(title="the figures (B - A where both are numbers)", title_justify="left")
    for name, justify in (("figure", "left"), ("A", "right"), ("B", "right"),
                          ("B - A", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows(v):
        table.add_row(*row)
    console.print(table, width=max(console.width, 120))
    console.print(NOT_INTERLEAVED, highlight=False)


def rows(v: Verdict) -> list[tuple[str, str, str, str]]:
    """The table's rows: the runs' setup and capacity, then each shared level's latency and
    reads from storage, then the table's host memory and the KV pools."""
    a, b = v.a, v.b
    out = [("placement", a.placement or "-", b.placement or "-", ""),
           ("Max C", a.max_c_text(), b.max_c_text(), f"{b.max_c - a.max_c:+d}"),
           ("chat users", str(a.chat_users), str(b.chat_users),
            f"{b.chat_users - a.chat_users:+d}"),
           ("agentic users", str(a.agentic_users), str(b.agentic_users),
            f"{b.agentic_users - a.agentic_users:+d}")]
    for c in v.shared:
        x, y = a.levels[c], b.levels[c]
        out.append((f"C={c} passes", _yes(x.passes), _yes(y.passes), ""))
        out.append(_figure(f"C={c} TTFT mean (ms)", x.ttft_ms, y.ttft_ms))
        out.append(_figure(f"C={c} TPOT mean (ms)", x.tpot_ms, y.tpot_ms))
        out += _bytes_rows(f"C={c} table B read / token (/stats)", x, y,
                           lambda s: s.disk_bytes_per_token)
        out += _bytes_rows(f"C={c} server reads B / output token (host agent)", x, y,
                           lambda s: s.tree_read_bytes_per_output_token)
    out.append(("host memory held by the table", _held(a), _held(b),
                _change(a.held.bytes, b.held.bytes, size)))
    out.append((f"... per chat user (held / (Max C x {v.chat_factor:g}))",
                _size(a.held_per_chat_user), _size(b.held_per_chat_user),
                _change(a.held_per_chat_user, b.held_per_chat_user, size)))
    out.append(("KV pool (tokens)", _count(a.kv.tokens), _count(b.kv.tokens),
                _change(a.kv.tokens, b.kv.tokens, lambda n: f"{n:,.0f}")))
    if a.kv.bytes is not None or b.kv.bytes is not None:
        out.append(("KV pool (bytes)", _size(a.kv.bytes), _size(b.kv.bytes),
                    _change(a.kv.bytes, b.kv.bytes, size)))
    for what in v.other_differences:
        out.append(("also differs", what, "", ""))
    return out


def as_json(v: Verdict) -> dict[str, Any]:
    """The verdict as `compare --json` writes it: both sides, the levels, the paragraph, and
    each side's host memory per chat user."""
    sides = {}
    for name, side in (("a", v.a), ("b", v.b)):
        data = asdict(side)
        data["levels"] = [{"concurrency": c, **asdict(lv)} for c, lv in sorted(side.levels.items())]
        data["held_per_chat_user_bytes"] = side.held_per_chat_user
        sides[name] = data
    return {**sides, "shared_levels": list(v.shared), "level": v.level,
            "other_differences": list(v.other_differences), "chat_factor": v.chat_factor,
            "paragraph": v.paragraph, "caveat": NOT_INTERLEAVED}


def _figure(name: str, x: Figure, y: Figure) -> tuple[str, str, str, str]:
    return (name, _with_interval(x), _with_interval(y),
            _change(x.value, y.value, lambda d: f"{d:,.1f}"))


def _with_interval(f: Figure) -> str:
    if f.value is None:
        return "-"
    return f"{f.value:,.1f}" + (f" [{f.low:,.1f}-{f.high:,.1f}]"
                                if f.low is not None and f.high is not None else "")


def _bytes_rows(name: str, x: LevelSide, y: LevelSide,
                pick: Callable[[LevelSide], float | None]) -> list[tuple[str, str, str, str]]:
    if pick(x) is None and pick(y) is None:
        return []
    return [(name, _size(pick(x)), _size(pick(y)), _change(pick(x), pick(y), size))]


def _held(side: RunSide) -> str:
    return f"{_size(side.held.bytes)} ({side.held.how})"


def _change(x: float | None, y: float | None, fmt: Callable[[float], str]) -> str:
    if x is None or y is None:
        return ""
    d = y - x
    return ("+" if d > 0 else "-" if d < 0 else "") + fmt(abs(d))


def _size(n: float | None) -> str:
    return "-" if n is None else size(n)


def _count(n: float | None) -> str:
    return "-" if n is None else f"{n:,.0f}"


def _yes(passes: bool) -> str:
    return "yes" if passes else "no"
