"""Server-side latencies of the bundled server: vLLM-named /metrics histograms and gauges, and
--request-log lines on the monotonic clock a client on the same machine also reads."""

import json
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runners.engram.exposition import exposition
from runners.engram.latency import E2E, ITL, QUEUE, TTFT, Histogram, RequestTimes, ServerLatency
from runners.engram.runtime import Runtime, ServerConfigError
from tests.runners.fixtures import LiveServer, options, serve

HISTOGRAM_NAMES = (TTFT, ITL, QUEUE, E2E)
USER_MESSAGE = [{"role": "user", "content": "Tell me"}]


def test_buckets_are_cumulative_and_inclusive_of_their_bound():
    h = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        h.observe(value)
    snap = h.snapshot()
    assert snap["buckets"] == {"0.1": 2, "1.0": 3, "+Inf": 4}
    assert snap["count"] == 4 and snap["sum"] == pytest.approx(3.65)


def test_a_request_feeds_ttft_then_gaps_then_queue_and_end_to_end():
    latency = ServerLatency()
    times = RequestTimes(received=10.0)
    times.admit(10.2)
    for now in (10.5, 10.6, 10.8):
        latency.token(times, now)
    latency.finish(times, 11.0)
    snap = latency.snapshot()
    assert (times.first_token, times.last_token, times.finished) == (10.5, 10.8, 11.0)
    assert snap[TTFT]["count"] == 1 and snap[TTFT]["sum"] == pytest.approx(0.5)
    assert snap[ITL]["count"] == 2 and snap[ITL]["sum"] == pytest.approx(0.3)
    assert snap[QUEUE]["sum"] == pytest.approx(0.2) and snap[E2E]["sum"] == pytest.approx(1.0)
    never_scheduled = RequestTimes(received=20.0)  # cancelled while waiting: no queue time
    latency.finish(never_scheduled, 20.5)
    assert latency.snapshot()[QUEUE]["count"] == 1
    assert latency.snapshot()[E2E]["count"] == 2


def test_colon_names_parse_back_as_vllm_types():
    latency = ServerLatency()
    latency.token(RequestTimes(received=0.0), 0.03)
    text = exposition({"model": "tiny", "running_requests": 2, "requests_waiting": 5,
                       "latency_histograms": latency.snapshot()}).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in HISTOGRAM_NAMES:
        assert families[name].type == "histogram"
    ttft = {(s.name, s.labels.get("le")): s.value for s in families[TTFT].samples}
    assert ttft[(TTFT + "_bucket", "0.02")] == 0 and ttft[(TTFT + "_bucket", "0.04")] == 1
    assert ttft[(TTFT + "_count", None)] == 1
    running = families["vllm:num_requests_running"]
    assert running.type == "gauge" and running.samples[0].value == 2
    assert running.samples[0].labels == {"model_name": "tiny"}
    assert families["vllm:num_requests_waiting"].samples[0].value == 5


def histograms(url: str) -> dict[str, dict[str, float]]:
    """name -> {"count": .., "sum": ..} from the server's /metrics."""
    text = httpx.get(url + "/metrics").text
    got = {}
    for family in text_string_to_metric_families(text):
        if family.name in HISTOGRAM_NAMES:
            assert family.type == "histogram"
            got[family.name] = {s.name.rsplit("_", 1)[1]: s.value for s in family.samples
                                if s.name.endswith(("_count", "_sum"))}
    return got


def read_log(path, lines: int, timeout_s: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        text = path.read_text() if path.exists() else ""
        if len(text.splitlines()) >= lines or time.monotonic() > deadline:
            return [json.loads(line) for line in text.splitlines()]
        time.sleep(0.05)


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("latency")
    log = tmp / "logs" / "requests.jsonl"  # its folder is made on start
    with LiveServer(Runtime(options(tmp, request_log=log))) as live:
        yield live, log


def test_a_streamed_request_is_timed_like_the_client_saw_it(logged):
    server, log = logged
    before = histograms(server.url)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me"}],
            "max_tokens": 8, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.Client(timeout=30) as http:
        sent = time.monotonic()
        first = None
        with http.stream("POST", server.url + "/v1/chat/completions", json=body,
                         headers={"X-Request-Id": "bench-7"}) as resp:
            assert resp.headers["x-request-id"] == "bench-7"
            events = []
            for line in resp.iter_lines():
                if not line.startswith("data: {"):
                    continue
                events.append(json.loads(line[6:]))
                delta = events[-1]["choices"][0]["delta"] if events[-1]["choices"] else {}
                if first is None and delta.get("content"):
                    first = time.monotonic()
        done = time.monotonic()
    [record] = read_log(log, 1)
    after = histograms(server.url)
    assert {name: after[name]["count"] - before[name]["count"]
            for name in (TTFT, QUEUE, E2E)} == {TTFT: 1, QUEUE: 1, E2E: 1}
    content_chunks = sum(1 for e in events if e["choices"] and e["choices"][0]["delta"].get(
        "content"))
    assert after[ITL]["count"] - before[ITL]["count"] == content_chunks - 1
    # one clock: the server's stamps fall inside the client's, in order
    assert record["x_request_id"] == "bench-7" and record["request_id"] == events[0]["id"]
    assert record["sampling"] == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 8,
                                  "ignore_eos": True, "min_tokens": 0, "seed": None}
    assert (sent <= record["received"] <= record["admitted"] <= record["first_token"] <= first
            <= done)
    assert record["first_token"] <= record["last_token"] <= record["finished"] <= done
    server_ttft = after[TTFT]["sum"] - before[TTFT]["sum"]
    assert server_ttft == pytest.approx(record["first_token"] - record["received"])
    assert 0 < server_ttft <= first - sent < server_ttft + 1.0  # loopback overhead only
    usage = events[-1]["usage"]
    assert (record["prompt_tokens"], record["completion_tokens"]) == (
        usage["prompt_tokens"], usage["completion_tokens"]) and usage["completion_tokens"] == 8
    assert (record["status"], record["finish_reason"]) == ("ok", "length")


def test_unstreamed_and_abandoned_requests_are_logged_too(logged):
    server, log = logged
    already = len(read_log(log, 0, timeout_s=0))
    plain = httpx.post(server.url + "/v1/completions", json={
        "model": "tiny", "prompt": "plain", "max_tokens": 3, "ignore_eos": True})
    assert "x-request-id" not in plain.headers
    body = {"model": "tiny", "prompt": "long", "max_tokens": 200, "ignore_eos": True,
            "stream": True}
    with httpx.Client(timeout=30) as http, http.stream(
            "POST", server.url + "/v1/completions", json=body,
            headers={"X-Request-Id": "walks-away"}) as resp:
        next(resp.iter_lines())  # one chunk, then the client is gone
    records = read_log(log, already + 2)[already:]
    by_id = {r["x_request_id"]: r for r in records}
    assert by_id[None]["status"] == "ok" and by_id[None]["completion_tokens"] == 3
    assert by_id[None]["first_token"] <= by_id[None]["last_token"]
    gone = by_id["walks-away"]
    assert gone["status"] == "cancelled" and gone["finish_reason"] is None
    assert gone["completion_tokens"] < 200


def test_queue_time_is_the_wait_for_a_running_slot(tmp_path):
    log = tmp_path / "requests.jsonl"
    with LiveServer(Runtime(options(tmp_path, max_running=1, request_log=log))) as live:
        def ask(name: str, tokens: int) -> None:
            httpx.post(live.url + "/v1/completions", timeout=60, headers={"X-Request-Id": name},
                       json={"model": "tiny", "prompt": name, "max_tokens": tokens,
                             "ignore_eos": True})

        first = threading.Thread(target=ask, args=("first", 40))
        first.start()
        deadline = time.monotonic() + 10
        while not live.runtime.engine.running:  # the first holds the only slot
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ask("second", 1)
        first.join(60)
        by_id = {r["x_request_id"]: r for r in read_log(log, 2)}
    # the second waited until the first had produced its tokens and let go of the slot
    assert by_id["second"]["admitted"] > by_id["first"]["first_token"]
    assert by_id["second"]["received"] < by_id["first"]["last_token"]


def test_a_waiting_chat_stream_sends_nothing_until_its_first_token(tmp_path):
    """As vLLM's: the role chunk comes with the first token, so a client that stops TTFT at
    the first message with choices (vLLM's benchmark does) does not stop it while the request
    still waits for a slot."""
    log = tmp_path / "requests.jsonl"
    with LiveServer(Runtime(options(tmp_path, max_running=1, request_log=log))) as live:
        holder = threading.Thread(target=httpx.post, args=(live.url + "/v1/completions",),
                                  kwargs={"timeout": 60, "headers": {"X-Request-Id": "holder"},
                                          "json": {"model": "tiny", "prompt": "hold",
                                                   "max_tokens": 60, "ignore_eos": True}})
        holder.start()
        deadline = time.monotonic() + 10
        while not live.runtime.engine.running:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        body = {"model": "tiny", "messages": USER_MESSAGE, "max_tokens": 2, "stream": True,
                "ignore_eos": True}
        with httpx.Client(timeout=60) as http, http.stream(
                "POST", live.url + "/v1/chat/completions", json=body,
                headers={"X-Request-Id": "waiter"}) as resp:
            first_choices = None
            for line in resp.iter_lines():
                if (first_choices is None and line.startswith("data: {")
                        and json.loads(line[6:])["choices"]):
                    first_choices = time.monotonic()
        holder.join(60)
        by_id = {r["x_request_id"]: r for r in read_log(log, 2)}
    assert by_id["waiter"]["received"] < by_id["holder"]["last_token"]  # it did wait
    assert first_choices is not None and first_choices > by_id["waiter"]["admitted"]


def test_an_unwritable_request_log_is_refused_in_one_sentence(tmp_path):
    (tmp_path / "a-file").write_text("")
    refusal = r"--request-log .* cannot be written: File exists \(.*a-file\)"
    with pytest.raises(ServerConfigError, match=refusal):
        Runtime(options(tmp_path, request_log=tmp_path / "a-file" / "log.jsonl"))
    proc = serve("--request-log", str(tmp_path / "a-file" / "log.jsonl"), cwd=tmp_path)
    assert proc.returncode == 2 and "--request-log" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "results").exists()
