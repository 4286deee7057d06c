"""`summary --as vllm|aiperf|guidellm`: each tool's definitions, worked out by hand on a level
whose figures are known."""

import json

import pytest

from harness.records import RequestRecord
from harness.results.peer_views import NEEDS_CHUNK_TIMES, peer_view
from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.helpers import run_cli

MS = 1e6  # ns


def _level() -> list[RequestRecord]:
    """Two answers and one failure at C=2, one pass. A: sent at 100.0 s, first token 100 ms,
    ends at 1,100 ms, 11 tokens in 11 chunks 100 ms apart. B: sent at 100.5 s, first token
    200 ms, ends at 1,400 ms, 11 tokens in 6 chunks 240 ms apart (several tokens a chunk).
    The failure lies inside the span. Duration: 100.0 s to 101.9 s, 1.9 s."""
    a = RequestRecord("a", 2, 0, 0, 100.0, ttft_ms=100.0, latency_ms=1100.0, output_tokens=11,
                      input_tokens=50, chunks=11,
                      chunk_offsets_ns=[round((100 + 100 * i) * MS) for i in range(11)])
    b = RequestRecord("b", 2, 0, 1, 100.5, ttft_ms=200.0, latency_ms=1400.0, output_tokens=11,
                      input_tokens=50, chunks=6,
                      chunk_offsets_ns=[round((200 + 240 * i) * MS) for i in range(6)])
    failed = RequestRecord("f", 2, 1, 0, 100.2, latency_ms=300.0, error_kind="http_error",
                           http_status=500)
    return [a, b, failed]


def _figures(tool: str, records: list[RequestRecord]) -> dict:
    return peer_view(records, tool)["levels"][0]["figures"]


def test_vllm_bench_serve_definitions():
    f = _figures("vllm", _level())
    assert f["Request throughput"] == pytest.approx(2 / 1.9)
    assert f["Output token throughput"] == pytest.approx(22 / 1.9)
    assert f["Total token throughput"] == pytest.approx((22 + 100) / 1.9)
    assert f["Mean TTFT"] == pytest.approx(150.0)
    # TPOT per request: A (1100 - 100) / 10 = 100, B (1400 - 200) / 10 = 120
    assert f["Mean TPOT"] == pytest.approx(110.0)
    assert f["Median TPOT"] == pytest.approx(110.0)
    # ITL: every chunk gap pooled, ten of 100 ms and five of 240 ms
    assert f["Mean ITL"] == pytest.approx((10 * 100 + 5 * 240) / 15)
    assert f["Median ITL"] == pytest.approx(100.0)
    assert f["P99 ITL"] == pytest.approx(240.0)
    assert f["Mean E2EL"] == pytest.approx(1250.0)


def test_vllm_itl_without_chunk_times_gives_its_mean_and_says_what_is_missing():
    bare = [RequestRecord(r.request_id, r.concurrency, r.round, r.worker, r.sent_at,
                          ttft_ms=r.ttft_ms, latency_ms=r.latency_ms,
                          output_tokens=r.output_tokens, input_tokens=r.input_tokens,
                          chunks=r.chunks, error_kind=r.error_kind) for r in _level()]
    view = peer_view(bare, "vllm")
    f = view["levels"][0]["figures"]
    assert f["Mean ITL"] == pytest.approx((10 * 100 + 5 * 240) / 15)
    assert f["Median ITL"] is None and f["P99 ITL"] is None
    assert view["missing"]["P99 ITL"] == NEEDS_CHUNK_TIMES


def test_aiperf_definitions():
    f = _figures("aiperf", _level())
    assert f["Inter Token Latency mean"] == pytest.approx(110.0)  # vLLM's TPOT, per request
    assert f["Output Token Throughput Per User avg"] == pytest.approx((10.0 + 1000 / 120) / 2)
    assert f["Output Token Throughput"] == pytest.approx(22 / 1.9)
    assert f["Time to First Token p50"] == pytest.approx(150.0)
    assert f["Request Latency mean"] == pytest.approx(1250.0)


def test_guidellm_definitions():
    f = _figures("guidellm", _level())
    # TPOT includes TTFT: A 1100 / 11 = 100, B 1400 / 11; both weigh 11 tokens
    assert f["TPOT mean"] == pytest.approx((100.0 + 1400 / 11) / 2)
    assert f["ITL mean"] == pytest.approx(110.0)  # (latency - TTFT) / 10 each, weights 10
    assert f["Output tokens per second per request mean"] == pytest.approx(
        (11 / 1.1 + 11 / 1.4) / 2)
    assert f["Requests per second"] == pytest.approx(2 / 1.9)


def test_summary_as_each_tool_reads_a_stored_run(tmp_path):
    """The CLI over a stored run: --json per tool, and the text names the tool and says what
    the rows lack (the chunk times, stored only with --token-times)."""
    db = tmp_path / "peers.duckdb"
    store = Store(db)
    store.initialise()
    store.create_run(RunRow(run_id="hand", model="m", mode="closed", levels=[2], rounds=2,
                            output_tokens=11))
    store.write_requests("hand", _level())
    store.finish_run("hand", "complete")
    for tool, name in (("vllm", "Mean TPOT"), ("aiperf", "Inter Token Latency mean"),
                       ("guidellm", "ITL mean")):
        out = run_cli("summary", "hand", "--db", str(db), "--as", tool, "--json")
        assert out.returncode == 0, out.stderr
        level = json.loads(out.stdout)["levels"][0]
        assert level["concurrency"] == 2 and level["figures"][name] == pytest.approx(110.0)
    text = run_cli("summary", "hand", "--db", str(db), "--as", "vllm")
    assert "as vllm bench serve defines" in text.stdout
    assert "P99 ITL: - needs the chunk times" in " ".join(text.stdout.split())
    bad = run_cli("summary", "hand", "--db", str(db), "--as", "locust")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
