"""The managed engines, by name: the one list of the servers `run --device` starts itself
(docs/design.md, "Adding a managed engine").

Each engine is one module of this package (runners.engines.base says what an engine is); the
CLI's --bundled choices and help, the refusal of another engine's flags, and which engine a
stored (or resumed) run starts all come from ENGINES."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from runners.engines import engram, vllm
from runners.engines.base import EngineFlagError, ManagedEngine

ENGINES: dict[str, ManagedEngine[Any]] = {engine.name: engine for engine in (
    engram.ENGINE,
    vllm.ENGINE,
)}
DEFAULT = next(iter(ENGINES.values()))  # what --device starts given no --bundled


class UnknownEngine(ValueError):
    """A stored run's server args that no engine of this version owns."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--bundled, its choices and help from the registry, and each engine's own flags."""
    choices = "; ".join(f"{engine.name}, {engine.help}" for engine in ENGINES.values())
    parser.add_argument("--bundled", choices=tuple(ENGINES),
                        help=f"the server --device starts (no --url): {choices} (default: "
                             f"{DEFAULT.name})")
    for engine in ENGINES.values():
        engine.add_arguments(parser)


def chosen(args: argparse.Namespace) -> tuple[ManagedEngine[Any], Any]:
    """The engine --bundled names (the default without it) and its options, read from its
    own flags: the CLI's one call into the engines with the command line. Another engine's
    flags given with it are refused in one sentence naming them."""
    engine = ENGINES[args.bundled] if args.bundled else DEFAULT
    for other in ENGINES.values():
        given = other.given_flags(args) if other is not engine else []
        if given:
            raise EngineFlagError(f"{', '.join(given)} set up {other.title}, not "
                                  f"{engine.title}: drop them or leave out --bundled "
                                  f"{engine.name}")
    return engine, engine.options(args)


def engine_of(server_args: Sequence[str]) -> ManagedEngine[Any]:
    """The engine a run's stored server args start."""
    for engine in ENGINES.values():
        if engine.owns(server_args):
            return engine
    raise UnknownEngine(f"no engine of this version starts a server with "
                        f"{' '.join(server_args)!r}: start a new run")
