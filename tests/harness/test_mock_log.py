"""The fake server's per-request log grades a client's load: the prompt tokens it counted
(with the tokenizer a client was given, under --tokenizer), the tokens it sent and the
sampling fields it received."""

import subprocess
import sys

import httpx
from tokenizers import Tokenizer

from tests.conftest import ROOT

TOKENIZER = ROOT / "runners" / "engram" / "data" / "tokenizer.json"


def test_the_log_counts_prompts_with_the_given_tokenizer_and_keeps_the_sampling(start_mock):
    server = start_mock(tokenizer=str(TOKENIZER))
    text = "The quick brown fox jumps over the lazy dog, twice: quickly!"
    body = {"model": "mock-model", "messages": [{"role": "user", "content": text}],
            "max_tokens": 5, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=10) as http, http.stream(
            "POST", server.url + "/chat/completions", json=body,
            headers={"X-Request-Id": "peer-1"}) as resp:
        assert resp.status_code == 200
        list(resp.iter_lines())
        [row] = [t for t in http.get(server.url[:-3] + "/mock/timings").json()
                 if t["request_id"] == "peer-1"]
    own = len(Tokenizer.from_file(str(TOKENIZER)).encode(text, add_special_tokens=False).ids)
    assert row["prompt_tokens"] == own + 4 + 3  # one message's template overhead, as usage
    assert row["tokens"] == 5
    assert row["sampling"] == {"temperature": 0, "max_tokens": 5, "ignore_eos": True}


def test_content_parts_are_counted_as_their_text(start_mock):
    """OpenAI's list form of a message (`[{"type": "text", "text": ...}]`) counts as its text."""
    server = start_mock()
    counts = []
    for content in ("one two three", [{"type": "text", "text": "one two "},
                                      {"type": "text", "text": "three"}]):
        body = {"model": "mock-model", "messages": [{"role": "user", "content": content}],
                "max_tokens": 1}
        answer = httpx.post(server.url + "/chat/completions", json=body, timeout=10).json()
        counts.append(answer["usage"]["prompt_tokens"])
    assert counts[0] == counts[1]


def test_max_completion_tokens_is_honoured_as_max_tokens_is(start_mock):
    """Chat clients may ask for `max_completion_tokens` (the newer name) instead."""
    server = start_mock()
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 3}
    answer = httpx.post(server.url + "/chat/completions", json=body, timeout=10).json()
    assert answer["usage"]["completion_tokens"] == 3


def test_a_tokenizer_that_is_not_one_is_refused_in_one_sentence(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "harness.mock_server", "--port", "0",
                           "--tokenizer", str(bad)], capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"--tokenizer {bad} is not a tokenizer.json")
    assert "Traceback" not in proc.stderr
