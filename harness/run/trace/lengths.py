"""`run --lengths-from TRACE`: a sweep whose requests take their input and output lengths
from a trace's (scaled and clipped as a replay's are), each request one of the trace's
requests drawn by a seeded walk over them, its prompt natural text of that length on the
server's token line, its max_tokens the output length.

The draws are the sweep's prompt source, and hold the lengths alone (two integers a request):
a worker process gets them with its prompts, and neither holds nor reads the trace."""

from __future__ import annotations

import functools
import statistics
from array import array
from dataclasses import dataclass, replace
from typing import ClassVar

from harness.config import ConfigError, RunConfig
from harness.run.prompts import spread
from harness.run.trace import source
from harness.run.trace.prompts import TraceBlocks, blocks
from harness.run.trace.requests import shape


@functools.lru_cache(maxsize=4)
def read(path: str, fmt: str, window: source.Window, sort: bool) -> source.Trace:
    """A trace's window, read once per process (the CLI checks it before anything is stored;
    the run sends from it)."""
    return source.read(path, fmt, window, sort)


def window(config: RunConfig) -> source.Window:
    return source.Window(config.trace_start_s, config.trace_duration_s, config.trace_limit)


@dataclass(slots=True, frozen=True, eq=False)
class LengthDraws:
    """The (input, output) lengths of a trace's window, each as a request is sent with it, and
    the prompt text they size: `words` pieces drawn as TraceBlocks draws them. The trace
    itself is read (once per process) only for its digest and description."""

    trace_key: tuple[str, str, source.Window, bool]  # read()'s arguments: path, format, ...
    inputs: array[int]
    outputs: array[int]
    seed: int
    words: int = 96
    calibrated: ClassVar[bool] = True

    def at(self, ordinal: int) -> tuple[int, int]:
        """The lengths of the request with this ordinal (the same on every resume)."""
        k = spread(self.seed, ordinal, len(self.inputs))
        return self.inputs[k], self.outputs[k]

    @property
    def median_input(self) -> int:
        return round(statistics.median(self.inputs))

    def check_server(self, context: int | None, kv_pool: int | None) -> None:
        """Refuse lengths past what the server said it holds, with how many."""
        for limit, what in ((context, "context (its max_model_len)"), (kv_pool, "KV pool")):
            over = [i + o for i, o in zip(self.inputs, self.outputs, strict=True)
                    if limit is not None and i + o > limit]
            if over:
                raise ConfigError(
                    f"{len(over):,} of the {len(self.inputs):,} lengths of {self.trace_key[0]} "
                    f"need more than the server's {limit:,}-token {what} (the longest "
                    f"{max(over):,} tokens of prompt and output): clip them with "
                    "--max-input-tokens and --max-output-tokens, or scale them with "
                    "--input-scale")

    def sized(self, words: int) -> LengthDraws:
        return replace(self, words=words)

    def text(self, key: str, ordinal: int) -> str:
        return blocks(self.seed, "unstored").prompt((), 1, self.words, own_id=ordinal)

    def digest(self) -> str:
        return self._blocks().digest()

    def changed(self, digest: str) -> str | None:
        return self._blocks().changed(digest)

    def describe(self) -> str:
        return self._blocks().describe()

    def _blocks(self) -> TraceBlocks:
        return TraceBlocks(read(*self.trace_key), self.seed, self.words)


@functools.lru_cache(maxsize=4)
def draws(config: RunConfig) -> LengthDraws | None:
    """The run's length draws (None: it has no --lengths-from), its prompt source."""
    if not config.lengths_from:
        return None
    if source.sniff(config.lengths_from, config.trace_format)[0] == "jsonl":
        raise ConfigError(f"--lengths-from {config.lengths_from} gives its prompts as "
                          "text, not lengths: use a Mooncake, Azure or BurstGPT trace (or "
                          "replay this one with --trace)")
    key = (config.lengths_from, config.trace_format, window(config), config.sort_trace)
    inputs, outputs = array("q"), array("q")
    for r in read(*key).requests:
        tokens, output = shape(config, r)
        assert tokens is not None  # every format but jsonl gives lengths
        inputs.append(tokens)
        outputs.append(output)
    return LengthDraws(key, inputs, outputs, config.seed)


def prompts(config: RunConfig) -> LengthDraws | None:
    """The prompt source of a sweep with --lengths-from: natural text cut by pieces, as the
    token line is calibrated on, sized by the draws."""
    return draws(config)
