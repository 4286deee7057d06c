"""`python -m harness` is the same CLI as `engram-bench`."""

from harness.cli import main

if __name__ == "__main__":  # spawned writer processes import this module too
    raise SystemExit(main())
