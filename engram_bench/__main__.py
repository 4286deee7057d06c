"""`python -m engram_bench` is the same CLI as `engram-bench`."""

from engram_bench.cli import main

if __name__ == "__main__":  # spawned writer processes import this module too
    raise SystemExit(main())
