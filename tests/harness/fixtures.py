"""Deterministic request records (no clock, no randomness beyond a fixed seed)."""

from __future__ import annotations

import random

from harness.records import RequestRecord

T0 = 1_790_000_000.0


def make_records(levels=(1, 2, 4), rounds=3, output_tokens=128, seed=7) -> list[RequestRecord]:
    rng = random.Random(seed)
    records = []
    for c in levels:
        start = T0 + c * 100
        for rnd in range(rounds):
            for w in range(c):
                ttft = 100 + 40 * c + rng.uniform(0, 30)
                latency = ttft + 127 * (8 + c) + rng.uniform(0, 50)
                tokens = output_tokens if rng.random() > 0.1 else output_tokens - 5
                rec = RequestRecord(
                    request_id=f"run-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=round(start + rnd * 2.0 + w * 0.001, 6), ttft_ms=ttft,
                    latency_ms=latency, output_tokens=tokens, input_tokens=128,
                    chunks=tokens, max_gap_ms=9.0, finish_reason="length", http_status=200,
                )
                if c == 4 and rnd == 1 and w == 2:
                    rec.error_kind, rec.error_message = "http_error", "HTTP 500"
                    rec.http_status = 500
                    rec.ttft_ms, rec.output_tokens, rec.chunks = None, 0, 0
                records.append(rec)
    return records
