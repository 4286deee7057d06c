"""The CLI reference page of the docs, written from the argument parsers themselves.

`python -m engram_bench.cli_reference > docs/reference/cli.md`; a test holds the committed page
equal to this output, so the reference cannot drift from `--help`.
"""

from __future__ import annotations

import argparse
import importlib
import os

from engram_bench.parser import build_parser
from runners.engines import DEFAULT

WIDTH = "100"  # argparse wraps at $COLUMNS: fixed, so the page is the same on every terminal


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def page() -> str:
    """Markdown: the top-level help, then each command's own, `serve` from the default
    engine's server."""
    os.environ["COLUMNS"] = WIDTH
    parser = build_parser()
    commands = _subparsers(parser)
    assert DEFAULT.serve_module is not None
    commands["serve"] = importlib.import_module(f"{DEFAULT.serve_module}.__main__").build_parser()
    parts = ["# CLI reference", "",
             "Generated from the argument parsers (`python -m engram_bench.cli_reference`); "
             "every default shown is the one the code uses.", "",
             "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in commands.items():
        parts += [f"## `engram-bench {name}`", "", "```text", sub.format_help().rstrip(),
                  "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(page(), end="")
