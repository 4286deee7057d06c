"""Flag types that read a value with the harness's own parsers (common.flag_types has the
plain ones): a bad value is refused by argparse in one sentence naming the flag, exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from harness.config import ConfigError

_T = TypeVar("_T")


def parsed_by(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """An argparse type from a parser that raises ConfigError with its sentence."""
    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert
