"""Past one event loop: C = 512, 1024 and 2048 closed streams with one load process, split
across processes (what `--workers auto` picks, at least two), and across as many Ray actors
(`--ray`) on a local cluster of two Ray nodes, the arms interleaved level by level, against
fake servers that share one port (`--reuse-port`, one process per CPU, each logging its own
timing at a control port).

Per row: the TTFT bias (the harness's TTFT minus the server's own, from the logs) and where
it arose: the servers reading the request late (a server's body read minus the harness's
send: their queue, on CPUs the load shares) and the harness reading the first token late (its
first-token time minus the server's write: its own error); the TPS error against the
server's, the harness's CPU per streamed chunk (every load process and the main one, over the
level), and its self-check: the loop lag p50/p99 of the worst process, how late its first
tokens were read (the kernel's TCP_INFO), and whether the level was flagged client-bound. The
output opens with the date, the CPU (/proc/cpuinfo) and the load around the run, and ends with
each level and load's means where a level ran more than once, ready for
docs/studies/accuracy.md. Part of `make bench-harness`.

    .venv/bin/python -m benchmarks.high_concurrency [--levels 512,1024,2048] [--rounds 2]
        [--servers N] [--no-ray]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from statistics import fmean

from benchmarks.cells import cell, span
from benchmarks.machine import machine_line
from harness.config import RunConfig
from harness.results.store import Store
from harness.run import aio
from harness.run.progress import LevelProgress
from harness.run.ray_workers import Cluster, connect
from harness.run.session import execute, new_run_id
from harness.run.workers import auto
from harness.wire.endpoint import Endpoint
from runners.lifecycle import free_port

ROOT = Path(__file__).resolve().parent.parent
MODEL = "mock-model"


def start_servers(count: int, flags: tuple[str, ...]) -> tuple[list[subprocess.Popen], str,
                                                                  list[int]]:
    """`count` fake server processes on one port; their control ports."""
    port, controls = free_port(), [free_port() for _ in range(count)]
    procs = []
    for control in controls:
        proc = subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port",
                                 str(port), "--reuse-port", "--control-port", str(control),
                                 *flags], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout is not None
        proc.stdout.readline()  # "listening on ..."
        procs.append(proc)
    return procs, f"http://127.0.0.1:{port}/v1", controls


def server_log(controls: list[int]) -> dict[str, dict]:
    """Every server process's log, by request id (each cleared as it is read)."""
    log = {}
    for control in controls:
        with urllib.request.urlopen(f"http://127.0.0.1:{control}/mock/timings?clear=1") as r:
            log.update({t["request_id"]: t for t in json.load(r)})
    return log


def level(url: str, c: int, workers: int, cluster: Cluster | None, args: argparse.Namespace,
          db: Path, controls: list[int]) -> dict:
    config = RunConfig(url=url, model=MODEL, levels=(c,), max_concurrency=c, rounds=args.rounds,
                       input_tokens=16, output_tokens=args.tokens, server_metrics=False,
                       workers=workers, ray=cluster.address if cluster else "")
    store = Store(db)
    store.initialise()
    server_log(controls)  # calibration's requests left out
    result = aio.run(execute(config, Endpoint(url), store, LevelProgress(enabled=False),
                             new_run_id(), cluster=cluster))
    outcome, clock = result.outcomes[0], result.clock
    log = server_log(controls)
    bias, tps_err, request_late, read_late = [], [], [], []
    for r in outcome.records:
        t = log.get(r.request_id)
        if r.ok and r.ttft_ms is not None and t and t["first_write"]:
            sent = r.sent_at - clock.anchor_wall + clock.anchor_ns / 1e9  # monotonic, as t's
            bias.append(r.ttft_ms - (t["first_write"] - t["body_read"]) * 1000)
            request_late.append((t["body_read"] - sent) * 1000)
            read_late.append((sent + r.ttft_ms / 1000 - t["first_write"]) * 1000)
            server_tps = t["tokens"] / (t["last_write"] - t["body_read"])
            tps_err.append(abs((r.tps or 0) - server_tps) / server_tps)
    check = outcome.client
    assert check is not None
    load = (f"{workers} Ray actors" if cluster else
            f"{workers} process{'es' if workers > 1 else ''}")
    return {"c": c, "load": load, "requests": len(outcome.records),
            "errors": sum(1 for r in outcome.records if not r.ok),
            "bias": fmean(bias) if bias else None, "tps_err": fmean(tps_err) if tps_err else None,
            "request_late": fmean(request_late) if request_late else None,
            "read_late": fmean(read_late) if read_late else None,
            "cpu_us": outcome.cpu_s / max(outcome.chunks, 1) * 1e6,
            "lag_p50": check.loop_lag_p50_ms, "lag_p99": check.loop_lag_p99_ms,
            "read_lag": check.read_lag_mean_ms, "flagged": check.client_bound}


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
        proc.wait(5)


@contextlib.contextmanager
def _local_ray(cpus: int) -> Iterator[Cluster]:
    """A Ray cluster of two nodes on this machine, this machine's CPUs shared between them,
    joined as `run --ray` joins one."""
    from ray.cluster_utils import Cluster as RayCluster

    nodes = RayCluster(initialize_head=True, head_node_args={"num_cpus": max(1, cpus // 2)})
    nodes.add_node(num_cpus=max(1, cpus - cpus // 2))
    nodes.wait_for_nodes()
    try:
        yield connect(nodes.address, 30.0)
    finally:
        import ray

        ray.shutdown()
        nodes.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="512,1024,2048")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--servers", type=int, default=os.cpu_count() or 1,
                        help="fake server processes (default: one per CPU)")
    parser.add_argument("--no-ray", dest="ray", action="store_false",
                        help="leave out the arm on a local Ray cluster")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    load_at_start = os.getloadavg()[0]
    procs, url, controls = start_servers(args.servers, ("--ttft-ms", "100", "--itl-ms",
                                                        str(args.itl_ms)))
    rows = []
    with contextlib.ExitStack() as stack:
        stack.callback(_stop, procs)
        cluster = stack.enter_context(_local_ray(cpus)) if args.ray else None
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for k, c in enumerate(int(x) for x in args.levels.split(",")):
            # the split: what --workers auto picks, at least two (at C=512, or beside a server
            # on this host with few CPUs, auto keeps one)
            many = max(2, auto(RunConfig(url=url, model=MODEL, levels=(c,),
                                         max_concurrency=c))[0])
            arms: list[tuple[int, Cluster | None]] = [(1, None), (many, None)]
            if cluster:
                arms.append((many, cluster))
            for n, (workers, on) in enumerate(arms[k % len(arms):] + arms[:k % len(arms)]):
                rows.append(level(url, c, workers, on, args, tmp / f"{c}-{n}.duckdb", controls))
                print(f"C={c}: {rows[-1]['load']} done", file=sys.stderr)
    report(rows, args, machine_line(load_at_start))


def report(rows: list[dict], args: argparse.Namespace, machine: str) -> None:
    """The rows in the order run, then the means of each level and load that ran more than
    once: markdown for docs/studies/accuracy.md."""
    servers = f"{args.servers} process{'es' if args.servers > 1 else ''}"
    print(f"\n{machine}; fake servers: {servers} on one port, TTFT 100 ms, ITL "
          f"{args.itl_ms:g} ms, {args.tokens} tokens; {args.rounds} rounds per level\n")
    print("| C | load | requests | errors | TTFT bias ms | server read late ms | harness read "
          "late ms | TPS error | CPU us/chunk | loop lag p50 / p99 ms | first-token read lag "
          "ms | client-bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['c']} | {r['load']} | {r['requests']} | {r['errors']} | "
              f"{cell(r['bias'], '+.2f')} | {cell(r['request_late'], '+.2f')} | "
              f"{cell(r['read_late'], '+.2f')} | {cell(r['tps_err'], '.2%')} | "
              f"{r['cpu_us']:.1f} | {cell(r['lag_p50'], '.2f')} / {cell(r['lag_p99'], '.1f')} "
              f"| {cell(r['read_lag'], '.2f')} | {'yes' if r['flagged'] else 'no'} |")
    runs: dict[tuple[int, str], list[dict]] = {}
    for r in rows:
        runs.setdefault((r["c"], r["load"]), []).append(r)
    repeated = {key: rs for key, rs in runs.items() if len(rs) > 1}
    if not repeated:
        return
    print("\nMeans of the levels that ran more than once (the runs' range):\n")
    print("| C | load | runs | TTFT bias ms | server read late ms | harness read late ms | "
          "CPU us/chunk | flagged |")
    print("|---|---|---|---|---|---|---|---|")
    for (c, load), rs in sorted(repeated.items()):
        print(f"| {c} | {load} | {len(rs)} | {_span(rs, 'bias', '+.1f')} | "
              f"{_span(rs, 'request_late', '+.1f')} | {_span(rs, 'read_late', '+.1f')} | "
              f"{_span(rs, 'cpu_us', '.1f')} | {sum(1 for r in rs if r['flagged'])} of "
              f"{len(rs)} |")


def _span(rows: list[dict], key: str, spec: str) -> str:
    """The rows' mean of one figure and its range."""
    return span([r[key] for r in rows if r[key] is not None], spec)


if __name__ == "__main__":
    main()
