"""Prompt length as the server counts the prompts actually sent, whatever its tokenizer."""

import json
import re

import pytest

from harness import mock_server as fake
from harness.results.metrics import Targets, stats_by_level
from harness.results.report import summarise

RUN_ID = "20261129-120000-0a1b"
_PIECE = re.compile(r"\d|[^\W\d]+|[^\w\s]")


def digit_heavy_count(texts: list[str]) -> int:
    """Unlike the bundled tokenizer and the fake's default: one token per digit (so the keys in
    prompts weigh a lot), words split every 4 letters, and a 9-token chat template."""
    return sum(sum(-(-len(p) // 4) for p in _PIECE.findall(t)) for t in texts) + 9


def _run(sweep, prompts: str, progress: bool = False):
    # a fixed run id: the id is part of every `words` prompt, so a random one would make the
    # prompts, and the three-request C=1 mean, differ from run to run
    swept = sweep(levels=(1, 4), rounds=3, output_tokens=4, prompts=prompts, run_id=RUN_ID,
                  progress=progress)
    run, records = swept.run, swept.records
    return run, records, summarise(run, stats_by_level(records, 4), records, Targets())


@pytest.mark.parametrize("prompts", ["words", "text"])
def test_levels_send_the_calibrated_length_as_a_different_tokenizer_counts(
        sweep, monkeypatch, prompts):
    monkeypatch.setattr(fake, "count_prompt_tokens", digit_heavy_count)
    run, records, summary = _run(sweep, prompts)
    sent = [r.input_tokens for r in records]
    assert all(r.ok for r in records) and len(sent) == 3 + 12
    assert run.measured_input_tokens == pytest.approx(sum(sent) / len(sent), rel=1e-12)
    for level in summary["levels"]:
        assert level["mean_prompt_tokens"] == pytest.approx(128, rel=0.05)
    assert not [w for w in summary["warnings"] if "target" in w]
    assert json.loads(run.config)["calibration_prompt_tokens"] == pytest.approx(128, rel=0.05)


def test_a_level_off_the_target_is_warned_during_the_run_and_in_the_summary(
        sweep, monkeypatch, capsys):
    count = fake.count_prompt_tokens

    def longer_at_c4(texts: list[str]) -> int:  # the server counts C=4's prompts 20% longer
        return round(count(texts) * 1.2) if any("-c4-" in t for t in texts) else count(texts)

    monkeypatch.setattr(fake, "count_prompt_tokens", longer_at_c4)
    run, records, summary = _run(sweep, "words", progress=True)
    c1, c4 = summary["levels"]
    assert c1["mean_prompt_tokens"] == pytest.approx(128, rel=0.05)
    assert c4["mean_prompt_tokens"] > 1.05 * 128
    warned = [w for w in summary["warnings"] if "target" in w]
    assert len(warned) == 1 and warned[0].startswith("C=4:")
    assert "C=4: prompts averaged" in capsys.readouterr().err
    assert run.measured_input_tokens == pytest.approx(
        sum(r.input_tokens for r in records) / len(records))
