"""`make bench-offload`: the same prompts and seed under every table placement, at C=1,4,8.

Drives the engine directly (no HTTP, so only the table placement differs) and prints mean TPS
per request, the ratio to `device`, the stall fraction of step time and the Engram bytes per
token. nvme/mmap runs warm (a pass first touches its pages); nvme/direct runs with a row cache
far smaller than the table, so rows keep coming from disk. All placements are loaded at
once and measured in turn, round by round, so drift of a shared machine hits them alike.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from runners.engram.runtime import Runtime, ServerOptions
from runners.engram.scheduler import SamplingParams, Sequence

CASES = [  # label, placement, io, page-cache / row-cache budget in GiB (None: free RAM), prefetch
    ("device", "device", "mmap", None, True),
    ("host", "host", "mmap", None, True),
    ("nvme mmap (warm)", "nvme", "mmap", None, True),
    ("nvme direct (cache 64 MiB)", "nvme", "direct", 1 / 16, True),
    ("nvme direct, no prefetch", "nvme", "direct", 1 / 16, False),
]


def measure_bandwidth() -> float:
    """Memory copy bandwidth (read + write bytes per second), numpy, one thread."""
    src = np.ones(256 * 2**20, dtype=np.uint8)
    dst = np.empty_like(src)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = max(best, 2 * src.nbytes / (time.perf_counter() - start))
    return best


def run_level(runtime: Runtime, concurrency: int, tokens: int) -> list[float]:
    """C requests together; returns each request's TPS (output tokens / its time)."""
    tok = runtime.tokenizer
    done = threading.Event()
    finished: list[float] = []
    lock = threading.Lock()
    start = time.perf_counter()

    def on_token(token: int | None, reason: str | None) -> None:
        if reason is not None:
            with lock:
                finished.append(time.perf_counter())
                if len(finished) == concurrency:
                    done.set()

    for i in range(concurrency):
        prompt = tok.chat_prompt([{"role": "user", "content": f"Story {i}: " + "once " * 100}])
        runtime.engine.submit(Sequence(f"b{i}", prompt, SamplingParams(tokens, ignore_eos=True)),
                              on_token)
    done.wait()
    return [tokens / (end - start) for end in finished]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen-mini")
    parser.add_argument("--table-gib", type=float, default=2.0)
    parser.add_argument("--levels", default="1,4,8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="repeats of each level")
    parser.add_argument("--cases", default="", help="comma-separated labels' first words")
    args = parser.parse_args()
    levels = [int(c) for c in args.levels.split(",")]
    bandwidth = measure_bandwidth()
    table = Path("results/tables") / f"{args.preset}-{args.table_gib:g}gib.bin"
    wanted = [w for w in args.cases.split(",") if w]
    cases = [c for c in CASES if not wanted or c[0].split()[0] in wanted or c[0] in wanted]
    runtimes = {}
    for label, placement, io, budget, prefetch in cases:  # all loaded at once ...
        options = ServerOptions(preset=args.preset, placement=placement, io_mode=io,
                                table_gib=args.table_gib, table_path=table,
                                page_cache_gib=budget, max_running=max(levels),
                                prefetch=prefetch, results_dir=Path("results"))
        started = time.perf_counter()
        runtime = Runtime(options)
        runtimes[label] = (runtime, time.perf_counter() - started)
        runtime.start()
        run_level(runtime, max(levels), 8)  # warm-up: first-call costs, touches pages
    results: dict[tuple[str, int], dict] = {}
    for c in levels:  # ... and interleaved, so machine noise spreads over every placement
        for _ in range(args.rounds):
            for label, (runtime, _) in runtimes.items():
                before = runtime.stats()
                tps = run_level(runtime, c, args.tokens)
                after = runtime.stats()
                acc = results.setdefault((label, c), {"tps": [], "step": 0.0, "stall": 0.0,
                                                      "tokens": 0, "read": 0})
                acc["tps"] += tps
                acc["step"] += after["step_ms"] - before["step_ms"]
                acc["stall"] += after["stall_ms"] - before["stall_ms"]
                acc["tokens"] += after["tokens"] - before["tokens"]
                acc["read"] += after["engram_bytes_read"] - before["engram_bytes_read"]
    weight_bytes = next(iter(runtimes.values()))[0].weight_bytes
    rows = []
    for (label, c), acc in results.items():
        rows.append((label, c, statistics.fmean(acc["tps"]), acc["stall"] / acc["step"],
                     acc["read"] / acc["tokens"], runtimes[label][1]))
    rows.sort(key=lambda r: ([x[0] for x in cases].index(r[0]), r[1]))
    for runtime, _ in runtimes.values():
        runtime.close()
    floor_ms = weight_bytes / bandwidth * 1000
    device_tps = {c: tps for label, c, tps, *_ in rows if label == "device"}
    print(f"preset {args.preset}, table {args.table_gib:g} GiB, {args.tokens} output tokens, "
          f"greedy, same prompts under every placement")
    print(f"{'placement':<28}{'C':>3}{'TPS/req':>9}{'x device':>10}{'stall':>8}"
          f"{'B/token':>9}{'load s':>8}")
    for label, c, tps, stall, per_token, load_s in rows:
        print(f"{label:<28}{c:>3}{tps:>9.1f}{tps / device_tps[c]:>10.3f}{stall:>8.1%}"
              f"{per_token:>9.0f}{load_s:>8.1f}")
    c1 = device_tps.get(1)
    if c1:
        print(f"decode at C=1 (device): {1000 / c1:.1f} ms/token; memory-bandwidth floor "
              f"{floor_ms:.1f} ms ({weight_bytes / 1e6:.0f} MB of weights / "
              f"{bandwidth / 1e9:.1f} GB/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
