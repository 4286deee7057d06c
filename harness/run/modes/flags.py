"""Value types of command-line flags, shared by the modes' flags and the CLI's: a bad value
is refused by argparse in one sentence naming the flag, exit 2."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

from harness.config import ConfigError

_T = TypeVar("_T")


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


def parsed_by(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """An argparse type from a parser that raises ConfigError with its sentence."""
    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert
