"""OpenAI compatibility of the bundled server: what SDKs send is served, what it cannot do is a
400 with an OpenAI error object (never a 500, never silently ignored), routing errors too."""

import threading
import time

import httpx
import openai
import pytest

from runners.engram.runtime import Runtime
from tests.runners.fixtures import LiveServer, options

USER = [{"role": "user", "content": "Say something"}]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with LiveServer(Runtime(options(tmp_path_factory.mktemp("compat")))) as live:
        yield live.url


def openai_error(resp: httpx.Response, status: int) -> dict:
    """The OpenAI error object of a response, checked for its status and exact shape."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]


def chat(url: str, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=30, json={
        "model": "tiny", "messages": USER, "max_tokens": 2, **fields})


def completion(url: str, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/completions", timeout=30, json={
        "model": "tiny", "max_tokens": 2, **fields})


def test_a_seed_beyond_int64_is_a_400_and_any_int64_seed_samples(url):
    error = openai_error(chat(url, seed=99999999999999999999999), 400)
    assert error["param"] == "seed" and "less than 9223372036854775808" in error["message"]
    for seed in (2**63 - 1, -(2**63), 10**15):  # the engine's seed mixing once overflowed
        assert chat(url, seed=seed, temperature=1.0).status_code == 200


@pytest.mark.parametrize(("endpoint", "field", "value"), [
    ("chat", "n", 3),
    ("chat", "logprobs", True),
    ("chat", "top_logprobs", 2),
    ("chat", "presence_penalty", 0.5),
    ("chat", "logit_bias", {"42": 5}),
    ("completions", "best_of", 2),
    ("completions", "logprobs", 0),  # a completions count: even 0 asks for logprobs
    ("completions", "echo", True),
])
def test_what_the_server_does_not_do_is_refused_not_ignored(url, endpoint, field, value):
    send = chat if endpoint == "chat" else completion
    extra = {} if endpoint == "chat" else {"prompt": "x"}
    error = openai_error(send(url, **extra, **{field: value}), 400)
    assert error["param"] == field and error["code"] == "unsupported_parameter"
    assert "is not supported by this server" in error["message"]


def test_the_neutral_values_of_those_parameters_are_fine(url):
    assert chat(url, n=1, logprobs=False, top_logprobs=None, presence_penalty=0,
                frequency_penalty=0.0, logit_bias={}).status_code == 200
    assert completion(url, prompt="x", best_of=1, logprobs=None, echo=False).status_code == 200


def test_an_unknown_role_is_a_400(url):
    error = openai_error(chat(url, messages=[{"role": "wizard", "content": "hi"}]), 400)
    assert error["param"] == "messages.0.role" and "'developer'" in error["message"]
    roles = ["system", "developer", "user", "assistant", "tool"]
    assert chat(url, messages=[{"role": r, "content": "hi"} for r in roles]).status_code == 200


def test_text_content_parts_are_the_joined_text(url):
    parts = [{"type": "text", "text": "Say"}, {"type": "text", "text": "something"}]
    as_parts = chat(url, messages=[{"role": "user", "content": parts}], temperature=0)
    as_text = chat(url, messages=[{"role": "user", "content": "Say\nsomething"}],
                   temperature=0)
    assert as_parts.status_code == 200
    assert as_parts.json()["usage"] == as_text.json()["usage"]
    assert (as_parts.json()["choices"][0]["message"]["content"]
            == as_text.json()["choices"][0]["message"]["content"])
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")  # as an SDK sends them
    sdk = client.chat.completions.create(model="tiny", max_tokens=2, messages=[
        {"role": "user", "content": [{"type": "text", "text": "Say something"}]}])
    assert sdk.usage.prompt_tokens == chat(url).json()["usage"]["prompt_tokens"]


def test_non_text_content_parts_are_refused_by_name(url):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    error = openai_error(chat(url, messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, image]}]), 400)
    assert error["param"] == "messages.0.content"
    assert error["message"] == ('messages.0.content: content parts of type "image_url" are not '
                                "supported by this server; send text parts only")


def test_a_prompt_of_token_ids_is_the_same_prompt(url):
    ids = httpx.post(url + "/tokenize", json={"prompt": "Once upon a time"}).json()["tokens"]
    by_text = completion(url, prompt="Once upon a time", temperature=0, max_tokens=5).json()
    for prompt in (ids, [ids]):
        by_ids = completion(url, prompt=prompt, temperature=0, max_tokens=5)
        assert by_ids.status_code == 200
        assert by_ids.json()["usage"]["prompt_tokens"] == len(ids)
        assert by_ids.json()["choices"][0]["text"] == by_text["choices"][0]["text"]


@pytest.mark.parametrize(("prompt", "fragment"), [
    ([5, 32_768], "prompt token id 32768 is outside this model's vocabulary (0 to 32767)"),
    ([-1], "prompt token id -1 is outside"),
    ([[1, 2], [3]], "exactly one prompt is supported"),
])
def test_token_ids_outside_the_vocabulary_or_batches_are_400(url, prompt, fragment):
    error = openai_error(completion(url, prompt=prompt), 400)
    assert fragment in error["message"] and error["param"] == "prompt"


def test_unknown_paths_and_wrong_methods_are_openai_errors(url):
    missing = openai_error(httpx.post(url + "/v1/embeddings", json={}), 404)
    assert missing["message"] == "Not Found (POST /v1/embeddings)"
    wrong = httpx.get(url + "/v1/chat/completions")
    assert openai_error(wrong, 405)["message"] == "Method Not Allowed (GET /v1/chat/completions)"
    assert wrong.headers["allow"] == "POST"


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/completions", b'{"model": "tiny", "prompt": "a\\ud800", "max_tokens": 2}'),
    ("/v1/chat/completions",
     b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}'),
    ("/tokenize", b'{"prompt": "\\udfff"}'),
])
def test_a_lone_surrogate_is_a_400_not_a_crash(url, path, body):
    resp = httpx.post(url + path, content=body, timeout=30,
                      headers={"content-type": "application/json"})
    error = openai_error(resp, 400)
    assert "lone surrogate" in error["message"]


@pytest.mark.parametrize(("path", "field", "body"), [
    ("/v1/completions", "prompt", lambda text: {"prompt": text}),
    ("/v1/chat/completions", "messages",
     lambda text: {"messages": [{"role": "user", "content": text}]}),
])
def test_a_megabyte_prompt_is_refused_naming_its_field_and_never_stalls_the_loop(
        url, path, field, body):
    """Tokenizing 1 MB takes a good part of a second: in a thread, so /health answers
    meanwhile (it waited 0.3-0.65 s behind it on the event loop)."""
    text = "lorem ipsum dolor sit amet " * 38_000  # 1 MB, just inside the body limit
    health: list[float] = []
    done = threading.Event()

    def ping() -> None:
        with httpx.Client(timeout=10) as client:
            while not done.is_set():
                t0 = time.perf_counter()
                assert client.get(url + "/health").status_code == 200
                health.append(time.perf_counter() - t0)
                time.sleep(0.005)

    pinger = threading.Thread(target=ping)
    pinger.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    resp = httpx.post(url + path, json={"model": "tiny", "max_tokens": 4, **body(text)},
                      timeout=60)
    took = time.perf_counter() - t0
    done.set()
    pinger.join(15)
    error = openai_error(resp, 400)
    assert error["param"] == field and "this model's context is" in error["message"]
    assert max(health) < took / 2, (max(health), took)  # the loop answered all along


@pytest.mark.parametrize("body", [
    b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    b'{"model": "tiny", "messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
])
def test_deeply_nested_json_is_a_400_not_a_500(url, body):
    resp = httpx.post(url + "/v1/chat/completions", content=body, timeout=30,
                      headers={"content-type": "application/json"})
    assert "nests JSON too deeply" in openai_error(resp, 400)["message"]
    assert chat(url).status_code == 200


def test_min_tokens_above_max_tokens_is_a_400(url):
    error = openai_error(chat(url, min_tokens=5, max_tokens=4), 400)
    assert error["param"] == "min_tokens" and "exceeds max_tokens 4" in error["message"]
    default = openai_error(chat(url, min_tokens=17, max_tokens=None), 400)
    assert "max_tokens 16 (the default" in default["message"]
    assert chat(url, min_tokens=4, max_tokens=4, ignore_eos=True).json()["usage"][
        "completion_tokens"] == 4
