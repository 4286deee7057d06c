"""The load modes, by name: the one list of them (docs/design.md, "Adding a load mode").

Each mode is one module of this package (harness.run.modes.base says what a mode is); the
CLI's --mode choices and flags, a run's checks and its pass loop all come from MODES."""

from __future__ import annotations

import argparse
from typing import Any

from harness.config import ConfigError, RunConfig
from harness.run.modes import burst, closed, rate, trace, users
from harness.run.modes.base import LoadMode

MODES: dict[str, LoadMode] = {mode.name: mode for mode in (
    closed.MODE,
    burst.MODE,
    rate.MODE,
    users.MODE,
    trace.TIMED,
    trace.CLOSED,
)}
DEFAULT = closed.MODE.name


def mode_for(name: str) -> LoadMode:
    if name not in MODES:
        raise ConfigError(f"--mode must be one of {', '.join(MODES)}, not {name!r}")
    return MODES[name]


def chosen(args: argparse.Namespace) -> str:
    """The run's mode: --mode as given, else the one its flags imply (--trace: a trace
    replay), else the default."""
    if args.mode:
        return str(args.mode)
    return next((name for mode in MODES.values() if (name := mode.implied(args))), DEFAULT)


def check(config: RunConfig) -> RunConfig:
    """A run's config as its mode takes it: every other mode refuses its own flags given to
    this one, in one sentence naming the flag."""
    chosen = mode_for(config.mode)
    for mode in MODES.values():
        if mode is chosen:
            mode.check(config)
        else:
            mode.refuse_outside(config)
    if config.workers > 1 and not chosen.splits:
        splits = ", ".join(name for name, mode in MODES.items() if mode.splits)
        raise ConfigError(f"--workers splits the levels of modes {splits}: --mode "
                          f"{config.mode}'s run in one process")
    return config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--mode and the flags each mode takes."""
    parser.add_argument("--mode", choices=tuple(MODES),
                        help="; ".join(mode.help for mode in MODES.values())
                        + f" (default: {DEFAULT}, or what --trace implies)")
    for mode in MODES.values():
        mode.add_arguments(parser)


def read_flags(args: argparse.Namespace, levels: tuple[int, ...]) -> dict[str, Any]:
    """RunConfig fields from the modes' flags, the CLI's one call into them with the command
    line: the mode chosen, its levels (--levels, else the mode's own of the device's `levels`)
    and every mode's own flags (a mode checks that the others' are unset)."""
    name = chosen(args)
    fields: dict[str, Any] = {
        "mode": name, "levels": args.levels or MODES[name].default_levels(levels, args)}
    for mode in MODES.values():
        fields.update(mode.read_flags(args, chosen=mode.name == name))
    return fields


def stored_as() -> dict[str, str]:
    """Each mode's flags whose RunConfig field has another name: flag dest -> field."""
    return {flag: field for mode in MODES.values() for flag, field in mode.stored_as}


def keyed_by(name: str) -> str | None:
    """What a mode's levels are keyed by (C, U or R); None for a mode this version lacks."""
    mode = MODES.get(name)
    return mode.key if mode else None
