"""Prompt sources: distinct per request, rebuilt alike, and bad files refused by line."""

import json
import os
import threading

import pytest

from common import corpus
from harness.config import RunConfig
from harness.run import prompts
from harness.run.prompts import PromptFileError, RandomWords, load, pieces, spread
from harness.run.session import CALIBRATION_SAMPLES
from harness.run.sweep import Sweep, calibration_ordinal
from harness.wire.endpoint import Endpoint

KEY = "20261129-180121-2ecb-c1-r0-w0"


def test_word_prompts_are_unique_and_deterministic():
    f = RandomWords(seed=3, words=50)
    assert f.text("a", 0) == RandomWords(seed=3, words=50).text("a", 0)
    assert f.text("a", 0) != f.text("b", 0)
    assert f.text("a", 0)[:40] != f.text("b", 0)[:40]  # differs at the start: no shared prefix
    assert len(f.text("a", 0).split()) == 50


def test_word_prompts_of_one_size_send_the_same_words_each_in_its_own_order():
    """So a tokenizer counts every prompt alike (the key aside), wherever its merges fall."""
    from tokenizers import Tokenizer

    from runners.engram.tokenizer import TOKENIZER_PATH

    f = RandomWords(seed=3, words=100)
    bodies = [f.text(f"{KEY[:-2]}w{i}", i).split(": ", 1)[1].split() for i in range(200)]
    assert all(sorted(b) == sorted(bodies[0]) for b in bodies)
    assert len({tuple(b[:6]) for b in bodies}) == len(bodies)  # orders part at once
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    counts = [len(tok.encode(f.text(f"{KEY[:-2]}w{i}", i)).ids) for i in range(200)]
    assert max(counts) - min(counts) <= 2  # the key's last digits


@pytest.mark.parametrize("n", [1, 2, 7, 64, 25_515])
def test_spread_visits_every_slot_once_per_cycle(n):
    slots = [spread(5, i, n) for i in range(min(n, 3000))]
    assert len(set(slots)) == len(slots)
    assert all(0 <= s < n for s in slots)
    assert spread(5, n + 3, n) == spread(5, 3, n)  # then the cycle repeats


def test_text_prompts_are_windows_of_the_prose_with_distinct_starts():
    prompts = load("text", seed=1).sized(90)
    prose = " ".join(corpus.text().split())
    texts = [prompts.text(KEY, i) for i in range(300)]
    for t in texts[:50]:
        assert t in prose + " " + prose  # consecutive words of the running text (circular)
        assert "2ecb" not in t  # no request key: its digits are n-grams nobody else sends
    assert len({" ".join(t.split()[:8]) for t in texts}) == len(texts)  # no shared openings
    assert texts == [load("text", seed=1).sized(90).text(KEY, i) for i in range(300)]
    assert load("text", seed=2).sized(90).text(KEY, 0) != texts[0]


def test_text_windows_hold_the_pieces_of_their_word_count_on_average():
    prompts = load("text", seed=3).sized(90)
    texts = [prompts.text(KEY, i) for i in range(400)]
    per_word = pieces(corpus.text()) / len(corpus.text().split())
    budget = round(90 * per_word)
    counts = [pieces(t) for t in texts]
    assert all(0 <= c - budget < 10 for c in counts)  # cut at a piece count, one word over
    words = [len(t.split()) for t in texts]
    assert sum(words) / len(words) == pytest.approx(90, rel=0.05)  # `words` stays the mean
    assert len(set(words)) > 1  # the word count is what varies


def test_every_request_of_a_run_gets_its_own_prompt():
    config = RunConfig(url="http://127.0.0.1:9/v1", model="m", levels=(1, 2, 4, 8), rounds=10,
                       warmup=5)
    sweep = Sweep(config, Endpoint(config.url), "run", load("text").sized(60), clock=None)
    try:
        ordinals = [sweep.ordinal(c, r, w) for c in config.levels
                    for r in range(config.rounds) for w in range(c)]
        ordinals += [sweep.warmup_ordinal(i) for i in range(config.warmup)]
        ordinals += [calibration_ordinal(i) for i in range(CALIBRATION_SAMPLES)]
        texts = {sweep.prompts.text(KEY, o) for o in ordinals}
        assert len(texts) == len(ordinals) == 150 + 5 + CALIBRATION_SAMPLES
    finally:
        sweep.close()


def _write(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines))
    return str(path)


def test_jsonl_formats_keep_their_prompts_and_cycle_in_a_seeded_order(tmp_path):
    lines = [
        {"conversations": [{"from": "system", "value": "be brief"},
                           {"from": "human", "value": "first"}, {"from": "gpt", "value": "x"}]},
        "",
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "second"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "third"}]}]},
        {"prompt": "fourth"},
    ]
    prompts = load(_write(tmp_path / "p.jsonl", lines), seed=0)
    assert not prompts.calibrated
    cycle = [prompts.text(KEY, i) for i in range(4)]
    assert sorted(cycle) == ["first", "fourth", "second", "third"]
    assert [prompts.text(KEY, i) for i in range(4, 8)] == cycle
    orders = {tuple(load(str(tmp_path / "p.jsonl"), seed=s).text(KEY, i) for i in range(4))
              for s in range(6)}
    assert len(orders) > 1  # the seed chooses the order


def test_a_plain_text_file_is_cut_like_text(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("It was the best of times,\n\nit was the worst of times.\n")
    prompts = load(str(path)).sized(5)
    assert prompts.calibrated
    text = prompts.text(KEY, 0)
    assert len(text.split()) == 5 and set(text.split()) <= set(path.read_text().split())


def test_digest_follows_the_file(tmp_path):
    path = _write(tmp_path / "p.jsonl", [{"prompt": "a"}])
    before = load(path).digest()
    assert load(path).digest() == before
    _write(tmp_path / "p.jsonl", [{"prompt": "b"}])
    assert load(path).digest() != before


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("p.jsonl", "", "is empty"),
        ("p.jsonl", "\n  \n", "is empty"),
        ("p.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": \n', "line 3 is not JSON"),
        ("p.jsonl", '{"prompt": "a"}\n{"text": "b"}\n', "line 2 has no prompt"),
        ("p.jsonl", '{"prompt": "a"}\n["b"]\n', "line 2 has no prompt"),
        ("p.jsonl", '{"messages": [{"role": "assistant", "content": "b"}]}', "line 1 has no"),
        ("p.jsonl", '{"prompt": ""}', "line 1 has no prompt"),
        ("p.txt", " \n\n", "has no text"),
        ("p.txt", b"fine\n\xff\xfe\n", "line 2 is not UTF-8 text"),
        ("p.jsonl", '{"prompt": "a"}\n{"prompt": "b \\ud800"}\n', "line 2 holds half a surrog"),
        ("p.jsonl", '{"prompt": "a"}\n' + "[" * 100_000 + "]" * 100_000, "line 2 is JSON nest"),
    ],
)
def test_bad_files_are_named_with_their_line(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(PromptFileError, match=message) as err:
        load(str(path))
    assert str(path) in str(err.value)


def test_a_prompt_past_what_one_request_may_hold_is_refused_by_its_line(tmp_path,
                                                                        monkeypatch):
    """One request holds so many tokens at most, as a trace's requests do; a prompt of more
    words than that (a word is a token at least) is refused. Checked at a bound of 1,000."""
    monkeypatch.setattr(prompts, "MAX_REQUEST_TOKENS", 1000)
    path = _write(tmp_path / "p.jsonl", [{"prompt": "a"}, {"prompt": "word " * 1001}])
    with pytest.raises(PromptFileError, match=r"line 2 holds a prompt of more than 1,000 wor"):
        load(path)
    _write(tmp_path / "p.jsonl", [{"prompt": "a"}, {"prompt": "word " * 1000},
                                  {"prompt": "x" * 5000}])
    assert "3 prompt(s)" in load(path).describe()


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(PromptFileError, match="does not exist"):
        load(str(tmp_path / "nope.jsonl"))


def test_a_pipe_or_a_device_is_refused_without_reading_it(tmp_path):
    """A pipe would be read without bound (or wait for a writer), and could not be read alike
    on --resume; this one holds a valid prompt, and /dev/null reads as empty."""
    fifo = tmp_path / "fed.jsonl"
    os.mkfifo(fifo)
    feeder = threading.Thread(target=fifo.write_text, args=('{"prompt": "a"}\n',), daemon=True)
    feeder.start()
    try:
        for path in (fifo, "/dev/null"):
            with pytest.raises(PromptFileError, match="is not a regular file"):
                load(str(path))
    finally:  # a reader end lets the feeder's open return, if it still waits for one
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        feeder.join(5)
        os.close(reader)
