"""Request bodies, and the calibration that sizes prompts to ~N tokens (harness.run.prompts).

Calibration asks the target itself: it sends a few max_tokens=1 requests and reads
`usage.prompt_tokens`, then fits words -> tokens (chat templates add a fixed overhead).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

# Calibration stops within this of the target: well inside the 5 % a level's mean is held to
# (harness.results.metrics.PROMPT_TOLERANCE), as a level's prompts are other windows than
# the probes' and their mean lands a few percent either side.
TOLERANCE = 0.02


# usage at the end, and on every chunk where the server can (vLLM's and SGLang's
# continuous_usage_stats): each chunk's tokens then come from the server, not an estimate
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}

Turn = tuple[str, str]  # a user's message and the answer it got


def payload(
    api: str,
    model: str,
    prompt: str,
    max_tokens: int,
    temperature: float,
    force_length: bool = True,
    history: Sequence[Turn] = (),
    messages: Sequence[dict] = (),
) -> dict:
    """The request body; `force_length` asks servers to ignore EOS so outputs reach max_tokens.
    `history`: the conversation so far, resent before the new message (chat: as messages;
    completions: as one text, turns apart by blank lines), so it is a prefix of this prompt.
    `messages`: chat messages to send for the new turn in place of one user message of
    `prompt` (which completions send)."""
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": temperature,
                  "stream": True, "stream_options": STREAM_OPTIONS}
    if api == "chat":
        body["messages"] = [
            *({"role": role, "content": text} for said, answer in history
              for role, text in (("user", said), ("assistant", answer))),
            *(messages or ({"role": "user", "content": prompt},))]
    else:
        body["prompt"] = "".join(f"{said}\n\n{answer}\n\n" for said, answer in history) + prompt
    if force_length:
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    return body


BLOCK_MARGIN = 0.05  # a trace's block holds this much over its tokens (TokenLine.block_pieces)


@dataclass(slots=True, frozen=True)
class TokenLine:
    """What the server counts for a prompt of p words (or pieces): `base` + `per_word` x p;
    `base` is its chat template's share. Fitted over calibration's probes."""

    base: float
    per_word: float

    def content_pieces(self, tokens: int) -> int:
        """Pieces of text that make a prompt of `tokens` tokens, template included."""
        return max(1, round((tokens - self.base) / self.per_word))

    def block_pieces(self, tokens: float) -> int:
        """Pieces of a block of `tokens` tokens inside a prompt (no template of its own),
        BLOCK_MARGIN over: a window of text holds a few percent more or fewer tokens than the
        line says, and a block that fell short would leave a cache of whole blocks one block
        short of the prefix the trace shares. A prompt's length is its own (content_pieces):
        the margin only moves where its blocks end."""
        return max(1, math.ceil(tokens * (1 + BLOCK_MARGIN) / self.per_word))

    @classmethod
    def fit(cls, points: Sequence[tuple[int, int]]) -> TokenLine | None:
        """Least squares over (words, tokens) of two or more sizes; None with fewer."""
        if len({w for w, _ in points}) < 2:
            return None
        n = len(points)
        mw = sum(w for w, _ in points) / n
        mt = sum(t for _, t in points) / n
        slope = (sum((w - mw) * (t - mt) for w, t in points)
                 / sum((w - mw) ** 2 for w, _ in points))
        if slope <= 0:
            return None
        return cls(mt - slope * mw, slope)


UNCOUNTED = TokenLine(0.0, 1.0)  # a server that counts no prompt tokens: a piece a token


@dataclass(slots=True, frozen=True)
class Calibration:
    words: int
    prompt_tokens: int | None  # None: the server reports no usage, so the count is a guess
    target: int
    line: TokenLine | None = None  # fitted over every probe (None: fewer than two sizes)

    @property
    def error(self) -> float | None:
        if self.prompt_tokens is None:
            return None
        return (self.prompt_tokens - self.target) / self.target

    def describe(self) -> str:
        if self.prompt_tokens is None:
            return (f"prompts: {self.words} words (the server reports no usage.prompt_tokens, "
                    f"so the {self.target}-token target is not verified)")
        return (f"prompts: {self.words} words -> {self.prompt_tokens} prompt tokens measured "
                f"(target {self.target}, {self.error:+.1%})")


Probe = Callable[[int], Awaitable[int | None]]


async def calibrate(target: int, probe: Probe, max_probes: int = 8) -> Calibration:
    """Find the word count whose prompt measures within +-TOLERANCE of `target` tokens (or
    the closest of `max_probes`).

    `probe(words)` sends one max_tokens=1 request and returns usage.prompt_tokens. Every
    probe's point goes into the calibration's `line` (prompts of other lengths, a trace's).
    """
    w1 = max(target // 2, 4)
    p1 = await probe(w1)
    if p1 is None:
        return Calibration(words=max(int(target / 1.3), 4), prompt_tokens=None, target=target)
    w2 = w1 * 2
    p2 = await probe(w2)
    if p2 is None:
        return Calibration(words=w1, prompt_tokens=p1, target=target)
    points = [(w1, p1), (w2, p2)]
    slope = max((p2 - p1) / (w2 - w1), 0.05)
    best = (w1, p1) if abs(p1 - target) <= abs(p2 - target) else (w2, p2)
    words = w2
    for _ in range(max_probes - 2):
        words = max(4, round(w1 + (target - p1) / slope))
        measured = await probe(words)
        if measured is None:
            break
        points.append((words, measured))
        if abs(measured - target) < abs(best[1] - target):
            best = (words, measured)
        if abs(measured - target) <= TOLERANCE * target:
            break
        w1, p1 = words, measured
    return Calibration(words=best[0], prompt_tokens=best[1], target=target,
                       line=TokenLine.fit(points))
