from dataclasses import replace

import pytest

from harness.results.metrics import (
    LevelPoint,
    Targets,
    capacity,
    level_stats,
    mean_prompt_tokens,
    point,
    prompt_warning,
    stats_by_level,
    users,
)
from harness.results.quantiles import quantile
from tests.harness.fixtures import make_records


def test_quantile_interpolates_like_numpy():
    values = [10.0, 20.0, 30.0, 40.0]
    assert quantile(values, 0.5) == 25.0
    assert quantile(values, 0.9) == pytest.approx(37.0)
    assert quantile(values, 0.0) == 10.0 and quantile(values, 1.0) == 40.0
    assert quantile([], 0.5) is None


def test_level_stats_use_successful_requests_only():
    records = [r for r in make_records() if r.concurrency == 4]
    stats = level_stats(4, records, output_target=128)
    good = [r for r in records if r.ok]
    assert stats.requests == 12 and stats.errors == 1
    assert stats.number("mean_ttft_ms") == pytest.approx(sum(r.ttft_ms for r in good) / len(good))
    tps = [r.output_tokens / (r.latency_ms / 1000) for r in good]
    assert stats.number("mean_tps") == pytest.approx(sum(tps) / len(tps))
    assert stats.short_outputs == sum(1 for r in good if r.output_tokens < 128)
    # the fixture's rounds do not overlap: the level is busy for the sum of their spans
    busy = sum(max(r.sent_at + r.latency_ms / 1000 for r in records if r.round == rnd)
               - min(r.sent_at for r in records if r.round == rnd) for rnd in range(3))
    assert stats.throughput_tps == pytest.approx(sum(r.output_tokens for r in good) / busy)


def test_published_capacity_rules():
    rtx = [(1, 139.2, 155.8), (2, 195.8, 120.0), (4, 220.6, 90.8), (8, 252.3, 63.7),
           (16, 257.2, 43.2), (32, 3222.7, 22.2)]
    cap = capacity([LevelPoint(c, t, s) for c, t, s in rtx])
    assert (cap.max_c, cap.chat_users, cap.agentic_users) == (16, 64, 24)
    assert cap.levels[-1].reason == "TTFT 3223 ms > 1000 ms"
    assert cap.warnings == []


def test_a_level_with_a_failed_request_does_not_pass():
    cap = capacity([LevelPoint(1, 100, 50, errors=0), LevelPoint(2, 100, 50, errors=1)])
    assert cap.max_c == 1
    assert "1 failed request(s)" in cap.levels[1].reason


def test_pass_above_a_failure_is_reported_with_a_warning():
    cap = capacity([LevelPoint(1, 100, 50), LevelPoint(2, 1500, 50), LevelPoint(4, 900, 25)])
    assert cap.max_c == 4
    assert any("lower level(s) C=2 fail" in w for w in cap.warnings)


def test_users_levels_are_warned_about_as_users():
    points = [LevelPoint(4, 100, 50), LevelPoint(8, 1500, 50), LevelPoint(16, 900, 25)]
    warnings = capacity(points, users_levels=True).warnings
    assert any("U=16 passes although lower level(s) U=8 fail" in w for w in warnings)
    assert "Max users >= 16: no higher level was tested" in warnings
    assert not any("Max C" in w or "C=" in w.replace("U=", "") for w in warnings)


def test_missing_figure_cannot_pass_and_is_said():
    cap = capacity([LevelPoint(1, 213, 36.0), LevelPoint(8, None, 25.0)])
    assert cap.max_c == 1
    assert not cap.levels[1].passes
    assert any("C=8 cannot be judged" in w for w in cap.warnings)
    assert any("lower bound" in w for w in cap.warnings)


def test_nothing_passes():
    cap = capacity([LevelPoint(1, 2000, 5)])
    assert (cap.max_c, cap.chat_users, cap.agentic_users) == (0, 0, 0)
    assert "no level meets the targets" in cap.warnings


def test_targets_factors_and_statistic_are_parameters():
    stats = stats_by_level(make_records(levels=(1, 2)), 128)
    loose = Targets(tps_min=1, ttft_max_ms=10_000, statistic="p90", chat_factor=10,
                    agentic_factor=0.5)
    cap = capacity([point(s, loose.statistic) for s in stats], loose)
    assert (cap.max_c, cap.chat_users, cap.agentic_users) == (2, 20, 1)
    assert point(stats[0], "p90").ttft_ms == stats[0].number("p90_ttft_ms")
    assert point(stats[0], "p90").tps == stats[0].number("p10_tps")
    with pytest.raises(ValueError):
        Targets(statistic="p75")


def test_users_floor():
    assert users(2, 1.5) == 3 and users(3, 1.5) == 4 and users(16, 4) == 64


def test_a_pass_at_the_highest_tested_level_only_bounds_max_c():
    cap = capacity([LevelPoint(1, 100, 50), LevelPoint(2, 200, 40)])
    assert cap.max_c == 2
    assert "Max C >= 2: no higher level was tested" in cap.warnings
    bounded = capacity([LevelPoint(1, 100, 50), LevelPoint(2, 2000, 40)])
    assert bounded.max_c == 1
    assert not any(w.startswith("Max C >=") for w in bounded.warnings)  # C=2 was tested


def test_level_prompt_tokens_are_what_successful_requests_sent():
    records = [r for r in make_records() if r.concurrency == 2]
    for i, r in enumerate(records):
        r.input_tokens = 120 + i
    records[0].error_kind, records[0].input_tokens = "dropped", 999  # a failure is not counted
    records[1].input_tokens = None  # nor a request the server did not count
    counted = [r.input_tokens for r in records[2:]]
    stats = level_stats(2, records, 128)
    assert stats.number("mean_prompt_tokens") == pytest.approx(sum(counted) / len(counted))
    assert mean_prompt_tokens(records) == stats.number("mean_prompt_tokens")
    assert mean_prompt_tokens([]) is None


@pytest.mark.parametrize(("mean", "warned"), [(128.0, False), (134.0, False), (122.0, False),
                                              (135.0, True), (121.0, True), (None, False)])
def test_a_level_whose_prompts_miss_the_target_by_over_five_percent_is_warned(mean, warned):
    measured = level_stats(4, make_records(levels=(4,)), 128)
    stats = replace(measured, declared={**measured.declared, "mean_prompt_tokens": mean})
    warning = prompt_warning(stats, 128)
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith("C=4:") and f"{mean:.1f}" in warning
