"""Every fault kind: the failed request is stored with its kind and the sweep goes on."""

import pytest

from harness.records import ERROR_KINDS
from harness.results.metrics import Targets, capacity, point, stats_by_level

SMALL = {"levels": (1, 2), "rounds": 2, "output_tokens": 16, "input_tokens": 32}


FAULTS = [
    ("http_500", "http_error", 500, "HTTP 500: injected failure"),
    ("http_429", "http_error", 429, "HTTP 429: rate limited"),
    ("drop", "dropped", 200, "server closed the connection before the response ended"),
    ("malformed", "malformed", 200, "event is not JSON"),
    ("stream_error", "stream_error", 200, "injected mid-stream failure"),
    ("not_sse", "malformed", 200, "answered with application/json, not text/event-stream"),
    ("close_on_receipt", "dropped", None, "server closed the connection before the response"),
]


@pytest.mark.parametrize(("fault", "kind", "status", "message"), FAULTS)
def test_fault_is_stored_and_sweep_goes_on(sweep, fault, kind, status, message):
    swept = sweep({"fault": fault, "fault_match": "-c2-r1-w0", "stall_s": 30}, **SMALL)
    run, records = swept.run, swept.records
    assert run.status == "complete"
    assert len(records) == 1 * 2 + 2 * 2
    failed = [r for r in records if not r.ok]
    assert [(r.concurrency, r.round, r.worker) for r in failed] == [(2, 1, 0)]
    bad = failed[0]
    assert bad.error_kind in ERROR_KINDS
    assert (bad.error_kind, bad.http_status) == (kind, status)
    assert message in bad.error_message
    if fault in ("drop", "malformed", "stream_error"):
        assert bad.chunks == 2  # what arrived before the fault is kept
    assert all(r.ok and r.output_tokens == 16 for r in records if r is not bad)
    cap = capacity([point(s) for s in stats_by_level(records, 16)], Targets(tps_min=1))
    assert cap.max_c == 1  # the level with a failure does not pass
    assert "1 failed request(s)" in cap.levels[1].reason


def test_stall_past_the_request_timeout(sweep):
    swept = sweep({"fault": "stall", "fault_match": "-c1-r0-", "stall_s": 30}, **SMALL,
                  request_timeout_s=0.5)
    run, records = swept.run, swept.records
    bad = [r for r in records if not r.ok]
    assert [(b.error_kind, b.concurrency, b.round) for b in bad] == [("request_timeout", 1, 0)]
    assert bad[0].latency_ms == pytest.approx(500, abs=100)
    assert "no complete response within 0.5 s" in bad[0].error_message
    assert run.status == "complete" and len(records) == 6


def test_no_usage_counts_chunks_and_flags_estimate(sweep):
    records = sweep({"usage": False, "tokens_per_chunk": 1}, **SMALL).records
    assert all(r.output_tokens == 16 and r.output_tokens_estimated for r in records)
    assert all(r.input_tokens is None for r in records)


def test_several_tokens_per_chunk_use_usage_not_chunks(sweep):
    swept = sweep({"tokens_per_chunk": 4, "reasoning_tokens": 4, "keepalive_comments": True},
                  **SMALL)
    run, records = swept.run, swept.records
    assert all(r.chunks == 4 and r.output_tokens == 16 for r in records)
    assert not any(r.output_tokens_estimated for r in records)
    assert all(r.ttft_ms is not None and r.ttft_ms >= 5 for r in records)
    assert run.measured_input_tokens == pytest.approx(32, rel=0.05)


def test_completions_endpoint(sweep):
    records = sweep(**SMALL, api="completions", mode="burst").records
    assert len(records) == 6 and all(r.ok and r.output_tokens == 16 for r in records)
    assert {r.finish_reason for r in records} == {"length"}


def test_server_stats_are_stored_per_level(sweep):
    swept = sweep(**SMALL)
    stats = swept.store.server_stats(swept.run_id)
    assert [s["concurrency"] for s in stats] == [1, 2]
    assert stats[1]["after"]["tokens"] - stats[1]["before"]["tokens"] == 2 * 2 * 16
