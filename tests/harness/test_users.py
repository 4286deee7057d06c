"""`run --mode users`: simulated users who think between requests, measured max users beside
the factor estimate, and the checks that refuse bad users settings."""

import collections
import dataclasses
import json
import math
import random
import statistics
import subprocess
from datetime import datetime

import httpx
import pytest

from harness.config import PROFILE_DUTY, RunConfig, StoredRun, ThinkModel, think_cv
from harness.records import RequestRecord
from harness.results.metrics import Targets
from harness.results.report import search_plan
from harness.results.run_row import RunRow
from harness.results.search import plan
from harness.results.store import Store
from harness.results.users import (
    LeadIn,
    UsersEstimate,
    duty_cycle,
    in_flight,
    paired_concurrency_run,
    steady_state,
    worst_lead_in,
)
from harness.run.think import LevelThink, Pacing, pace_tolerance
from tests.helpers import ROOT, run_cli

# A server whose first token waits 3 ms per request in flight (this one included), as when one
# engine prefills every request in turn: closed, TTFT(C) ~ 3 C ms, so against a 100 ms target
# Max C is ~33 (large, so that one level more or less is a small share of it), and the chat
# factor predicts ~4 x 33 users.
PREFILL_BOUND = ("--ttft-ms", "3", "--itl-ms", "1", "--shared-prefill")
TARGET = ("--ttft-max-ms", "100", "--tps-min", "1")
SHORT = ("--input-tokens", "16", "--output-tokens", "8", "--no-progress")


@pytest.mark.parametrize("dist", ["exponential", "constant", "lognormal"])
def test_think_time_gives_the_profile_duty_cycle(dist):
    rng = random.Random(7)
    for profile, duty in PROFILE_DUTY.items():
        think = ThinkModel(duty_cycle=duty, dist=dist)
        draws = [think.draw(rng, think.mean_for(2.0)) for _ in range(20_000)]
        busy = 2.0 * len(draws)
        assert busy / (busy + sum(draws)) == pytest.approx(duty, rel=0.03), profile
        spread = statistics.pstdev(draws) / statistics.fmean(draws)
        assert spread == pytest.approx({"exponential": 1.0, "constant": 0.0,
                                        "lognormal": 0.95}[dist], abs=0.06)
    always_busy = ThinkModel(duty_cycle=1.0, dist=dist)
    assert always_busy.draw(rng, always_busy.mean_for(5.0)) == 0.0  # never thinks
    fixed = ThinkModel(fixed_s=0.5, dist=dist)
    draws = [fixed.draw(rng, fixed.mean_for(99.0)) for _ in range(20_000)]
    assert statistics.fmean(draws) == pytest.approx(0.5, rel=0.03)


@pytest.mark.parametrize("kwargs", [{"duty_cycle": 0.0}, {"duty_cycle": 1.5},
                                    {"fixed_s": -1.0}, {}, {"duty_cycle": 0.5, "fixed_s": 1.0},
                                    {"duty_cycle": 0.5, "dist": "pareto"}])
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


def test_paired_concurrency_run_is_the_newest_complete_one_of_the_same_setup():
    base = RunRow(run_id="users", device="spark", engine="mock", model="m",
                  table_placement="nvme", input_tokens=128, output_tokens=128)

    def closed(run_id: str, day: int, **fields: object) -> RunRow:
        return dataclasses.replace(base, **{"run_id": run_id, "mode": "closed",
                                            "status": "complete",
                                            "started_at": datetime(2026, 1, day), **fields})

    runs = [closed("old", 1), closed("new", 2), closed("bad", 3, status="aborted"),
            closed("mem", 4, table_placement="device")]
    assert paired_concurrency_run(runs, dataclasses.replace(base, mode="users")).run_id == "new"
    assert paired_concurrency_run(runs, dataclasses.replace(base, input_tokens=4096)) is None


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
    # users then lies within 15% of what the chat duty cycle predicts. 12 rounds: on this
    # server the duty follows Z steeply, and fewer rounds leave each level's Z noisier.
    below, above = math.ceil(0.87 * 4 * max_c), math.floor(1.15 * 4 * max_c)
    users = run_cli("run", "--url", url, "--mode", "users", "--profile", "chat", "--levels",
                    f"{below},{above}", "--rounds", "12", "--db", db, *SHORT, *TARGET, "--json",
                    timeout=240)
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
    assert best in verdicts, summary["levels"]  # no level passed in steady state: say which
    assert verdicts[best] and not verdicts[best + 1]  # below 16 users: to the integer
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
    (("--think-dist", "constant"), "--think-dist needs --mode users"),
    (("--mode", "users", "--think-dist", "pareto"), "--think-dist: invalid choice"),
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
    last new user sent its first request (level 16 carries on users 0-3 of level 4, who are
    in its load from the start). A fresh run's first level sizes the spread by one request
    sent alone before any user's."""
    url = mock_process("--ttft-ms", "20", "--itl-ms", "2")
    db = tmp_path / "u.duckdb"
    out = run_cli("run", "--url", url, "--mode", "users", "--profile", "chat", "--levels",
                  "4,16", "--rounds", "3", "--db", str(db), *SHORT, *TARGET, "--json")
    assert out.returncode == 0, out.stderr
    run_id = json.loads(out.stdout)["run_id"]
    read = {t["request_id"]: t["body_read"]
            for t in httpx.get(url[:-3] + "/mock/timings").json()}
    stored = Store(db).requests(run_id)
    for c, new in ((4, range(4)), (16, range(4, 16))):
        leads = {rid: at for rid, at in read.items() if f"-lead-c{c}-" in rid}
        first = {w: min(at for rid, at in leads.items() if rid.endswith(f"-w{w}"))
                 for w in new}
        assert min(read[r.request_id] for r in stored if r.concurrency == c) > max(
            first.values())
    alone = [at for rid, at in read.items() if rid.endswith("-lead-c4-r0-w4")]
    assert len(alone) == 1 and alone[0] < min(at for rid, at in read.items()
                                              if "-lead-c4-" in rid and rid[-3:] != "-w4")


def test_the_users_of_a_level_carry_on_into_the_next(tmp_path, mock_process):
    """Levels 4 then 8: users 0-3 carry on, mid-request and mid-think, so level 8 starts in
    the phases they were in (a level-4 request of theirs still streams when level 8's first
    is read, and ends whole) and only users 4-7 arrive. By the server's own log (busy users,
    duty 0.9, and requests of 0.8 s that outlast the level's own bookkeeping: that some of
    users 0-3 are mid-request then is near certain)."""
    url = mock_process("--ttft-ms", "20", "--itl-ms", "100")
    db = tmp_path / "carry.duckdb"
    out = run_cli("run", "--url", url, "--mode", "users", "--duty-cycle", "0.9", "--levels",
                  "4,8", "--rounds", "3", "--db", str(db), *SHORT, *TARGET, "--json")
    assert out.returncode == 0, out.stderr
    log = [t for t in httpx.get(url[:-3] + "/mock/timings").json() if "-c0-" not in
           t["request_id"]]  # not the prompt calibration's
    user = {t["request_id"]: int(t["request_id"].rsplit("-w", 1)[1]) for t in log}
    begun = min(t["body_read"] for t in log if "-c8-" in t["request_id"])
    across = [t for t in log if "-c4-" in t["request_id"] and t["body_read"] < begun
              < t["last_write"]]
    assert across and all(t["tokens"] == 8 and user[t["request_id"]] < 4 for t in across)
    assert {user[t["request_id"]] for t in log if "-c8-" in t["request_id"]} == set(range(8))
    alone = [t for t in log if "-lead-" in t["request_id"] and "-r0-" in t["request_id"]]
    assert len(alone) == 1 and alone[0]["request_id"].endswith("-lead-c4-r0-w4")


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


# A server whose token rate is shared by the streams in flight (2 ms per token per stream), so
# a request's latency follows the load the other users put on it.
SHARED_DECODE = {"ttft_ms": 5, "itl_ms": 2, "shared_decode": True}


def _pooled_r(records: list[RequestRecord]) -> float:
    """Pearson's r of think against the latency it follows, pooled within levels."""
    pairs = []
    for u in {r.concurrency for r in records}:
        level = [r for r in records if r.concurrency == u]
        lat = statistics.fmean(r.latency_ms for r in level)
        think = statistics.fmean(r.think_ms for r in level)
        pairs += [(r.latency_ms - lat, r.think_ms - think) for r in level]
    return (sum(a * b for a, b in pairs)
            / math.sqrt(sum(a * a for a, _ in pairs) * sum(b * b for _, b in pairs)))


def test_thinks_do_not_follow_the_latency_before_them_and_the_duty_lands(sweep):
    """Agentic users (each profile's duty lands in the search test below too). Each user
    thinks around the level's one mean, whatever its own last request took: pooled within
    levels, think and the latency it follows are uncorrelated (|r| < 0.12; over 1,008 requests,
    so that sampling alone leaves |r| < 0.12 with p > 0.9999), and the run's duty cycle lands
    within 2 points of the profile's. Level 24 carries level 12's users on."""
    swept = sweep(SHARED_DECODE, mode="users", profile="agentic", levels=(12, 24), rounds=28,
                  input_tokens=16, output_tokens=8)
    records = [r for r in swept.store.requests(swept.run_id) if r.think_ms is not None]
    assert len(records) == (12 + 24) * 28
    assert abs(_pooled_r(records)) < 0.12
    assert duty_cycle(records) == pytest.approx(PROFILE_DUTY["agentic"], abs=0.02)
    proc = run_cli("summary", "--db", str(swept.store.path), "--json")
    summary = json.loads(proc.stdout)
    zs = swept.store.user_levels(swept.run_id)
    for level in summary["levels"]:
        assert level["think_mean_ms"] == pytest.approx(zs[level["concurrency"]], rel=1e-3)
        assert level["steady_state"] is True, level["steady_state_note"]
        assert level["response_time_law_error_pct"] is not None
    assert summary["users"]["unsteady_levels"] == []


def _users_level(users: int, active: int, rounds: int, latency_ms: float, think_ms: float,
                 seed: int = 3, dist: str = "exponential") -> list[RequestRecord]:
    """`active` of `users` users each storing `rounds` requests, thinks of `dist`."""
    model = ThinkModel(fixed_s=think_ms / 1000, dist=dist)
    rng = random.Random(seed)
    out = []
    for w in range(active):
        sent = rng.uniform(0, (latency_ms + think_ms) / 1000)
        for k in range(rounds):
            think = model.draw(rng, think_ms)
            out.append(RequestRecord(f"u{w}-{k}", users, k, w, sent, ttft_ms=10.0,
                                     latency_ms=latency_ms, output_tokens=8, think_ms=think))
            sent += (latency_ms + think) / 1000
    return out


def test_a_level_cut_short_or_off_its_law_is_flagged():
    """Steady users pass; one request per user is too short to check; a level where half the
    users never came breaks the response-time law; a duty far off its target is flagged."""
    exponential = think_cv("exponential")
    assert steady_state(_users_level(8, 8, 12, 100.0, 300.0), 8, 0.25, exponential).flag is None
    assert "too short to check" in steady_state(_users_level(8, 8, 1, 100.0, 300.0), 8,
                                                0.25, exponential).flag
    assert "response-time law is +" in steady_state(_users_level(8, 4, 24, 100.0, 300.0), 8,
                                                    0.25, exponential).flag
    busy = steady_state(_users_level(8, 8, 12, 300.0, 100.0), 8, 0.25, exponential)
    assert "against 0.25" in busy.flag and busy.duty_cycle == pytest.approx(0.75, abs=0.05)


@pytest.mark.parametrize(("users", "rounds"), [(2, 6), (3, 6), (8, 3)])
def test_steady_small_levels_are_seldom_flagged_for_their_random_thinks(users, rounds):
    """A level of few requests lands its duty off the target by the luck of its thinks' draws;
    the check allows for that (3 standard errors flag ~0.3 % of steady levels in theory; with
    batch means alone, 2-11 of these 200 seeded levels were flagged)."""
    flagged = sum(steady_state(_users_level(users, users, rounds, 110.0, 55.0, seed=s), users,
                               2 / 3, think_cv("exponential")).flag is not None
                  for s in range(200))
    assert flagged <= 2
    # constant thinks half their target's length: no luck of the draws explains it
    constant = _users_level(users, users, rounds, 110.0, 55.0, dist="constant")
    assert "against 0.50" in steady_state(constant, users, 0.5, think_cv("constant")).flag


def test_a_users_level_cut_short_is_flagged_in_the_summary_and_json(tmp_path, mock_process):
    """One round of 8 users: the last users to arrive may store nothing before the count is
    sent, and no window holds a request from all; the summary and --json say so and Max users
    leaves the level out."""
    url = mock_process("--ttft-ms", "20", "--itl-ms", "2")
    db = str(tmp_path / "cut.duckdb")
    out = run_cli("run", "--url", url, "--mode", "users", "--profile", "chat", "--levels",
                  "8", "--rounds", "1", "--db", db, *SHORT, *TARGET, "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    [level] = summary["levels"]
    assert level["steady_state"] is False and "too short" in level["steady_state_note"]
    assert level["passes"] and summary["max_users"] == 0
    assert summary["users"]["unsteady_levels"] == [8]
    text = run_cli("summary", summary["run_id"], "--db", db, *TARGET).stdout
    assert "U=8 is not in steady state, left out of Max users" in " ".join(text.split())


def test_max_users_names_the_levels_within_noise_of_the_targets(tmp_path):
    """Three repeats of a users run whose rounds' mean TPS scatter by ~2.4 tok/s: U=8 passes
    at 20.5 tok/s, but its interval holds the 20 tok/s target, so its verdict lies within its
    noise and the summary says so beside Max users; U=4, at 30, is certain."""
    db = tmp_path / "noise.duckdb"
    store = Store(db)
    store.initialise()
    config = RunConfig(url="http://127.0.0.1:9/v1", model="m", mode="users", profile="chat",
                       levels=(4, 8), rounds=12, repeat=3)
    store.create_run(RunRow(run_id="noisy", device="", engine="", model="m", table_placement="",
                            target_url=config.url, api="chat", mode="users",
                            levels=[4, 8], rounds=12, input_tokens=128,
                            output_tokens=128, label="",
                            config=StoredRun(config).to_json()))
    scatter = (-4, -2, 0, 2, 4, -3, 3, -1, 1, 0, -2, 2)  # per round, summing to 0
    rows = []
    for u, tps in ((4, 30.0), (8, 20.5)):
        for repeat in range(3):
            for w in range(u):
                sent = 1000.0 * (repeat + 1) + u * 100 + w * 0.05
                for k, off in enumerate(scatter):
                    latency = 128 / (tps + off) * 1000
                    rows.append(RequestRecord(
                        f"noisy-c{u}-p{repeat}-r{k}-w{w}", u, k, w, sent, ttft_ms=50.0,
                        latency_ms=latency, output_tokens=128, think_ms=3 * latency,
                        repeat=repeat))
                    sent += 4 * latency / 1000
    store.write_requests("noisy", rows)
    store.finish_run("noisy", "complete")
    proc = run_cli("summary", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["users"]["uncertain_levels"] == [8]
    assert all(level["steady_state"] for level in summary["levels"])
    assert summary["max_users"] == 8
    text = run_cli("summary", "--db", str(db)).stdout
    assert "levels within noise of the targets: 8" in " ".join(text.split())


def test_the_level_think_follows_every_users_requests_not_ones_own():
    """Z is (1 - d) / d times the mean of the level's requests since all users arrived, over
    its last max(U, 24): a user's own slow request moves it by 1 / 24 of its excess, and the
    thinks after it repay what the level's duty owes for it by 1 / 24 each; a fixed
    --think-time never moves."""
    think = LevelThink(ThinkModel(duty_cycle=0.25), users=4, typical_latency_s=1.0)
    assert think.z_s == pytest.approx(3.0)
    think.observe(9.0)  # a slow lead-in while users still arrive
    think.restart()  # all have arrived: measured afresh
    rng = random.Random(1)
    for _ in range(30):  # each request, then the think after it
        think.observe(2.0)
        assert think.z_s == pytest.approx(6.0)
        think.draw(rng)
    think.observe(14.0)  # one user's very slow request
    moving = 3 * (2.0 + 12.0 / 24)
    owed = 3 * 14.0 - moving  # the duty's share of it that the moving average leaves out
    assert think.z_s == pytest.approx(moving + owed / 24)
    draws = [think.draw(rng, stored=True) for _ in range(3)]
    assert len(set(draws)) == 3 and think.mean_drawn_around_s is not None
    assert moving < think.mean_drawn_around_s < moving + owed / 24
    fixed = LevelThink(ThinkModel(fixed_s=0.5), users=4, typical_latency_s=1.0)
    fixed.observe(30.0)
    assert fixed.z_s == 0.5


def test_requests_in_flight_are_weighed_by_time():
    # one request over the whole window, a second over its middle half: 1.5 on average
    mean, sd = in_flight([(0.0, 4.0), (1.0, 3.0)], 0.0, 4.0)
    assert mean == pytest.approx(1.5) and sd == pytest.approx(0.5)
    mean, sd = in_flight([(-1.0, 10.0)] * 3, 0.0, 2.0)  # spans clipped to the window
    assert (mean, sd) == (pytest.approx(3.0), pytest.approx(0.0))


def test_a_resumed_users_level_sends_only_the_requests_it_lacks(sweep):
    """A users pass stores U x rounds requests; a pass cut short (here: its later batches
    lost) is resumed with the rest only, numbered on from the last stored round, so ids stay
    unique and the level ends with exactly U x rounds."""
    first = sweep(SHARED_DECODE, mode="users", profile="chat", levels=(4,), rounds=6,
                  input_tokens=16, output_tokens=8)
    stored = first.store.requests(first.run_id)
    assert len(stored) == 4 * 6
    lost = [r.request_id for r in sorted(stored, key=lambda r: r.sent_at)[10:]]
    with first.store._connect() as con:  # as if the run had stopped after 10 stored requests
        con.execute("DELETE FROM requests WHERE run_id = ? AND request_id IN (SELECT unnest(?))",
                    [first.run_id, lost])
        con.execute("UPDATE runs SET status = 'aborted' WHERE run_id = ?", [first.run_id])
    kept = {r.request_id: r.round for r in first.store.requests(first.run_id)}
    assert len(kept) == 10
    again = sweep(first.server, store=first.store, run_id=first.run_id, resume=True,
                  config=first.config)
    after = again.store.requests(first.run_id)
    assert len(after) == 4 * 6 and len({r.request_id for r in after}) == 4 * 6
    new = [r for r in after if r.request_id not in kept]
    assert len(new) == 14 and min(r.round for r in new) == max(kept.values()) + 1
    assert again.store.run(first.run_id).status == "complete"


def test_repeat_runs_every_users_level_again_and_gives_it_an_interval(tmp_path, mock_process):
    """`--repeat 3` in users mode: each pass of a level stores its own U x rounds requests,
    the level's mean TPS gets the range over repeats, and the summary says which levels lie
    within noise of the targets (here none: 1 tok/s is far below every level)."""
    url = mock_process("--ttft-ms", "5", "--itl-ms", "2")
    db = str(tmp_path / "rep.duckdb")
    out = run_cli("run", "--url", url, "--mode", "users", "--profile", "agentic", "--levels",
                  "4", "--rounds", "3", "--repeat", "3", "--db", db, *SHORT, *TARGET, "--json",
                  timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    rows = Store(db).requests(summary["run_id"])
    assert sorted(collections.Counter(r.repeat for r in rows).items()) == [(0, 12), (1, 12),
                                                                           (2, 12)]
    [level] = summary["levels"]
    assert level["tps_ci"]["repeats"] == 3 and level["tps_ci"]["low"] <= level["mean_tps"]
    assert summary["users"]["uncertain_levels"] == [] and summary["max_users"] == 4
    assert len(Store(db).user_levels(summary["run_id"])) == 1
    text = run_cli("summary", summary["run_id"], "--db", db, *TARGET).stdout
    assert "no level within noise of the targets" in " ".join(text.split())


def test_a_level_paced_off_its_duty_by_more_than_its_noise_is_flagged():
    """16 users, 48 requests: d (1 - d) cv / sqrt n puts a chat level's duty noise at 0.027,
    so a duty of 0.34 (3.3 of them off 0.25) is flagged and 0.31 (2.2) is not; thinks held
    constant here, so the duty is exactly what the level was paced at."""
    exponential = think_cv("exponential")
    for duty, flagged in ((0.34, True), (0.31, False)):
        level = _users_level(16, 16, 3, 1000.0, 1000.0 * (1 - duty) / duty, dist="constant")
        check = steady_state(level, 16, 0.25, exponential)
        assert check.duty_cycle == pytest.approx(duty, abs=1e-3)
        assert (check.flag is not None and "against 0.25" in check.flag) is flagged, check.flag


def test_a_lead_in_that_reached_its_cap_unsettled_flags_its_level():
    steady = _users_level(8, 8, 12, 100.0, 300.0)
    settled = LeadIn(requests=24, settled=True, paced_duty=0.25)
    assert steady_state(steady, 8, 0.25, 1.0, settled).flag is None
    capped = steady_state(steady, 8, 0.25, 1.0, LeadIn(40, False, 0.31))
    assert "not paced at duty 0.25 (paced at 0.31) after 5.0 lead-in requests per user" in (
        capped.flag or "")
    assert worst_lead_in([settled, LeadIn(40, False, 0.31), LeadIn(48, False, 0.2)]) == (
        LeadIn(40, False, 0.31))


def test_pacing_settles_once_a_whole_window_was_paced_at_the_target():
    """Z a cycle behind a latency that climbed: paced above the target until the window holds
    only requests whose Z had caught up."""
    pacing = Pacing(0.25, window=24)
    for _ in range(23):
        pacing.add(1.0, 3.0)
    assert not pacing.settled  # not a whole window yet
    pacing.add(1.0, 3.0)
    assert pacing.settled and pacing.duty == pytest.approx(0.25)
    for _ in range(12):  # latency doubled; Z still follows the old one
        pacing.add(2.0, 3.0)
    assert not pacing.settled and pacing.duty > 0.25 + pace_tolerance(0.25)
    for _ in range(24):
        pacing.add(2.0, 6.0)
    assert pacing.settled
    assert Pacing(None, window=24).settled  # a fixed think time has nothing to settle


def test_a_flagged_level_never_decides_max_users(tmp_path):
    """U=8 passes but its users were paced far off the chat duty (thinks a third of what chat
    users think): it is flagged, Max users is U=4, and the search plans around U=8."""
    db = tmp_path / "flagged.duckdb"
    store = Store(db)
    store.initialise()
    config = RunConfig(url="http://127.0.0.1:9/v1", model="m", mode="users", profile="chat",
                       levels=(4, 8, 16), rounds=12, search=True)
    store.create_run(RunRow(run_id="flagged", device="", engine="", model="m",
                            table_placement="", target_url=config.url, api="chat",
                            mode="users", levels=[4, 8, 16], rounds=12,
                            input_tokens=128, output_tokens=128, label="",
                            config=StoredRun(config).to_json()))
    rows = []
    for u, tps, think in ((4, 40.0, 3.0), (8, 30.0, 1.0), (16, 10.0, 3.0)):
        latency = 128 / tps * 1000
        level = _users_level(u, u, 12, latency, think * latency, dist="constant")
        rows += [dataclasses.replace(r, request_id=f"flagged-c{u}-r{r.round}-w{r.worker}",
                                     sent_at=r.sent_at + 1000.0 * u, output_tokens=128)
                 for r in level]
    store.write_requests("flagged", rows)
    store.finish_run("flagged", "complete")
    summary = json.loads(run_cli("summary", "--db", str(db), "--json").stdout)
    by_users = {lv["concurrency"]: lv for lv in summary["levels"]}
    assert by_users[8]["passes"] and not by_users[8]["steady_state"]
    assert summary["max_users"] == 4 and summary["users"]["unsteady_levels"] == [8]
    found = search_plan(store, "flagged", config, Targets())
    assert found.unsettled == (8,) and found.max_c == 4
    assert found.next_probe is not None and found.next_probe not in (4, 8, 16)


def test_the_search_probes_around_unsettled_levels():
    """A bisection's midpoint that did not settle gives way to the nearest level that may;
    with none left between the bracket's ends the search stops and says why."""
    assert plan({4: True, 16: False}, [], unsettled={10}).next_probe == 9
    assert plan({4: True, 16: False}, [], unsettled={9, 10}).next_probe == 11
    stuck = plan({4: True, 6: False}, [], unsettled={5})
    assert stuck.next_probe is None and not stuck.exact and stuck.max_c == 4
    assert "U=5 not in steady state" in stuck.how
    assert plan({4: True}, [], unsettled={8}).next_probe == 7


@pytest.mark.parametrize(("profile", "tps_min"), [("chat", "50"), ("agentic", "20")])
def test_a_users_search_on_a_server_slowed_by_its_load_lands_the_profile_duty(
        tmp_path, mock_process, profile, tps_min):
    """Each token waits 2 ms per stream in flight, so a level's latency climbs with its users
    and a Z carried over from another level paces them off the duty until it catches up. Every
    stored level's lead-in either settled (its last cycle paced within tolerance) or flagged
    the level, every level's duty is within its noise of the target or the level is flagged,
    and the run's duty, over 1,000+ requests (a standard error under ~0.01), is the profile's
    within 0.02."""
    url = mock_process("--ttft-ms", "5", "--itl-ms", "2", "--shared-decode")
    db = str(tmp_path / "climb.duckdb")
    out = run_cli("run", "--url", url, "--mode", "users", "--profile", profile, "--levels",
                  "8,16,32", "--rounds", "6", "--search", "--db", db, "--tps-min", tps_min,
                  "--ttft-max-ms", "10000", *SHORT, "--json", timeout=240)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    store = Store(db)
    target = PROFILE_DUTY[profile]
    lead_ins = store.lead_ins(summary["run_id"])
    records = [r for r in store.requests(summary["run_id"]) if r.think_ms is not None]
    assert len(records) >= 1000
    for level in summary["levels"]:
        u = level["concurrency"]
        lead_in = lead_ins[u]
        assert lead_in.settled is not None and lead_in.paced_duty is not None
        if level["steady_state"]:
            assert lead_in.settled
            assert abs(lead_in.paced_duty - target) <= pace_tolerance(target)
            mine = [r for r in records if r.concurrency == u]
            latency = [r.latency_ms for r in mine]
            noise = (target * (1 - target) * math.hypot(1, statistics.stdev(latency)
                                                        / statistics.fmean(latency))
                     / math.sqrt(len(mine)))
            assert abs(level["duty_cycle"] - target) <= 3 * noise + 0.005, level
        assert level["lead_in_cycles"] is not None and level["lead_in_cycles"] > 0
    assert duty_cycle(records) == pytest.approx(target, abs=0.02)
    assert summary["max_users"] > 0
