"""Where a level's /metrics samples fall while a server on this host keeps the CPUs busy.

A real server (vLLM on CPU, the bundled server) is busy while a round runs and idle in the
short pause between rounds. The busy processes here do the same: each spins for 90% of a
0.73 s period and sleeps the rest, one process per `--busy` (the period is not a multiple of
the scraper's 0.5 s, so samples do not lock onto one phase). A stand-in /metrics logs each
GET; a 6 s level is bracketed by the scraper's `start` and `stop`. Per arm: the samples the
level got, how many fell while the CPUs were busy (90% would be if the scraper ran when it
meant to), and how late `stop` was answered. With `--old TREE` (a worktree of another
commit) the arms alternate.

    .venv/bin/python -m benchmarks.scrape_under_load [--old TREE] [--passes 3] [--busy 2,4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERIOD_S, BUSY_SHARE, LEVEL_S = 0.73, 0.9, 6.0
_BUSY = ("import time\n"
         f"end = time.monotonic() + {LEVEL_S + 2}\n"
         "while (t := time.monotonic()) < end:\n"
         f"    if t % {PERIOD_S} >= {PERIOD_S * BUSY_SHARE}:\n"
         f"        time.sleep({PERIOD_S} - t % {PERIOD_S})\n")
_EXPOSITION = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"


def busy_at(t: float) -> bool:
    return t % PERIOD_S < PERIOD_S * BUSY_SHARE


def arm(busy: int) -> None:
    """In the arm's own process, on its tree's scraper: one level; prints its line's cells."""
    from harness.wire.endpoint import Endpoint
    from harness.wire.scraper import Scraper

    gets: list[float] = []

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            gets.append(time.monotonic())
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(_EXPOSITION)))
            self.end_headers()
            self.wfile.write(_EXPOSITION)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def level() -> None:
        scraper = Scraper(Endpoint(f"http://127.0.0.1:{server.server_port}/v1"))
        try:
            await scraper.start()  # the child is up: what follows is the level alone
            await scraper.stop()
            gets.clear()
            spinners = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(busy)]
            await asyncio.sleep(0.5)
            began = time.monotonic()
            await scraper.start()
            await asyncio.sleep(LEVEL_S)
            asked = time.monotonic()
            await scraper.stop()
            ended = time.monotonic()
            for spinner in spinners:
                spinner.wait()
        finally:
            scraper.close()
        inside = [t for t in gets if began <= t <= ended]
        print(f"{len(inside)} | {sum(map(busy_at, inside))} | {(ended - asked) * 1000:.0f}")

    asyncio.run(level())
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a worktree of the commit to compare with")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--busy", default="2,4", help="busy processes, a comma list")
    parser.add_argument("--arm", type=int, help=argparse.SUPPRESS)  # in an arm's process
    args = parser.parse_args()
    if args.arm is not None:
        arm(args.arm)
        return
    from benchmarks.machine import machine_line
    from benchmarks.one_loop import tree_head

    trees = {tree_head(ROOT): ROOT, **({tree_head(args.old.resolve()): args.old.resolve()}
                                   if args.old else {})}
    load = os.getloadavg()[0]
    lines = []
    for busy in (int(n) for n in args.busy.split(",")):
        for p in range(args.passes):
            for name in (list(trees) if p % 2 == 0 else list(trees)[::-1]):
                cells = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--arm", str(busy)],
                    cwd=trees[name], capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": str(trees[name])}).stdout.strip()
                lines.append(f"| {name} | {busy} | {cells} |")
                print(lines[-1], file=sys.stderr, flush=True)
    print(f"{machine_line(load)}; {os.cpu_count()} CPUs, busy {BUSY_SHARE:.0%} of each "
          f"{PERIOD_S} s, a {LEVEL_S:.0f} s level")
    print("| arm | busy processes | samples | while busy | stop answered late, ms |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
