"""How a server that reasons splits its answer, one rule for the fake server
(harness/mock_server.py) and the bundled one (runners/engram): the first tokens of a chat's
answer go out as reasoning, a count of them or a share of its max_tokens, in the delta field
vLLM and SGLang name."""

from __future__ import annotations

# the delta fields a reasoning model's thinking streams in: vLLM's and SGLang's, newer vLLM's
REASONING_FIELDS = ("reasoning_content", "reasoning")


def reasoned_tokens(count: int, share: float, max_tokens: int) -> int:
    """Of an answer of `max_tokens`, how many go out as reasoning: `count`, else `share` of
    them rounded down, never more than the answer."""
    return min(count or int(share * max_tokens), max_tokens)
