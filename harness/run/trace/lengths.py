"""`run --lengths-from TRACE`: a sweep whose requests take their input and output lengths
from a trace's (scaled and clipped as a replay's are), each request one of the trace's
requests drawn by a seeded walk over them, its prompt natural text of that length on the
server's token line, its max_tokens the output length."""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

from harness.config import ConfigError, RunConfig
from harness.run.prompts import spread
from harness.run.trace import source
from harness.run.trace.prompts import TraceBlocks
from harness.run.trace.requests import shape


@functools.lru_cache(maxsize=4)
def read(path: str, fmt: str, window: source.Window, sort: bool) -> source.Trace:
    """A trace's window, read once per process (the CLI checks it before anything is stored;
    the run sends from it)."""
    return source.read(path, fmt, window, sort)


def window(config: RunConfig) -> source.Window:
    return source.Window(config.trace_start_s, config.trace_duration_s, config.trace_limit)


@dataclass(slots=True, frozen=True)
class LengthDraws:
    """The (input, output) lengths of a trace's window, each as a request is sent with it."""

    trace: source.Trace
    lengths: tuple[tuple[int, int], ...]
    seed: int

    def at(self, ordinal: int) -> tuple[int, int]:
        """The lengths of the request with this ordinal (the same on every resume)."""
        return self.lengths[spread(self.seed, ordinal, len(self.lengths))]

    @property
    def median_input(self) -> int:
        return round(statistics.median(i for i, _ in self.lengths))

    def check_server(self, context: int | None, kv_pool: int | None) -> None:
        """Refuse lengths past what the server said it holds, with how many."""
        for limit, what in ((context, "context (its max_model_len)"), (kv_pool, "KV pool")):
            over = [i + o for i, o in self.lengths if limit is not None and i + o > limit]
            if over:
                raise ConfigError(
                    f"{len(over):,} of the {len(self.lengths):,} lengths of {self.trace.path} "
                    f"need more than the server's {limit:,}-token {what} (the longest "
                    f"{max(over):,} tokens of prompt and output): clip them with "
                    "--max-input-tokens and --max-output-tokens, or scale them with "
                    "--input-scale")


@functools.lru_cache(maxsize=4)
def draws(config: RunConfig) -> LengthDraws | None:
    """The run's length draws (None: it has no --lengths-from)."""
    if not config.lengths_from:
        return None
    trace = read(config.lengths_from, config.trace_format, window(config), config.sort_trace)
    lengths = []
    for r in trace.requests:
        tokens, output = shape(config, r)
        if tokens is None:
            raise ConfigError(f"--lengths-from {config.lengths_from} gives its prompts as "
                              "text, not lengths: use a Mooncake, Azure or BurstGPT trace (or "
                              "replay this one with --trace)")
        lengths.append((tokens, output))
    return LengthDraws(trace, tuple(lengths), config.seed)


def prompts(config: RunConfig) -> TraceBlocks | None:
    """The prompt source of a sweep with --lengths-from: natural text cut by pieces, as the
    token line is calibrated on."""
    drawn = draws(config)
    return TraceBlocks(drawn.trace, config.seed) if drawn else None
