"""The CLI as users run it: subprocesses against the fake server in its own process."""

import csv
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.results.store import Store
from runners.lifecycle import free_port
from tests.helpers import ROOT, run_cli

BUNDLED_RUNS = ROOT / "results" / "reference" / "published_runs.csv"


def test_run_json_records_every_request_and_matches_server_timing(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "50", "--itl-ms", "2")
    db = tmp_path / "bench.duckdb"
    proc = run_cli("run", "--url", url, "--model", "mock-model", "--levels", "1,4",
                   "--rounds", "3", "--json", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(lv["concurrency"], lv["requests"], lv["errors"]) for lv in out["levels"]] == [
        (1, 3, 0), (4, 12, 0)]
    assert out["max_c"] == 4 and out["chat_users"] == 16 and out["agentic_users"] == 6
    assert "Max C >= 4: no higher level was tested" in out["warnings"]
    assert out["engine"] == "mock" and out["model"] == "mock-model"
    assert out["measured_input_tokens"] == pytest.approx(128, rel=0.05)
    assert out["statistic"] == "mean"
    assert out["judged"] == {"ttft": "mean_ttft_ms", "tps": "mean_tps"}

    # Compare with what the server itself logged (same monotonic clock on this machine).
    server = {t["request_id"]: t for t in httpx.get(url[:-3] + "/mock/timings").json()}
    records = Store(db).requests(out["run_id"])
    assert len(records) == 15
    bias, tps_err = [], []
    for r in records:
        t = server[r.request_id]
        bias.append(r.ttft_ms - (t["first_write"] - t["body_read"]) * 1000)
        server_tps = t["tokens"] / (t["last_write"] - t["body_read"])
        tps_err.append(abs(r.tps - server_tps) / server_tps)
    assert r.output_tokens == 128
    # Functional bounds: the harness times from before the server read the request to after
    # it wrote, so it never reads less; a 40 ms Nagle stall would show. The tight bounds
    # (<= 1 ms bias, <= 0.5 % TPS) are `make bench-harness`'s to measure, not a test's.
    assert min(bias) >= 0, bias
    assert sum(bias) / len(bias) <= 20, bias
    assert max(tps_err) <= 0.05, tps_err


def test_capacity_csv_reproduces_published_figures():
    proc = run_cli("capacity", "--csv", str(BUNDLED_RUNS), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    with open(ROOT / "results" / "reference" / "published_capacity.csv") as f:
        published = {row["run"]: row for row in csv.DictReader(f)}
    full_data = ["deepseek-v4.1-flash_4x-spark_nvme", "qwen3.8-flash-next_1x-spark_nvme",
                 "qwen3.8-flash-next_1x-rtx-pro-6000_host"]
    for run in full_data:
        got = result[run]
        want = published[run]
        assert (got["max_c"], got["chat_users"], got["agentic_users"]) == (
            int(want["max_c"]), int(want["chat_users"]), int(want["agentic_users"]))
    # The 8x runs lack C=2 and C=4 and a TTFT at C=8: the output says so.
    for run in ("deepseek-v4.1-flash_8x-spark_memory", "deepseek-v4.1-flash_8x-spark_nvme"):
        assert any("lower bound" in w for w in result[run]["warnings"])


@pytest.mark.parametrize("row", ["x,2,nan,30", "x,2,200,inf", "x,2,-5,30", "x,2,200,30,-1"])
def test_capacity_csv_refuses_figures_that_are_no_finite_count(tmp_path, row):
    path = tmp_path / "levels.csv"
    path.write_text(f"run,concurrency,mean_ttft_ms,mean_tps,errors\nx,1,200,30,0\n{row}\n")
    proc = run_cli("capacity", "--csv", str(path))
    assert proc.returncode == 2, proc.stdout
    assert "line 3" in proc.stderr and "not a finite number >= 0" in proc.stderr
    assert "Traceback" not in proc.stderr and "Max C" not in proc.stdout


def test_a_level_above_the_open_file_limit_is_refused_before_anything_is_sent(tmp_path):
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    db = tmp_path / "b.duckdb"
    proc = subprocess.run(
        [sys.executable, "-m", "engram_bench", "run", "--url", "http://127.0.0.1:9/v1",
         "--levels", "1000", "--max-concurrency", "1000", "--db", str(db), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, preexec_fn=low_limit)
    assert proc.returncode == 2, proc.stderr
    assert "needs about 1064 open files, above the 256" in proc.stderr
    assert "Traceback" not in proc.stderr and not Store(db).runs()


def test_a_prompt_file_past_the_size_limit_is_refused_unread(tmp_path):
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:  # sparse: no disk, no time
        f.truncate(300 * 2**20)
    proc = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--prompts", str(huge),
                   "--db", str(tmp_path / "b.duckdb"), timeout=30)
    assert proc.returncode == 2 and "300 MiB, above the 256 MiB" in proc.stderr, proc.stderr


def test_capacity_empty_cell_cannot_pass(tmp_path):
    path = tmp_path / "levels.csv"
    path.write_text("run,concurrency,mean_ttft_ms,mean_tps\nx,1,200,30\nx,2,,25\n")
    proc = run_cli("capacity", "--csv", str(path))
    assert proc.returncode == 0
    assert "C=2 cannot be judged (no TTFT figure), so it does not pass" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--url", "http://x/v1", "--levels", "0,2"], "positive integers"),
        (["run", "--url", "http://x/v1", "--levels", "1,b"], "positive integers"),
        (["run", "--url", "http://x/v1", "--levels", "1,,2"], "empty item"),
        (["run", "--url", "http://x/v1", "--mode", "rate", "--rates", "1,,2"], "empty item"),
        (["run", "--url", "http://x/v1", "--chat-factor", "nan"], "user factors must be finite"),
        (["run", "--url", "http://x/v1", "--mode", "rate", "--rates", "1e9", "--duration", "2"],
         "schedule 2,000,000,000 requests"),
        (["run", "--url", "http://x/v1", "--mode", "rate", "--rates", "100", "--duration",
          "20000"], "above the 1,000,000 one run may hold"),
        (["run", "--url", "http://x/v1", "--tps-min", "inf"], "TPS target must be a finite"),
        (["run", "--url", "http://x/v1", "--ttft-max-ms", "nan"], "the TTFT target a number"),
        (["run", "--url", "http://x/v1", "--rounds", "0"], "positive integer"),
        (["run", "--url", "http://x/v1", "--slo", "itl_ms=5"], "no objective 'itl_ms'"),
        (["run", "--url", "http://x/v1", "--slo", "ttft_ms=0"], "finite number above 0"),
        (["run", "--url", "http://x/v1", "--slo", "ttft_ms=-5"], "finite number above 0"),
        (["summary", "--slo", "ttft_ms=nan"], "finite number above 0"),
        (["run", "--url", "http://x/v1", "--slo", "ttft_ms=100", "--min-goodput", "1.5"],
         "share in (0, 1]"),
        (["run", "--url", "http://x/v1", "--min-goodput", "0.9"], "needs --slo"),
        (["run", "--url", "http://x/v1", "--mode", "open"], "invalid choice"),
        (["run", "--device", "spark", "--cache-ratio", "0"], "must be a fraction in (0, 1]"),
        (["run", "--device", "spark", "--cache-ratio", "1.5"], "must be a fraction in (0, 1]"),
        (["run", "--device", "spark", "--page-cache-gb", "-1"], "must be a positive number"),
        (["run", "--device", "moon"], "unknown device 'moon'; valid devices: spark"),
        (["run", "--url", "http://x/v1", "--device", "moon"], "unknown device 'moon'"),
        (["run", "--url", "ftp://x"], "not an http(s) URL"),
        (["run", "--url", "http://x/v1", "--db", "/proc/engram/b.duckdb"], "cannot create"),
        (["capacity", "--csv", "/nonexistent.csv"], "cannot read"),
        (["summary", "--db", "/nonexistent.duckdb"], "does not exist yet"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreachable_url_and_wrong_model_stop_before_the_sweep(mock_process, tmp_path):
    db = tmp_path / "b.duckdb"
    dead = f"http://127.0.0.1:{free_port()}/v1"
    proc = run_cli("run", "--url", dead, "--db", str(db))
    assert proc.returncode == 2 and f"cannot reach {dead}" in proc.stderr
    url = mock_process()
    proc = run_cli("run", "--url", url, "--model", "gpt-9", "--db", str(db))
    assert proc.returncode == 2
    assert "model 'gpt-9' is not served" in proc.stderr and "mock-model" in proc.stderr
    assert Store(db).runs() == []


def _wait_for_rounds(db: Path, at_least: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if db.exists():
            runs = Store(db).runs()
            if runs and len(Store(db).done_rounds(runs[0].run_id)) >= at_least:
                return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise TimeoutError("rounds did not arrive")


def _start_run(url: str, db: Path, rounds: int = 6) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--url", url, "--levels", "1,2",
         "--rounds", str(rounds), "--output-tokens", "20", "--no-progress", "--db", str(db)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _assert_complete_after_resume(db: Path, run_id: str, url: str, rounds: int = 6) -> None:
    proc = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    store = Store(db)
    records = store.requests(run_id)
    keys = [(r.concurrency, r.round, r.worker) for r in records]
    assert len(keys) == len(set(keys)) == 1 * rounds + 2 * rounds
    assert store.run(run_id).status == "complete"
    assert json.loads(proc.stdout)["max_c"] == 2


def test_ctrl_c_keeps_finished_rounds_and_resume_runs_the_rest(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "20", "--itl-ms", "10")  # ~0.2 s per request
    db = tmp_path / "b.duckdb"
    proc = _start_run(url, db)
    _wait_for_rounds(db, 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "--resume" in err
    store = Store(db)
    run = store.runs()[0]
    assert run.status == "aborted"
    kept = store.requests(run.run_id)
    assert len(kept) >= 2
    rounds = {(r.concurrency, r.round) for r in kept}
    for c, rnd in rounds:  # only whole rounds are stored
        assert sum(1 for r in kept if (r.concurrency, r.round) == (c, rnd)) == c
    _assert_complete_after_resume(db, run.run_id, url)


def test_sigterm_stops_a_busy_run_at_once_and_invents_no_error(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "5", "--itl-ms", "2")
    db = tmp_path / "b.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--url", url, "--levels", "32",
         "--rounds", "200", "--output-tokens", "128", "--no-progress", "--db", str(db)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_rounds(db, 2, proc)  # mid-level: 32 streams in flight
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err  # 128 + SIGTERM, as a shell reports a kill
    assert time.monotonic() - t0 < 5, "the stop took too long"
    assert "Fatal error" not in err and "--resume" in err
    run = Store(db).runs()[0]
    assert run.status == "aborted"
    assert all(r.ok for r in Store(db).requests(run.run_id))  # no invented server error


def test_a_run_being_measured_cannot_be_resumed_by_a_second_process(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "20", "--itl-ms", "10")
    db = tmp_path / "b.duckdb"
    rounds = 20  # ~0.2 s each: the first still measures after the second's refusal
    proc = _start_run(url, db, rounds)
    _wait_for_rounds(db, 1, proc)
    run_id = Store(db).runs()[0].run_id
    second = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db))
    assert second.returncode == 2, second.stderr
    assert f"run {run_id} is being measured by another engram-bench process" in second.stderr
    assert proc.poll() is None  # the first goes on, untouched
    _wait_for_rounds(db, 3, proc)
    with Store(db).read_only() as con:  # the two never wrote the same request
        assert con.execute("SELECT count(*) - count(DISTINCT request_id) FROM requests"
                           ).fetchone() == (0,)
    assert proc.poll() is None, "the first run ended before its stop: give it more rounds"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    _assert_complete_after_resume(db, run_id, url, rounds)  # its lock went with it


def test_killed_process_loses_at_most_the_round_in_flight(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "20", "--itl-ms", "10")
    db = tmp_path / "b.duckdb"
    proc = _start_run(url, db)
    _wait_for_rounds(db, 3, proc)
    proc.kill()
    proc.wait(10)
    run = Store(db).runs()[0]
    assert run.status == "running"  # nobody could mark it
    assert len(Store(db).done_rounds(run.run_id)) >= 3
    _assert_complete_after_resume(db, run.run_id, url)


def test_resume_of_a_complete_run_is_refused(mock_process, tmp_path):
    url = mock_process()
    db = tmp_path / "b.duckdb"
    assert run_cli("run", "--url", url, "--levels", "1", "--rounds", "1", "--db", str(db),
                   "--output-tokens", "4").returncode == 0
    run_id = Store(db).runs()[0].run_id
    proc = run_cli("run", "--resume", run_id, "--db", str(db))
    assert proc.returncode == 2 and "already complete" in proc.stderr


def test_resume_refuses_flags_that_would_change_the_run(mock_process, tmp_path):
    url = mock_process()
    db = tmp_path / "b.duckdb"
    assert run_cli("run", "--url", url, "--levels", "1,2", "--rounds", "1", "--db", str(db),
                   "--output-tokens", "4").returncode == 0
    run_id = Store(db).runs()[0].run_id
    Store(db).update_run(run_id, status="aborted")  # as if stopped: resumable
    proc = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db), "--levels", "1,4",
                   "--rounds", "3", "--output-tokens", "4")
    assert proc.returncode == 2
    assert "--levels, --rounds cannot change it" in proc.stderr, proc.stderr
    assert Store(db).run(run_id).status == "aborted"  # refused before anything ran
    same = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db), "--levels", "1,2",
                   "--output-tokens", "4", "--tps-min", "5")  # its own values, new targets
    assert same.returncode == 0, same.stderr
    assert Store(db).run(run_id).status == "complete"


def test_summary_and_export(mock_process, tmp_path):
    url = mock_process()
    db = tmp_path / "b.duckdb"
    assert run_cli("run", "--url", url, "--levels", "1,2", "--rounds", "2", "--db", str(db),
                   "--output-tokens", "8", "--label", "smoke").returncode == 0
    proc = run_cli("summary", "latest", "--db", str(db), "--json", "--ttft-max-ms", "1")
    summary = json.loads(proc.stdout)
    assert summary["label"] == "smoke" and summary["max_c"] == 0  # nothing meets 1 ms TTFT
    assert all("TTFT" in lv["fails_because"] for lv in summary["levels"])
    text = run_cli("summary", "--db", str(db)).stdout
    assert "Max C = 2" in text and "chat users 8" in text
    assert "Max C >= 2: no higher level was tested" in text
    p99 = json.loads(run_cli("summary", "--db", str(db), "--json", "--statistic", "p99").stdout)
    assert p99["statistic"] == "p99" and p99["judged"] == {"ttft": "p99_ttft_ms", "tps": "p1_tps"}
    for level in p99["levels"]:  # every statistic's figures, whichever is judged
        assert level["p1_tps"] <= level["p10_tps"] <= level["p50_tps"]
        assert level["p50_ttft_ms"] <= level["p90_ttft_ms"] <= level["p99_ttft_ms"]
        assert level["mean_tps"] > 0 and level["mean_ttft_ms"] > 0
    out = tmp_path / "exports"
    proc = run_cli("export", "--db", str(db), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    with open(out / "levels.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["concurrency"] for r in rows] == ["1", "2"]
    # the exported levels file is itself a valid `capacity --csv` input, for every statistic
    cap = json.loads(run_cli("capacity", "--csv", str(out / "levels.csv"), "--json").stdout)
    assert cap[summary["run_id"]]["max_c"] == 2
    cap = json.loads(run_cli("capacity", "--csv", str(out / "levels.csv"), "--json",
                             "--statistic", "p99", "--tps-min", "1").stdout)[summary["run_id"]]
    assert cap["statistic"] == "p99" and cap["max_c"] == 2
    assert "Max C >= 2: no higher level was tested" in cap["warnings"]
    for level, exported in zip(cap["levels"], rows, strict=True):
        assert level["p1_tps"] == pytest.approx(float(exported["p1_tps"]))
        assert level["p50_tps"] == pytest.approx(float(exported["p50_tps"]))


def test_capacity_csv_needs_the_columns_of_the_statistic_judged(tmp_path):
    path = tmp_path / "levels.csv"
    path.write_text("run,concurrency,mean_ttft_ms,mean_tps\nx,1,200,30\n")
    proc = run_cli("capacity", "--csv", str(path), "--statistic", "p90")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "lacks column(s) p90_ttft_ms, p10_tps" in proc.stderr
