"""The bundled server reasons (--reasoning-tokens): a chat's first tokens stream as reasoning,
usage and /metrics count them, and its request log says when the answer began."""

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runners.engram.runtime import Runtime
from tests.runners.fixtures import LiveServer, options, serve

REASONING = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("srv")
    with LiveServer(Runtime(options(tmp, reasoning_tokens=REASONING,
                                    request_log=tmp / "requests.jsonl"))) as live:
        yield live


def _stream(server, max_tokens: int, route: str = "chat/completions",
            request_id: str = "") -> list[dict]:
    body: dict = {"model": "tiny", "max_tokens": max_tokens, "ignore_eos": True,
                  "stream": True, "stream_options": {"include_usage": True}}
    if route == "completions":
        body["prompt"] = "Once upon"
    else:
        body["messages"] = [{"role": "user", "content": "Think first"}]
    with httpx.Client(timeout=60) as http, http.stream(
            "POST", f"{server.url}/v1/{route}", json=body,
            headers={"X-Request-Id": request_id} if request_id else {}) as resp:
        assert resp.status_code == 200
        lines = [line[6:] for line in resp.iter_lines() if line.startswith("data: {")]
    return [json.loads(line) for line in lines]


def _metric(server, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    [family] = [f for f in text_string_to_metric_families(text) if f.name == name]
    return family.samples[0].value


def test_the_first_tokens_stream_as_reasoning_content_then_the_answer(server):
    events = _stream(server, 8)
    kinds = [next(iter(e["choices"][0]["delta"])) for e in events
             if e["choices"] and e["choices"][0]["delta"].get("role") is None
             and any(e["choices"][0]["delta"].values())]
    assert kinds[0] == "reasoning_content" and kinds[-1] == "content"
    assert kinds == sorted(kinds, key=lambda k: k == "content")  # reasoning, then answer only
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["completion_tokens_details"] == {"reasoning_tokens": REASONING}


def test_a_max_tokens_inside_the_reasoning_never_answers(server):
    events = _stream(server, 2)
    assert not any(e["choices"][0]["delta"].get("content") for e in events if e["choices"])
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 2
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_metrics_count_the_reasoning_tokens_sent(server):
    before = _metric(server, "engram_reasoning_tokens")
    _stream(server, 6)
    _stream(server, 1)
    assert _metric(server, "engram_reasoning_tokens") - before == REASONING + 1
    assert httpx.get(server.url + "/stats").json()["reasoning_tokens"] == _metric(
        server, "engram_reasoning_tokens")


def test_completions_have_no_reasoning_field_and_count_none(server):
    before = _metric(server, "engram_reasoning_tokens")
    events = _stream(server, 5, route="completions")
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert "completion_tokens_details" not in events[-1]["usage"]
    assert _metric(server, "engram_reasoning_tokens") == before


def test_the_answer_body_splits_reasoning_from_content(server):
    answer = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "model": "tiny", "max_tokens": 7, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Think first"}]}).json()
    message = answer["choices"][0]["message"]
    assert message["reasoning_content"] and "content" in message
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": REASONING}


def test_the_request_log_says_when_the_answer_began(server):
    _stream(server, 6, request_id="think-6")
    _stream(server, 2, request_id="think-2")
    rows = {row["x_request_id"]: row for row in map(json.loads, (
        server.runtime.options.request_log.read_text().splitlines()))}
    answered, unanswered = rows["think-6"], rows["think-2"]
    assert answered["first_token"] < answered["first_answer"] <= answered["last_token"]
    assert answered["reasoning_tokens"] == REASONING
    assert unanswered["first_answer"] is None and unanswered["reasoning_tokens"] == 2


def test_a_negative_count_is_refused_in_one_sentence(tmp_path):
    proc = serve("--reasoning-tokens", "-1", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "engram-bench serve: error: --reasoning-tokens must be 0 or more"


def test_a_share_of_each_chats_max_tokens_streams_as_reasoning(tmp_path):
    with LiveServer(Runtime(options(tmp_path, reasoning_share=0.25))) as shared:
        for max_tokens, reasoned in ((8, 2), (13, 3)):  # rounded down
            usage = _stream(shared, max_tokens)[-1]["usage"]
            assert usage["completion_tokens"] == max_tokens
            assert usage["completion_tokens_details"] == {"reasoning_tokens": reasoned}


def test_a_count_and_a_share_together_are_refused_in_one_sentence(tmp_path):
    proc = serve("--reasoning-tokens", "4", "--reasoning-share", "0.5", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "argument --reasoning-share: not allowed with argument --reasoning-tokens")
