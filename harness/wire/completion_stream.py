"""Interprets OpenAI streaming chunks (chat and completions) as they arrive.

Rules from docs/design.md: TTFT ends at the first delta carrying `content`, `reasoning_content`
or `tool_calls`; TTFO (the first output token) at the first carrying the answer, `content` or
`tool_calls`: a delta whose only text is `reasoning_content` or `reasoning` is reasoning, whose
tokens come from `usage.completion_tokens_details.reasoning_tokens` where the server reports
them, else from the reasoning chunks' per-chunk usage, else one a chunk; output tokens come
from `usage` when the server sends it, else from the count of content chunks (flagged as
estimated, since one chunk may carry several tokens); cached prompt tokens from
`usage.prompt_tokens_details.cached_tokens` where the server reports them. Each content chunk's
arrival time is kept, and its tokens where every content chunk carries the cumulative
`usage.completion_tokens` (vLLM's `continuous_usage_stats`), for the inter-token figures of
harness.results.token_timing. After the first content chunk, a chunk without text whose usage
grew counts too: its tokens decoded to no text yet (a partial character, a skipped special
token), but the server sent them then, and the chunks' tokens add up to the request's. The
answer's text is kept only when asked (`keep_text`: a multi-turn user resends it). A chunk
whose fields have the wrong shape is a `malformed` fault, never an exception from the protocol
callback (which would store the request as `dropped`).
"""

from __future__ import annotations

# orjson: ~0.8 us per chunk instead of json's ~4.5 us, a fifth of the harness's cost per chunk
from orjson import loads as _loads


class StreamFault(Exception):
    """The stream broke the protocol; `kind` is one of records.ERROR_KINDS."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CompletionStream:
    """State of one streamed completion, fed `(data payload, arrival ns)` pairs."""

    __slots__ = (
        "answer_at",
        "cached_tokens",
        "chunk_tokens",
        "chunks",
        "completion_tokens",
        "counted",
        "finish_reason",
        "last_ns",
        "prompt_tokens",
        "reasoning_chunks",
        "reasoning_tokens",
        "saw_done",
        "text",
        "times_ns",
    )

    def __init__(self, keep_text: bool = False) -> None:
        self.chunks = 0
        self.last_ns = 0
        self.times_ns: list[int] = []  # each content chunk's arrival
        self.chunk_tokens: list[int] | None = []  # ... and its tokens; None: not streamed
        self.counted = 0  # usage.completion_tokens at the last content chunk
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.answer_at: int | None = None  # the first answer chunk's index in times_ns
        self.reasoning_chunks = 0
        self.reasoning_tokens: int | None = None  # usage.completion_tokens_details'
        self.text: list[str] | None = [] if keep_text else None
        self.finish_reason: str | None = None
        self.saw_done = False

    def add(self, payload: bytes, now_ns: int) -> None:
        if self.saw_done:  # the stream ended: what follows is not part of it, however split
            return
        if payload == b"[DONE]":
            self.saw_done = True
            return
        try:
            obj = _loads(payload)
        except ValueError:
            raise StreamFault("malformed", f"event is not JSON: {payload[:80]!r}") from None
        if not isinstance(obj, dict):
            raise StreamFault("malformed", f"event is not an object: {payload[:80]!r}")
        if "error" in obj and "choices" not in obj:
            error = obj["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise StreamFault("stream_error", str(message)[:300])
        usage = obj.get("usage")
        chunk_usage = None
        if usage:
            if not isinstance(usage, dict):
                raise StreamFault("malformed", f"usage is not an object: {payload[:80]!r}")
            chunk_usage = _count(usage, "completion_tokens", None)
            if chunk_usage is not None:
                self.completion_tokens = chunk_usage
            self.prompt_tokens = _count(usage, "prompt_tokens", self.prompt_tokens)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                self.cached_tokens = _count(details, "cached_tokens", self.cached_tokens)
            details = usage.get("completion_tokens_details")
            if isinstance(details, dict):
                self.reasoning_tokens = _count(details, "reasoning_tokens", self.reasoning_tokens)
        choices = obj.get("choices")
        if not choices:  # the final usage-only chunk has "choices": []
            return
        if not isinstance(choices, list):
            raise StreamFault("malformed", f"choices is not a list: {payload[:80]!r}")
        choice = choices[0]
        if not isinstance(choice, dict):
            raise StreamFault("malformed", f"choices[0] is not an object: {payload[:80]!r}")
        reason = choice.get("finish_reason")
        if reason:
            if not isinstance(reason, str):
                raise StreamFault("malformed", f"finish_reason is not a string: {payload[:80]!r}")
            self.finish_reason = reason
        delta = choice.get("delta")
        if delta is not None:
            if not isinstance(delta, dict):
                raise StreamFault("malformed", f"delta is not an object: {payload[:80]!r}")
            answer = delta.get("content") or delta.get("tool_calls")
            text = answer or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            text = answer = choice.get("text")
        if not text:
            if (self.times_ns and self.chunk_tokens is not None and chunk_usage is not None
                    and chunk_usage > self.counted):
                # tokens that made no text (a partial character, a skipped special token)
                # arrived all the same: by the server's count this chunk carried them
                self._count_chunk(chunk_usage, now_ns)
            return
        if self.text is not None:  # the answer itself: content, not reasoning or tool calls
            piece = delta.get("content") if delta is not None else text
            if isinstance(piece, str):
                self.text.append(piece)
        if self.chunk_tokens is not None and chunk_usage is None:
            self.chunk_tokens = None
        if not answer:
            self.reasoning_chunks += 1
        elif self.answer_at is None:
            self.answer_at = len(self.times_ns)
        self._count_chunk(chunk_usage, now_ns)

    def _count_chunk(self, chunk_usage: int | None, now_ns: int) -> None:
        """One chunk that carried output; its tokens are the growth of the cumulative usage."""
        if self.chunk_tokens is not None and chunk_usage is not None:
            self.chunk_tokens.append(chunk_usage - self.counted)
            self.counted = chunk_usage
        self.times_ns.append(now_ns)
        self.last_ns = now_ns
        self.chunks += 1


    def reasoning_figures(self, sent_ns: int, end_ns: int,
                          output_tokens: int) -> dict[str, float | int | str | bool | None]:
        """The answer's timing apart from the reasoning before it, once the stream has ended
        (the declared figures of harness.results.request_figures): TTFO, or why there is none
        (a stream that reasoned and never answered); the reasoning's time and tokens, and
        where they were read; the answer's own tokens per second after TTFO; and whether the
        server reported more reasoning tokens than completion tokens (stored as reported)."""
        times = self.times_ns
        if self.reasoning_tokens is not None:
            tokens, source = self.reasoning_tokens, "usage"
        elif self.chunk_tokens is not None and self.reasoning_chunks:
            tokens, source = sum(self.chunk_tokens[:self.answer_at]), "chunk_usage"
        else:  # the harness's estimate: a token a chunk
            tokens, source = self.reasoning_chunks, "chunks"
        figures: dict[str, float | int | str | bool | None] = {
            "reasoning_tokens": tokens, "reasoning_tokens_source": source,
            "reasoning_over_completion": (source == "usage" and self.completion_tokens is not None
                                          and tokens > self.completion_tokens)}
        if self.answer_at is None:
            if times:
                figures["ttfo_missing"] = ("the stream ended inside its reasoning (finish_reason "
                                           f"{self.finish_reason or 'none'})")
            return figures
        answer_ns = times[self.answer_at]
        figures["ttfo_ms"] = (answer_ns - sent_ns) / 1e6
        figures["reasoning_ms"] = (answer_ns - times[0]) / 1e6
        answer_tokens = output_tokens - tokens
        if end_ns > answer_ns and answer_tokens > 0:
            figures["answer_tps"] = answer_tokens / ((end_ns - answer_ns) / 1e9)
        return figures


def _count(usage: dict, key: str, default: int | None) -> int | None:
    """A token count from `usage`: an int (or null), else the chunk is malformed."""
    value = usage.get(key, default)
    if value is not None and (type(value) is not int or value < 0):
        raise StreamFault("malformed", f"usage.{key} is not a token count: {value!r:.40}")
    return value
