import asyncio

import pytest

from harness.mock_server import count_prompt_tokens
from harness.workload import PromptFactory, calibrate, payload


def test_prompts_are_unique_and_deterministic():
    f = PromptFactory(seed=3, words=50)
    assert f.text("a") == PromptFactory(seed=3, words=50).text("a")
    assert f.text("a") != f.text("b")
    assert f.text("a")[:40] != f.text("b")[:40]  # differs at the start: no shared prefix
    assert len(f.text("a").split()) == 50


@pytest.mark.parametrize(("overhead", "per_word"), [(0, 1.0), (30, 1.0), (12, 1.6), (5, 0.8)])
def test_calibration_lands_within_five_percent(overhead, per_word):
    probes = []

    async def probe(words: int) -> int:
        probes.append(words)
        return overhead + round(per_word * words)

    cal = asyncio.run(calibrate(128, probe))
    assert abs(cal.prompt_tokens - 128) <= 0.05 * 128
    assert len(probes) <= 8
    assert "measured" in cal.describe()


def test_calibration_against_the_fake_tokenizer():
    async def probe(words: int) -> int:
        text = PromptFactory(words=words).text("calibrate")
        return count_prompt_tokens([text])

    cal = asyncio.run(calibrate(512, probe))
    assert abs(cal.error) <= 0.05


def test_server_without_usage_is_said_not_hidden():
    async def probe(words: int) -> None:
        return None

    cal = asyncio.run(calibrate(128, probe))
    assert cal.prompt_tokens is None and "not verified" in cal.describe()


def test_payload_forces_length_and_asks_for_usage():
    body = payload("chat", "m", "hi", 128, 0.0)
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["min_tokens"] == 128
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert payload("completions", "m", "hi", 8, 0.0, force_length=False).keys() >= {"prompt"}
