"""One load loop at high concurrency: this checkout's harness against another commit's, the
arms interleaved (old, new, then new, old, ...) against one fake server process.

Each arm is a process of its own that imports its tree's harness (`--old`: a worktree, say
`git worktree add /tmp/old 6fa4a7e`) and runs one closed level through `execute`, with one
load loop (no `--workers`). Per row, from the fake server's log (its clock is the harness's):

- the TTFT bias (the harness's TTFT minus the server's own), and where it arose: the server
  reading the request late (its body read minus the harness's send: the server's queue,
  which a real server has too) and the harness reading the first token late (its first-token
  time minus the server's write: the harness's own error);
- the harness's CPU per token over the level (one token a chunk here), and over its whole
  process (start-up, calibration and store included); the results writer's and the server's
  CPU per token, the other takers of the same cores; the garbage collector's pauses in the
  load process over the level;
- the self-check: its first-token read lag (TCP_INFO), loop lag p99, and whether it flagged.

CPU per token is the steadier guide on a shared machine, latency moves with other load. A
loop that falls behind reads several chunks a wakeup and spends less per token, so compare
CPU between rows whose first tokens were read about as late.

    .venv/bin/python -m benchmarks.one_loop --old /tmp/old [--levels 32,256,512,1024]
        [--passes 2] [--rounds 2] [--tokens 64] [--ttft-ms 150] [--itl-ms 40]
        [--reasoning-tokens 0]

`--reasoning-tokens N`: the fake server streams each answer's first N tokens as reasoning
deltas (their TTFT is the first of them, in either tree).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parent.parent
MODEL = "mock-model"


def arm(args: argparse.Namespace) -> None:
    """In the arm's own process, on its tree's harness: one level, written to `args.out`."""
    from harness.config import RunConfig
    from harness.results.store import Store
    from harness.run import aio
    from harness.run.progress import LevelProgress
    from harness.run.session import execute, new_run_id
    from harness.wire.endpoint import Endpoint

    pauses: list[tuple[float, float, int]] = []  # each collection: start (s), ms, generation
    began = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append((began[0], (time.perf_counter() - began[0]) * 1000,
                           info["generation"]))

    gc.callbacks.append(on_gc)
    config = RunConfig(url=args.url, model=MODEL, levels=(args.c,), max_concurrency=args.c,
                       rounds=args.rounds, input_tokens=16, output_tokens=args.tokens,
                       server_metrics=False)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "arm.duckdb")
        store.initialise()
        result = aio.run(execute(config, Endpoint(args.url), store,
                                 LevelProgress(enabled=False), new_run_id()))
    outcome, clock = result.outcomes[0], result.clock
    sent = {r.request_id: r.sent_at - clock.anchor_wall + clock.anchor_ns / 1e9
            for r in outcome.records}
    start, end = min(sent.values()), max(r.sent_at + (r.latency_ms or 0) / 1000
                                         - clock.anchor_wall + clock.anchor_ns / 1e9
                                         for r in outcome.records)
    in_level = [(ms, generation) for at, ms, generation in pauses if start <= at <= end]
    check = outcome.client
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the writer, ended with the run
    args.out.write_text(json.dumps({
        "cpu_s": outcome.cpu_s, "process_cpu_s": time.process_time(), "chunks": outcome.chunks,
        "writer_cpu_s": usage.ru_utime + usage.ru_stime,
        "gc_ms": sum(ms for ms, _ in in_level),
        "gc_max_ms": max((ms for ms, _ in in_level), default=0.0),
        "gc_full": sum(1 for _, generation in in_level if generation == 2),
        "read_lag": getattr(check, "read_lag_mean_ms", None),
        "lag_p99": check.loop_lag_p99_ms if check else None,
        "flagged": check.client_bound if check else None,
        "requests": [(r.request_id, sent[r.request_id], r.ttft_ms)
                     for r in outcome.records if r.ok]}))


def process_cpu(pid: int) -> float:
    """CPU seconds another process has used so far."""
    from common.proc_tree import read_stat  # in this tree's process, not the arms'

    stat = read_stat(pid)
    assert stat is not None, f"process {pid} is gone"
    return (stat.user_ticks + stat.system_ticks) / os.sysconf("SC_CLK_TCK")


def server_log(url: str) -> dict[str, dict]:
    """The fake server's log by request id, cleared as it is read."""
    with urllib.request.urlopen(f"{url.removesuffix('/v1')}/mock/timings?clear=1") as r:
        return {t["request_id"]: t for t in json.load(r)}


def measure(tree: Path, server: int, url: str, c: int, args: argparse.Namespace) -> dict:
    """One arm at one level, in a process that imports `tree`'s harness (`server`: the fake
    server's pid, whose CPU over the arm is counted)."""
    server_log(url)  # what came before left out
    server_cpu0 = process_cpu(server)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "arm.json"
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--arm", "--url", url,
                        "--c", str(c), "--rounds", str(args.rounds), "--tokens",
                        str(args.tokens), "--out", str(out)],
                       cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
        got = json.loads(out.read_text())
    server_cpu = process_cpu(server) - server_cpu0
    log = server_log(url)
    bias, request_late, read_late = [], [], []
    for request_id, sent, ttft in got["requests"]:
        t = log.get(request_id)
        if t and t["first_write"] and ttft is not None:
            bias.append(ttft - (t["first_write"] - t["body_read"]) * 1000)
            request_late.append((t["body_read"] - sent) * 1000)
            read_late.append((sent + ttft / 1000 - t["first_write"]) * 1000)
    tokens = max(got["chunks"], 1)
    return {"c": c, "requests": len(got["requests"]), "bias": fmean(bias),
            "request_late": fmean(request_late), "read_late": fmean(read_late),
            "cpu_us": got["cpu_s"] / tokens * 1e6,
            "process_us": got["process_cpu_s"] / tokens * 1e6,
            "writer_us": got["writer_cpu_s"] / tokens * 1e6,
            "server_us": server_cpu / tokens * 1e6,
            "gc_ms": got["gc_ms"], "gc_max_ms": got["gc_max_ms"], "gc_full": got["gc_full"],
            "read_lag": got["read_lag"], "lag_p99": got["lag_p99"], "flagged": got["flagged"]}


def tree_head(tree: Path) -> str:
    """The tree's commit, marked where its files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True,
                              text=True).stdout.strip()

    changed = git("status", "--porcelain", "--untracked-files=no", "--", "harness")
    return (git("rev-parse", "--short", "HEAD") or str(tree)) + (" + changes" if changed else "")


def report(rows: list[dict], names: dict[str, str], args: argparse.Namespace,
           load_at_start: float) -> None:
    """Every row in the order run, then each arm's means per level."""
    from benchmarks.cells import cell, span
    from benchmarks.machine import machine_line

    print(f"\n{machine_line(load_at_start)}; old = {names['old']}, new = {names['new']}; "
          f"one fake server process, TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, "
          f"{args.tokens} tokens ({args.reasoning_tokens} of them reasoning), "
          f"{args.rounds} rounds; "
          "one load loop")
    print("| C | arm | requests | TTFT bias ms | server read the request late ms | harness "
          "read the first token late ms | harness CPU us/token, level (process) | writer / "
          "server CPU us/token | GC pauses in the level ms (longest; full ones) | self-check "
          "read lag ms | loop lag p99 ms | flagged |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        flagged = "-" if r["flagged"] is None else "yes" if r["flagged"] else "no"
        print(f"| {r['c']} | {names[r['arm']]} | {r['requests']} | {r['bias']:+.1f} | "
              f"{r['request_late']:+.1f} | {r['read_late']:+.1f} | {r['cpu_us']:.1f} "
              f"({r['process_us']:.0f}) | {r['writer_us']:.1f} / {r['server_us']:.1f} | "
              f"{r['gc_ms']:.0f} ({r['gc_max_ms']:.1f}; {r['gc_full']}) | "
              f"{cell(r['read_lag'], '.1f')} | "
              f"{cell(r['lag_p99'], '.1f')} | {flagged} |")
    print("\nPer level and arm, the mean over the passes (and its range):")
    print("| C | arm | TTFT bias ms | harness read the first token late ms | harness CPU "
          "us/token |")
    print("|---|---|---|---|---|")
    for c in dict.fromkeys(r["c"] for r in rows):
        for name in ("old", "new"):
            mine = [r for r in rows if r["c"] == c and r["arm"] == name]
            print(f"| {c} | {names[name]} | {span([r['bias'] for r in mine], '+.1f')} | "
                  f"{span([r['read_late'] for r in mine], '+.1f')} | "
                  f"{span([r['cpu_us'] for r in mine], '.1f')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a worktree of the commit to compare with")
    parser.add_argument("--new", type=Path, default=ROOT, help="the tree to compare (this one)")
    parser.add_argument("--levels", default="32,256,512,1024")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--ttft-ms", type=float, default=150.0)
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--reasoning-tokens", type=int, default=0)
    parser.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--c", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        arm(args)
        return
    if args.old is None or not (args.old / "harness").is_dir():
        parser.error("--old must name a worktree of the commit to compare with")
    from runners.lifecycle import free_port

    load_at_start = os.getloadavg()[0]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "harness.mock_server", "--port", str(port), "--ttft-ms",
         str(args.ttft_ms), "--itl-ms", str(args.itl_ms), "--reasoning-tokens",
         str(args.reasoning_tokens)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert server.stdout is not None
    server.stdout.readline()  # "listening on ..."
    url = f"http://127.0.0.1:{port}/v1"
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    names = {"old": tree_head(trees["old"]), "new": tree_head(trees["new"])}
    rows = []
    try:
        for p in range(args.passes):
            for k, c in enumerate(int(x) for x in args.levels.split(",")):
                for name in (["old", "new"] if (p + k) % 2 == 0 else ["new", "old"]):
                    rows.append({"arm": name, **measure(trees[name], server.pid, url, c, args)})
                    print(f"pass {p + 1}, C={c}: {name} done", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(5)
    report(rows, names, args, load_at_start)


if __name__ == "__main__":
    main()
