"""What a managed engine is: a server `run --device` starts itself (the bundled Engram server,
vLLM ...), each engine one module of this package, named in its registry (runners.engines).
An engine declares its name, what it needs installed, its own `run` flags and the typed
options it reads them into (once, at the CLI's call), the server args a run stores from those
options, which stored args are its own, and how its server is started and stopped."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Sequence
from typing import ClassVar, Generic, TypeVar

from runners.lifecycle import ManagedServer
from runners.profiles import DeviceProfile

Say = Callable[[str], None]
Options = TypeVar("Options")  # an engine's own flags, typed (a frozen dataclass of them)


class EngineFlagError(ValueError):
    """A run flag that sets up another engine than the one chosen; one sentence."""


class ManagedEngine(Generic[Options]):
    """A managed engine. `flags`: the `run` flags (argparse dests) that set up this engine
    only, refused with any other (those `add_arguments` adds, and any shared flag it alone
    reads); `extra`: the engram-bench extra this process needs to start it (None: it brings
    its own install, made on first start); `serve_module`: the module `engram-bench serve`
    runs in its own process when this is the default engine."""

    name: ClassVar[str]
    help: ClassVar[str]  # its part of --bundled's help
    title: ClassVar[str]  # how a sentence names it
    flags: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str | None] = None
    serve_module: ClassVar[str | None] = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The `run` flags that set up this engine only (their dests listed in `flags`);
        unset, each is None, so `given_flags` sees what the user typed."""

    def options(self, args: argparse.Namespace) -> Options:
        """Its own flags (and any shared flag it alone reads), read once, at the CLI's call:
        nothing else of the engine sees the parsed command line."""
        raise NotImplementedError

    def server_args(self, options: Options, device: DeviceProfile) -> tuple[str, ...]:
        """What a run stores to start (and, resumed, start again) this engine's server; led
        by its name, so `owns` knows them again."""
        raise NotImplementedError

    def table_placement(self, options: Options, device: DeviceProfile) -> str:
        """The table placement a run records (none for an engine without an Engram table)."""
        return ""

    def reads_table_file(self, options: Options, device: DeviceProfile) -> bool:
        """Whether the server it starts reads its table from a file, the one `run
        --table-state` drops or warms through the agent `run` starts beside it."""
        return False

    def owns(self, server_args: Sequence[str]) -> bool:
        """Whether a run's stored server args are this engine's."""
        return tuple(server_args[:1]) == (self.name,)

    def run_flags(self, server_args: Sequence[str]) -> list[str]:
        """The `run` flags that start this server again from a run's stored `server_args`,
        beside --device and --placement, which the run's config repeats."""
        return ["--bundled", self.name]

    def serve(self, server_args: Sequence[str],
              say: Say) -> contextlib.AbstractContextManager[ManagedServer]:
        """Set up (first use), start, yield the running server, stop; `say` prints progress."""
        raise NotImplementedError

    def table_files(self, server: ManagedServer) -> list[str]:
        """The files the running server reads its table from on disk, for the host agent
        `run` starts beside it (none: the table is in memory, or the engine has none)."""
        return []

    def given_flags(self, args: argparse.Namespace) -> list[str]:
        """Its `flags` set on the command line, as the user typed them."""
        return ["--" + dest.replace("_", "-") for dest in self.flags
                if getattr(args, dest, None) is not None]
