"""Simulated users (`run --mode users`) and multi-turn runs (`--turns N`) in the explorer: the Run
page judges a users run by its measured Max users beside the estimate from the paired closed
run's Max C, and shows a multi-turn run's context, cached tokens and TTFT per turn; the Runs,
Capacity and Compare pages list users runs by Max users, against U."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from explorer import charts, data
from harness.config import RunConfig, StoredRun
from harness.results import users
from harness.results.metrics import Targets
from harness.results.run_row import RunRow
from harness.results.store import Store
from tests.explorer import fixtures
from tests.explorer.apptest import (
    app,
    assert_human,
    assert_runs_table,
    config,
    downloads,
    metrics,
)


@pytest.fixture(scope="module")
def users_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("explorer_users") / "bench.duckdb"
    fixtures.build_with_users(path)
    return path


HEADLINE = ("Max users 6 (lower bound: U=7-11 not tested) at duty cycle 0.25; estimate Max C 2 "
            "x 4 = 8 (run fixture-closed)")


def test_run_page_shows_measured_users_beside_the_estimate(monkeypatch, users_db):
    at = app(monkeypatch, users_db, "views/run.py")
    at.selectbox(key="run_id").set_value(fixtures.USERS_RUN).run()
    assert not at.exception, at.exception
    assert at.subheader[0].value == HEADLINE
    shown = metrics(at)
    assert shown["Max users (measured)"] == "6"
    assert shown["duty cycle (measured)"] == "0.25"
    assert shown["estimate: Max C x 4"] == "8"  # Max C 2 of fixture-closed, x 4 (chat)
    assert shown["users per Max C (measured)"] == "3.00"
    assert "Max C" not in shown and "chat users" not in shown
    assert any("from the closed run fixture-closed" in c.value for c in at.caption)

    per_level = at.dataframe[0].value
    assert_human(at.dataframe[0])
    assert list(per_level.columns[:5]) == ["users", "passes", "within noise of the targets",
                                           "steady state", "duty cycle (measured)"]
    assert per_level["steady state"].all() and not per_level["within noise of the targets"].any()
    assert per_level["think Z (ms)"].tolist() == pytest.approx(
        [3 * 128 / tps * 1000 for _, tps in fixtures.USERS_PROFILE.values()], rel=0.03)
    assert config(at.dataframe[0])["users"]["pinned"] is True
    assert list(per_level["users"]) == list(fixtures.USERS_LEVELS)
    assert list(per_level["passes"]) == [True, True, False]
    assert per_level["fails because"][2].startswith("TTFT 15")
    assert per_level["duty cycle (measured)"].tolist() == pytest.approx([0.25] * 3, abs=0.01)
    assert "Levels CSV (3 rows)" in downloads(at)

    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    for spec in specs[:2]:  # TTFT and TPS against the user count
        assert spec["layout"]["xaxis"]["title"]["text"] == "users U"
        assert spec["data"][0]["hovertemplate"].startswith("U=")
        assert spec["data"][0]["name"].endswith("(users)")
    duty = specs[2]  # the duty cycle per level, the chat profile's 0.25 dashed
    assert duty["layout"]["yaxis"]["title"]["text"] == "duty cycle (measured)"
    assert duty["layout"]["shapes"][0]["y0"] == 0.25


def test_run_page_says_how_to_get_an_estimate_without_a_paired_run(monkeypatch, tmp_path):
    db = tmp_path / "bench.duckdb"
    fixtures.build_with_users(db)
    with Store(db)._connect() as con:  # the closed sweep of that setup is gone
        con.execute("DELETE FROM runs WHERE run_id = ?", [fixtures.PAIRED_RUN])
    at = app(monkeypatch, db, "views/run.py")
    at.selectbox(key="run_id").set_value(fixtures.USERS_RUN).run()
    assert not at.exception, at.exception
    assert at.subheader[0].value == (
        f"Max users 6 (lower bound: U=7-11 not tested) at duty cycle 0.25; {data.NO_PAIRED_RUN}")
    assert metrics(at)["Max users (measured)"] == "6"
    assert not any(label.startswith("estimate") for label in metrics(at))
    assert any("closed `make bench`" in info.value for info in at.info)


def test_a_users_level_not_in_steady_state_is_left_out_of_max_users(monkeypatch, tmp_path):
    """The summary's own check: U=6 keeps one request per user, too few to check, so Max
    users falls to 4 and the headline and the per-level table say why."""
    db = tmp_path / "bench.duckdb"
    fixtures.build_with_users(db)
    with Store(db)._connect() as con:
        con.execute("DELETE FROM requests WHERE run_id = ? AND concurrency = 6 AND round > 0",
                    [fixtures.USERS_RUN])
    at = app(monkeypatch, db, "views/run.py")
    at.selectbox(key="run_id").set_value(fixtures.USERS_RUN).run()
    assert not at.exception, at.exception
    assert at.subheader[0].value.startswith("Max users 4 ")
    assert "not in steady state, left out: 6" in at.subheader[0].value
    per_level = at.dataframe[0].value.set_index("users")
    assert per_level.loc[6, "steady state"] == False  # noqa: E712 (a numpy bool)
    assert per_level.loc[6, "why not steady"].startswith("too short to check")


def test_run_page_shows_context_and_cached_tokens_per_turn(monkeypatch, users_db):
    at = app(monkeypatch, users_db, "views/run.py")
    at.selectbox(key="run_id").set_value(fixtures.TURNS_RUN).run()
    assert not at.exception, at.exception
    assert metrics(at)["Max C"] == "2"
    assert "Per turn: context length and cached tokens" in [s.value for s in at.subheader]
    table = at.dataframe[1]
    assert_human(table)
    turns = table.value
    assert list(turns.columns[:6]) == ["C", "turn", "prompt tokens", "cached tokens",
                                       "cached share", "mean TTFT (ms)"]
    assert list(turns["turn"]) == [1, 2, 3] * len(fixtures.TURN_LEVELS)
    expected_prompt = [fixtures.turn_prompt(t) for t in (1, 2, 3)]
    expected_cached = [fixtures.turn_cached(t) for t in (1, 2, 3)]
    assert list(turns["prompt tokens"][:3]) == expected_prompt
    assert list(turns["cached tokens"][:3]) == expected_cached  # grows turn by turn
    assert list(turns["cached share"][:3]) == pytest.approx([0, 256 / 384, 512 / 640])
    assert list(turns["mean TTFT (ms)"][:3]) == [fixtures.turn_ttft(1, t) for t in (1, 2, 3)]
    assert config(table)["cached share"]["type_config"]["format"] == "percent"
    assert "Turns CSV (6 rows)" in downloads(at)

    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                 if "context length" in c.proto.spec)
    assert chart["layout"]["xaxis"]["title"]["text"].startswith("context length")
    ttft = [t for t in chart["data"] if t["name"].endswith("TTFT")]
    cached = [t for t in chart["data"] if t["name"].endswith("cached tokens")]
    assert [t["name"] for t in ttft] == ["C=1: TTFT", "C=2: TTFT"]  # one trace per level
    assert [t["yaxis"] for t in cached] == ["y2", "y2"]


def test_ttft_against_context_draws_a_line_per_level(users_db):
    fig = charts.ttft_vs_context(data.turns(users_db, fixtures.TURNS_RUN), users=True)
    assert [t.name for t in fig.data] == ["U=1: TTFT", "U=1: cached tokens", "U=2: TTFT",
                                          "U=2: cached tokens"]
    assert list(fig.data[0].x) == [fixtures.turn_prompt(t) for t in (1, 2, 3)]
    assert list(fig.data[0].y) == [fixtures.turn_ttft(1, t) for t in (1, 2, 3)]
    assert list(fig.data[1].y) == [fixtures.turn_cached(t) for t in (1, 2, 3)]


def test_turns_csv_carries_the_per_turn_figures(users_db):
    turns = data.turns(users_db, fixtures.TURNS_RUN)
    csv = pd.read_csv(io.StringIO(data.to_csv(turns).decode()))
    assert len(csv) == 6
    assert {"concurrency", "turn", "mean_prompt_tokens", "mean_cached_tokens",
            "cached_share", "mean_ttft_ms", "mean_tps"} <= set(csv.columns)
    assert list(csv["mean_cached_tokens"][:3]) == [0, 256, 512]


def test_a_single_turn_run_has_no_turns_section(monkeypatch, users_db):
    at = app(monkeypatch, users_db, "views/run.py")
    at.selectbox(key="run_id").set_value("fixture-nvme").run()
    assert not any("Per turn" in s.value for s in at.subheader)
    assert not any(label.startswith("Turns CSV") for label in downloads(at))


def test_runs_page_lists_mode_profile_turns_and_max_users(monkeypatch, users_db):
    at = app(monkeypatch, users_db)
    assert metrics(at)["runs shown"] == "5"
    assert_runs_table(at.dataframe[0])
    frame = at.dataframe[0].value.set_index("run")
    users = frame.loc[fixtures.USERS_RUN]
    assert users["verdict"] == HEADLINE
    assert users["Max users (measured)"] == 6 and users["estimated users"] == 8
    assert pd.isna(users["Max C"]) and pd.isna(users["chat users"])
    assert (users["mode"], users["users profile"]) == ("users", "chat")
    assert frame.loc[fixtures.TURNS_RUN, "turns"] == 3
    assert pd.isna(frame.loc[fixtures.USERS_RUN, "turns"])  # single-turn: not set
    assert frame.loc[fixtures.PAIRED_RUN, "Max C"] == 2
    assert frame.loc[fixtures.PAIRED_RUN, "mode"] == "closed"
    assert (frame["prompt tokens (set)"] == 128).all()
    assert any("users run" in c.value for c in at.caption)


def test_capacity_page_lists_the_users_run_by_its_max_users(monkeypatch, users_db):
    at = app(monkeypatch, users_db, "views/capacity.py")
    assert not at.exception, at.exception
    assert_runs_table(at.dataframe[0])
    table = at.dataframe[0].value.set_index("run")
    users = table.loc[fixtures.USERS_RUN]
    assert users["Max users (measured)"] == 6 and users["estimated users"] == 8
    assert users["estimated from run"] == fixtures.PAIRED_RUN
    assert users["users per Max C (measured)"] == 3.0
    assert pd.isna(users["Max C"])
    assert users["passing levels (C; U of a users run)"] == "4,6"
    assert metrics(at)["best Max users (measured)"] == "6"
    at.number_input[2].set_value(3.0).run()  # chat users per C: the estimate follows
    users = at.dataframe[0].value.set_index("run").loc[fixtures.USERS_RUN]
    assert users["estimated users"] == 6
    assert users["verdict"].endswith("estimate Max C 2 x 3 = 6 (run fixture-closed)")


def test_compare_page_draws_users_runs_against_u(monkeypatch, users_db):
    at = app(monkeypatch, users_db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(
        [fixtures.PAIRED_RUN, fixtures.USERS_RUN]).run()
    assert not at.exception, at.exception
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert spec["layout"]["xaxis"]["title"]["text"] == "concurrency C / users U"
    names = [t["name"] for t in spec["data"]]
    assert any(n.endswith("(users)") for n in names) and not names[0].endswith("(users)")
    caps = at.dataframe[1].value.set_index("run")
    assert caps.loc[fixtures.USERS_RUN, "Max users (measured)"] == 6
    assert caps.loc[fixtures.PAIRED_RUN, "Max C"] == 2
    assert any("user count U" in c.value for c in at.caption)


def test_compare_page_shows_prompt_lengths_that_differ(monkeypatch, tmp_path):
    db = tmp_path / "bench.duckdb"
    fixtures.build(db)
    Store(db).update_run("fixture-nvme", input_tokens=8192)
    at = app(monkeypatch, db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(["fixture-mem", "fixture-nvme"]).run()
    names = [t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert any(n.endswith("8192 prompt tokens") for n in names)
    caps = at.dataframe[1].value.set_index("run")
    assert caps.loc["fixture-nvme", "prompt tokens (set)"] == 8192


def test_users_table_and_factors():
    levels = pd.DataFrame([
        {"run_id": "u", "concurrency": 3, "mean_ttft_ms": 300.0, "mean_tps": 30.0, "errors": 0,
         "duty_cycle": 0.6},
        {"run_id": "c", "concurrency": 2, "mean_ttft_ms": 300.0, "mean_tps": 30.0, "errors": 0,
         "duty_cycle": None}])
    runs = pd.DataFrame([{"run_id": "u", "profile": "agentic", "duty_target": 2 / 3},
                         {"run_id": "c", "profile": None, "duty_target": None}])
    row = data.users_table(levels, runs, {"u": "c"}, Targets()).iloc[0]
    assert (row["max_users"], row["estimated_users"], row["factor"]) == (3, 3, "x 1.5")
    assert row["measured_factor"] == 1.5
    by_target = users.estimate(3, 0.4, 2, None, 0.5, Targets())
    assert (by_target.factor, by_target.how, by_target.estimated_users) == (
        2.0, "/ target duty 0.50", 4)
    by_measured = users.estimate(3, 0.4, 2, None, None, Targets())
    assert (by_measured.factor, by_measured.how) == (2.5, "/ measured duty 0.40")
    unknown = users.estimate(3, None, 2, None, None, Targets())
    assert (unknown.factor, unknown.how, unknown.estimated_users) == (None, "", None)
    assert data.run_settings(None) == {"profile": None, "duty_target": None, "think_s": None,
                                       "turns": None}
    stored = StoredRun(RunConfig(url="u", model="m", mode="users", profile="chat", turns=4))
    assert data.run_settings(stored.to_json()) == {"profile": "chat", "duty_target": None,
                                                   "think_s": None, "turns": 4}


def test_level_title():
    assert charts.level_title(["a"], ()) == "concurrency C"
    assert charts.level_title(["a"], {"a"}) == "users U"
    assert charts.level_title(["a", "b"], {"a"}) == "concurrency C / users U"


def test_compare_of_users_runs_only_names_its_levels_users(monkeypatch, users_db):
    store = Store(users_db)
    run = store.run(fixtures.USERS_RUN)
    store.create_run(RunRow(run_id="fixture-users-again", **{k: getattr(run, k) for k in (
        "device", "engine", "model", "table_placement", "mode", "levels", "rounds",
        "input_tokens", "output_tokens", "config")}))
    store.write_requests("fixture-users-again", fixtures.users_records())
    store.finish_run("fixture-users-again", "complete")
    at = app(monkeypatch, users_db, "views/compare.py")
    at.multiselect(key="compare_runs").set_value(
        [fixtures.USERS_RUN, "fixture-users-again"]).run()
    assert not at.exception, at.exception
    diff = at.dataframe[0].value
    assert "users" in diff.columns and "C" not in diff.columns
