"""How a server that reasons splits its answer, one rule for the fake server
(harness/mock_server.py) and the bundled one (runners/engram): the first tokens of a chat's
answer go out as reasoning, a count of them or a share of the answer's length (its max_tokens;
the fake server's --output-tokens where that is set), in the delta field vLLM and SGLang
name."""

from __future__ import annotations

# the delta fields a reasoning model's thinking streams in: vLLM's and SGLang's, newer vLLM's
REASONING_FIELDS = ("reasoning_content", "reasoning")


def settings_refusal(count: int, share: float, field: str) -> str | None:
    """The sentence refusing a server's reasoning settings (its flags'), None where they
    hold."""
    if count < 0:
        return "--reasoning-tokens must be 0 or more"
    if not 0 <= share <= 1:
        return "--reasoning-share must be a share in [0, 1]"
    if count and share:
        return "--reasoning-tokens and --reasoning-share: give one of them"
    if field not in REASONING_FIELDS:
        return f"--reasoning-field {field!r} is not one of {', '.join(REASONING_FIELDS)}"
    return None


def reasoned_tokens(count: int, share: float, max_tokens: int) -> int:
    """Of an answer of `max_tokens`, how many go out as reasoning: `count`, else `share` of
    them rounded down, never more than the answer."""
    return min(count or int(share * max_tokens), max_tokens)
