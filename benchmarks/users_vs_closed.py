"""Measured users beside Max C x 4, with their intervals and the figure that explains the gap:
`make bench-users-study`.

Per server, a closed run (levels C) and a chat-users run (levels U) with `--repeat`, their
levels interleaved (closed C, users U, next C, ...: each arm's order swapping at every step),
all against one server instance. Servers: the mock server decode-bound (its gap between tokens
grows with the streams in flight), prefill-bound (its first token waits for every request in
flight), and, with `--bundled`, the bundled Engram server as `make bench DEVICE=spark` starts it
(`--serve-flags` adds to its flags, such as `--placement host` where the disk under the table
is not the Spark's); its levels also show the disk's reads from the kernel.
Prints per level mean TPS and TTFT with their intervals, the users levels' requests in flight
(mean +- sd over time, how bursty the users were) and duty cycle, then Max C, Max C x 4 and
Max users with the levels within noise of the targets.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import fmean

from benchmarks.users_search import free_port, start_mock, wait_healthy
from explorer.counters import level_counters
from harness.results.store import Store

ROOT = Path(__file__).resolve().parent.parent
MOCKS = {
    "decode-bound": (("--ttft-ms", "20", "--itl-ms", "9", "--shared-decode"),
                     "4,5,6", "28,36,44"),
    "prefill-bound": (("--ttft-ms", "60", "--itl-ms", "1", "--shared-prefill"),
                      "16,18,19,20", "40,48,56,64"),
}


def cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "engram_bench", *args, "--json",
                          "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"engram-bench {' '.join(args)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def interleaved(url: str, db: Path, closed: str, users: str, args: argparse.Namespace,
                extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """Closed and users levels alternating, each level a run of its own into one file; the
    two summaries are then read over all their levels."""
    common = ("--url", url, "--rounds", str(args.rounds), "--repeat", str(args.repeat),
              "--output-tokens", str(args.tokens), "--db", str(db), *extra)
    cs, us = closed.split(","), users.split(",")
    summaries: dict[str, list[dict]] = {"closed": [], "users": []}
    for step in range(max(len(cs), len(us))):
        arms = [("closed", cs), ("users", us)]
        for arm, levels in (arms if step % 2 == 0 else arms[::-1]):
            if step < len(levels):
                mode = ("--mode", "users", "--profile", "chat") if arm == "users" else ()
                summary = cli("run", *common, "--levels", levels[step], *mode)
                _add_disk_reads(summary, db)
                summaries[arm].append(summary)
    return _merged(summaries["closed"]), _merged(summaries["users"])


def _add_disk_reads(summary: dict, db: Path) -> None:
    """Each level's block device reads per second (device-wide, every process) and bytes this
    server read from storage per token, the kernel's counters in the bundled server's /stats
    as the explorer reads them (`level_counters`), averaged over the level's passes; nothing
    where the server has none."""
    passes: dict[int, list[dict]] = {}
    for row in Store(db).server_stats(summary["run_id"]):
        passes.setdefault(row["concurrency"], []).append(
            level_counters(row["before"], row["after"]))
    for lv in summary["levels"]:
        for name, key in (("blockdev_reads_per_s", "read_iops"),
                          ("disk_bytes_per_token", "disk_bytes_per_token")):
            values = [p[key] for p in passes.get(lv["concurrency"], [])]
            lv[name] = (fmean(values) if values and all(isinstance(v, float | int)
                                                         for v in values) else None)


def _merged(summaries: list[dict]) -> dict:
    levels = sorted((lv for s in summaries for lv in s["levels"]),
                    key=lambda lv: lv["concurrency"])
    return {"levels": levels, "mode": summaries[0]["mode"] if summaries else ""}


def _reads(lv: dict) -> str:
    per_s, per_token = lv.get("blockdev_reads_per_s"), lv.get("disk_bytes_per_token")
    if per_s is None or per_token is None:
        return "-"
    return f"{per_s:,.0f} /s, {per_token / 1024:,.1f} KiB/tok"


def _ci(lv: dict, name: str) -> str:
    ci = lv.get(f"{name}_ci")
    mean = lv[f"mean_{name}" if name == "tps" else "mean_ttft_ms"]
    if not ci or ci["low"] is None:
        return f"{mean:.1f}"
    how = "" if ci["method"] == "bootstrap" else " range"
    return f"{mean:.1f} [{ci['low']:.1f}, {ci['high']:.1f}]{how}"


def report(name: str, closed: dict, users: dict) -> None:
    print(f"\n## {name}")
    print("| level | mean TPS [interval] | mean TTFT ms [interval] | in flight | duty | disk reads "
          "| pass |")
    print("|---|---|---|---|---|---|---|")
    for lv in closed["levels"]:
        print(f"| C={lv['concurrency']} | {_ci(lv, 'tps')} | {_ci(lv, 'ttft')} | "
              f"{lv['concurrency']} | - | {_reads(lv)} | {'yes' if lv['passes'] else 'no'} |")
    for lv in users["levels"]:
        busy = ("-" if lv.get("in_flight_mean") is None
                else f"{lv['in_flight_mean']:.1f} +- {lv['in_flight_sd']:.1f}")
        verdict = ("yes" if lv["passes"] else "no") + (" (within noise)" if lv["within_noise"]
                                                       else "")
        if not lv["steady_state"]:
            verdict += f" (not steady: {lv['steady_state_note']})"
        print(f"| U={lv['concurrency']} | {_ci(lv, 'tps')} | {_ci(lv, 'ttft')} | {busy} | "
              f"{lv['duty_cycle']:.2f} | {_reads(lv)} | {verdict} |")
    max_c = max((lv["concurrency"] for lv in closed["levels"] if lv["passes"]), default=0)
    max_users = max((lv["concurrency"] for lv in users["levels"]
                     if lv["passes"] and lv["steady_state"]), default=0)
    uncertain = [lv["concurrency"] for lv in users["levels"] if lv["within_noise"]]
    print(f"\nMax C {max_c}, Max C x 4 = {4 * max_c}; Max users {max_users} "
          f"(levels within noise of the targets: {', '.join(map(str, uncertain)) or 'none'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per level (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="passes per level (default 3)")
    parser.add_argument("--tokens", type=int, default=16, help="output tokens (default 16)")
    parser.add_argument("--bundled", action="store_true",
                        help="also the bundled server as DEVICE=spark (default: mock only)")
    parser.add_argument("--only", choices=[*MOCKS, "bundled", "dists"],
                        help="one part only (default: all)")
    parser.add_argument("--serve-flags", default="",
                        help="more flags for the bundled server, e.g. '--placement host' "
                             "(default: none, as make bench DEVICE=spark)")
    parser.add_argument("--bundled-levels", default="3,4,5,6:12,16,20,24", metavar="C:U",
                        help="the bundled server's closed and users levels "
                             "(default: 3,4,5,6:12,16,20,24)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "dists"):
            think_dists(Path(tmp) / "dists.duckdb", args)
        for name, (flags, closed, users) in MOCKS.items():
            if args.only not in (None, name):
                continue
            proc, base = start_mock(flags)
            try:
                c, u = interleaved(base + "/v1", Path(tmp) / f"{name}.duckdb", closed, users,
                                   args, ("--input-tokens", "16"))
            finally:
                proc.terminate()
                proc.wait(5)
            report(f"mock server, {name} ({' '.join(flags)})", c, u)
        if args.bundled or args.only == "bundled":
            c, u = interleaved_bundled(Path(tmp) / "spark.duckdb", args)
            report(f"bundled server, --device spark {args.serve_flags} (qwen-mini, 128/128)"
                   .replace("  ", " "), c, u)


def think_dists(db: Path, args: argparse.Namespace) -> None:
    """How much the think distribution moves Max users: the decode-bound mock's users levels
    with exponential, constant and log-normal thinks, one pass each, interleaved level by
    level."""
    flags, _, users = MOCKS["decode-bound"]
    dists = ("exponential", "constant", "lognormal")
    proc, base = start_mock(flags)
    found: dict[str, list[dict]] = {d: [] for d in dists}
    try:
        for step, level in enumerate(users.split(",")):
            for dist in dists[step % 3:] + dists[:step % 3]:
                found[dist] += cli("run", "--url", base + "/v1", "--mode", "users", "--profile",
                                   "chat", "--think-dist", dist, "--levels", level, "--rounds",
                                   str(args.rounds),
                                   "--input-tokens", "16", "--output-tokens", str(args.tokens),
                                   "--db", str(db))["levels"]
    finally:
        proc.terminate()
        proc.wait(5)
    print("\n## think distributions, mock server decode-bound")
    print("| think | " + " | ".join(f"U={lv['concurrency']}" for lv in found[dists[0]])
          + " | Max users |")
    print("|---" * (len(found[dists[0]]) + 2) + "|")
    for dist, levels in found.items():
        best = max((lv["concurrency"] for lv in levels if lv["passes"] and lv["steady_state"]),
                   default=0)
        print(f"| {dist} | " + " | ".join(f"{_ci(lv, 'tps')}{' ?' if lv['within_noise'] else ''}"
                                         for lv in levels) + f" | {best} |")


def interleaved_bundled(db: Path, args: argparse.Namespace) -> tuple[dict, dict]:
    """The bundled server started once (`engram-bench serve --device spark`), then the same
    interleaving against it."""
    port = free_port()
    closed, users = args.bundled_levels.split(":")
    server = subprocess.Popen([sys.executable, "-m", "engram_bench", "serve", "--device",
                               "spark", *shlex.split(args.serve_flags), "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 600)
        return interleaved(f"http://127.0.0.1:{port}/v1", db, closed, users,
                           argparse.Namespace(**{**vars(args), "tokens": 128}),
                           ("--device", "spark"))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
