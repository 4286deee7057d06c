"""A trace's prompt source as calibration and the warm-up use it: calibration probes text of
the blocks' kind (so the server's tokens per piece it fits are those of every block), the
warm-up sends the same; a jsonl trace's own texts are sent as written, uncalibrated. Both are
the trace's `Prompts` (harness.run.prompts), their digest the trace's, kept so that a resume on
a changed trace names its first changed line (harness.run.trace.changes)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import ClassVar

from harness.run.trace import changes
from harness.run.trace.blocks import BlockText
from harness.run.trace.source import Trace


@functools.cache
def blocks(seed: int, epoch: str) -> BlockText:
    return BlockText(seed, epoch)


@dataclass(slots=True, frozen=True)
class TraceBlocks:
    """Text of `words` pieces drawn as a block is, its own for each ordinal."""

    trace: Trace
    seed: int = 0
    words: int = 96
    calibrated: ClassVar[bool] = True

    def sized(self, words: int) -> TraceBlocks:
        return replace(self, words=words)

    def text(self, key: str, ordinal: int) -> str:
        return blocks(self.seed, "unstored").prompt((), 1, self.words, own_id=ordinal)

    def digest(self) -> str:
        return changes.fingerprint(self.trace)

    def changed(self, digest: str) -> str | None:
        return changes.changed(self.trace, digest)

    def describe(self) -> str:
        return f"{self.trace.describe()}; blocks of natural text"


@dataclass(slots=True, frozen=True)
class TraceTexts:
    """A trace that gives its prompts as text: the warm-up cycles through them."""

    trace: Trace
    calibrated: ClassVar[bool] = False

    def sized(self, words: int) -> TraceTexts:
        return self

    def text(self, key: str, ordinal: int) -> str:
        r = self.trace.requests[ordinal % len(self.trace.requests)]
        return "\n\n".join(m["content"] for m in r.messages)

    def digest(self) -> str:
        return changes.fingerprint(self.trace)

    def changed(self, digest: str) -> str | None:
        return changes.changed(self.trace, digest)

    def describe(self) -> str:
        return f"{self.trace.describe()}; prompts as the trace gives them"
