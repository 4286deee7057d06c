"""TTFT and TTFO as `engram-bench run` stores them, against the fake server's own clock.

The fake server, in a process of its own, streams each answer's first --reasoning-tokens
tokens as reasoning and logs when it read each request and wrote its first token and its
first answer token (time.perf_counter, the clock the harness times with). `run` sweeps it
with its defaults at levels 1 and 8, --passes times; per pass and level, the mean and median
of the stored TTFO less the server's (first answer write - body read), the same of TTFT, and
of the reasoning time (TTFO - TTFT) less the server's; and whether every request's
reasoning_tokens is what the server counted. With `--old TREE` (a worktree of another
commit), each pass runs that tree's `run` and this one's, in alternating order.

    .venv/bin/python -m benchmarks.reasoning_timing [--passes 3] [--rounds 30] [--old TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.one_loop import server_log, tree_head
from harness.results.store import Store
from runners.lifecycle import free_port

ROOT = Path(__file__).resolve().parent.parent


def one_pass(url: str, rounds: int, db: Path, tree: Path, arm: str) -> list[str]:
    """One `run` of levels 1 and 8, `tree`'s; a line per level."""
    server_log(url)  # what came before left out
    proc = subprocess.run([sys.executable, "-m", "engram_bench", "run", "--url", url,
                           "--model", "mock-model", "--levels", "1,8", "--rounds", str(rounds),
                           "--output-tokens", "20", "--json", "--db", str(db)],
                          cwd=tree, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    run_id = json.loads(proc.stdout)["run_id"]
    server = server_log(url)
    lines = []
    records = Store(db).requests(run_id)
    for c in (1, 8):
        ttfo, ttft, reasoning, counted = [], [], [], True
        for r in (r for r in records if r.concurrency == c):
            t = server[r.request_id]
            ttfo_ms = r.figures["ttfo_ms"]
            assert isinstance(ttfo_ms, float) and r.ttft_ms is not None
            ttfo.append(ttfo_ms - (t["first_answer_write"] - t["body_read"]) * 1000)
            ttft.append(r.ttft_ms - (t["first_write"] - t["body_read"]) * 1000)
            reasoning.append(ttfo_ms - r.ttft_ms
                             - (t["first_answer_write"] - t["first_write"]) * 1000)
            counted &= r.figures["reasoning_tokens"] == t["reasoning_tokens"]
        lines.append(
            f"| {arm} | {c} | {len(ttfo)} | {statistics.fmean(ttfo):+.2f} / "
            f"{statistics.median(ttfo):+.2f} | {statistics.fmean(ttft):+.2f} / "
            f"{statistics.median(ttft):+.2f} | {statistics.fmean(reasoning):+.2f} | "
            f"{'yes' if counted else 'no'} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--reasoning-tokens", type=int, default=12)
    parser.add_argument("--old", type=Path, help="a worktree of the commit to compare with")
    args = parser.parse_args()
    trees = {tree_head(ROOT): ROOT, **({tree_head(args.old.resolve()): args.old.resolve()}
                                   if args.old else {})}
    from benchmarks.machine import machine_line

    load = os.getloadavg()[0]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "harness.mock_server", "--port", str(port), "--ttft-ms", "5",
         "--itl-ms", "4", "--reasoning-tokens", str(args.reasoning_tokens)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    server.stdout.readline()  # "listening on ..."
    try:
        print(f"{machine_line(load)}; fake server TTFT 5 ms, ITL 4 ms, 20 tokens of which "
              f"{args.reasoning_tokens} reasoning; `run` defaults, {args.rounds} rounds")
        print("| arm | C | requests | TTFO - server's ms, mean / median | TTFT - server's ms, "
              "mean / median | reasoning time - server's ms, mean | reasoning tokens = server's |")
        print("|---|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            for p in range(args.passes):
                for arm in (list(trees) if p % 2 == 0 else list(trees)[::-1]):
                    for line in one_pass(f"http://127.0.0.1:{port}/v1", args.rounds,
                                         Path(tmp) / f"{arm}{p}.duckdb", trees[arm], arm):
                        print(line, flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
