"""Levels of a closed or burst run stored short of their rounds: a load worker that died (under
`--keep-going` too), a stop or a kill leaves some (repeat, round) of a level unstored, or
stored in part, which `run --resume` sends. The summary flags each, so that a level's figures
are not read as its whole."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from harness.config import StoredRun
from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.summary import LevelRow, row_name


def planned_rounds(run: RunRow) -> tuple[int, int] | None:
    """(rounds, repeats) that each level of `run` plans; None for a run whose levels plan
    none (rate and trace levels are stored whole, a trace-closed level's rounds are its
    trace's requests, a users level's its own), or whose config this version cannot read."""
    config = StoredRun.from_json(run.config).config
    if config is None or config.trace or config.mode in ("rate", "users"):
        return None
    return config.rounds, config.repeat


def missing_rounds(records: Iterable[RequestRecord], rounds: int,
                   repeats: int) -> dict[int, int]:
    """Per concurrency of the records' closed levels (rate levels left out), how many of the
    `repeats` x `rounds` (repeat, round) it plans hold fewer than its C requests."""
    held = Counter((r.concurrency, r.repeat, r.round) for r in records if r.rate is None)
    return {c: sum(1 for repeat in range(repeats) for rnd in range(rounds)
                   if held[(c, repeat, rnd)] < c)
            for c in {c for c, _, _ in held}}


def is_short(run: RunRow, records: Sequence[RequestRecord]) -> bool:
    """Whether a level of the run is short of rounds it plans."""
    planned = planned_rounds(run)
    return bool(planned and any(missing_rounds(records, *planned).values()))


def flag(run: RunRow, levels: Sequence[LevelRow],
         records: Sequence[RequestRecord]) -> list[str]:
    """Set each level row's `missing_rounds` where the run plans rounds per level, and a
    warning for each level short of some."""
    planned = planned_rounds(run)
    if planned is None:
        return []
    missing = missing_rounds(records, *planned)
    total = planned[0] * planned[1]
    warnings = []
    for row in levels:
        row["missing_rounds"] = short = missing.get(row["concurrency"], total)
        if not short:
            continue
        stored = f"{total - short} of its {total} rounds are stored whole"
        warnings.append(f"{row_name(row)}: {stored} so far" if run.status == "running" else
                        f"{row_name(row)} is short: {stored}; `run --resume {run.run_id}` "
                        "measures the rest")
    return warnings
