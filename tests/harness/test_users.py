"""`run --mode users`: simulated users who think between requests, measured max users beside
the factor estimate, and the checks that refuse bad users settings."""

import json
import math
import random
import statistics
import subprocess

import httpx
import pytest

from harness.config import PROFILE_DUTY, ThinkModel
from harness.records import RequestRecord
from harness.results.store import Store
from harness.results.users import UsersEstimate, duty_cycle, paired_closed_run
from tests.conftest import ROOT, run_cli

# A server whose first token waits 3 ms per request in flight (this one included), as when one
# engine prefills every request in turn: closed, TTFT(C) ~ 3 C ms, so against a 100 ms target
# Max C is ~33 (large, so that one level more or less is a small share of it), and the chat
# factor predicts ~4 x 33 users.
PREFILL_BOUND = ("--ttft-ms", "3", "--itl-ms", "1", "--shared-prefill")
TARGET = ("--ttft-max-ms", "100", "--tps-min", "1")
SHORT = ("--input-tokens", "16", "--output-tokens", "8", "--no-progress")


def test_think_time_gives_the_profile_duty_cycle():
    rng = random.Random(7)
    for profile, duty in PROFILE_DUTY.items():
        think = ThinkModel(duty_cycle=duty)
        draws = [think.draw(rng, 2.0) for _ in range(20_000)]
        busy = 2.0 * len(draws)
        assert busy / (busy + sum(draws)) == pytest.approx(duty, rel=0.03), profile
    assert ThinkModel(duty_cycle=1.0).draw(rng, 5.0) == 0.0  # always busy: never thinks
    fixed = [ThinkModel(fixed_s=0.5).draw(rng, 99.0) for _ in range(20_000)]
    assert statistics.fmean(fixed) == pytest.approx(0.5, rel=0.03)


@pytest.mark.parametrize("kwargs", [{"duty_cycle": 0.0}, {"duty_cycle": 1.5},
                                    {"fixed_s": -1.0}, {}, {"duty_cycle": 0.5, "fixed_s": 1.0}])
def test_think_model_refuses_what_cannot_be_a_duty_cycle(kwargs):
    with pytest.raises(ValueError):
        ThinkModel(**kwargs)


def test_duty_cycle_counts_only_requests_a_think_followed():
    records = [RequestRecord("a", 2, 0, 0, 0.0, latency_ms=100.0, think_ms=300.0),
               RequestRecord("b", 2, 1, 0, 0.0, latency_ms=200.0, think_ms=600.0),
               RequestRecord("c", 2, 2, 0, 0.0, latency_ms=5000.0)]  # the last: no think
    assert duty_cycle(records) == pytest.approx(0.25)
    assert duty_cycle(records[2:]) is None


def test_estimate_sets_measured_users_beside_max_c_times_the_factor():
    est = UsersEstimate(max_users=30, duty_cycle=0.26, max_c=8, factor=4.0)
    assert est.estimated_users == 32
    assert est.predicted_users == pytest.approx(8 / 0.26)
    assert est.measured_factor == pytest.approx(3.75)
    assert UsersEstimate(30, 0.26, None, 4.0).estimated_users is None


def test_paired_closed_run_is_the_newest_complete_one_of_the_same_setup():
    base = {"device": "spark", "engine": "mock", "model": "m", "table_placement": "nvme",
            "input_tokens": 128, "output_tokens": 128}
    runs = [{**base, "run_id": "old", "mode": "closed", "status": "complete", "started_at": 1},
            {**base, "run_id": "new", "mode": "closed", "status": "complete", "started_at": 2},
            {**base, "run_id": "bad", "mode": "closed", "status": "aborted", "started_at": 3},
            {**base, "run_id": "mem", "mode": "closed", "status": "complete", "started_at": 4,
             "table_placement": "device"}]
    assert paired_closed_run(runs, {**base, "mode": "users"})["run_id"] == "new"
    assert paired_closed_run(runs, {**base, "input_tokens": 4096}) is None


def test_measured_chat_users_are_within_15_percent_of_the_duty_cycle_prediction(
        tmp_path, mock_process):
    url = mock_process(*PREFILL_BOUND)
    db = str(tmp_path / "u.duckdb")
    closed = run_cli("run", "--url", url, "--levels", "32", "--search", "--db", db, *SHORT,
                     *TARGET, "--json", timeout=180)
    assert closed.returncode == 0, closed.stderr
    max_c = json.loads(closed.stdout)["max_c"]
    assert 28 <= max_c <= 40  # TTFT ~ 3 ms x C against 100 ms
    # Users 13% below Max C / 0.25 must pass and users 15% above must fail: the measured max
    # users then lies within 15% of what the chat duty cycle predicts.
    below, above = math.ceil(0.87 * 4 * max_c), math.floor(1.15 * 4 * max_c)
    users = run_cli("run", "--url", url, "--mode", "users", "--profile", "chat", "--levels",
                    f"{below},{above}", "--rounds", "8", "--db", db, *SHORT, *TARGET, "--json",
                    timeout=180)
    assert users.returncode == 0, users.stderr
    summary = json.loads(users.stdout)
    verdicts = {lv["concurrency"]: lv["passes"] for lv in summary["levels"]}
    assert verdicts == {below: True, above: False}, summary["levels"]
    found = summary["users"]
    assert found["max_users"] == below and found["profile"] == "chat"
    assert found["max_c"] == max_c and found["estimated_users"] == 4 * max_c  # the closed run
    assert 0.2 < found["duty_cycle"] < 0.3  # think ~3x the last request
    assert summary["max_c"] is None  # a users run has no Max C of its own
    requests = Store(db).requests(summary["run_id"])
    assert all(r.think_ms is not None for r in requests)
    assert {r.worker for r in requests if r.concurrency == above} == set(range(above))


def test_search_finds_the_highest_passing_user_count(tmp_path, mock_process):
    url = mock_process("--ttft-ms", "40", "--itl-ms", "1", "--shared-prefill")  # Max C 2
    db = str(tmp_path / "s.duckdb")
    out = run_cli("run", "--url", url, "--mode", "users", "--profile", "agentic", "--levels",
                  "2", "--rounds", "6", "--search", "--db", db, *SHORT, *TARGET, "--json",
                  timeout=180)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    verdicts = {lv["concurrency"]: lv["passes"] for lv in summary["levels"]}
    best = summary["max_users"]
    assert verdicts[best] and not verdicts[best + 1]  # known to the integer
    assert "Max users found by --search" not in out.stderr
    text = run_cli("summary", summary["run_id"], "--db", db, *TARGET)
    assert f"Max users = {best} agentic users" in text.stdout
    assert "no closed run of the same setup" in text.stdout


@pytest.mark.parametrize("flags, says", [
    (("--mode", "users", "--duty-cycle", "0"), "--duty-cycle must be in (0, 1]"),
    (("--mode", "users", "--duty-cycle", "1.5"), "--duty-cycle must be in (0, 1]"),
    (("--mode", "users", "--think-time", "-2"), "--think-time must be 0 or more seconds"),
    (("--turns", "0"), "--turns must be at least 1"),
    (("--profile", "chat"), "--profile needs --mode users"),
    (("--mode", "users", "--duty-cycle", "0.5", "--think-time", "1"), "give one"),
    (("--mode", "users", "--profile", "agentic", "--think-time", "0"), "give one"),
    (("--mode", "users", "--profile", "chat", "--duty-cycle", "0.9"), "give one"),
])
def test_bad_users_settings_get_one_sentence_and_exit_2(tmp_path, mock_server, flags, says):
    db = tmp_path / "bad.duckdb"
    out = run_cli("run", "--url", mock_server.url, "--levels", "1", "--rounds", "1",
                  "--db", str(db), *flags)
    assert out.returncode == 2
    assert says in out.stderr and "Traceback" not in out.stderr
    assert not Store(db).runs()


def test_lengths_the_server_cannot_hold_are_refused_before_anything_is_stored(
        tmp_path, mock_server):
    db = tmp_path / "len.duckdb"
    mock_server.configure(context_tokens=512, kv_pool_tokens=320, metrics=True)
    too_long = run_cli("run", "--url", mock_server.url, "--levels", "1", "--rounds", "1",
                       "--db", str(db), "--input-tokens", "600")
    assert too_long.returncode == 2
    assert "above the server's 512-token context" in too_long.stderr
    pool = run_cli("run", "--url", mock_server.url, "--levels", "1", "--rounds", "1",
                   "--db", str(db), "--input-tokens", "300")
    assert pool.returncode == 2
    assert "KV pool holds 320 tokens, too small for one request of 428" in pool.stderr
    turns = run_cli("run", "--url", mock_server.url, "--levels", "1", "--rounds", "3",
                    "--db", str(db), "--input-tokens", "100", "--output-tokens", "40",
                    "--turns", "3")
    assert turns.returncode == 2 and "x 3 turns" in turns.stderr
    assert not Store(db).runs()
    # with fewer rounds than turns a conversation ends early: 2 x 140 tokens fit the pool
    short = run_cli("run", "--url", mock_server.url, "--levels", "1", "--rounds", "2",
                    "--db", str(db), "--input-tokens", "100", "--output-tokens", "40",
                    "--turns", "3", "--no-progress")
    assert short.returncode == 0, short.stderr


def test_make_bench_passes_the_users_profile_and_turns():
    dry = subprocess.run(["make", "-n", "bench", "MODE=users", "PROFILE=agentic", "TURNS=3"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(x for x in dry.splitlines() if "engram-bench run" in x)
    assert "--mode users" in line and "--profile agentic" in line and "--turns 3" in line
    plain = subprocess.run(["make", "-n", "bench"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout
    assert "--profile" not in plain and "--turns" not in plain


def test_every_stored_request_is_sent_once_all_users_have_begun(tmp_path, mock_process):
    """Users arrive spread over a cycle and send unstored requests until the last has come:
    by the fake server's own log, no stored request of a level was read before the level's
    last user sent its first request. A fresh run's first level sizes the spread by one
    request sent alone before any user's."""
    url = mock_process("--ttft-ms", "20", "--itl-ms", "2")
    db = tmp_path / "u.duckdb"
    out = run_cli("run", "--url", url, "--mode", "users", "--profile", "chat", "--levels",
                  "4,16", "--rounds", "3", "--db", str(db), *SHORT, *TARGET, "--json")
    assert out.returncode == 0, out.stderr
    run_id = json.loads(out.stdout)["run_id"]
    read = {t["request_id"]: t["body_read"]
            for t in httpx.get(url[:-3] + "/mock/timings").json()}
    stored = Store(db).requests(run_id)
    for c in (4, 16):
        leads = {rid: at for rid, at in read.items() if f"-lead-c{c}-" in rid}
        first = {w: min(at for rid, at in leads.items() if rid.endswith(f"-w{w}"))
                 for w in range(c)}
        assert min(read[r.request_id] for r in stored if r.concurrency == c) > max(
            first.values())
    alone = [at for rid, at in read.items() if rid.endswith("-lead-c4-r0-w4")]
    assert len(alone) == 1 and alone[0] < min(at for rid, at in read.items()
                                              if "-lead-c4-" in rid and rid[-3:] != "-w4")


def test_a_server_that_does_not_say_its_context_is_told_once(tmp_path, mock_server):
    """A length no server limit can be checked against is not checked in silence."""
    db = tmp_path / "ctx.duckdb"
    silent = run_cli("run", "--url", mock_server.url, "--levels", "1,2", "--rounds", "1",
                     "--db", str(db), "--output-tokens", "8")
    assert silent.returncode == 0, silent.stderr
    said = " ".join(silent.stderr.split())
    assert said.count("does not say its context length") == 1
    assert "requests of 136 tokens cannot be checked against it" in said
    mock_server.configure(context_tokens=4096)
    told = run_cli("run", "--url", mock_server.url, "--levels", "1", "--rounds", "1",
                   "--db", str(db), "--output-tokens", "8")
    assert told.returncode == 0 and "context length" not in told.stderr
