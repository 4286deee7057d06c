"""`python -m harness` is the same CLI as `engram-bench`."""

from harness.cli import main

raise SystemExit(main())
