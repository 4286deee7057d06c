import asyncio

import pytest

from harness.mock_server import count_prompt_tokens
from harness.run.prompts import RandomWords, load
from harness.run.workload import calibrate, payload


@pytest.mark.parametrize(("overhead", "per_word"), [(0, 1.0), (30, 1.0), (12, 1.6), (5, 0.8)])
def test_calibration_lands_within_two_percent(overhead, per_word):
    probes = []

    async def probe(words: int) -> int:
        probes.append(words)
        return overhead + round(per_word * words)

    cal = asyncio.run(calibrate(128, probe))
    assert abs(cal.prompt_tokens - 128) <= 0.02 * 128
    assert len(probes) <= 8
    assert "measured" in cal.describe()


@pytest.mark.parametrize("prompts", [RandomWords(), load("text")])
def test_calibration_against_the_fake_tokenizer(prompts):
    async def probe(words: int) -> int:
        return count_prompt_tokens([prompts.sized(words).text("20261129-180121-2ecb-c0-r0-w0", -1)])

    cal = asyncio.run(calibrate(512, probe))
    assert abs(cal.error) <= 0.02


def test_server_without_usage_is_said_not_hidden():
    async def probe(words: int) -> None:
        return None

    cal = asyncio.run(calibrate(128, probe))
    assert cal.prompt_tokens is None and "not verified" in cal.describe()


def test_payload_forces_length_and_asks_for_usage():
    body = payload("chat", "m", "hi", 128, 0.0)
    assert body["stream_options"]["include_usage"] is True
    assert body["ignore_eos"] is True and body["min_tokens"] == 128
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert payload("completions", "m", "hi", 8, 0.0, force_length=False).keys() >= {"prompt"}
