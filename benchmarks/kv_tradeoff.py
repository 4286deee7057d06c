"""`make bench-kv-tradeoff`: where moving the Engram table to NVMe pays, because the memory it
frees becomes KV cache and more requests fit.

Two arms on `spark`, each its own bundled server started once: the table in the unified pool
(`--placement device`) and the table on NVMe (`--placement nvme`, spark's page-cache share).
Each server sizes its paged KV pool from spark's published pools (DeepSeek-V4.1-Flash on 8x
DGX Spark: 8.7 GB per node with the table in memory, ~30 GB with it on NVMe), scaled like its
table (runners.sizing.bundled_kv_pool_bytes). Both run the same closed levels at a short and a
long prompt, level by level with the arms' order alternating, so this machine's drift falls
on both alike. Each (arm, prompt length) is one stored run, written level by level.

Targets: the published ones (mean TPS >= 20, mean TTFT <= 1,000 ms, no errors) at the short
prompt. At the long prompt a 2-core CPU needs seconds just to prefill one request alone, so
TTFT is allowed 1,000 ms on top of that: the memory arm's unloaded (C=1) mean TTFT at that
length, measured in this run. A request whose prompt does not fit the free blocks waits for KV
(the server's `vllm:num_requests_waiting` counts it), and one preempted when running requests
outgrow the pool is prefilled again later (`vllm:num_preemptions`); both show in TTFT and TPS.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness.config import RunConfig, parse_levels
from harness.results.metrics import Targets, capacity, point, stats_by_level
from harness.results.store import Store
from harness.run import aio
from harness.run.progress import LevelProgress
from harness.run.session import execute, new_run_id
from harness.wire.endpoint import Endpoint
from runners.engram.kv_blocks import blocks_for
from runners.lifecycle import BundledServer

PLACEMENTS = ("device", "nvme")
DEFAULT_DB = Path("results/kv_tradeoff.duckdb")


def server_args(placement: str, args: argparse.Namespace) -> list[str]:
    return ["--device", "spark", "--preset", args.preset, "--placement", placement,
            "--table-size-gb", str(args.table_gb), "--decode", "replay"]


def run_length(urls: dict[str, str], prompt: int, levels: tuple[int, ...], rounds: int,
               args: argparse.Namespace, store: Store) -> dict[str, str]:
    """Every level of one prompt length, arms alternating; returns arm -> run id."""
    run_ids = {arm: new_run_id() + f"-{arm[:3]}{prompt}" for arm in urls}
    started: set[str] = set()
    for i, c in enumerate(levels):
        for arm in (PLACEMENTS if i % 2 == 0 else PLACEMENTS[::-1]):
            config = RunConfig(
                url=urls[arm], model="", levels=(c,), rounds=rounds, input_tokens=prompt,
                output_tokens=args.output_tokens, device="spark", table_placement=arm,
                label=f"kv-tradeoff {arm} {prompt}/{args.output_tokens}", prompts="text",
                request_timeout_s=900.0)
            print(f"  {prompt:>5} tokens, {arm:<6} C={c} ...", end="", flush=True)
            t0 = time.perf_counter()
            aio.run(execute(config, Endpoint(urls[arm]), store, LevelProgress(enabled=False),
                            run_ids[arm], resume=arm in started))
            started.add(arm)
            print(f" {time.perf_counter() - t0:.0f} s", flush=True)
    for run_id in run_ids.values():  # the runs hold every level, as one sweep would
        stored = json.loads(store.run(run_id).config)
        store.update_run(run_id, levels=list(levels),
                         config=json.dumps({**stored, "levels": list(levels)}))
    return run_ids


def kv_figures(store: Store, run_id: str, prompt: int,
               output: int) -> tuple[int, int, float, float]:
    """The server's own pool (tokens), how many requests of this length it holds at once at
    their full length, the most requests it had waiting at any level and the requests it
    preempted over the run (its /metrics)."""
    stats = store.server_stats(run_id)[-1]["after"]
    pool = stats["kv_pool_tokens"]
    block = stats["kv_block_size"]
    per_request = blocks_for(prompt + output, block)  # one request at its full length
    rows = store.server_metrics(run_id)
    waiting = max((row["value"] for row in rows
                   if row["name"] == "vllm:num_requests_waiting" and row["stat"] == "max"),
                  default=0.0)
    preempted = sum(row["value"] for row in rows
                    if row["name"] == "vllm:num_preemptions_total" and row["stat"] == "delta")
    return pool, stats["kv_blocks_total"] // per_request, waiting, preempted


def report(store: Store, runs: dict[int, dict[str, str]], args: argparse.Namespace) -> None:
    print()
    print(f"spark, preset {args.preset}, table {args.table_gb:g} GiB; {args.output_tokens} "
          "output tokens; closed levels, arms alternating level by level")
    header = (f"{'prompt':>6} {'table':<7} {'KV pool':>9} {'fit':>4} {'max wait':>8} "
              f"{'preempted':>9}  "
              f"{'TTFT target':>11}  levels (C: mean TTFT ms / mean TPS)   Max C")
    print(header)
    print("-" * len(header))
    summary = {}
    for prompt, by_arm in runs.items():
        records = {arm: store.requests(run_id) for arm, run_id in by_arm.items()}
        ttft_max = 1000.0
        if prompt > args.short:
            alone = [r.ttft_ms for r in records["device"] if r.ok and r.concurrency == 1]
            ttft_max += sum(alone) / len(alone)
        targets = Targets(ttft_max_ms=ttft_max)
        for arm, run_id in by_arm.items():
            stats = stats_by_level(records[arm], args.output_tokens)
            cap = capacity([point(s) for s in stats], targets)
            pool, fit, waiting, preempted = kv_figures(store, run_id, prompt,
                                                       args.output_tokens)
            levels = "  ".join(f"{s.concurrency}: {s.number('mean_ttft_ms') or 0:.0f}/"
                               f"{s.number('mean_tps') or 0:.1f}"
                               f"{'' if v.passes else '*'}"
                               for s, v in zip(stats, cap.levels, strict=True))
            print(f"{prompt:>6} {arm:<7} {pool:>9,} {fit:>4} {waiting:>8.0f} {preempted:>9.0f}  "
                  f"{ttft_max:>9.0f}ms  {levels}   {cap.max_c}")
            summary[prompt, arm] = cap.max_c
    print("(* fails the targets; KV pool: the server's /stats; fit: its blocks over the blocks "
          "of one request of this length at its full length (arithmetic); max wait: the most "
          "requests /metrics showed waiting during a level; preempted: its preemptions counter "
          "over the run's levels)")
    for prompt in runs:
        mem, nvme = summary[prompt, "device"], summary[prompt, "nvme"]
        verdict = ("NVMe wins" if nvme > mem else "memory wins" if mem > nvme else "a tie")
        print(f"{prompt}-token prompts: Max C {mem} with the table in memory, {nvme} with it on "
              f"NVMe: {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen-small",
                        help="model preset (qwen-small prefills 4k tokens in ~2 s here)")
    parser.add_argument("--table-gb", type=float, default=0.125,
                        help="table GiB; the KV pools scale with it")
    parser.add_argument("--short", type=int, default=128, help="short prompt tokens")
    parser.add_argument("--long", type=int, default=4096, help="long prompt tokens")
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--short-levels", type=parse_levels, default=(1, 2, 4, 6, 8))
    parser.add_argument("--long-levels", type=parse_levels, default=(1, 2, 3, 4))
    parser.add_argument("--short-rounds", type=int, default=10)
    parser.add_argument("--long-rounds", type=int, default=3)
    parser.add_argument("--db", type=Path, default=DEFAULT_DB)
    args = parser.parse_args()
    store = Store(args.db)
    store.initialise()
    with BundledServer(server_args("device", args)) as memory, \
            BundledServer(server_args("nvme", args)) as nvme:
        urls = {"device": memory.url, "nvme": nvme.url}
        runs = {}
        for prompt, levels, rounds in ((args.short, args.short_levels, args.short_rounds),
                                       (args.long, args.long_levels, args.long_rounds)):
            runs[prompt] = run_length(urls, prompt, levels, rounds, args, store)
    report(store, runs, args)
    print(f"stored in {args.db}: `make explore DB={args.db}` compares the runs")
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    raise SystemExit(code)
