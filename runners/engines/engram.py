"""The bundled Engram server (`python -m runners.engram`, `engram-bench serve`) as a managed
engine: the default of `run --device`, started with the device's table placement."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from common import stats_keys
from common.flag_types import fraction, positive_float, positive_int
from runners.engines.base import ManagedEngine, Say
from runners.lifecycle import BundledServer, ManagedServer
from runners.profiles import DeviceProfile

DEFAULT_PRESET = "qwen-mini"


@dataclass(frozen=True, slots=True)
class EngramOptions:
    """The bundled server's `run` flags as given (None: unset, so the server's own default
    holds); `placement` is the shared --placement, which only this engine reads."""

    placement: str | None = None
    io: str | None = None
    table_size_gb: float | None = None
    preset: str | None = None
    cache_ratio: float | None = None
    page_cache_gb: float | None = None
    cache_state: str | None = None
    decode: str | None = None
    reasoning_tokens: int | None = None
    reasoning_share: float | None = None


class Engram(ManagedEngine[EngramOptions]):
    name = "engram"
    help = "the bundled Engram server"
    title = "the bundled Engram server"
    # --placement is a shared flag (a label for --url), read only by this engine
    flags = tuple(f.name for f in dataclasses.fields(EngramOptions))
    extra = "server"  # torch and the HTTP stack, in this process's environment
    serve_module = "runners.engram"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--io", choices=("mmap", "direct"),
                            help="bundled server: nvme I/O mode (default: the device's)")
        parser.add_argument("--table-size-gb", "--table-gb", type=positive_float, metavar="G",
                            help="bundled server: table size in GiB (default: the server's, "
                                 "2; --table-gb is the old name)")
        parser.add_argument("--preset", help=f"bundled server: model preset (default: "
                                              f"{DEFAULT_PRESET})")
        parser.add_argument("--cache-ratio", type=fraction, metavar="R",
                            help="bundled server: share of the table the page cache may hold, "
                                 "in (0, 1] (default: the device's)")
        parser.add_argument("--page-cache-gb", type=positive_float, metavar="G",
                            help="bundled server: page-cache budget for the table in GiB "
                                 "(default: from --cache-ratio)")
        parser.add_argument("--cache-state", choices=("cold", "warm"),
                            help="bundled server: table start state (default: the server's, "
                                 "cold on nvme)")
        parser.add_argument("--decode", choices=("sample", "replay"),
                            help="bundled server: output tokens (default: replay, a natural "
                                 "token stream)")
        reasoning = parser.add_mutually_exclusive_group()
        reasoning.add_argument("--reasoning-tokens", type=positive_int, metavar="N",
                               help="bundled server: stream each chat answer's first N tokens "
                                    "as reasoning, as a reasoning model thinks first (default: "
                                    "none; judge on the answer's first token with --ttft-of "
                                    "output)")
        reasoning.add_argument("--reasoning-share", type=fraction, metavar="F",
                               help="bundled server: or stream this share of each chat "
                                    "answer's max_tokens as reasoning, in (0, 1] (default: "
                                    "none)")

    def options(self, args: argparse.Namespace) -> EngramOptions:
        return EngramOptions(**{dest: getattr(args, dest, None) for dest in self.flags})

    def server_args(self, options: EngramOptions, device: DeviceProfile) -> tuple[str, ...]:
        """`engram-bench serve` flags; its decode defaults to replay here, and flags left
        unset are not passed, so the server's own defaults hold."""
        optional = (("--io", options.io), ("--table-size-gb", options.table_size_gb),
                    ("--cache-ratio", options.cache_ratio),
                    ("--page-cache-gb", options.page_cache_gb),
                    ("--cache-state", options.cache_state),
                    ("--decode", options.decode or "replay"),
                    ("--reasoning-tokens", options.reasoning_tokens),
                    ("--reasoning-share", options.reasoning_share))
        return ("--device", device.name, "--preset", options.preset or DEFAULT_PRESET,
                "--placement", self.table_placement(options, device),
                *(item for flag, value in optional if value is not None
                  for item in (flag, repr(value) if isinstance(value, float) else str(value))))

    def table_placement(self, options: EngramOptions, device: DeviceProfile) -> str:
        return options.placement or device.table_placement

    def reads_table_file(self, options: EngramOptions, device: DeviceProfile) -> bool:
        return self.table_placement(options, device) == "nvme"

    def owns(self, server_args: Sequence[str]) -> bool:
        """Its args are the server's own flags, unmarked (as runs have always stored them)."""
        return bool(server_args) and server_args[0].startswith("-")

    def run_flags(self, server_args: Sequence[str]) -> list[str]:
        """Its `run` flags are the server's (server_args), spelled alike: all of them but
        --device and --placement; it is the default engine, so no --bundled."""
        kept, skipping = [], False
        for word in server_args:
            if word.startswith("--"):
                skipping = word in ("--device", "--placement")
            if not skipping:
                kept.append(word)
        return kept

    @contextlib.contextmanager
    def serve(self, server_args: Sequence[str], say: Say) -> Iterator[ManagedServer]:
        say(f"starting the bundled Engram server: {' '.join(server_args)}")
        with BundledServer(server_args) as server:
            say(f"bundled server up at {server.url} after {server.start_s:.1f} s "
                f"(log {server.log_path})")
            yield server


    def table_files(self, server: ManagedServer) -> list[str]:
        """Its table file when it reads it from NVMe, as its own /stats names it."""
        try:
            with urllib.request.urlopen(f"{server.url.removesuffix('/v1')}/stats",
                                        timeout=5) as response:
                stats = json.load(response)
        except (OSError, ValueError):
            return []
        if not isinstance(stats, dict) or stats.get(stats_keys.PLACEMENT) != "nvme":
            return []
        path = stats.get(stats_keys.TABLE_PATH)
        return [path] if isinstance(path, str) else []


ENGINE = Engram()
