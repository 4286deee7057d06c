"""Replayed output: natural text from the corpus, the same for the same prompt everywhere."""

import subprocess
import sys

import pytest

from common.corpus import text
from runners.engram.replay import ReplayText, corpus_ids
from runners.engram.tokenizer import EngramTokenizer

EOS = EngramTokenizer().eos_id
PROMPT = [9, 1330, 13774, 305]


def replayed(replay, prompt, count, start=0):
    return [replay.next_token(prompt, k) for k in range(start, start + count)]


def test_output_is_consecutive_corpus_text():
    tok = EngramTokenizer()
    replay = ReplayText.corpus(EOS)
    for prompt in (PROMPT, [5], list(range(200))):
        out = tok.decode(replayed(replay, prompt, 40))
        assert out in text() + text() and len(out.split()) >= 10


def test_same_prompt_same_text_across_processes_and_different_prompts_differ():
    replay = ReplayText.corpus(EOS)
    here = replay.offset(PROMPT)
    code = ("from runners.engram.replay import ReplayText; "
            f"print(ReplayText.corpus({EOS}).offset({PROMPT}))")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout
    assert int(there) == here
    offsets = {replay.offset([*PROMPT, extra]) for extra in range(20)}
    assert len(offsets) == 20


def test_replay_wraps_around_and_never_emits_eos():
    replay = ReplayText.corpus(EOS)
    n = len(corpus_ids())
    assert replayed(replay, PROMPT, 5, start=n) == replayed(replay, PROMPT, 5)
    assert EOS not in corpus_ids()
    with pytest.raises(ValueError, match="EOS"):
        ReplayText([5, EOS, 6], EOS)
