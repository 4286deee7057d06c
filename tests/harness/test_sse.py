import pytest

from harness.completion_stream import CompletionStream, StreamFault
from harness.sse import SSEDecoder


def test_events_split_across_reads_and_crlf():
    dec = SSEDecoder()
    raw = b'data: {"a":1}\r\n\r\n: ping\r\n\r\ndata: [DONE]\r\n\r\n'
    events = []
    for i in range(len(raw)):
        events += dec.feed(raw[i : i + 1])
    assert events == [b'{"a":1}', b"[DONE]"]
    assert dec.comments == 1


def test_multiline_data_and_other_fields():
    events = SSEDecoder().feed(b"event: message\nid: 3\ndata: line1\ndata: line2\n\n")
    assert events == [b"line1\nline2"]


def chunk(delta: dict | None = None, text: str | None = None, usage=None, choices=True) -> bytes:
    import json

    obj: dict = {"id": "x"}
    if choices:
        choice: dict = {"index": 0, "finish_reason": None}
        if delta is not None:
            choice["delta"] = delta
        if text is not None:
            choice["text"] = text
        obj["choices"] = [choice]
    else:
        obj["choices"] = []
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj).encode()


def test_ttft_starts_at_first_content_or_reasoning_delta():
    s = CompletionStream()
    s.add(chunk({"role": "assistant", "content": ""}), 100)  # role-only chunk: no token yet
    s.add(chunk({"reasoning_content": "think"}), 200)
    s.add(chunk({"content": "a"}), 260)
    s.add(chunk({"content": "b c d"}), 400)  # several tokens in one chunk
    s.add(chunk(usage={"prompt_tokens": 9, "completion_tokens": 5}, choices=False), 410)
    s.add(b"[DONE]", 411)
    assert (s.first_ns, s.last_ns, s.chunks, s.max_gap_ns) == (200, 400, 3, 140)
    assert (s.completion_tokens, s.prompt_tokens, s.saw_done) == (5, 9, True)


def test_completions_text_and_null_usage():
    s = CompletionStream()
    s.add(chunk(text="x", usage=None), 5)
    s.add(b'{"choices":[{"index":0,"text":"y","finish_reason":"length"}],"usage":null}', 9)
    assert (s.chunks, s.finish_reason, s.completion_tokens) == (2, "length", None)


@pytest.mark.parametrize(
    ("payload", "kind"),
    [(b"{not json", "malformed"), (b"[1,2]", "malformed"),
     (b'{"choices": "x"}', "malformed"),
     (b'{"error": {"message": "engine died"}}', "stream_error")],
)
def test_broken_events_raise_with_kind(payload, kind):
    with pytest.raises(StreamFault) as info:
        CompletionStream().add(payload, 1)
    assert info.value.kind == kind
