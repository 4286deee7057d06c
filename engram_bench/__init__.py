"""The composition layer: the `engram-bench` command, wiring the harness to the runners."""
