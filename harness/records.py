"""What one measured request leaves behind: the row type shared by client, store and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

# Error kinds a request can end with; `None` means the request succeeded.
ERROR_KINDS = (
    "http_error",  # non-2xx status (429 and 5xx included); http_status says which
    "connect_error",  # the TCP/TLS connection could not be opened (refused, TLS, DNS)
    "connect_timeout",  # the TCP/TLS connection did not open within the connect timeout
    "dropped",  # the server closed the connection before the stream ended
    "malformed",  # a 2xx that is not an event stream, or an event that is not a completion chunk
    "stream_error",  # the server sent an error object inside the stream
    "stall_timeout",  # after the first token, no further token within the stall timeout
    "request_timeout",  # no end of stream within the request timeout (the whole request)
)


@dataclass(slots=True)
class RequestRecord:
    """One request as the harness saw it. Durations come from `perf_counter_ns`."""

    request_id: str
    concurrency: int
    round: int
    worker: int
    sent_at: float  # wall-clock seconds (run anchor + monotonic offset)
    ttft_ms: float | None = None
    latency_ms: float | None = None
    output_tokens: int = 0
    output_tokens_estimated: bool = False
    input_tokens: int | None = None
    chunks: int = 0
    max_gap_ms: float | None = None
    finish_reason: str | None = None
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    retried: str | None = None  # the first attempt's error kind when the request was re-sent
    rate: float | None = None  # mode rate: the level's requests/s (concurrency is then 0)
    scheduled_at: float | None = None  # mode rate: when the schedule said to send (wall s)
    repeat: int = 0  # `run --repeat N`: which pass over the sweep (0-based)
    turn: int = 1  # `--turns N`: the request's turn in its user's conversation (1-based)
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, if reported
    think_ms: float | None = None  # `--mode users`: the user's think time after this request
    # a trace's request (modes trace, trace-closed): the level's speedup (a timed replay), its
    # line in the trace and the lengths the trace gives it; the lengths it was sent with
    # (scaled and clipped: what its prompt was sized to, its max_tokens); and the prompt
    # tokens in blocks it shares with an earlier request of its pass (what the trace's hash
    # ids leave a prefix cache to reuse)
    speedup: float | None = None
    trace_line: int | None = None
    trace_input_tokens: int | None = None
    trace_output_tokens: int | None = None
    input_tokens_requested: int | None = None
    output_tokens_requested: int | None = None
    trace_prefix_tokens: int | None = None
    # inter-token figures (harness.results.token_timing): chunk gaps, one per chunk, apart
    # from the token-weighted ITL; tokens per chunk from per-chunk usage unless estimated
    tokens_per_chunk: float | None = None
    tokens_per_chunk_estimated: bool = False
    chunk_gap_mean_ms: float | None = None
    chunk_gap_p50_ms: float | None = None
    chunk_gap_p90_ms: float | None = None
    chunk_gap_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    itl_bins: list[int] | None = field(default=None, repr=False)  # token gaps' histogram
    itl_counts: list[int] | None = field(default=None, repr=False)
    # each content chunk's arrival after the send (ns) and its tokens (None: the server
    # streamed no per-chunk usage), until stored: the store works out the figures above from
    # them (harness.results.store.fill_token_timing), and keeps them with `--token-times`
    chunk_offsets_ns: list[int] | None = field(default=None, repr=False)
    chunk_tokens: list[int] | None = field(default=None, repr=False)
    reply: str | None = field(default=None, repr=False)  # `--turns`: the answer (not stored)
    # the declared per-request figures (harness.results.request_figures), by column name: set
    # once as the request ends
    figures: dict[str, float | int | str | bool | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: (latency - TTFT) / (output tokens - 1), the
        tokens from usage, so a chunk that carries several tokens (speculative decoding)
        counts each (the SQL form is the request_figures view's)."""
        if (not self.ok or self.output_tokens < 2 or self.ttft_ms is None
                or self.latency_ms is None):
            return None
        return (self.latency_ms - self.ttft_ms) / (self.output_tokens - 1)

    @property
    def tps(self) -> float | None:
        """Output tokens over the whole request time, TTFT included (docs/design.md)."""
        if not self.ok or not self.latency_ms:
            return None
        return self.output_tokens / (self.latency_ms / 1000.0)


@dataclass(frozen=True, slots=True)
class LoadHost:
    """Where a `run --ray` load worker ran, and its host's clock against the driver's (a row
    of `load_hosts`): the wall clock's offset (theirs minus ours) at the shortest of the round
    trips it was read over, and that round trip."""

    worker: int
    node_id: str
    hostname: str
    clock_offset_ms: float
    round_trip_ms: float
