"""The summary level row's keys of the declared per-request figures: written by
`python -m harness.results.request_figures` from its REQUEST_FIGURES; do not edit."""

from __future__ import annotations

from typing import TypedDict


class DeclaredRow(TypedDict, total=False):
    """The declared figures' level statistics (harness.results.request_figures)."""

    mean_ttft_ms: float | None
    p50_ttft_ms: float | None
    p90_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tps: float | None
    p50_tps: float | None
    p10_tps: float | None
    p1_tps: float | None
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    mean_tpot_ms: float | None
    p50_tpot_ms: float | None
    p90_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_tokens_per_chunk: float | None
    p50_e2e_ms: float | None
    p90_e2e_ms: float | None
    p99_e2e_ms: float | None
    mean_input_tokens_requested: float | None
    mean_trace_prefix_tokens: float | None
    mean_cached_tokens: float | None
    mean_ttfo_ms: float | None
    p50_ttfo_ms: float | None
    p90_ttfo_ms: float | None
    p99_ttfo_ms: float | None
    count_ttfo_missing: int
    mean_reasoning_ms: float | None
    p50_reasoning_ms: float | None
    p99_reasoning_ms: float | None
    mean_reasoning_tokens: float | None
    values_reasoning_tokens_source: str | None
    count_reasoning_over_completion: int
    mean_answer_tps: float | None
    p50_answer_tps: float | None
