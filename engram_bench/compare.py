"""`compare RUN_A RUN_B`: what moving the Engram table did, as a paragraph and a table
(harness.results.placement), or `--json`."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from engram_bench.errors import UserError
from engram_bench.parser import targets
from harness.results.placement import PlacementError
from harness.results.render_placement import as_json, print_verdict
from harness.results.store import Store
from harness.results.stored_summary import stored_verdict


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    if len(args.run_ids) != 2:
        raise UserError(f"compare takes two runs, the table's first placement and its second; "
                        f"{len(args.run_ids)} given")
    if not args.db.exists():
        raise UserError(f"{args.db} does not exist yet: start a run with `make bench`")
    run_a, run_b = args.run_ids
    try:
        found = stored_verdict(Store(args.db), run_a, run_b, targets(args))
    except PlacementError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(json.dumps(as_json(found)))
    else:
        print_verdict(found, console)
    return 0
