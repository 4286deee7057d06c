"""How long a users search takes beside the closed search on the same server, and where its
time goes: `make bench-users`.

One mock server with a shared token budget (its gap between tokens grows with the requests in
flight, as one engine decoding every stream in turn). Arms interleaved, `--pairs` times:
`run --search` (closed) and `run --mode users --profile chat --search`, both with the same
levels and rounds. Each arm's wall time is the CLI's own; the users levels are split, from
the server's own log of every request it read (ids name lead-in, stored and load-keeping
requests), into the lead-in (the level's first request to its first stored one), the stored
window (first stored request to the last stored request sent) and the tail (from there to the
level's last stored answer, waiting for the slowest user). Prints the times, Max C and Max
users, and the ratio against the bound 1.5 x (1 / duty cycle) x the closed search's time.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ("--ttft-ms", "20", "--itl-ms", "9", "--shared-decode")  # 9 ms a token x streams
DUTY = 0.25  # the chat profile's
_LEVEL = re.compile(r"-(?:(lead|load)-)?c(\d+)(?:-p\d+)?-r\d+-w\d+$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(base: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server at {base} did not answer /health in {timeout_s:g} s")


def start_mock(flags: tuple[str, ...] = SERVER) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port", str(port),
                             *flags], cwd=ROOT, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, 20)
    return proc, base


def timings(base: str) -> list[dict]:
    """The server's log since the last call (and cleared)."""
    with urllib.request.urlopen(base + "/mock/timings?clear=1", timeout=10) as r:
        return json.loads(r.read())


def run_arm(base: str, db: Path, args: argparse.Namespace, users: bool) -> tuple[float, dict]:
    mode = ("--mode", "users", "--profile", "chat") if users else ()
    cmd = [sys.executable, "-m", "engram_bench", "run", "--url", base + "/v1", "--levels",
           args.levels, "--rounds", str(args.rounds), "--search", "--input-tokens", "16",
           "--output-tokens", str(args.tokens), "--db", str(db), "--no-progress", "--json",
           *mode]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{'users' if users else 'closed'} search failed: {out.stderr}")
    return took, json.loads(out.stdout)


def phases(log: list[dict]) -> dict[int, dict[str, float]]:
    """Per users level, from the server's log: seconds of lead-in (the level's first request
    to its first stored one), of storing with every user at it (to the first load-keeping
    request, sent by the first user done with its stored requests) and of the tail (from
    there to the last stored answer: waiting for the slowest users)."""
    by_level: dict[int, dict[str, list[float]]] = {}
    for t in log:
        found = _LEVEL.search(t["request_id"])
        if not found or t["last_write"] is None or found.group(2) == "0":  # 0: calibration
            continue
        level = by_level.setdefault(int(found.group(2)), {"all": [], "stored": [], "end": [],
                                                          "load": []})
        level["all"].append(t["body_read"])
        kind = found.group(1) or "stored"
        if kind == "stored":
            level["stored"].append(t["body_read"])
            level["end"].append(t["last_write"])
        elif kind == "load":
            level["load"].append(t["body_read"])
    out = {}
    for c, level in sorted(by_level.items()):
        if not level["stored"]:
            continue
        first, last = min(level["stored"]), max(level["end"])
        first_done = min(level["load"], default=last)
        out[c] = {"lead_in": first - min(level["all"]), "stored": first_done - first,
                  "tail": last - first_done}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="8,16,32", help="starting levels (default 8,16,32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per level (default 3)")
    parser.add_argument("--tokens", type=int, default=32, help="output tokens (default 32)")
    parser.add_argument("--pairs", type=int, default=1, help="closed/users pairs (default 1)")
    args = parser.parse_args()
    proc, base = start_mock()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for pair in range(args.pairs):
                order = (False, True) if pair % 2 == 0 else (True, False)
                times: dict[bool, float] = {}
                for users in order:
                    timings(base)
                    took, summary = run_arm(base, Path(tmp) / f"{pair}-{users}.duckdb", args,
                                            users)
                    times[users] = took
                    if users:
                        split = phases(timings(base))
                        print(f"users search: {took:.1f} s, Max users {summary['max_users']}, "
                              f"{len(split)} levels")
                        for c, p in split.items():
                            print(f"  U={c:<4} lead-in {p['lead_in']:6.1f} s  all storing "
                                  f"{p['stored']:6.1f} s  tail {p['tail']:6.1f} s")
                        total = {k: sum(p[k] for p in split.values())
                                 for k in ("lead_in", "stored", "tail")}
                        print("  total  " + "  ".join(f"{k} {v:.1f} s" for k, v in total.items()))
                    else:
                        print(f"closed search: {took:.1f} s, Max C {summary['max_c']}")
                bound = 1.5 / DUTY * times[False]
                print(f"pair {pair}: users {times[True]:.1f} s / closed {times[False]:.1f} s = "
                      f"{times[True] / times[False]:.2f} (bound 1.5 x 1/{DUTY:g} = "
                      f"{1.5 / DUTY:g}: {bound:.1f} s, "
                      f"{'within' if times[True] <= bound else 'OVER'})")
    finally:
        proc.terminate()
        proc.wait(5)


if __name__ == "__main__":
    main()
