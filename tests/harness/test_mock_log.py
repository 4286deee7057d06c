"""The fake server's per-request log grades a client's load: the prompt tokens it counted
(with the tokenizer a client was given, under --tokenizer), the tokens it sent and the
sampling fields it received."""

import asyncio
import subprocess
import sys
import threading
import time

import httpx
import pytest
from tokenizers import Tokenizer

from harness.mock_server import MockConfig, MockServer
from tests.helpers import ROOT

TOKENIZER = ROOT / "runners" / "engram" / "data" / "tokenizer.json"


@pytest.mark.parametrize("off_loop", [False, True])
def test_the_log_counts_prompts_with_the_given_tokenizer_and_keeps_the_sampling(start_mock,
                                                                                off_loop):
    server = start_mock(tokenizer=str(TOKENIZER), count_off_loop=off_loop)
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


def test_a_bad_tokenizer_fails_the_servers_start_not_its_first_request(tmp_path):
    """The tokenizer is read before the server serves, so no request waits for it."""
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")

    async def start() -> None:
        server = MockServer(MockConfig(tokenizer=str(bad)))
        try:
            await server.start()
        finally:
            await server.close()

    with pytest.raises(ValueError, match=r"is not a tokenizer\.json"):
        asyncio.run(start())


def test_counting_off_the_loop_leaves_other_requests_served_meanwhile(start_mock):
    """With `count_off_loop`, a prompt that takes long to count holds up no other request:
    one sent while it is counted gets its first token first."""
    server = start_mock(tokenizer=str(TOKENIZER), count_off_loop=True, ttft_ms=0)
    # ~180,000 tokens: counted in ~0.4 s here, so the short request (a new connection from
    # this thread) is served while it is counted even on a loaded runner (at 30,000 tokens,
    # ~70 ms, the short one once came 11 ms after it)
    long_text = "The quick brown fox jumps over the lazy dog, twice: quickly! " * 12000

    def ask(request_id: str, text: str) -> None:
        body = {"model": "mock-model", "messages": [{"role": "user", "content": text}],
                "max_tokens": 2, "stream": True}
        with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=30,
                          headers={"X-Request-Id": request_id}) as resp:
            list(resp.iter_lines())

    long_one = threading.Thread(target=ask, args=("long", long_text))
    long_one.start()
    while not server.server.requests_seen:  # the long one is read: being counted now
        time.sleep(0.001)
    ask("short", "hi")
    long_one.join(30)
    first = {t["request_id"]: t["first_write"]
             for t in httpx.get(server.url[:-3] + "/mock/timings", timeout=10).json()}
    assert first["short"] < first["long"]
