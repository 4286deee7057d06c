"""The context each request of a trace's window needs: its prompt and max_tokens, after its
session's earlier turns and their answers (a jsonl session resends the conversation so far
with every turn, so its context grows turn by turn, without end in a long session). A prompt
the trace gives as text counts its words, a word being a token at least, and an answer its
max_tokens (the server is asked to ignore EOS): a need is what the server counts, or less.
Pure: the trace is already read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.run.trace.requests import Shaped
from harness.run.trace.source import Trace

_WORD = re.compile(r"\w+")


@dataclass(slots=True, frozen=True)
class Need:
    """The tokens request `index` of the window needs, and its turn in its session (1: the
    first, or a request of no session)."""

    index: int
    tokens: int
    turn: int


def words(messages: Sequence[dict]) -> int:
    """The words of a turn's messages."""
    return sum(sum(1 for _ in _WORD.finditer(str(m.get("content") or ""))) for m in messages)


def needs(trace: Trace, shapes: Sequence[Shaped]) -> list[Need]:
    """Every request's need, in window order."""
    grown: dict[str, tuple[int, int]] = {}  # a session -> its context so far, its turns
    out = []
    for index, (r, s) in enumerate(zip(trace.requests, shapes, strict=True)):
        prompt = s.input_tokens if s.input_tokens is not None else words(r.messages)
        before, turns = grown.get(r.session, (0, 0)) if r.session is not None else (0, 0)
        need = Need(index, before + prompt + s.output_tokens, turns + 1)
        if r.session is not None:
            grown[r.session] = (need.tokens, need.turn)
        out.append(need)
    return out


def describe(trace: Trace, need: Need) -> str:
    """Where a request is and what its need counts, e.g. "line 9 (turn 3 of session 'a',
    after the turns before it and their answers, a word counted a token)"."""
    r = trace.requests[need.index]
    if need.turn > 1:
        return (f"line {r.line} (turn {need.turn:,} of session {r.session!r}, after the turns "
                "before it and their answers, a word counted a token)")
    if r.input_tokens is None:
        return f"line {r.line} (a word counted a token)"
    return f"line {r.line}"


def remedy(trace: Trace, over: Sequence[Need]) -> str:
    """What takes requests of these needs under a bound: the flags that fit a trace's lengths,
    or for text (which is sent as written) a window that ends before them."""
    if any(n.turn > 1 or trace.requests[n.index].input_tokens is None for n in over):
        return ("take a window that ends before them (--trace-limit, --trace-duration), or cut "
                "the trace's sessions short")
    return ("clip them with --max-input-tokens and --max-output-tokens, or scale them with "
            "--input-scale")
