import pytest

from harness.results.metrics import LevelPoint, Targets, capacity
from harness.results.search import DEFAULT_MAX_CONCURRENCY, outcomes, plan, search


def one_over_c(c: int) -> LevelPoint:
    """A server whose per-request speed falls as 1/C: 110/C tok/s, so C=5 passes (22), 6 fails."""
    return LevelPoint(c, ttft_ms=100.0, tps=110.0 / c)


def passes_by_targets(c: int) -> bool:
    return outcomes([one_over_c(c)])[c]


def test_the_issue_example_bisects_4_to_8_into_max_c_5():
    first = plan({4: True, 8: False})
    assert (first.next_probe, first.max_c, first.exact) == (6, 4, False)
    second = plan({4: True, 8: False}, [(6, False)])
    assert second.next_probe == 5
    done = plan({4: True, 8: False}, [(6, False), (5, True)])
    assert (done.next_probe, done.max_c, done.exact, done.lower_bound) == (None, 5, True, False)
    assert done.how == "bisection: 4 passed, 8 failed; probed 6 (fail), 5 (pass)"


def test_speed_falling_as_one_over_c_gives_max_c_5_from_levels_1_2_4_8():
    result, probes = search([1, 2, 4, 8], passes_by_targets)
    assert probes == [(6, False), (5, True)]
    assert (result.max_c, result.exact) == (5, True)
    # the search refines exactly the number the capacity rules report over all levels
    cap = capacity([one_over_c(c) for c in [1, 2, 4, 8] + [p for p, _ in probes]])
    assert cap.max_c == result.max_c == 5
    assert cap.warnings == []


def test_outcomes_follow_the_capacity_targets():
    pts = [LevelPoint(1, 900, 25), LevelPoint(2, 1100, 25), LevelPoint(4, 500, 25, errors=1),
           LevelPoint(8, None, 25)]
    assert outcomes(pts) == {1: True, 2: False, 4: False, 8: False}
    assert outcomes(pts, Targets(ttft_max_ms=2000))[2] is True


def test_every_level_passing_doubles_until_one_fails_then_bisects():
    result, probes = search([1, 2, 4, 8], lambda c: c <= 37)
    assert [c for c, _ in probes[:3]] == [16, 32, 64]
    assert probes[2] == (64, False)
    assert (result.max_c, result.exact, result.lower_bound) == (37, True, False)
    assert result.how.startswith("doubling: every level up to 8 passed; probed 16 (pass), ")
    # bisection after doubling: each probe lies strictly between the bracket's ends
    assert [c for c, _ in probes[3:]] == [48, 40, 36, 38, 37]


def test_doubling_stops_at_the_cap_and_a_passing_cap_is_a_lower_bound():
    result, probes = search([1, 2, 4, 8], lambda c: True, max_concurrency=100)
    assert [c for c, _ in probes] == [16, 32, 64, 100]
    assert (result.max_c, result.exact, result.lower_bound) == (100, False, True)
    assert result.how.endswith("the cap C=100 passed, so Max C >= 100")
    default, _ = search([1, 2, 4, 8], lambda c: True)
    assert default.max_c == DEFAULT_MAX_CONCURRENCY == 256


def test_a_failing_cap_is_bisected_below_it():
    result, probes = search([1, 2, 4, 8], lambda c: c <= 9, max_concurrency=12)
    assert probes == [(12, False), (10, False), (9, True)]
    assert (result.max_c, result.exact) == (9, True)


def test_cap_equal_to_the_highest_passing_level_probes_nothing():
    result = plan({1: True, 8: True}, max_concurrency=8)
    assert (result.next_probe, result.max_c, result.lower_bound) == (None, 8, True)


def test_level_1_failing_means_max_c_0_and_nothing_to_probe():
    result = plan({1: False, 2: False, 4: False})
    assert (result.next_probe, result.max_c, result.exact) == (None, 0, True)
    assert result.how == "levels: 1 failed, so no concurrency meets the targets"


def test_nothing_passing_above_1_bisects_down_towards_1():
    result, probes = search([4, 8], lambda c: False)
    assert probes == [(2, False), (1, False)]
    assert (result.max_c, result.exact) == (0, True)
    assert result.how.endswith("1 failed, so no concurrency meets the targets")
    result, probes = search([4, 8], lambda c: c <= 2)
    assert probes == [(2, True), (3, False)] and result.max_c == 2


def test_adjacent_levels_need_no_probe():
    result = plan({1: True, 2: True, 3: False})
    assert (result.next_probe, result.max_c, result.exact) == (None, 2, True)
    assert result.how == "bisection: 2 passed, 3 failed; adjacent levels, nothing to probe"


def test_a_pass_above_a_failure_is_searched_like_capacity_reads_it():
    # capacity() takes the highest passing level (with a warning), so the search brackets there
    swept = {1: True, 2: False, 4: True, 8: False}
    first = plan(swept)
    assert (first.next_probe, first.max_c) == (6, 4)
    assert "C=2 failed below the passing C=4 (not monotonic)" in first.how
    done = plan(swept, [(6, True), (7, False)])
    assert (done.max_c, done.exact) == (6, True)
    assert capacity([LevelPoint(c, 100, 50 if ok else 5) for c, ok in
                     [*swept.items(), (6, True), (7, False)]]).max_c == 6


def test_the_plan_while_searching_reports_the_bound_so_far():
    mid = plan({1: True, 2: True}, [(4, True)])
    assert (mid.next_probe, mid.max_c, mid.exact, mid.lower_bound) == (8, 4, False, False)


@pytest.mark.parametrize(
    ("swept", "probes", "cap", "message"),
    [
        ({1: True, 16: False}, (), 8,
         "the maximum concurrency 8 is below the highest level tested, C=16"),
        ({1: True}, [(32, False)], 16,
         "the maximum concurrency 16 is below the highest level tested, C=32"),
        ({1: True}, (), 0, "the maximum concurrency must be >= 1, got 0"),
        ({}, (), 256, "the search needs at least one measured level to start from"),
        ({}, [(4, True)], 256, "the search needs at least one measured level to start from"),
        ({0: True}, (), 256, "concurrency levels must be >= 1, got 0"),
        ({4: True}, [(4, False)], 256, "C=4 is recorded both as passing and as failing"),
    ],
)
def test_bad_input_is_one_sentence(swept, probes, cap, message):
    with pytest.raises(ValueError) as err:
        plan(swept, probes, cap)
    assert str(err.value) == message


def test_every_rule_finds_the_true_max_c_with_few_probes():
    # brute force over monotone pass rules: the answer is exact and bisection stays logarithmic
    for true_max in range(0, 70):
        result, probes = search([1, 2, 4, 8], lambda c, m=true_max: c <= m)
        assert result.max_c == true_max and result.exact
        assert len(probes) <= 10  # 4 doublings to 128, then 6 halvings of 64
        assert len({c for c, _ in probes}) == len(probes)  # never probes a level twice


def test_a_search_with_a_resolution_stops_once_its_bracket_is_that_narrow():
    """With resolution 1/8, 32 passing and 36 failing is close enough (36 - 32 <= 32 / 8): the
    search stops there, neither exact nor a lower bound, and says why; 32 and 40 are not."""
    wide = plan({32: True, 40: False}, resolution=1 / 8)
    assert wide.next_probe == 36
    done = plan({32: True, 40: False}, [(36, False)], resolution=1 / 8)
    assert (done.next_probe, done.max_c, done.exact, done.lower_bound) == (None, 32, False,
                                                                           False)
    assert "stopped with 32 passing and 36 failing" in done.how
    assert plan({32: True, 40: False}, [(36, False)]).next_probe == 34  # none: to the integer
    small = plan({4: True, 6: False}, resolution=1 / 8)  # below 16 the step is one
    assert small.next_probe == 5


def test_speed_falling_as_one_over_c_bisects_to_within_the_resolution():
    """110 x 8 / C tok/s: C=44 passes (20) and 45 fails; at 1/8 the search ends with a pass
    and a fail at most a step apart, the pass the highest probed."""
    def passes(c: int) -> bool:
        return outcomes([LevelPoint(c, ttft_ms=100.0, tps=880.0 / c)])[c]

    result, probes = search([8, 16, 32], passes, resolution=1 / 8)
    failing = min(c for c, ok in probes if not ok and c > result.max_c)
    assert passes(result.max_c) and result.max_c <= 44 < failing
    assert failing - result.max_c <= result.max_c // 8
    exact, exact_probes = search([8, 16, 32], passes)
    assert exact.max_c == 44 and len(probes) < len(exact_probes)
