"""The bundled server over HTTP (tiny preset, small table): OpenAI client, errors, stats."""

import json
import socket
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runners.engram import os_io
from runners.engram.runtime import Runtime, ServerConfigError
from tests.runners.fixtures import LiveServer, options


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("srv")
    with LiveServer(Runtime(options(tmp, placement="nvme"))) as live:
        yield live


def test_openai_client_streams_chat_and_completions(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Say something"}], max_tokens=6,
        stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage.completion_tokens == 6
    assert any(c.choices and c.choices[0].finish_reason == "length" for c in chunks)
    comp = client.completions.create(model="tiny", prompt="Once upon", max_tokens=4, stream=True,
                                     extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in comp if c.choices)
    full = client.chat.completions.create(model="tiny", max_tokens=3, extra_body={
        "ignore_eos": True}, messages=[{"role": "user", "content": "x"}])
    assert full.usage.completion_tokens == 3 and full.choices[0].message.content


def test_continuous_usage_stats_puts_the_tokens_so_far_on_every_chunk(server):
    """As vLLM streams it: each content chunk's usage counts the tokens generated up to it,
    so a client knows each chunk's tokens; without the option only the last chunk has usage."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")

    def chunks(options: dict) -> list:
        return list(client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Say something"}], max_tokens=8,
            stream=True, stream_options=options, extra_body={"ignore_eos": True}))

    counted = [c.usage.completion_tokens for c in chunks(
        {"include_usage": True, "continuous_usage_stats": True})
        if c.choices and c.choices[0].delta.content]
    assert counted == sorted(counted) and counted[-1] <= 8 and len(counted) >= 2
    assert counted[0] >= 1
    plain = chunks({"include_usage": True})
    assert [c.usage is not None for c in plain] == [False] * (len(plain) - 1) + [True]


def test_stats_name_kernel_truth_and_requested_bytes_apart(server):
    before = httpx.get(server.url + "/stats").json()
    httpx.post(server.url + "/v1/completions", json={
        "model": "tiny", "prompt": "count the rows", "max_tokens": 4, "ignore_eos": True})
    after = httpx.get(server.url + "/stats").json()
    for gone in ("bytes_per_token", "engram_bytes_read", "mapping_resident_bytes", "stall_ms"):
        assert gone not in after  # bookkeeping no longer goes by a measured-sounding name
    tokens = after["tokens"] - before["tokens"]
    rows = after["rows_requested"] - before["rows_requested"]
    assert rows == tokens * server.runtime.geometry.rows_per_token  # one gather per token
    assert after["bytes_requested_per_token"] == after["bytes_requested"] / after["tokens"]
    # kernel figures: present, and moving with real work
    assert after["page_faults_minor"] > before["page_faults_minor"]
    assert after["disk_read_bytes"] >= before["disk_read_bytes"] >= 0
    assert 0 < after["table_resident_bytes"] <= after["table_budget_bytes"] * 1.05
    assert after["table_mapping_rss_bytes"] is not None
    assert after["placement"] == "nvme" and after["cache_state"] == "cold"


def test_metrics_is_a_prometheus_exposition_of_the_same_figures(server):
    httpx.post(server.url + "/v1/completions", json={
        "model": "tiny", "prompt": "metrics", "max_tokens": 2, "ignore_eos": True})
    resp = httpx.get(server.url + "/metrics")
    assert resp.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    stats = httpx.get(server.url + "/stats").json()
    assert families["engram_disk_read_bytes"].type == "counter"
    assert families["engram_page_faults_major"].type == "counter"
    assert families["engram_table_resident_bytes"].type == "gauge"
    assert families["engram_layer_wait_ms"].type == "counter"
    assert {s.labels["layer"] for s in families["engram_layer_wait_ms"].samples} == {
        str(layer) for layer in server.runtime.geometry.layers}
    info = families["engram_info"].samples[0].labels
    assert (info["placement"], info["model"]) == ("nvme", "tiny")
    for name in ("table_bytes", "table_budget_bytes", "steps", "tokens"):  # one set of figures
        sample = families["engram_" + name].samples[0]
        assert sample.value == stats[name]


def test_unavailable_kernel_counters_are_null_not_zero(tmp_path, monkeypatch):
    runtime = Runtime(options(tmp_path, placement="nvme"))
    runtime.start()
    try:
        monkeypatch.setattr(os_io, "PROC_IO", str(tmp_path / "no-proc-io"))
        monkeypatch.setattr(os_io, "PROC_PAGEMAP", str(tmp_path / "no-pagemap"))
        monkeypatch.setattr(os_io, "_mincore", lambda *args: -1)  # as if ENOSYS
        stats = runtime.stats()
        for name in ("disk_read_bytes", "disk_read_bytes_per_token", "page_hit_rate",
                     "table_resident_bytes", "table_resident_peak_bytes",
                     "table_mapping_rss_bytes"):
            assert stats[name] is None, name
        text = runtime.prometheus().decode()
        assert "engram_disk_read_bytes" not in text and "engram_table_resident_bytes " not in text
        assert "engram_page_faults_major_total" in text  # getrusage still answers
    finally:
        runtime.close()


def test_drop_cache_makes_the_table_cold_again(server, tmp_path):
    httpx.post(server.url + "/v1/completions", json={
        "model": "tiny", "prompt": "warm it up", "max_tokens": 3, "ignore_eos": True})
    assert httpx.get(server.url + "/stats").json()["table_resident_bytes"] > 0
    dropped = httpx.post(server.url + "/table/drop_cache")
    assert dropped.status_code == 200 and dropped.json()["table_resident_bytes"] == 0
    with LiveServer(Runtime(options(tmp_path, placement="device"))) as live:
        refused = httpx.post(live.url + "/table/drop_cache")
        assert refused.status_code == 409 and "only --placement nvme" in refused.text


def test_tokenize_counts_exactly(server):
    got = httpx.post(server.url + "/tokenize", json={"prompt": "Hello, world!"}).json()
    assert got["count"] == len(got["tokens"]) == len(server.runtime.tokenizer.encode(
        "Hello, world!"))


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"model": "tiny"}', 400, "messages"),
        (b'{"model": "tiny", "messages": []}', 400, "messages"),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
         400, "max_tokens must be at least 1"),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], '
         b'"max_tokens": 100000}', 400, "exceeds the 256-token context"),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"word " * 400
         + b'"}]}', 400, "this model's context is 256"),
        (b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}', 404,
         "does not exist"),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "'
         + b"x" * (1024 * 1024 + 10) + b'"}]}', 400, "exceeds 1048576 bytes"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, body, status,
                                                                       fragment):
    resp = httpx.post(server.url + "/v1/chat/completions", content=body,
                      headers={"content-type": "application/json"})
    assert resp.status_code == status
    error = resp.json()["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"
    ok = httpx.post(server.url + "/v1/completions",
                    json={"model": "tiny", "prompt": "still", "max_tokens": 1})
    assert ok.status_code == 200


def test_queue_full_is_503_with_retry_after(tmp_path, monkeypatch):
    runtime = Runtime(options(tmp_path, max_running=1, max_waiting=1))
    # the engine's steps wait while the queue is filled, so the running request cannot end
    # and free its place first (200 tokens took ~1.3 s, and a loaded runner once outran it)
    steps_go = threading.Event()
    run_step = runtime.engine._run
    monkeypatch.setattr(runtime.engine, "_run",
                        lambda step: (steps_go.wait(30), run_step(step))[1])
    with LiveServer(runtime) as live:
        body = {"model": "tiny", "prompt": "a", "max_tokens": 200, "ignore_eos": True,
                "stream": True}
        with httpx.Client(timeout=30) as http:
            holders = [http.stream("POST", live.url + "/v1/completions", json=body)
                       for _ in range(2)]
            # the second once the first runs: sent while the first still waited (a loaded
            # runner), it was refused itself, and the third took its place
            responses = [holders[0].__enter__()]
            deadline = time.monotonic() + 30
            while not runtime.engine.running:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            responses.append(holders[1].__enter__())  # waiting
            assert [r.status_code for r in responses] == [200, 200]
            third = http.post(live.url + "/v1/completions", json=body)
            steps_go.set()
            assert third.status_code == 503 and third.headers["retry-after"] == "1"
            assert third.json()["error"]["code"] == "queue_full"
            for h, r in zip(holders, responses, strict=True):
                r.close()
                h.__exit__(None, None, None)
        deadline = time.monotonic() + 10  # disconnected clients free their slots
        while runtime.engine.running or runtime.engine.queue_depth:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_api_key_is_required_when_set(tmp_path):
    with LiveServer(Runtime(options(tmp_path)), api_key="s3cret") as live:
        body = {"model": "tiny", "prompt": "a", "max_tokens": 1}
        denied = httpx.post(live.url + "/v1/completions", json=body)
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
        allowed = httpx.post(live.url + "/v1/completions", json=body,
                             headers={"Authorization": "Bearer s3cret"})
        assert allowed.status_code == 200
        lowercase = httpx.post(live.url + "/v1/completions", json=body,  # schemes ignore case
                               headers={"Authorization": "bearer s3cret"})
        assert lowercase.status_code == 200
        wrong = httpx.post(live.url + "/v1/completions", json=body,
                           headers={"Authorization": "Basic s3cret"})
        assert wrong.status_code == 401
        assert httpx.get(live.url + "/health").status_code == 200


def test_table_larger_than_the_budget_only_serves_from_nvme(tmp_path):
    for placement in ("device", "host"):
        with pytest.raises(ServerConfigError, match="--placement nvme keeps it on disk"):
            Runtime(options(tmp_path, placement=placement, memory_budget_gib=0.002))
    runtime = Runtime(options(tmp_path, placement="nvme", memory_budget_gib=0.002))
    with LiveServer(runtime) as live:
        resp = httpx.post(live.url + "/v1/completions", json={
            "model": "tiny", "prompt": "offload", "max_tokens": 3, "ignore_eos": True})
        assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 3
        stats = httpx.get(live.url + "/stats").json()
        assert stats["table_resident_bytes"] <= stats["table_budget_bytes"] * 1.05


def test_an_engine_failure_ends_the_request_with_an_error_and_serving_goes_on(tmp_path):
    runtime = Runtime(options(tmp_path))
    forward = runtime.engine.model.forward
    failures = iter([True, True])  # the next two steps fail

    def failing(*args, **kwargs):
        if next(failures, False):
            raise RuntimeError("injected engine failure")
        return forward(*args, **kwargs)

    runtime.engine.model.forward = failing
    with LiveServer(runtime) as live:
        body = {"model": "tiny", "prompt": "a", "max_tokens": 3, "ignore_eos": True}
        plain = httpx.post(live.url + "/v1/completions", json=body)
        assert plain.status_code == 500 and plain.json()["error"]["code"] == "engine_error"
        streamed = httpx.post(live.url + "/v1/completions", json={**body, "stream": True})
        assert '"code": "engine_error"' in streamed.text
        assert streamed.text.rstrip().endswith("data: [DONE]")
        ok = httpx.post(live.url + "/v1/completions", json=body)
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


def test_a_client_that_leaves_before_its_body_leaves_no_traceback(tmp_path, capfd):
    with LiveServer(Runtime(options(tmp_path))) as live:
        body = b'{"model": "tiny", "prompt": "hello", "max_tokens": 8, "stream": true}'
        for _ in range(10):  # headers promise more body than is sent, then the client closes
            with socket.create_connection(("127.0.0.1", live.port)) as sock:
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body) + 100, body))
                time.sleep(0.05)
        assert httpx.get(live.url + "/health").status_code == 200
    err = capfd.readouterr().err
    assert "ClientDisconnect" not in err and "Traceback" not in err, err[-2000:]


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    sock.settimeout(within_s)
    try:
        while sock.recv(4096):
            pass  # a response before the close is fine (the keep-alive case reads one)
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_request_head_that_never_completes_is_timed_out(tmp_path):
    """Half a head used to hold its connection for good (300 held for 60 s)."""
    with LiveServer(Runtime(options(tmp_path)), header_timeout_s=0.5) as live:
        addr = ("127.0.0.1", live.port)
        partial = [socket.create_connection(addr) for _ in range(50)]
        for sock in partial:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        silent = socket.create_connection(addr)  # connects, sends nothing
        kept = socket.create_connection(addr)  # one full request, then half of the next
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in kept.recv(4096)
        kept.sendall(b"GET /health HTTP/1.1\r\n")
        slow = socket.create_connection(addr)  # a whole head in pieces, inside the deadline
        for piece in (b"GET /health HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
            slow.sendall(piece)
            time.sleep(0.1)
        assert b"200 OK" in slow.recv(4096)
        for sock in [*partial, silent, kept]:
            assert _closed_by_server(sock, within_s=5)
            sock.close()
        slow.close()
        assert httpx.get(live.url + "/health").status_code == 200


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def _upload_until_answered(sock: socket.socket, chunk: bytes,
                           limit: int) -> tuple[int, bytes, bool]:
    """Send `chunk` over and over (up to `limit` bytes) until the server answers: the bytes
    sent by then, the answer, and whether the server closed the connection after it."""
    sock.setblocking(False)
    sent, pending, answer = 0, chunk, b""
    while sent < limit:
        try:
            answer += sock.recv(65536)
            if answer:
                break
        except BlockingIOError:
            pass
        try:
            done = sock.send(pending)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += done
        pending = pending[done:] or chunk
    sock.settimeout(5)
    try:
        while more := sock.recv(65536):
            answer += more
    except TimeoutError:
        return sent, answer, False
    except ConnectionResetError:
        pass
    return sent, answer, True


def test_a_chunked_body_past_the_cap_is_refused_as_it_arrives(server):
    """A chunked body declares no length: it was read whole before the cap applied (300 MB
    sent grew the server by 300 MB, and the answer waited for the body's end)."""
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    small = b'{"model": "tiny", "prompt": "chunked", "max_tokens": 2}'
    with socket.create_connection(("127.0.0.1", server.port)) as sock:  # under the cap: served
        sock.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(small), small))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    before = _rss_mb()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head)
        sent, answer, closed = _upload_until_answered(
            sock, b"%x\r\n%s\r\n" % (2**16, b" " * 2**16), limit=300 * 2**20)
    assert answer.startswith(b"HTTP/1.1 400 ") and closed, answer[:200]
    assert b"the request body exceeds 1048576 bytes" in answer
    assert sent < 100 * 2**20 and _rss_mb() - before < 200, (sent, _rss_mb() - before)
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_body_that_trickles_in_is_answered_408(tmp_path):
    """A client sending its body a byte at a time held its connection and slot for good."""
    with LiveServer(Runtime(options(tmp_path)), body_timeout_s=0.5) as live:
        with socket.create_connection(("127.0.0.1", live.port)) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 1000\r\n\r\n{")
            sock.settimeout(0.05)
            start, answer = time.monotonic(), b""
            while not answer and time.monotonic() - start < 10:
                sock.sendall(b" ")
                try:
                    answer = sock.recv(65536)
                except TimeoutError:
                    pass
            waited = time.monotonic() - start
            sock.settimeout(5)
            while more := sock.recv(65536):  # on to the close that follows the answer
                answer += more
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert error["type"] == "invalid_request_error" and "within 0.5 s" in error["message"]
        assert waited < 5
        assert httpx.get(live.url + "/health").status_code == 200


def test_an_answer_before_its_body_ends_closes_the_connection(server):
    """A route that reads no body (here an unknown one) answered, then read on whatever the
    client kept sending, for as long as it sent."""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/nowhere HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        _, answer, closed = _upload_until_answered(
            sock, b"%x\r\n%s\r\n" % (2**16, b" " * 2**16), limit=300 * 2**20)
    assert answer.startswith(b"HTTP/1.1 404 ") and b"Not Found (POST /v1/nowhere)" in answer
    assert closed  # it waited for more body, reading whatever came
