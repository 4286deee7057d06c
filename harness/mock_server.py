"""A fake OpenAI-compatible streaming server for tests and the harness accuracy benchmark.

Knobs: ttft_ms, itl_ms, tokens per chunk, output tokens, usage on/off, reasoning (the first N
tokens as `reasoning_content` or `reasoning` deltas, counted in usage) or tool-call deltas,
keep-alive comments and request limit, faults (HTTP 500/429, drop mid-stream, malformed or
error event, stall, a JSON 200, a close on receipt). It serves HTTP or TLS, IPv4 or IPv6, one
port from several processes (`--reuse-port`, each its log at a `--control-port`). It logs per
request when it read the body and wrote the first token, the first answer token and the last
(`time.perf_counter`, the harness's monotonic clock), the tokens it sent (and of them the
reasoning tokens), the prompt tokens it counted (word by word, or with `--tokenizer FILE`, on
its loop or with `--count-off-loop` in a thread), the sampling fields and (`--log-prompts`) the
prompt's texts, served at GET /mock/timings.

Run it alone: `python -m harness.mock_server --port 8100 --ttft-ms 150 --itl-ms 8`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import random
import re
import ssl as ssl_module
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.reasoning import reasoned_tokens, settings_refusal
from harness.run import aio

FAULTS = ("none", "http_500", "http_429", "drop", "malformed", "stream_error", "stall", "not_sse",
          "close_on_receipt")
_WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(slots=True, frozen=True)
class MockConfig:
    model: str = "mock-model"
    tokenizer: str = ""  # a tokenizer.json: prompt tokens counted with it, not word by word
    count_off_loop: bool = False  # prompts counted in a worker thread (a tokenizer.json's
    # count lets go of the GIL), so the event loop only reads requests and streams
    ttft_ms: float = 20.0
    ttft_jitter_ms: float = 0.0  # each request's TTFT adds a uniform draw from [0, this),
    # seeded by its X-Request-Id: the same request is as late on every run
    itl_ms: float = 2.0
    tokens_per_chunk: int = 1
    chunk_jitter_ms: float = 0.0  # each chunk leaves up to this much after its slot (uniform,
    # seeded by X-Request-Id and chunk index; slots stay on the grid, so lateness never adds up)
    chunk_usage: bool = True  # honour stream_options.continuous_usage_stats: usage on every
    # chunk, its completion_tokens counting the tokens sent so far (as vLLM streams it)
    log_chunks: bool = False  # /mock/timings lists each chunk's write time and tokens
    log_prompts: bool = False  # /mock/timings lists each request's prompt texts
    spec_decode: bool = False  # /metrics counts each chunk as one speculative step whose
    # draft proposed tokens_per_chunk tokens and had all but the last accepted
    output_tokens: int | None = None  # None: honour max_tokens
    usage: bool = True
    reasoning_tokens: int = 0  # chat: the first N tokens arrive as reasoning deltas, and
    # usage.completion_tokens_details.reasoning_tokens counts them; a request whose max_tokens
    # ends inside them never answers
    reasoning_share: float = 0.0  # chat: or this share of each answer's tokens (rounded down)
    reasoning_field: str = "reasoning_content"  # the delta's field: vLLM's and SGLang's name,
    # or "reasoning" as newer vLLM streams it
    tool_calls: bool = False  # chat: tokens arrive as tool-call argument deltas, no content
    keepalive_comments: bool = False
    fault: str = "none"
    fault_every: int = 1  # the fault hits requests 1, 1+N, 1+2N, ... (1: every request)
    fault_match: str = ""  # if set, only requests whose X-Request-Id contains it can fault
    fault_after_chunks: int = 2  # drop / malformed / stream_error / stall after this many
    stall_s: float = 3600.0
    # N > 0: the request after the Nth on a connection is read, then the connection closed
    # unanswered, as when a server's idle keep-alive timeout meets a request in flight
    keepalive_requests: int = 0
    stats: bool = True  # serve GET /stats with counters
    metrics: bool = False  # serve GET /metrics: Prometheus text with vLLM-named families
    shared_decode: bool = False  # the gap between tokens grows with requests in flight (x N),
    # as when one engine decodes them all: per-request speed falls as 1/C
    shared_prefill: bool = False  # the wait for the first token grows with requests in flight
    # (x N, counting this one), as when one engine prefills them in turn: TTFT rises as C
    prefix_cache: bool = False  # usage reports cached_tokens: the earlier prompts' messages
    # this prompt starts with (a multi-turn conversation's history)
    context_tokens: int | None = None  # /v1/models max_model_len; longer requests get a 400
    kv_pool_tokens: int | None = None  # /metrics vllm:cache_config_info (blocks of 16 tokens)

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"fault {self.fault!r} is not one of {', '.join(FAULTS)}")
        if self.tokens_per_chunk < 1 or self.fault_every < 1:
            raise ValueError("tokens_per_chunk and fault_every must be at least 1")
        if refused := settings_refusal(self.reasoning_tokens, self.reasoning_share,
                                       self.reasoning_field):
            raise ValueError(refused)

    def reasoning_of(self, n_tokens: int) -> int:
        """How many of a chat answer's `n_tokens` go out as reasoning."""
        return reasoned_tokens(self.reasoning_tokens, self.reasoning_share, n_tokens)


SAMPLING_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens",
                   "ignore_eos", "min_tokens", "seed")


def _message_text(content: object) -> str:
    """A chat message's text: a string, or the text of its content parts (OpenAI's list form)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def count_prompt_tokens(texts: list[str]) -> int:
    """A deterministic stand-in tokenizer: words and punctuation, plus template overhead."""
    return sum(len(_WORD.findall(t)) + 4 for t in texts) + 3


def load_tokenizer(path: str) -> Callable[[list[str]], int]:
    """A prompt counter from a tokenizer.json (the same template overhead as the stand-in),
    so the load a client sends is counted as a tokenizer it was given counts it."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ValueError("--tokenizer needs the tokenizers package (pip install "
                         "tokenizers)") from None
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # tokenizers raises its own Exception for a bad file
        raise ValueError(f"--tokenizer {path} is not a tokenizer.json: {exc}") from None

    def count(texts: list[str]) -> int:
        # encode_batch, not encode: it releases the GIL, so a count in a thread leaves the
        # event loop free (`count_off_loop`)
        return sum(len(e.ids) + 4
                   for e in tokenizer.encode_batch(texts, add_special_tokens=False)) + 3
    return count


@dataclass(slots=True)
class Timing:
    request_id: str
    body_read: float
    first_write: float | None = None
    first_answer_write: float | None = None  # the first token that is not reasoning; None
    # when the request only reasoned (its max_tokens ended inside the reasoning)
    last_write: float | None = None
    tokens: int = 0
    reasoning_tokens: int = 0  # of `tokens`, those sent as reasoning deltas
    prompt_tokens: int = 0  # as this server counted them (its `usage.prompt_tokens`)
    sampling: dict[str, object] | None = None  # the sampling fields the request gave
    chunk_writes: list[tuple[float, int]] | None = None  # log_chunks: (time, tokens) each
    prompt: list[str] | None = None  # log_prompts: the texts of its messages (or its prompt)


class MockServer:
    """The fake server; `config` may be replaced between requests (tests do)."""

    def __init__(self, config: MockConfig | None = None) -> None:
        self.config = config or MockConfig()
        self.timings: collections.deque[Timing] = collections.deque(maxlen=200_000)
        self.requests_seen = 0
        self.faults_seen = 0  # requests that matched the fault filter
        self.tokens_sent = 0
        self.drafts = 0  # spec_decode: steps, tokens proposed and accepted, as vLLM counts
        self.draft_tokens = 0
        self.accepted_tokens = 0
        self.in_flight = 0  # requests being answered now
        self.prefixes: set[tuple[str, ...]] = set()  # messages of prompts seen (prefix_cache)
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._counters: dict[str, Callable[[list[str]], int]] = {}

    def _count_prompt(self, texts: list[str]) -> int:
        path = self.config.tokenizer
        if not path:
            return count_prompt_tokens(texts)
        if path not in self._counters:
            self._counters[path] = load_tokenizer(path)
        return self._counters[path](texts)

    async def start(self, host: str = "127.0.0.1", port: int = 0,
                    ssl: ssl_module.SSLContext | None = None, reuse_port: bool = False) -> int:
        """`reuse_port`: several processes serve one port (SO_REUSEPORT)."""
        if self.config.tokenizer:  # read before serving, as a real server reads its own
            self._count_prompt([])
        self._server = await asyncio.start_server(self._serve_connection, host, port, ssl=ssl,
                                                  reuse_port=reuse_port or None)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, headers = _parse_head(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                limit = self.config.keepalive_requests
                if limit and served == limit:
                    break
                served += 1
                keep = await self._dispatch(method, path, headers, body, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # shutdown; asyncio's stream callback chokes on re-raise
            pass
        finally:
            writer.close()

    async def _dispatch(
        self, method: str, path: str, headers: dict[str, str], body: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        route = path.split("?", 1)[0]
        if method == "GET" and route == "/v1/models":
            card: dict[str, object] = {"id": self.config.model, "object": "model",
                                       "owned_by": "mock"}
            if self.config.context_tokens:
                card["max_model_len"] = self.config.context_tokens
            models = {"object": "list", "data": [card]}
            return _send_json(writer, 200, models)
        if method == "GET" and route == "/health":
            return _send_json(writer, 200, {"status": "ok"})
        if method == "GET" and route == "/stats" and self.config.stats:
            stats = {"requests": self.requests_seen, "tokens": self.tokens_sent}
            return _send_json(writer, 200, stats)
        if method == "GET" and route == "/metrics" and self.config.metrics:
            return _send_text(writer, self._exposition())
        if method == "GET" and route == "/mock/timings":
            rows = [dataclasses.asdict(t) for t in self.timings]
            if "clear=1" in path:
                self.timings.clear()
            return _send_json(writer, 200, rows)
        if method == "POST" and route in ("/v1/chat/completions", "/v1/completions"):
            body_read = time.perf_counter()
            return await self._complete(route, headers, body, body_read, writer)
        return _send_json(writer, 404, _error(f"no route {method} {route}", "not_found"))

    def _exposition(self) -> str:
        """What a scraper meets on a vLLM-like server: counters, a gauge, a TTFT histogram
        whose every request sits at the configured TTFT."""
        ttft_s = self.config.ttft_ms / 1000
        n = self.requests_seen
        lines = [
            "# TYPE vllm:request_success counter", f"vllm:request_success_total {n}",
            "# TYPE vllm:generation_tokens counter",
            f"vllm:generation_tokens_total {self.tokens_sent}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running {self.in_flight}",
            "# TYPE vllm:time_to_first_token_seconds histogram",
        ]
        for le in (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}} '
                         f"{n if ttft_s <= le else 0}")
        lines += [f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {n}',
                  f"vllm:time_to_first_token_seconds_count {n}",
                  f"vllm:time_to_first_token_seconds_sum {n * ttft_s}"]
        if self.config.spec_decode:
            lines += ["# TYPE vllm:spec_decode_num_drafts counter",
                      f"vllm:spec_decode_num_drafts_total {self.drafts}",
                      "# TYPE vllm:spec_decode_num_draft_tokens counter",
                      f"vllm:spec_decode_num_draft_tokens_total {self.draft_tokens}",
                      "# TYPE vllm:spec_decode_num_accepted_tokens counter",
                      f"vllm:spec_decode_num_accepted_tokens_total {self.accepted_tokens}"]
        if self.config.kv_pool_tokens:
            lines += ["# TYPE vllm:cache_config_info gauge",
                      f'vllm:cache_config_info{{block_size="16",num_gpu_blocks='
                      f'"{self.config.kv_pool_tokens // 16}"}} 1.0']
        return "\n".join(lines) + "\n"

    def _cached_tokens(self, chat: bool, texts: list[str]) -> int:
        """Chat: the tokens of the longest run of leading messages an earlier prompt had.
        Completions: of the longest earlier prompt this one starts with."""
        if not chat:
            text = texts[0]
            hit = max((p for p in self.prefixes if text.startswith(p[0])),
                      key=lambda p: len(p[0]), default=None)
            self.prefixes.add((text,))
            return count_prompt_tokens([hit[0]]) - 3 if hit else 0
        cached = next((k for k in range(len(texts) - 1, 0, -1)
                       if tuple(texts[:k]) in self.prefixes), 0)
        for k in range(1, len(texts) + 1):
            self.prefixes.add(tuple(texts[:k]))
        return count_prompt_tokens(texts[:cached]) - 3 if cached else 0

    async def _complete(self, route: str, headers: dict[str, str], body: bytes,
                        body_read: float, writer: asyncio.StreamWriter) -> bool:
        self.in_flight += 1
        try:
            return await self._answer(route, headers, body, body_read, writer)
        finally:
            self.in_flight -= 1

    async def _answer(self, route: str, headers: dict[str, str], body: bytes,
                      body_read: float, writer: asyncio.StreamWriter) -> bool:
        cfg = self.config
        self.requests_seen += 1
        fault = self._pick_fault(headers)
        try:
            req = json.loads(body)
        except ValueError:
            return _send_json(writer, 400, _error("body is not valid JSON", "invalid_request"))
        if req.get("model") != cfg.model:
            return _send_json(writer, 404, _error(
                f"The model `{req.get('model')}` does not exist.", "model_not_found"))
        if fault == "http_500":
            return _send_json(writer, 500, _error("injected failure", "server_error"))
        if fault == "http_429":
            return _send_json(writer, 429, _error("rate limited", "rate_limit"), retry=1)
        if fault == "close_on_receipt":
            writer.transport.abort()
            return False
        chat = route.endswith("chat/completions")
        texts = (
            [_message_text(m.get("content", "")) for m in req.get("messages", [])]
            if chat else [str(req.get("prompt", ""))]
        )
        prompt_tokens = (await asyncio.to_thread(self._count_prompt, texts)
                         if cfg.count_off_loop else self._count_prompt(texts))
        n_tokens = cfg.output_tokens or int(req.get("max_completion_tokens")
                                            or req.get("max_tokens") or 16)
        if cfg.context_tokens and prompt_tokens + n_tokens > cfg.context_tokens:
            return _send_json(writer, 400, _error(
                f"{prompt_tokens} prompt + {n_tokens} output tokens exceed the "
                f"{cfg.context_tokens}-token context", "invalid_request_error"))
        cached = self._cached_tokens(chat, texts) if cfg.prefix_cache else None
        timing = Timing(headers.get("x-request-id", ""), body_read, prompt_tokens=prompt_tokens,
                        sampling={k: req[k] for k in SAMPLING_FIELDS if k in req},
                        prompt=texts if cfg.log_prompts else None)
        self.timings.append(timing)
        if not req.get("stream") or fault == "not_sse":
            await asyncio.sleep((cfg.ttft_ms + cfg.itl_ms * (n_tokens - 1)) / 1000)
            timing.first_write = timing.last_write = time.perf_counter()
            timing.tokens = n_tokens
            timing.reasoning_tokens = cfg.reasoning_of(n_tokens) if chat else 0
            if timing.reasoning_tokens < n_tokens:
                timing.first_answer_write = timing.first_write
            return _send_json(writer, 200, _final_object(
                chat, cfg.model, n_tokens, prompt_tokens, timing.reasoning_tokens,
                cfg.reasoning_field))
        return await self._stream(writer, cfg, req, timing, fault, chat, n_tokens, cached)

    def _pick_fault(self, headers: dict[str, str]) -> str:
        """The fault this request gets: the configured one on every `fault_every`-th request
        whose id holds `fault_match`, else none."""
        cfg = self.config
        if cfg.fault == "none" or cfg.fault_match not in headers.get("x-request-id", ""):
            return "none"
        self.faults_seen += 1
        return cfg.fault if (self.faults_seen - 1) % cfg.fault_every == 0 else "none"

    async def _stream(self, writer: asyncio.StreamWriter, cfg: MockConfig, req: dict,
                      timing: Timing, fault: str, chat: bool, n_tokens: int,
                      cached: int | None) -> bool:
        """The answer as an SSE stream: chunks paced from the request's body read by the TTFT
        and ITL (shared by the requests in flight where set), the configured fault injected
        after its chunk, then the finish, usage and [DONE] events."""
        body_read, prompt_tokens = timing.body_read, timing.prompt_tokens
        options = req.get("stream_options") or {}
        include_usage = cfg.usage and options.get("include_usage")
        chunk_usage = cfg.usage and cfg.chunk_usage and options.get("continuous_usage_stats")
        jitter = random.Random(f"chunks-{timing.request_id}") if cfg.chunk_jitter_ms else None
        if cfg.log_chunks:
            timing.chunk_writes = []
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
        frame = _ChunkFramer(chat, cfg.model, cfg.tool_calls, cfg.reasoning_field)
        reasoning_tokens = cfg.reasoning_of(n_tokens) if chat else 0
        if cfg.keepalive_comments:
            writer.write(_chunk(b": ping\n\n"))
        next_t = body_read + cfg.ttft_ms * (self.in_flight if cfg.shared_prefill else 1) / 1000
        if cfg.ttft_jitter_ms:
            next_t += random.Random(timing.request_id).uniform(0, cfg.ttft_jitter_ms) / 1000
        chunk_s = cfg.itl_ms * cfg.tokens_per_chunk / 1000
        sent = 0
        n_chunks = 0
        while sent < n_tokens:
            if fault != "none" and n_chunks == cfg.fault_after_chunks:
                return await self._inject(fault, writer, cfg)
            due = next_t + (jitter.uniform(0, cfg.chunk_jitter_ms) / 1000 if jitter else 0.0)
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if writer.is_closing():
                return False
            reasoning = sent < reasoning_tokens
            # a chunk never mixes reasoning and answer: the last reasoning chunk may be short
            k = min(cfg.tokens_per_chunk, (reasoning_tokens if reasoning else n_tokens) - sent)
            usage = (frame.usage_object(prompt_tokens, sent + k, None,
                                        min(sent + k, reasoning_tokens))
                     if chunk_usage else None)
            data = _chunk(frame.delta(" tok" * k, reasoning, first=sent == reasoning_tokens,
                                      usage=usage))
            now = time.perf_counter()  # taken before the write: the token leaves from here
            writer.write(data)
            if timing.chunk_writes is not None:
                timing.chunk_writes.append((now, k))
            if cfg.spec_decode:
                self.drafts += 1
                self.draft_tokens += cfg.tokens_per_chunk
                self.accepted_tokens += k - 1
            if timing.first_write is None:
                timing.first_write = now
                if cfg.keepalive_comments:
                    writer.write(_chunk(b": keep-alive\n\n"))
            if reasoning:
                timing.reasoning_tokens += k
            elif timing.first_answer_write is None:
                timing.first_answer_write = now
            timing.last_write = now
            sent += k
            n_chunks += 1
            timing.tokens = sent
            self.tokens_sent += k
            next_t += chunk_s * (self.in_flight if cfg.shared_decode else 1)
        writer.write(_chunk(frame.finish()))
        if include_usage:
            writer.write(_chunk(frame.usage(prompt_tokens, n_tokens, cached, reasoning_tokens)))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _inject(self, fault: str, writer: asyncio.StreamWriter, cfg: MockConfig) -> bool:
        if fault == "drop":
            writer.transport.abort()
        elif fault == "malformed":
            writer.write(_chunk(b'data: {"choices": [ {"delta": \n\n'))
            await writer.drain()
            await asyncio.sleep(cfg.stall_s)
        elif fault == "stream_error":
            error = json.dumps(_error("injected mid-stream failure", "server_error"))
            writer.write(_chunk(f"data: {error}\n\n".encode()))
            writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
            return True
        elif fault == "stall":
            await writer.drain()
            await asyncio.sleep(cfg.stall_s)
        return False


class _ChunkFramer:
    """Builds chunk events the way vLLM and SGLang shape them."""

    def __init__(self, chat: bool, model: str, tool_calls: bool = False,
                 reasoning_field: str = "reasoning_content") -> None:
        self.chat = chat
        self.tool_calls = chat and tool_calls
        self.reasoning_field = reasoning_field
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.head = f'{{"id":"cmpl-mock","object":"{kind}","created":0,"model":"{model}",'

    def delta(self, text: str, reasoning: bool, first: bool = False,
              usage: str | None = None) -> bytes:
        if self.tool_calls and not reasoning:
            choice = json.dumps({"index": 0, "delta": {"tool_calls": [_tool_call(text, first)]},
                                 "finish_reason": None})
        elif self.chat:
            key = self.reasoning_field if reasoning else "content"
            choice = f'{{"index":0,"delta":{{"{key}":"{text}"}},"finish_reason":null}}'
        else:
            choice = f'{{"index":0,"text":"{text}","finish_reason":null}}'
        tail = f',"usage":{usage}' if usage else ""
        return f'data: {self.head}"choices":[{choice}]{tail}}}\n\n'.encode()

    def finish(self) -> bytes:
        inner = '"delta":{}' if self.chat else '"text":""'
        reason = "tool_calls" if self.tool_calls else "length"
        choice = f'{{"index":0,{inner},"finish_reason":"{reason}"}}'
        return f'data: {self.head}"choices":[{choice}]}}\n\n'.encode()

    @staticmethod
    def usage_object(prompt_tokens: int, completion_tokens: int,
                     cached_tokens: int | None = None, reasoning_tokens: int = 0) -> str:
        """`reasoning_tokens` (of the completion tokens) as OpenAI reports them, when any."""
        details = ("" if cached_tokens is None
                   else f',"prompt_tokens_details":{{"cached_tokens":{cached_tokens}}}')
        if reasoning_tokens:
            details += f',"completion_tokens_details":{{"reasoning_tokens":{reasoning_tokens}}}'
        return (f'{{"prompt_tokens":{prompt_tokens},"completion_tokens":{completion_tokens},'
                f'"total_tokens":{prompt_tokens + completion_tokens}{details}}}')

    def usage(self, prompt_tokens: int, completion_tokens: int,
              cached_tokens: int | None = None, reasoning_tokens: int = 0) -> bytes:
        usage = self.usage_object(prompt_tokens, completion_tokens, cached_tokens,
                                  reasoning_tokens)
        return f'data: {self.head}"choices":[],"usage":{usage}}}\n\n'.encode()


def _tool_call(arguments: str, first: bool) -> dict:
    """One tool-call delta as OpenAI streams it: id, type and name only in the first."""
    call: dict = {"index": 0, "function": {"arguments": arguments}}
    if first:
        call.update(id="call_mock", type="function")
        call["function"]["name"] = "lookup"
    return call


def _final_object(chat: bool, model: str, n: int, prompt_tokens: int,
                  reasoning_tokens: int = 0, reasoning_field: str = "reasoning_content") -> dict:
    """The whole answer as one body; chat's first `reasoning_tokens` in the reasoning field."""
    text = " tok" * (n - reasoning_tokens)
    message: dict[str, object] = {"role": "assistant", "content": text}
    if reasoning_tokens:
        message[reasoning_field] = " tok" * reasoning_tokens
    choice: dict[str, object] = ({"index": 0, "message": message} if chat
                                 else {"index": 0, "text": text})
    choice["finish_reason"] = "length"
    usage: dict[str, object] = {"prompt_tokens": prompt_tokens, "completion_tokens": n,
                                "total_tokens": prompt_tokens + n}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return {"id": "cmpl-mock", "model": model, "choices": [choice], "usage": usage}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _error(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": code, "code": code}}


def _send_json(writer: asyncio.StreamWriter, status: int, obj: object,
               retry: int | None = None) -> bool:
    body = json.dumps(obj).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
              500: "Internal Server Error"}.get(status, "Error")
    extra = f"Retry-After: {retry}\r\n" if retry is not None else ""
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n")
    writer.write(head.encode() + body)
    return True


def _send_text(writer: asyncio.StreamWriter, text: str) -> bool:
    body = text.encode()
    head = ("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    writer.write(head.encode() + body)
    return True


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, path, headers


class ThreadedMockServer:
    """The fake server on its own event loop in a daemon thread (for tests)."""

    def __init__(
        self, config: MockConfig | None = None, host: str = "127.0.0.1",
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        self.server = MockServer(config)
        self.host = host
        self.ssl = ssl
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedMockServer:
        self._thread.start()
        start = self.server.start(self.host, 0, self.ssl)
        asyncio.run_coroutine_threadsafe(start, self._loop).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        async def shutdown() -> None:
            await self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.server.port}/v1"

    def configure(self, **changes: Any) -> None:  # each field has its own type
        self.server.config = dataclasses.replace(self.server.config, **changes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--reuse-port", action="store_true", help="share --port (SO_REUSEPORT)")
    parser.add_argument("--control-port", type=int, help="this process's own port as well")
    for f in dataclasses.fields(MockConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.type == "str":
            parser.add_argument(flag, default=f.default)
        elif f.type == "int | None":
            parser.add_argument(flag, type=int, default=f.default)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    args = parser.parse_args(argv)
    try:
        config = MockConfig(**{f.name: getattr(args, f.name)
                               for f in dataclasses.fields(MockConfig)})
    except ValueError as exc:  # a knob out of its range: one sentence, exit 2
        parser.exit(2, f"{exc}\n")

    async def serve() -> None:
        server = MockServer(config)
        try:
            port = await server.start(args.host, args.port, reuse_port=args.reuse_port)
        except ValueError as exc:  # a bad --tokenizer: read as the server starts
            parser.exit(2, f"{exc}\n")
        if args.control_port:  # its log, when several processes share --port
            await asyncio.start_server(server._serve_connection, args.host, args.control_port)
        print(f"mock server listening on http://{args.host}:{port}/v1", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        aio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
