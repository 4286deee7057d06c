"""`--help` that shows every default: one formatter for `engram-bench` and `serve` (stdlib)."""

from __future__ import annotations

import argparse


class DefaultsHelp(argparse.HelpFormatter):
    """Every option's help ends with its default; an option whose default is None or whose
    help already says what happens by default is left as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or "default" in text or action.default is None
                or action.default is argparse.SUPPRESS):
            return action.help
        return f"{text} (default: %(default)s)"
