"""`python -m runners.host_agent`: the agent alone, as `run --device` starts it beside the
server it started (`engram-bench agent` is the same command)."""

import sys

from runners.host_agent.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
