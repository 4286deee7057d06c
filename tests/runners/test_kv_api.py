"""The KV pool over HTTP (tiny preset): refusal of a request larger than the pool, the model's
context, cached prompt tokens in usage and the request log, vLLM's cache metrics, /stats."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from runners.engram import __main__ as engram_main
from runners.engram.kv_blocks import BLOCK_SIZE
from runners.engram.model import kv_bytes_per_token
from runners.engram.runtime import Runtime, ServerConfigError
from tests.runners.fixtures import LiveServer, options

BLOCKS = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kvsrv")
    runtime = Runtime(options(tmp, request_log=tmp / "requests.jsonl",
                              kv_pool_gib=BLOCKS * BLOCK_SIZE * 2048 / 2**30))
    assert kv_bytes_per_token(runtime.cfg) == 2048  # tiny: 2 x 4 layers x 64 x 4 bytes
    with LiveServer(runtime) as live:
        yield live


def complete(server, prompt, max_tokens=4, **extra):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            **extra}
    return httpx.post(server.url + "/v1/completions", json=body, timeout=30)


def test_a_request_larger_than_the_whole_pool_is_a_400_naming_both_sizes(server):
    pool = server.runtime.engine.blocks.pool_tokens
    resp = complete(server, list(range(10, 10 + pool - 3)), max_tokens=4)
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert f"{pool + 1} tokens" in message and f"{pool} tokens" in message
    assert complete(server, list(range(10, 10 + pool - 4)), max_tokens=4).status_code == 200


def test_models_report_the_context(server):
    data = httpx.get(server.url + "/v1/models").json()["data"]
    assert data[0]["max_model_len"] == server.runtime.cfg.max_seq


def test_a_shared_prefix_shows_as_cached_tokens_in_usage_and_the_request_log(server):
    prefix = list(range(2000, 2040))
    first = complete(server, prefix).json()["usage"]
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    second = complete(server, [*prefix, 7, 8, 9]).json()["usage"]
    assert second["prompt_tokens_details"]["cached_tokens"] == 32  # two full blocks
    stream = httpx.post(server.url + "/v1/completions", timeout=30, json={
        "model": "tiny", "prompt": [*prefix, 5], "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": True}})
    chunks = [json.loads(line[6:]) for line in stream.text.splitlines()
              if line.startswith("data: {")]
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    log = [json.loads(line) for line in
           server.runtime.options.request_log.read_text().splitlines()]
    assert [r["cached_tokens"] for r in log if r["prompt_tokens"] in (41, 43)][-2:] == [32, 32]


def test_metrics_and_stats_report_the_pool_and_the_prefix_cache(server):
    complete(server, list(range(3000, 3040)))
    complete(server, list(range(3000, 3041)))
    families = {f.name: f for f in text_string_to_metric_families(
        httpx.get(server.url + "/metrics").text)}
    value = {name: families[name].samples[0].value for name in (
        "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting",
        "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens_cached")}
    assert 0 <= value["vllm:kv_cache_usage_perc"] <= 1
    assert value["vllm:num_requests_waiting"] == 0
    assert value["vllm:prefix_cache_queries"] > value["vllm:prefix_cache_hits"] >= 32
    assert value["vllm:prompt_tokens_cached"] == value["vllm:prefix_cache_hits"]
    assert families["vllm:prefix_cache_hits"].samples[0].name == "vllm:prefix_cache_hits_total"
    info = families["vllm:cache_config_info"].samples[0]
    assert info.labels == {"block_size": "16", "num_gpu_blocks": str(BLOCKS),
                           "enable_prefix_caching": "True"} and info.value == 1
    stats = httpx.get(server.url + "/stats").json()
    assert (stats["kv_blocks_total"], stats["kv_block_size"]) == (BLOCKS, 16)
    assert stats["kv_pool_tokens"] == BLOCKS * 16 and stats["kv_blocks_used"] == 0
    assert stats["kv_pool_bytes"] == BLOCKS * 16 * 2048
    assert stats["prefix_cache_hits"] == stats["prompt_tokens_cached"] >= 32
    assert stats["requests_waiting_for_kv"] == 0


def test_a_pool_smaller_than_one_block_is_refused_at_start(tmp_path, capsys):
    with pytest.raises(ServerConfigError, match="smaller than one 16-token block"):
        Runtime(options(tmp_path, kv_pool_gib=1e-6))
    assert not (tmp_path / "tables").exists()  # refused before the table is built
    code = engram_main.main(["--preset", "tiny", "--kv-pool-gb", "0.000001", "--port", "1",
                             "--threads", str(torch.get_num_threads())])
    assert code == 2 and "smaller than one 16-token block" in capsys.readouterr().err


def test_prefix_caching_off_reports_false_and_caches_nothing(tmp_path):
    runtime = Runtime(options(tmp_path, prefix_caching=False))
    with LiveServer(runtime) as live:
        prefix = list(range(4000, 4040))
        complete(live, prefix)
        usage = complete(live, [*prefix, 1]).json()["usage"]
        metrics = httpx.get(live.url + "/metrics").text
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert 'enable_prefix_caching="False"' in metrics


def test_requests_outgrowing_the_pool_are_preempted_and_still_answered_in_full(server):
    """Two 20-token prompts fit the 8-block pool at once (the second as long as the first
    holds under 97 tokens), but not at 20 + 100 tokens each: one is preempted and prefilled
    again, /metrics counts it under vLLM's name, and the prefix-cache counters count each
    prompt once."""
    def metrics() -> dict[str, float]:
        families = text_string_to_metric_families(httpx.get(server.url + "/metrics").text)
        return {f.name: f.samples[0].value for f in families if f.samples}

    before = metrics()
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda start: complete(server, list(range(start, start + 20)),
                                                       max_tokens=100), (4000, 5000)))
    after = metrics()
    assert [a.json()["usage"]["completion_tokens"] for a in answers] == [100, 100]
    assert after["vllm:num_preemptions"] - before.get("vllm:num_preemptions", 0) >= 1
    assert after["vllm:prefix_cache_queries"] - before["vllm:prefix_cache_queries"] == 40
