"""Value types of command-line flags that several floors declare (the CLI's, the load modes',
the managed engines'): a bad value is refused by argparse in one sentence naming the flag,
exit 2."""

from __future__ import annotations

import argparse
import math


def number(text: str) -> float:
    """The flag's value, NaN when it is no number (every range check then fails)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def positive_float(text: str) -> float:
    if not 0 < (value := number(text)) < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return int(text)


def fraction(text: str) -> float:
    """A share in (0, 1]."""
    if not 0 < (value := number(text)) <= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], not {text!r}")
    return value
