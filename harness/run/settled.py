"""A run settled once before it starts: its config as its mode checked it, that mode, and the
prompts it sends, resolved. The CLI settles a run while it reads the flags (engram_bench's
run plan holds this beside the engine); the session only carries it out, checking nothing
again."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config import RunConfig
from harness.run import modes
from harness.run.modes.base import LoadMode
from harness.run.prompts import Prompts, load


@dataclass(frozen=True, slots=True)
class SettledRun:
    """What a sweep needs of its settling: `config` checked by its `mode` (modes.check), and
    `prompts`, the mode's own (--lengths-from) or --prompts loaded."""

    config: RunConfig
    mode: LoadMode
    prompts: Prompts

    @classmethod
    def of_checked(cls, config: RunConfig) -> SettledRun:
        """A config modes.check has passed: its mode looked up and its prompts resolved (a
        bad prompts file: ConfigError, before anything is stored)."""
        mode = modes.mode_for(config.mode)
        return cls(config, mode, mode.prompts(config) or load(config.prompts, config.seed))


def settle(config: RunConfig) -> SettledRun:
    """A config not yet checked (a test's, a benchmark's), checked by its mode and settled."""
    return SettledRun.of_checked(modes.check(config))
