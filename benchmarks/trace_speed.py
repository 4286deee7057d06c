"""How fast a trace is read and scheduled, and how closely a timed replay keeps its clock.

1. A 100,000-line Mooncake-format trace (benchmarks.trace_file) read, fitted (every
   request's lengths and the prefix its hash ids share) and grouped for sending, in a fresh
   interpreter: seconds and the process's peak RSS (and the interpreter's with its imports
   before the read), then the time to build one request's body at --input-scale 0.02 and 1.
2. A timed replay at 50 requests/s (a Poisson trace of --seconds, speedup 1) against the fake
   server in a process of its own: the send lag p50/p99 the summary reports, against rate
   mode's target (p99 within 2 ms at 50 requests/s).
3. A trace of --refused-lines lines (10M: ten times the requests one run may hold), written
   to a temporary folder in BurstGPT's and engram-bench's JSONL formats (the two whose lines
   are short enough for 10M to fit a trace's 256 MiB) and given to `engram-bench run --trace`
   and `--lengths-from`: the seconds until it is refused and the CLI process's peak RSS
   (target: under 10 s and 300 MB).

    .venv/bin/python -m benchmarks.trace_speed        # part of `make bench-trace`
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benchmarks.trace_file import write
from runners.lifecycle import free_port

ROOT = Path(__file__).resolve().parent.parent

_READ = textwrap.dedent("""
    import json, resource, sys, time
    from harness.config import RunConfig
    from harness.run.trace import source
    from harness.run.trace.requests import PassRequests, shaped, units
    from harness.run.workload import TokenLine
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    trace = source.read(sys.argv[1])
    config = RunConfig(url="x", model="m", mode="trace", levels=(), trace=sys.argv[1],
                       speedups=(1.0,), input_scale=0.02)
    shapes = shaped(config, trace)
    groups = units(trace)
    took = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    line = TokenLine(7.0, 1.05)
    build = {}
    for scale in (0.02, 1.0):
        config = RunConfig(url="x", model="m", mode="trace", levels=(), trace=sys.argv[1],
                           speedups=(1.0,), input_scale=scale)
        requests = PassRequests.of(config, trace, shaped(config, trace), line, "x1")
        t1 = time.perf_counter()
        for k in range(2000):
            requests.body(k)
        build[scale] = (time.perf_counter() - t1) / 2000 * 1e6
    shared = sum(s.prefix_tokens or 0 for s in shapes) / sum(s.input_tokens or 0 for s in shapes)
    print(json.dumps({"requests": len(trace.requests), "seconds": took, "peak_mib": peak,
                      "base_mib": base / 1024,
                      "body_us": build, "units": len(groups), "shared": shared,
                      "mean_input": sum(r.input_tokens or 0 for r in trace.requests)
                      / len(trace.requests)}))
""")


def read_speed(lines: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        path = write(Path(scratch) / "mooncake.jsonl", lines)
        size = path.stat().st_size
        done = subprocess.run([sys.executable, "-c", _READ, str(path)], capture_output=True,
                              text=True, cwd=ROOT, check=True)
    return {**json.loads(done.stdout), "mib": size / 2**20}


def send_lag(rate: float, seconds: float) -> dict:
    """A Poisson trace at `rate` replayed at speedup 1 against a fake server process."""
    rng = random.Random(1)
    t, rows = 0.0, []
    while (t := t + rng.expovariate(rate)) < seconds:
        rows.append({"timestamp": round(t * 1000, 3), "input_length": 200,
                     "output_length": 16, "hash_ids": [len(rows)]})
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port",
                               str(port), "--ttft-ms", "20", "--itl-ms", "5"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening on ..."
        with tempfile.TemporaryDirectory() as scratch:
            trace = Path(scratch) / "poisson.jsonl"
            trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
            done = subprocess.run(
                [sys.executable, "-m", "engram_bench", "run", "--url",
                 f"http://127.0.0.1:{port}/v1", "--trace", str(trace), "--input-scale", "0.5",
                 "--db", f"{scratch}/b.duckdb", "--no-progress", "--json"],
                capture_output=True, text=True, cwd=ROOT, check=True)
    finally:
        server.terminate()
        server.wait(5)
    level = json.loads(done.stdout.strip().splitlines()[-1])["levels"][0]
    return {"requests": level["requests"], "rate": level["rate"],
            "p50": level["p50_send_lag_ms"], "p99": level["p99_send_lag_ms"]}


_PEAK = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    t0 = time.perf_counter()
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(json.dumps({"seconds": time.perf_counter() - t0, "rc": done.returncode,
                      "stderr": done.stderr,
                      "peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
""")


def _long_trace(path: Path, fmt: str, lines: int) -> Path:
    """`lines` requests of one token each way (BurstGPT: a second apart)."""
    with path.open("w") as f:
        if fmt == "burstgpt":
            f.write("Timestamp,Request tokens,Response tokens,Log Type\n")
            f.writelines(f"{k},1,1,c\n" for k in range(lines))
        else:
            f.writelines('{"prompt": "a"}\n' for _ in range(lines))
    return path


def refusal(lines: int) -> list[dict]:
    """Each format and flag: how long the CLI takes to refuse a trace of `lines` lines, and
    its peak RSS (a fresh process that runs nothing but the CLI, so the peak is the CLI's)."""
    out = []
    with tempfile.TemporaryDirectory() as scratch:
        for fmt, name in (("burstgpt", "long.csv"), ("jsonl", "long.jsonl")):
            path = _long_trace(Path(scratch) / name, fmt, lines)
            flags = ["--trace"] + (["--lengths-from"] if fmt == "burstgpt" else [])
            for flag in flags:
                done = subprocess.run(
                    [sys.executable, "-c", _PEAK, sys.executable, "-m", "engram_bench", "run",
                     "--url", "http://127.0.0.1:9/v1", flag, str(path),
                     "--db", f"{scratch}/b.duckdb"],
                    capture_output=True, text=True, cwd=ROOT, check=True)
                got = json.loads(done.stdout)
                if got["rc"] != 2 or "requests one run may hold" not in got["stderr"]:
                    raise SystemExit(f"{flag} {path} was not refused for its size: "
                                     f"{got['stderr'].strip()[-300:]}")
                out.append({"format": fmt, "flag": flag, "mib": path.stat().st_size / 2**20,
                            **got})
            path.unlink()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--refused-lines", type=int, default=10_000_000)
    args = parser.parse_args()
    read = read_speed(args.lines)
    print(f"read and scheduled {read['requests']:,} lines ({read['mib']:.0f} MiB, "
          f"{read['units']:,} units, mean input {read['mean_input']:,.0f} tokens, "
          f"{read['shared']:.0%} of prompt tokens shared by hash ids) in "
          f"{read['seconds']:.2f} s; the process's peak RSS {read['peak_mib']:.0f} MiB, "
          f"{read['base_mib']:.0f} MiB of it the interpreter and its imports")
    print("one request's body: " + ", ".join(
        f"{us:.0f} us at --input-scale {scale}" for scale, us in read["body_us"].items()))
    lag = send_lag(args.rate, args.seconds)
    print(f"timed replay of {lag['requests']} requests at {lag['rate']:.1f} requests/s: send "
          f"lag p50 {lag['p50']:.2f} ms, p99 {lag['p99']:.2f} ms")
    for r in refusal(args.refused_lines):
        print(f"a {args.refused_lines:,}-line {r['format']} trace ({r['mib']:.0f} MiB) given "
              f"to {r['flag']}: refused in {r['seconds']:.1f} s, the CLI's peak RSS "
              f"{r['peak_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
