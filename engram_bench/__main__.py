"""`python -m engram_bench` and the `engram-bench` script.

A stop during start-up (the imports take ~0.4 s) exits as one later does, 130 for Ctrl-C, 143
for SIGTERM and 129 for SIGHUP, with one sentence and no traceback; the CLI then installs its
own handlers. `agent` skips the other commands' imports: it lives beside a server for hours.
"""

import signal
import sys


def _exit_on(signum: int, frame: object) -> None:
    print("engram-bench: stopped while starting up; nothing stored", file=sys.stderr)
    sys.exit(128 + signum)


def main() -> int:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on)
    if sys.argv[1:2] == ["agent"]:
        from runners.host_agent.cli import main as agent

        return agent(sys.argv[2:])
    from engram_bench.cli import main as cli

    return cli()


if __name__ == "__main__":  # spawned writer processes import this module too
    raise SystemExit(main())
