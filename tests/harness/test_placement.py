"""The placement verdict: two stored runs, table in host RAM and on NVMe, set side by side; the
paragraph's claims checked against the figures they come from."""

from __future__ import annotations

import json

import pytest

from common.readable import size
from engram_bench.cli import main
from harness.results.metrics import Targets
from harness.results.placement import PlacementError, run_side, verdict
from harness.results.render_placement import as_json, rows
from harness.results.store import Store
from harness.results.stored_summary import stored_summary, stored_verdict
from tests.harness import placement_fixtures as fx

TARGETS = Targets()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("placement") / "bench.duckdb"
    return path, fx.build(path)


def test_verdict_states_max_c_latency_disk_memory_and_kv_pool_of_both_runs(runs):
    path, ids = runs
    store = Store(path)
    v = stored_verdict(store, ids["ram"], ids["disk"], TARGETS)
    ram, disk = (stored_summary(store, ids[k], TARGETS) for k in ("ram", "disk"))
    # Max C and users are the summaries' own
    assert (v.a.max_c, v.b.max_c) == (ram["max_c"], disk["max_c"]) == (4, 2)
    assert (v.a.chat_users, v.b.chat_users) == (ram["chat_users"], disk["chat_users"])
    assert v.a.max_c_high == 7 and v.b.max_c_high == 3  # C=8 and C=4 fail
    text = v.paragraph
    assert "from host (placement-ram) to nvme (placement-disk) lowered Max C by 2" in text
    assert f"{ram['chat_users']} -> {disk['chat_users']} chat users" in text
    # the quoted level: the highest both pass, with each run's TTFT and its interval
    assert v.shared == fx.LEVELS and v.level == 2
    row_a = next(r for r in ram["levels"] if r["concurrency"] == 2)
    row_b = next(r for r in disk["levels"] if r["concurrency"] == 2)
    assert row_a["ttft_ci"]["method"] == "bootstrap"  # 20 rounds: an interval
    assert f"{row_a['mean_ttft_ms']:,.1f} ms (95% interval {row_a['ttft_ci']['low']:,.1f}-" in text
    assert f"to {row_b['mean_ttft_ms']:,.1f} ms" in text
    assert f"{row_b['mean_ttft_ms'] - row_a['mean_ttft_ms']:+,.1f} ms" in text
    assert "the intervals do not overlap" in text  # 70 ms apart, +-15 ms spread
    assert f"mean TPOT from {row_a['mean_tpot_ms']:,.1f}" in text
    # disk reads per token from /stats: 0 in RAM, the fixture's figure on NVMe
    assert v.b.levels[2].disk_bytes_per_token == fx.DISK_BYTES_PER_TOKEN
    assert v.a.levels[2].disk_bytes_per_token == 0
    assert f"nvme: {size(fx.DISK_BYTES_PER_TOKEN)} per token (/stats)" in text
    # host memory: the whole table in RAM, the peak residency on NVMe; per chat user
    assert v.a.held.bytes == fx.TABLE_BYTES and v.b.held.bytes == max(fx.RESIDENT.values())
    assert f"freed {size(fx.TABLE_BYTES - max(fx.RESIDENT.values()))} of host memory" in text
    assert v.a.held_per_chat_user == fx.TABLE_BYTES / (4 * TARGETS.chat_factor)
    assert f"{size(fx.TABLE_BYTES / 16)} on host ({size(fx.TABLE_BYTES)} / (4 x 4) chat users)" \
        in text
    # the KV pools each server reported
    assert v.a.kv.tokens == fx.KV_POOL["ram"][0] and v.a.kv.source == "/stats"
    assert f"{fx.KV_POOL['disk'][0]:,} tokens" in text
    assert "not about placement alone" not in text and not v.other_differences
    # the table: one row per figure, the paragraph's figures among them
    table = {r[0]: r for r in rows(v)}
    assert table["Max C"][3] == "-2"
    assert table["C=2 TTFT mean (ms)"][1].startswith(f"{row_a['mean_ttft_ms']:,.1f} [")


def test_host_agent_figures_join_the_verdict_and_runs_without_them_still_work():
    """A run with host figures (pinned memory, reads per output token) beside one without."""
    def summary(run_id: str, placement: str, host: dict | None) -> dict:
        level = {"concurrency": 1, "passes": True, "mean_ttft_ms": 300.0, "mean_tpot_ms": 50.0,
                 "ttft_ci": None, "host": host}
        return {"run_id": run_id, "mode": "closed", "max_c": 1, "chat_users": 4,
                "agentic_users": 1, "levels": [level], "table_placement": placement,
                "device": "rtx-pro-6000", "model": "m", "engine": "vllm",
                "input_tokens": 128, "output_tokens": 128}

    pinned = run_side(summary("a", "pinned", {"peak_pinned_bytes": 8 << 30,
                                              "tree_read_bytes_per_output_token": 0.0}))  # type: ignore[arg-type]
    cold = run_side(summary("b", "file", {"table_resident_bytes_end": 1 << 30,
                                          "tree_read_bytes_per_output_token": 12_288.0}))  # type: ignore[arg-type]
    bare = run_side({**summary("c", "file", None),  # type: ignore[arg-type]
                     "max_c_starved": "C=2 failed while the server was starved of CPU"})
    assert pinned.held.bytes == 8 << 30 and "pinned" in pinned.held.how
    assert cold.held.bytes == 1 << 30 and "page cache" in cold.held.how
    v = verdict(pinned, cold, 4.0)
    assert "file: 12 KiB per output token (host agent)" in v.paragraph
    assert "freed 7 GiB of host memory" in v.paragraph
    assert "Per sustained chat user: 2 GiB on pinned" in v.paragraph
    without = verdict(pinned, bare, 4.0)
    assert bare.held.bytes is None and "file: not measured" in without.paragraph
    assert ("file's Max C may be this machine's, not the server's: C=2 failed while the server "
            "was starved of CPU.") in without.paragraph
    assert "may be this machine's" not in v.paragraph
    assert "Neither engine reported its KV pool." in without.paragraph
    json.dumps(as_json(without))  # every figure serialises


def test_runs_that_differ_in_more_than_placement_say_so(tmp_path):
    path = tmp_path / "bench.duckdb"
    ids = fx.build(path, disk={"device": "rtx-pro-6000", "measured_input_tokens": 512.0})
    v = stored_verdict(Store(path), ids["ram"], ids["disk"], TARGETS)
    assert v.other_differences == ("device (spark vs rtx-pro-6000)",
                                   "prompt length (128 vs 512 tokens)")
    assert ("The runs also differ in device (spark vs rtx-pro-6000), prompt length (128 vs 512 "
            "tokens): the verdict is not about placement alone.") in v.paragraph


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_prints_the_verdict_and_its_json(runs, capsys):
    path, ids = runs
    code, out, _ = _cli(capsys, ids["ram"], ids["disk"], "--db", str(path))
    assert code == 0 and "lowered Max C by 2" in out and "host memory held by the table" in out
    code, out, _ = _cli(capsys, ids["ram"], ids["disk"], "--db", str(path), "--json")
    found = json.loads(out)
    assert code == 0 and found["a"]["max_c"] == 4 and found["b"]["placement"] == "nvme"
    assert found["b"]["levels"][1]["disk_bytes_per_token"] == fx.DISK_BYTES_PER_TOKEN


def test_bad_inputs_are_one_sentence_and_exit_2(runs, capsys, tmp_path):
    path, ids = runs
    for argv, says in (
        ((ids["ram"], "no-such-run"), "there is no run 'no-such-run'"),
        ((ids["ram"],), "compare takes two runs"),
        ((ids["ram"], ids["ram"], ids["disk"]), "compare takes two runs"),
        ((ids["ram"], ids["ram"]), "compare needs two different runs"),
    ):
        code, out, err = _cli(capsys, *argv, "--db", str(path))
        assert code == 2 and not out and says in err and err.count("\n") == 1, err
    store = Store(path)  # a users run: its capacity is Max users, not Max C
    users = fx.build(tmp_path / "users.duckdb", disk={"mode": "users"})
    code, _, err = _cli(capsys, users["ram"], users["disk"], "--db",
                        str(tmp_path / "users.duckdb"))
    assert code == 2 and "is a users run" in err and err.count("\n") == 1
    assert store.run(ids["ram"]).status == "complete"  # nothing was written
    with pytest.raises(PlacementError):
        stored_verdict(store, ids["ram"], ids["ram"], TARGETS)
