import pytest

from harness.wire.completion_stream import CompletionStream, StreamFault
from harness.wire.sse import SSEDecoder
from tests.harness.fixtures import splits


def decode(pieces: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    return [event for piece in pieces for event in dec.feed(piece)]


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


def test_a_crlf_split_across_reads_is_one_line_break():
    # a multi-line event: read as two line breaks, the CRLF after "line1" would end it early
    raw = b"data: line1\r\ndata: line2\r\n\r\ndata: x\rdata: y\r\rdata: [DONE]\r\n\r\n"
    for pieces in splits(raw):
        assert decode(pieces) == [b"line1\nline2", b"x\ny", b"[DONE]"], pieces


@pytest.mark.parametrize("read", [
    b"data: a\n\n", b"data:  two\n\n", b"data: \n\n", b"data:none\n\n", b"data: x\r\n\r\n",
    b"data: x\r\n\n", b"data: line1\ndata: line2\n\n", b": ping\n\n", b"data: [DONE]\n\n",
    b"data: a\n\ndata: b\n\n", b"data: a\n", b"id: 1\ndata: a\n\n"])
def test_a_read_of_one_whole_event_is_taken_as_any_split_of_it(read):
    """A token's read is usually one whole one-line event, decoded in one step: it must give
    what the same bytes give a byte at a time."""
    assert decode([read]) == decode([read[i:i + 1] for i in range(len(read))])


def test_exactly_one_space_is_stripped_after_the_colon():
    raw = (b"data:  two\n\ndata:none\n\nid: 1\ndata:   three\n\n"
           b"data\ndata: after-empty\n\ndata: \n\n")
    expected = [b" two", b"none", b"  three", b"\nafter-empty", b""]
    for pieces in splits(raw):
        assert decode(pieces) == expected, pieces


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


def test_tool_call_deltas_start_ttft_like_content():
    s = CompletionStream()
    s.add(chunk({"role": "assistant", "content": None}), 100)
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": ""}}
    s.add(chunk({"tool_calls": [call]}), 250)
    s.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]}), 300)
    assert (s.times_ns, s.chunks) == ([250, 300], 2)


def test_ttft_starts_at_first_content_or_reasoning_delta():
    s = CompletionStream()
    s.add(chunk({"role": "assistant", "content": ""}), 100)  # role-only chunk: no token yet
    s.add(chunk({"reasoning_content": "think"}), 200)
    s.add(chunk({"content": "a"}), 260)
    s.add(chunk({"content": "b c d"}), 400)  # several tokens in one chunk
    s.add(chunk(usage={"prompt_tokens": 9, "completion_tokens": 5}, choices=False), 410)
    s.add(b"[DONE]", 411)
    assert (s.times_ns, s.last_ns, s.chunks) == ([200, 260, 400], 400, 3)
    assert (s.completion_tokens, s.prompt_tokens, s.saw_done) == (5, 9, True)


def test_completions_text_and_null_usage():
    s = CompletionStream()
    s.add(chunk(text="x", usage=None), 5)
    s.add(b'{"choices":[{"index":0,"text":"y","finish_reason":"length"}],"usage":null}', 9)
    assert (s.chunks, s.finish_reason, s.completion_tokens) == (2, "length", None)


@pytest.mark.parametrize(
    ("payload", "kind", "message"),
    [(b"{not json", "malformed", "not JSON"), (b"[1,2]", "malformed", "not an object"),
     (b'{"choices": "x"}', "malformed", "choices is not a list"),
     (b'{"choices": {"0": {}}}', "malformed", "choices is not a list"),
     (b'{"choices": ["x"]}', "malformed", r"choices\[0\] is not an object"),
     (b'{"choices": [null]}', "malformed", r"choices\[0\] is not an object"),
     (b'{"choices": [{"delta": "hi"}]}', "malformed", "delta is not an object"),
     (b'{"choices": [{"delta": ["hi"]}]}', "malformed", "delta is not an object"),
     (b'{"choices": [], "usage": "12"}', "malformed", "usage is not an object"),
     (b'{"choices": [], "usage": [1]}', "malformed", "usage is not an object"),
     (b'{"choices": [], "usage": {"completion_tokens": "5"}}', "malformed", "completion_tokens"),
     (b'{"choices": [], "usage": {"prompt_tokens": 1.5}}', "malformed", "prompt_tokens"),
     (b'{"choices": [{"delta": {}, "finish_reason": 1}]}', "malformed", "finish_reason"),
     (b'{"error": {"message": "engine died"}}', "stream_error", "engine died")],
)
def test_broken_events_raise_with_kind(payload, kind, message):
    with pytest.raises(StreamFault, match=message) as info:
        CompletionStream().add(payload, 1)
    assert info.value.kind == kind


def test_empty_usage_and_choices_are_no_fault():
    s = CompletionStream()
    s.add(b'{"choices": [], "usage": null}', 1)
    s.add(b'{"choices": null, "usage": {}}', 2)
    assert (s.chunks, s.completion_tokens) == (0, None)


def test_events_after_done_are_not_counted_however_tcp_splits_them():
    raw = b"".join(b"data: " + e + b"\n\n" for e in (
        chunk({"content": "a"}), b"[DONE]", *[chunk({"content": "b"})] * 16))
    for pieces in splits(raw):
        dec, s = SSEDecoder(), CompletionStream()
        for piece in pieces:
            for event in dec.feed(piece):
                s.add(event, 100)
        assert s.saw_done and s.chunks == 1, pieces


def test_an_event_that_never_ends_is_malformed_in_bounded_memory():
    dec = SSEDecoder()
    dec.feed(b"data: " + b"x" * 2**20)
    with pytest.raises(StreamFault) as fault:
        for _ in range(20):  # 21 MiB without a blank line
            dec.feed(b"x" * 2**20)
    assert fault.value.kind == "malformed"


def test_tokens_that_made_no_text_still_count_where_usage_says_they_came():
    """A tiny random model's tokens can be partial characters: vLLM streams them with empty
    text and growing usage. Before the first content they join it (TTFT stays at the first
    text); after it they are chunks of their own, so the chunks' tokens add up to the
    request's even when its last tokens made no text."""
    s = CompletionStream()
    s.add(chunk(text="", usage={"completion_tokens": 1}), 100)
    s.add(chunk(text="a", usage={"completion_tokens": 2}), 200)
    s.add(chunk(text="", usage={"completion_tokens": 4}), 300)
    s.add(chunk(text="b", usage={"completion_tokens": 5}), 400)
    s.add(chunk(text="", usage={"completion_tokens": 5}), 450)  # finish chunk: no new token
    s.add(chunk(text="", usage={"completion_tokens": 7}), 500)
    s.add(chunk(usage={"completion_tokens": 7}, choices=False), 510)
    assert (s.times_ns, s.chunk_tokens, s.chunks) == ([200, 300, 400, 500], [2, 2, 1, 2], 4)
    assert sum(s.chunk_tokens) == s.completion_tokens == 7
