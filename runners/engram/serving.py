"""OpenAI completions over the engine: request -> Sequence, tokens -> SSE chunks or a body.

Each accepted request is timed on the monotonic clock: received (parsed), admitted (its
prefill step scheduled), first content, first answer content and last content handed to the
HTTP layer (streamed: as the chunk is yielded; not streamed: as the text arrives for the
body), finished. With `reasoning_tokens` a chat's first tokens are sent as reasoning (the
field vLLM and SGLang stream, `reasoning_content`, or newer vLLM's `reasoning`) and counted
in usage, as a reasoning model's thinking would be. The times feed
the vLLM-named histograms (latency.py) and, with --request-log, one JSON line per request.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from common.reasoning import reasoned_tokens
from runners.engram.engine import Engine
from runners.engram.latency import RequestTimes, ServerLatency
from runners.engram.protocol import APIError, ChatRequest, CompletionRequest, TokenizeRequest
from runners.engram.request_log import RequestLog
from runners.engram.scheduler import SamplingParams, Sequence
from runners.engram.tokenizer import LONG_TEXT_CHARS, EngramTokenizer, StreamDecoder

_ids = itertools.count()


@dataclass(slots=True)
class Piece:
    text: str
    finish_reason: str | None
    reasoning_tokens: int = 0  # tokens behind `text` sent as reasoning (then all of them are)


@dataclass(slots=True)
class Call:
    """One request the engine accepted: what was asked, its sequence and tokens, its times."""

    req: ChatRequest | CompletionRequest
    seq: Sequence
    queue: asyncio.Queue
    times: RequestTimes
    x_request_id: str | None
    finish_reason: str | None = None  # None at the end: the client went away
    reasoning_tokens: int = 0  # of its output, the tokens that went out as reasoning

    @property
    def status(self) -> str:
        if self.finish_reason is None:
            return "cancelled"
        return "error" if self.finish_reason == "error" else "ok"


def prompt_chars(req: ChatRequest | CompletionRequest | TokenizeRequest) -> int:
    """Characters of text a request asks to tokenize."""
    text = sum(len(m.content) for m in getattr(req, "messages", None) or ())
    prompt = getattr(req, "prompt", None)
    return text + (len(prompt) if isinstance(prompt, str) else 0)


async def off_loop_if_long(chars: int, tokenize: Callable[[], list[int]]) -> list[int]:
    """A long text in a thread (1 MB stalled the loop 0.3-0.65 s); a short one stays on the
    loop, where a thread hop would cost more than it saves."""
    return tokenize() if chars < LONG_TEXT_CHARS else await asyncio.to_thread(tokenize)


class Serving:
    def __init__(self, engine: Engine, tokenizer: EngramTokenizer, model_name: str,
                 request_log: RequestLog | None = None, reasoning_tokens: int = 0,
                 reasoning_field: str = "reasoning_content", reasoning_share: float = 0.0,
                 ) -> None:
        """`reasoning_tokens`: a chat's first tokens up to this many are sent as reasoning in
        `reasoning_field` (the completions route has no such field: all text there); or
        `reasoning_share` of its max_tokens, rounded down."""
        self.engine = engine
        self.reasoning_limit = reasoning_tokens
        self.reasoning_share = reasoning_share
        self.reasoning_field = reasoning_field
        self.reasoning_tokens_sent = 0  # the counter /metrics exports
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_seq = engine.cfg.max_seq
        self.latency = ServerLatency()
        self.request_log = request_log

    async def tokenized(self, req: ChatRequest | CompletionRequest) -> list[int]:
        """The prompt's ids; a long one is tokenized in a thread (the tokenizer lets go of
        the GIL), so /health and the streams in flight keep their event loop meanwhile."""
        return await off_loop_if_long(prompt_chars(req), lambda: self.prompt_ids(req))

    def prompt_ids(self, req: ChatRequest | CompletionRequest) -> list[int]:
        if isinstance(req, ChatRequest):
            return self.tokenizer.chat_prompt([m.model_dump() for m in req.messages])
        if isinstance(req.prompt, str):
            return self.tokenizer.encode(req.prompt)
        vocab = self.engine.cfg.vocab_size
        bad = next((i for i in req.prompt if not 0 <= i < vocab), None)
        if bad is not None:
            raise APIError(400, f"prompt token id {bad} is outside this model's vocabulary "
                           f"(0 to {vocab - 1})", param="prompt")
        return req.prompt

    def sequence(self, req: ChatRequest | CompletionRequest,
                 ids: list[int] | None = None) -> Sequence:
        """`ids`: the prompt already tokenized (off the loop, see `tokenized`)."""
        if req.model != self.model_name:
            raise APIError(404, f"The model `{req.model}` does not exist; this server serves "
                           f"`{self.model_name}`.", code="model_not_found", param="model")
        field = "messages" if isinstance(req, ChatRequest) else "prompt"
        ids = self.prompt_ids(req) if ids is None else ids
        if not ids:
            raise APIError(400, "the prompt is empty", param=field)
        max_tokens = req.requested_tokens
        if max_tokens <= 0:
            raise APIError(400, f"max_tokens must be at least 1, not {max_tokens}",
                           param="max_tokens")
        if req.min_tokens > max_tokens:
            default = req.max_tokens is None and req.max_completion_tokens is None
            raise APIError(400, f"min_tokens {req.min_tokens} exceeds max_tokens {max_tokens}"
                           + (" (the default, as max_tokens was not given)" if default else ""),
                           param="min_tokens")
        if len(ids) >= self.max_seq:
            raise APIError(400, f"the prompt has {len(ids)} tokens; this model's context is "
                           f"{self.max_seq} tokens", param=field)
        if len(ids) + max_tokens > self.max_seq:
            raise APIError(400, f"max_tokens {max_tokens} plus the {len(ids)}-token prompt "
                           f"exceeds the {self.max_seq}-token context", param="max_tokens")
        blocks = self.engine.blocks
        if not blocks.fits_pool(len(ids) + max_tokens):
            raise APIError(400, f"the request needs KV cache for {len(ids) + max_tokens} tokens "
                           f"({len(ids)} prompt + {max_tokens} max_tokens) but this server's "
                           f"whole KV pool holds {blocks.pool_tokens} tokens",
                           param="max_tokens")
        params = SamplingParams(max_tokens=max_tokens, min_tokens=req.min_tokens,
                                ignore_eos=req.ignore_eos, temperature=req.temperature,
                                top_p=req.top_p, seed=req.seed)
        return Sequence(f"cmpl-{next(_ids)}", ids, params)

    def start(self, req: ChatRequest | CompletionRequest, received: float,
              x_request_id: str | None, ids: list[int] | None = None) -> Call:
        """Hand the request to the engine (before any response byte is sent)."""
        seq = self.sequence(req, ids)
        times = RequestTimes(received)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int | None, str | None]] = asyncio.Queue()

        def on_token(token: int | None, reason: str | None) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (token, reason))

        if not self.engine.submit(seq, on_token, times.admit):
            raise APIError(503, "the server's request queue is full; retry shortly",
                           code="queue_full", headers={"Retry-After": "1"})
        return Call(req, seq, queue, times, x_request_id)

    async def pieces(self, call: Call) -> AsyncIterator[Piece]:
        """Text deltas as the engine produces them; cancels the sequence if abandoned."""
        seq, queue, stops = call.seq, call.queue, call.req.stop_strings
        limit = (reasoned_tokens(self.reasoning_limit, self.reasoning_share,
                                 call.req.requested_tokens)
                 if isinstance(call.req, ChatRequest) else 0)
        decoder = StreamDecoder(self.tokenizer)
        text = ""
        finished = False
        held = 0  # reasoning tokens whose text the decoder still holds (a partial character)
        try:
            while not finished:
                token, reason = await queue.get()
                call.finish_reason = reason
                if reason == "error":
                    raise APIError(500, "the engine failed while generating this request",
                                   code="engine_error")
                if token is not None and call.reasoning_tokens + held < limit:
                    held += 1
                delta = decoder.push(token) if token is not None else ""
                if stops and delta:
                    text += delta
                    hit = min((text.find(s) for s in stops if s in text), default=-1)
                    if hit >= 0:
                        delta = delta[: max(len(delta) - (len(text) - hit), 0)]
                        reason = call.finish_reason = "stop"
                finished = reason is not None
                if delta or finished:
                    call.reasoning_tokens += held
                    yield Piece(delta, reason, held)
                    held = 0
        finally:
            if seq.finish_reason is None:
                self.engine.cancel(seq)

    def usage(self, call: Call) -> dict:
        seq = call.seq
        usage = {"prompt_tokens": len(seq.prompt), "completion_tokens": len(seq.output),
                 "total_tokens": seq.length,
                 "prompt_tokens_details": {"cached_tokens": seq.cached_tokens}}
        if (self.reasoning_limit or self.reasoning_share) and isinstance(call.req, ChatRequest):
            usage["completion_tokens_details"] = {"reasoning_tokens": call.reasoning_tokens}
        return usage

    def _written(self, call: Call, piece: Piece) -> None:
        self.reasoning_tokens_sent += piece.reasoning_tokens
        if piece.text:
            now = time.monotonic()
            self.latency.token(call.times, now)
            if not piece.reasoning_tokens and call.times.first_answer is None:
                call.times.first_answer = now

    def _finish(self, call: Call) -> None:
        self.latency.finish(call.times, time.monotonic())
        if self.request_log is not None:
            t, seq = call.times, call.seq
            self.request_log.write({
                "request_id": seq.request_id, "x_request_id": call.x_request_id,
                "received": t.received, "admitted": t.admitted, "first_token": t.first_token,
                "first_answer": t.first_answer, "last_token": t.last_token,
                "finished": t.finished,
                "prompt_tokens": len(seq.prompt), "completion_tokens": len(seq.output),
                "reasoning_tokens": call.reasoning_tokens,
                "cached_tokens": seq.cached_tokens, "status": call.status,
                "finish_reason": call.finish_reason,
                "sampling": {"temperature": call.req.temperature, "top_p": call.req.top_p,
                             "max_tokens": call.req.requested_tokens,
                             "ignore_eos": call.req.ignore_eos, "min_tokens": call.req.min_tokens,
                             "seed": call.req.seed}})

    async def stream(self, call: Call) -> AsyncIterator[bytes]:
        req, seq = call.req, call.seq
        chat = isinstance(req, ChatRequest)
        head = {"id": seq.request_id, "created": int(time.time()), "model": self.model_name,
                "object": "chat.completion.chunk" if chat else "text_completion"}

        def event(choice: dict | None, usage: dict | None = None) -> bytes:
            body = {**head, "choices": [choice] if choice else []}
            if usage is not None:
                body["usage"] = usage
            return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

        try:
            # the role opens the stream with the first token, not before prefill, as vLLM's
            # does: clients that stop TTFT at the first message with choices then read it right
            role = chat
            try:
                per_chunk = req.usage_per_chunk
                async for piece in self.pieces(call):
                    if role:
                        role = False
                        yield event({"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None})
                    chunk = self._chunk(event, chat, piece, self.reasoning_field,
                                        self.usage(call) if per_chunk else None)
                    self._written(call, piece)
                    yield chunk
                if req.include_usage:
                    yield event(None, self.usage(call))
            except APIError as exc:  # headers are sent: the error goes into the stream
                yield b"data: " + json.dumps(exc.body()).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            self._finish(call)

    @staticmethod
    def _chunk(event: Callable[[dict | None, dict | None], bytes], chat: bool, piece: Piece,
               reasoning_field: str, usage: dict | None) -> bytes:
        choice: dict = {"index": 0, "finish_reason": piece.finish_reason}
        if chat:
            field = reasoning_field if piece.reasoning_tokens else "content"
            choice["delta"] = {field: piece.text} if piece.text else {}
        else:
            choice["text"] = piece.text
        return event(choice, usage)

    async def complete(self, call: Call) -> dict:
        req, seq = call.req, call.seq
        text = reasoning = ""
        try:
            async for piece in self.pieces(call):
                self._written(call, piece)
                if piece.reasoning_tokens:
                    reasoning += piece.text
                else:
                    text += piece.text
        finally:
            self._finish(call)
        chat = isinstance(req, ChatRequest)
        choice: dict = {"index": 0, "finish_reason": call.finish_reason}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
            if call.reasoning_tokens:
                choice["message"][self.reasoning_field] = reasoning
        else:
            choice["text"] = text
        return {"id": seq.request_id, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.model_name, "choices": [choice],
                "usage": self.usage(call)}
