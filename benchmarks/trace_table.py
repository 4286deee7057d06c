"""What a trace does to an offloaded Engram table: `make bench-trace`.

The bundled server as `make bench DEVICE=spark` starts it (qwen-mini, its table on NVMe in
the Spark's page-cache share) and the same server with its table in host RAM, each given a
Mooncake-format trace (`--trace FILE`, or a synthetic one, benchmarks.trace_file) replayed at
concurrency levels, and today's synthetic prompts (`--prompts text`) at the trace's mean
lengths, the same number of requests. Every arm runs on a fresh server (a cold table), the
arms interleaved: (placement, workload) in an order that swaps at every pass.

Per arm: mean TTFT and TPOT, the prompt tokens the trace's hash ids share, the server's prefix
cache hit rate (its /metrics), the tokens the engine computed per request (a prefix found in
the cache is not computed again, nor its table rows read), and from the kernel's counters in
its /stats the table's disk reads per request and per computed token, the share of its table
pages found in the page cache, and its residency after the level (explorer.counters).

    .venv/bin/python -m benchmarks.trace_table [--trace FILE] [--requests 96] [--level 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import fmean

from benchmarks.cells import cell
from benchmarks.trace_file import write
from benchmarks.users_search import free_port, wait_healthy
from benchmarks.users_vs_closed import cli
from common import stats_keys
from explorer.counters import level_counters
from harness.results.report import server_levels
from harness.results.store import Store
from harness.run.trace import source

ROOT = Path(__file__).resolve().parent.parent
PLACEMENTS = {"nvme": (), "host": ("--placement", "host")}


def arm(db: Path, placement: str, workload: tuple[str, ...], level: int) -> dict:
    """One arm on a fresh server: its level's figures, the server's and the kernel's."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "engram_bench", "serve", "--device",
                               "spark", *PLACEMENTS[placement], "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 600)
        summary = cli("run", "--url", f"http://127.0.0.1:{port}/v1", "--device", "spark",
                      "--placement", placement, "--levels", str(level), "--db", str(db),
                      *workload)
    finally:
        server.terminate()
        server.wait(30)
    run_id = summary["run_id"]
    lv = summary["levels"][0]
    store = Store(db)
    stats = store.server_stats(run_id)
    counters = [level_counters(r["before"], r["after"]) for r in stats]
    server = next(iter(server_levels(store.server_metrics(run_id)).values()), {})
    asked, shared = lv.get("mean_input_tokens_requested"), lv.get("mean_trace_prefix_tokens")

    def grown(key: str) -> float | None:
        """A /stats counter's growth over the level, per request."""
        deltas = [r["after"].get(key, 0) - r["before"].get(key, 0) for r in stats
                  if r["before"] and r["after"]]
        return sum(deltas) / lv["requests"] if deltas and lv["requests"] else None

    return {
        "requests": lv["requests"], "errors": lv["errors"], "ttft": lv["mean_ttft_ms"],
        "tpot": lv["mean_tpot_ms"], "prompt": lv["mean_prompt_tokens"],
        "output": lv["mean_output_tokens"],
        "shared": shared / asked if shared is not None and asked else None,
        "hit_rate": server.get("prefix_hit_rate"),
        "prefill": grown(stats_keys.PREFILL_TOKENS), "decode": grown(stats_keys.DECODE_TOKENS),
        "disk_per_request": grown(stats_keys.DISK_READ_BYTES),
        "disk_per_token": fmean(c["disk_bytes_per_token"] for c in counters)
        if counters and all(c["disk_bytes_per_token"] is not None for c in counters) else None,
        "page_hit_rate": fmean(c["page_hit_rate"] for c in counters)
        if counters and all(c["page_hit_rate"] is not None for c in counters) else None,
        "resident": counters[-1]["resident_bytes"] if counters else None,
        "budget": counters[-1]["budget_bytes"] if counters else None,
    }



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="a Mooncake-format trace (default: a "
                        "synthetic one, benchmarks.trace_file)")
    parser.add_argument("--requests", type=int, default=96, help="the trace's first N")
    parser.add_argument("--level", type=int, default=2, help="concurrency of every arm")
    parser.add_argument("--mean-input", type=int, default=128,
                        help="the trace's mean prompt after --input-scale (tokens)")
    parser.add_argument("--max-output", type=int, default=32, help="--max-output-tokens")
    parser.add_argument("--passes", type=int, default=2, help="passes over the four arms")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace or write(Path(tmp) / "mooncake.jsonl", args.requests)
        window = source.read(trace, "mooncake", source.Window(limit=args.requests))
        mean_in = fmean(r.input_tokens or 0 for r in window.requests)
        scale = args.mean_input / mean_in
        mean_out = fmean(min(r.output_tokens or 0, args.max_output) for r in window.requests)
        replay = ("--trace", str(trace), "--trace-schedule", "closed", "--trace-limit",
                  str(args.requests), "--input-scale", f"{scale:.6f}", "--max-output-tokens",
                  str(args.max_output))
        synthetic = ("--prompts", "text", "--input-tokens", str(args.mean_input),
                     "--output-tokens", str(round(mean_out)),
                     "--rounds", str(max(1, args.requests // args.level)))
        print(f"trace {trace if args.trace else 'synthetic (benchmarks.trace_file)'}: first "
              f"{len(window.requests)} requests, mean input {mean_in:,.0f} tokens scaled by "
              f"{scale:.4f} to ~{args.mean_input}, outputs clipped to {args.max_output} (mean "
              f"{mean_out:.1f}); C={args.level}, {args.passes} passes, a fresh server per arm")
        results: dict[tuple[str, str], list[dict]] = {}
        order = [(p, w) for p in PLACEMENTS for w in ("trace", "synthetic")]
        for k in range(args.passes):
            for placement, workload in (order if k % 2 == 0 else order[::-1]):
                flags = replay if workload == "trace" else synthetic
                results.setdefault((placement, workload), []).append(
                    arm(Path(tmp) / f"{placement}-{workload}.duckdb", placement, flags,
                        args.level))
                print(f"pass {k + 1}: {placement} {workload} done", file=sys.stderr)
    print("\n| table | workload | requests | prompt tok | shared (trace) | prefix hits "
          "(server) | computed / request (prefill + decode) | disk read / request | disk read "
          "B/token | page hits | resident / budget | TTFT ms | TPOT ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (placement, workload), runs in results.items():
        def mean(key: str, runs: list[dict] = runs) -> float | None:
            values = [r[key] for r in runs if r[key] is not None]
            return fmean(values) if values else None
        resident, budget = mean("resident"), mean("budget")
        share = f"{resident / budget:.0%}" if resident is not None and budget else "-"
        print(f"| {placement} | {workload} | {sum(r['requests'] for r in runs)} | "
              f"{cell(mean('prompt'), '.1f')} | {cell(mean('shared'), '.0%')} | "
              f"{cell(mean('hit_rate'), '.0%')} | {cell(mean('prefill'), '.0f')} + "
              f"{cell(mean('decode'), '.0f')} | "
              f"{cell((mean('disk_per_request') or 0) / 2**20, '.2f')} MiB | "
              f"{cell(mean('disk_per_token'), ',.0f')} | {cell(mean('page_hit_rate'), '.1%')} | "
              f"{share} | {cell(mean('ttft'), ',.0f')} | {cell(mean('tpot'), '.1f')} |")


if __name__ == "__main__":
    main()
