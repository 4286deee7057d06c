"""The fake server reasons as vLLM and SGLang stream it: the first N tokens as reasoning
deltas, then the answer, the reasoning counted in usage, and its log says when it wrote the
first answer token."""

import json
import subprocess
import sys

import httpx
import pytest

from tests.helpers import ROOT


def _events(url: str, body: dict, request_id: str = "r-1") -> list[dict]:
    with httpx.Client(timeout=10) as http, http.stream(
            "POST", url + "/chat/completions", json=body,
            headers={"X-Request-Id": request_id}) as resp:
        assert resp.status_code == 200
        lines = [line.removeprefix("data: ") for line in resp.iter_lines()
                 if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def _log(url: str, request_id: str = "r-1") -> dict:
    [row] = [t for t in httpx.get(url[:-3] + "/mock/timings", timeout=10).json()
             if t["request_id"] == request_id]
    return row


def _body(max_tokens: int, **extra: object) -> dict:
    return {"model": "mock-model", "messages": [{"role": "user", "content": "think"}],
            "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, **extra}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_the_first_tokens_stream_as_reasoning_then_the_answer_and_usage_counts_them(
        start_mock, field):
    server = start_mock(reasoning_tokens=3, reasoning_field=field, tokens_per_chunk=2)
    events = _events(server.url, _body(7))
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]
              and e["choices"][0]["delta"]]
    # no chunk mixes the two: 2 + 1 reasoning tokens, then 2 + 2 answer tokens
    assert deltas == [{field: " tok tok"}, {field: " tok"},
                      {"content": " tok tok"}, {"content": " tok tok"}]
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_the_log_holds_when_the_first_answer_token_was_written(start_mock):
    server = start_mock(reasoning_tokens=4, log_chunks=True, itl_ms=5)
    _events(server.url, _body(6))
    row = _log(server.url)
    writes = row["chunk_writes"]
    assert row["reasoning_tokens"] == 4 and row["tokens"] == 6
    assert row["first_write"] == writes[0][0]
    assert row["first_answer_write"] == writes[4][0]  # the fifth token is the answer's first
    assert row["first_answer_write"] > row["first_write"]


def test_without_reasoning_the_first_answer_token_is_the_first_token(start_mock):
    server = start_mock()
    events = _events(server.url, _body(3))
    row = _log(server.url)
    assert row["first_answer_write"] == row["first_write"] and row["reasoning_tokens"] == 0
    assert "completion_tokens_details" not in events[-1]["usage"]


def test_a_max_tokens_that_ends_inside_the_reasoning_never_answers(start_mock):
    server = start_mock(reasoning_tokens=10)
    events = _events(server.url, _body(4))
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert all("content" not in d for d in deltas)
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 4
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 4}
    row = _log(server.url)
    assert row["first_answer_write"] is None and row["first_write"] is not None


def test_continuous_usage_counts_the_reasoning_so_far(start_mock):
    server = start_mock(reasoning_tokens=2)
    body = _body(4, stream_options={"include_usage": True, "continuous_usage_stats": True})
    counted = [e["usage"].get("completion_tokens_details", {}).get("reasoning_tokens", 0)
               for e in _events(server.url, body) if e["choices"] and e["choices"][0]["delta"]]
    assert counted == [1, 2, 2, 2]


def test_the_answer_body_splits_reasoning_from_content(start_mock):
    server = start_mock(reasoning_tokens=2, reasoning_field="reasoning")
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 5}
    answer = httpx.post(server.url + "/chat/completions", json=body, timeout=10).json()
    message = answer["choices"][0]["message"]
    assert message["reasoning"] == " tok tok" and message["content"] == " tok tok tok"
    assert answer["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_completions_carry_no_reasoning(start_mock):
    """The completions route has no reasoning field: every token is text."""
    server = start_mock(reasoning_tokens=2)
    body = {"model": "mock-model", "prompt": "x", "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.Client(timeout=10) as http, http.stream(
            "POST", server.url + "/completions", json=body) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines()
                  if line.startswith("data: {")]
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == " tok" * 3
    assert "completion_tokens_details" not in events[-1]["usage"]


def test_an_unknown_reasoning_field_is_refused_in_one_sentence():
    proc = subprocess.run([sys.executable, "-m", "harness.mock_server", "--port", "0",
                           "--reasoning-field", "thoughts"], capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("--reasoning-field 'thoughts' is not one of "
                                   "reasoning_content, reasoning")


def test_a_share_of_each_answer_streams_as_reasoning(start_mock):
    server = start_mock(reasoning_share=0.25)
    for max_tokens, reasoned in ((8, 2), (13, 3)):  # rounded down
        events = _events(server.url, _body(max_tokens))
        usage = events[-1]["usage"]
        assert usage["completion_tokens_details"] == {"reasoning_tokens": reasoned}
        assert [d for e in events if e["choices"]
                for d in e["choices"][0]["delta"]].count("reasoning_content") == reasoned
