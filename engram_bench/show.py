"""What the results file holds, shown: `summary` (a run's table, or its figures as a peer
tool defines them), `capacity` (the rules over a CSV), `export` (files)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from engram_bench.errors import UserError
from engram_bench.parser import targets
from harness.results.capacity_csv import capacity_object, read_level_csv
from harness.results.handover.markdown import summary_markdown
from harness.results.metrics import Targets
from harness.results.peer_views import peer_view, with_chunk_times
from harness.results.render import print_capacity, print_peer_view, print_summary
from harness.results.store import Store
from harness.results.stored_summary import stored_summary


def show_run(store: Store, run_id: str, targets: Targets, as_json: bool, console: Console) -> int:
    summary = stored_summary(store, run_id, targets)
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        print_summary(summary, console)
    return 0


def cmd_summary(args: argparse.Namespace, console: Console) -> int:
    if not args.db.exists():
        raise UserError(f"{args.db} does not exist yet: start a run with `make bench`")
    if args.as_tool:
        return _show_as(Store(args.db), args.run_id, args.as_tool, args.json, console)
    if args.format == "md":
        print(summary_markdown(stored_summary(Store(args.db), args.run_id, targets(args))),
              end="")
        return 0
    return show_run(Store(args.db), args.run_id, targets(args), args.json, console)


def _show_as(store: Store, run_id: str, tool: str, as_json: bool, console: Console) -> int:
    run = store.run(run_id)
    records = with_chunk_times(store.requests(run.run_id), store.chunk_times(run.run_id))
    view = peer_view(records, tool)
    if as_json:
        print(json.dumps({"run_id": run.run_id, **view}))
    else:
        print_peer_view(view, run.run_id, console)
    return 0


def cmd_capacity(args: argparse.Namespace, console: Console) -> int:
    capacity_targets = targets(args)
    result = capacity_object(read_level_csv(args.csv, capacity_targets.statistic),
                             capacity_targets)
    if args.json:
        print(json.dumps(result))
    else:
        print_capacity(result, console)
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    if not args.db.exists():
        raise UserError(f"{args.db} does not exist yet: start a run with `make bench`")
    for path in Store(args.db).export(args.out, args.run_id, args.format):
        console.print(f"wrote {path}", highlight=False)
    return 0
