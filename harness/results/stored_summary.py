"""A stored run's summary, built from everything the results file holds about it (what
`summary` prints), and two runs' placement verdict (what `compare` prints)."""

from __future__ import annotations

from typing import cast

from harness.config import StoredRun
from harness.results import report
from harness.results.metrics import Targets, capacity, level_key, point, stats_by_level
from harness.results.placement import RunSide, Verdict, run_side, verdict
from harness.results.run_row import RunRow
from harness.results.store import Store
from harness.results.summary import Summary
from harness.results.users import paired_concurrency_run


def stored_summary(store: Store, run_id: str, targets: Targets) -> Summary:
    """The summary of run `run_id` ('latest': the newest) under `targets`; StoreError for a
    run the file does not hold."""
    run = store.run(run_id)
    records = store.requests(run.run_id)
    config = StoredRun.from_json(run.config).config
    found = (report.search_plan(store, run.run_id, config, targets)
             if config and config.search and records else None)
    return report.summarise(
        run, stats_by_level(records, cast(int, run.output_tokens), targets.slo), records,
        targets, found, _paired_max_c(store, run, targets),
        report.server_levels(store.server_metrics(run.run_id)), store.client_checks(run.run_id),
        store.user_levels(run.run_id), store.lead_ins(run.run_id), store.load_hosts(run.run_id),
        store.server_cpu(run.run_id), store.host_levels(run.run_id))


def stored_verdict(store: Store, run_a: str, run_b: str, targets: Targets) -> Verdict:
    """Run B against run A (harness.results.placement), each judged by `targets`; StoreError
    for a run the file does not hold, PlacementError for a pair no verdict fits."""
    def side(run_id: str) -> RunSide:
        run = store.run(run_id)
        return run_side(stored_summary(store, run.run_id, targets),
                        store.server_stats(run.run_id), store.server_metrics(run.run_id),
                        run.target_url)

    return verdict(side(run_a), side(run_b), targets.chat_factor)


def _paired_max_c(store: Store, run: RunRow, targets: Targets) -> tuple[str, int] | None:
    """A users run: the newest run of its setup keyed by C, and that run's Max C (its
    estimate)."""
    if level_key(run.mode) != "U":
        return None
    paired = paired_concurrency_run(store.runs(), run)
    if paired is None:
        return None
    stats = stats_by_level(store.requests(paired.run_id), cast(int, paired.output_tokens),
                           targets.slo)
    return paired.run_id, capacity([point(s, targets.statistic, targets.ttft_of) for s in stats],
                                   targets).max_c
