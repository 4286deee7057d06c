"""The explorer re-judges a stored run's capacity on TTFT or on TTFO (the Capacity page's
"TTFT of"), as `--ttft-of` does."""

from __future__ import annotations

import pandas as pd

from explorer import data
from harness.results.metrics import Targets
from tests.harness.test_reasoning_timing import _reasoning_run


def test_the_explorer_judges_max_c_on_either_first_token(tmp_path):
    levels = data.levels(_reasoning_run(tmp_path), ["run-a"])
    first = data.capacity_table(levels, Targets())
    output = data.capacity_table(levels, Targets(ttft_of="output"))
    assert list(first["max_c"]) == [3] and list(output["max_c"]) == [1]


def test_a_run_without_ttfo_is_judged_on_its_ttft_either_way():
    published = pd.DataFrame([{"run_id": "pub", "concurrency": c, "mean_ttft_ms": 100.0 * c,
                               "mean_tps": 30.0, "errors": 0} for c in (1, 2, 4)])
    assert (data.points(published, "mean", "output")["pub"]
            == data.points(published, "mean", "first")["pub"])
