"""The harness against a real engine: vLLM's CPU build serving the tiny Llama of runners/vllm.

Marked `vllm`: runs under `make test-vllm` (which sets up .venv-vllm); `make test` leaves it
out, and says why it is skipped while .venv-vllm is missing. One server is started for the
module; the CLI tests that start their own (`--bundled vllm`) run in the repository, so the
model written once is reused.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

import duckdb
import pytest

from harness.records import RequestRecord
from harness.results.store import Store
from harness.run.workload import payload
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint
from runners.vllm import setup
from runners.vllm.model import MARKER, TinyLlama
from runners.vllm.server import server_args, vllm_server
from tests.helpers import (
    ROOT,
    group_alive,
    run_cli,
    start_agent,
    stored_rows,
    wait_while_running,
)

pytestmark = pytest.mark.vllm

if not setup.installed():
    pytest.skip("vLLM is not installed: `make test-vllm` sets up .venv-vllm and runs these "
                "tests", allow_module_level=True)

MODELS = ROOT / "results" / "models"


def _avx512() -> bool:
    """Whether this x86 host has AVX-512, which vLLM's CPU kernels are built for (elsewhere
    they take a generic path: on a 2-core AVX2 EPYC the tiny Llama took 7.7 s to the first
    token of a 131-token prompt and ~110 ms a token, in bfloat16 and float32 alike)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return True
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return True


# Sweeps of tens of requests finish in minutes only on the kernels vLLM's CPU build is made
# for; the start, stream and metrics tests run on any host.
needs_avx512 = pytest.mark.skipif(
    not _avx512(), reason="this host lacks AVX-512, and vLLM's CPU build serves the tiny Llama "
    "~4x too slowly here for its sweeps (7.7 s to a first token of 131): run them where the "
    "CPU has it")
PROMPT = ("The committee met on a grey morning to weigh the proposal for a new bridge across "
          "the river, and after a long debate about its cost and its likely use they agreed "
          "to commission a further study of the traffic before deciding anything at all.")


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    logs = tmp_path_factory.mktemp("vllm-logs")
    with vllm_server(server_args(8), say=print, log_dir=logs, models_dir=MODELS) as server:
        pid = server.proc.pid
        yield server
    assert not group_alive(pid), "vLLM processes left behind"


def model_of(url: str) -> str:
    with urllib.request.urlopen(url + "/models", timeout=10) as r:
        return json.load(r)["data"][0]["id"]



def processes(needle: bytes, parent: int | None = None) -> list[int]:
    """Processes whose command line holds `needle` (children of `parent` when given)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent in (None, ppid) and needle in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return pids


# Tests that start their own server come first: one vLLM at a time (~3.5 GiB each).

def test_a_server_that_fails_to_start_gives_one_sentence_and_no_run(tmp_path):
    """A model directory that looks written but is not a model: vLLM exits while starting."""
    spec = TinyLlama()
    broken = tmp_path / "results" / "models" / spec.name
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    (broken / MARKER).write_text(json.dumps(asdict(spec)))
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--bundled", "vllm", "--device", "cpu", "--db", str(db),
                   "--no-progress", cwd=tmp_path, timeout=300)
    assert proc.returncode == 2
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("engram-bench: error: the vLLM server exited with code"), error
    assert "while starting" in error and "(log: results/logs/vllm-" in error
    assert Store(db).runs() == []
    assert not processes(str(broken).encode())


@needs_avx512
def test_vllm_killed_mid_sweep_fails_the_run_with_its_log_and_leaves_nothing(tmp_path):
    db = tmp_path / "b.duckdb"
    cli = subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--bundled", "vllm", "--device", "cpu",
         "--levels", "1,2", "--rounds", "20", "--db", str(db), "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # read every half second: each read holds the file's lock for a while, which the
        # run's writer waits out, on a CPU that vLLM's threads keep busy
        wait_while_running(lambda: stored_rows(db), cli, "a stored round", timeout_s=240,
                           poll_s=0.5)
        [server] = processes(b"vllm.entrypoints.openai.api_server", parent=cli.pid)
        assert len(group_alive(server)) >= 3  # the API server, its engine core and worker
        os.kill(server, signal.SIGKILL)
        _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("engram-bench: error: the vLLM server was killed by signal 9 "
                           "during the run; its log ends: "), last
    [run] = Store(db).runs()
    assert run.status == "failed"
    assert "killed by signal 9" in run.error
    log = ROOT / run.error.rsplit("(log: ", 1)[1].rstrip(")")
    assert log.read_text().strip().splitlines()[-1] in run.error  # the log's own last line
    records = Store(db).requests(run.run_id)
    # the run stops at the first round in which nothing could connect, stored with the rest
    assert len(records) < 1 * 20 + 2 * 20 and records[-1].error_kind == "connect_error"
    kinds = {r.error_kind for r in records}
    assert any(r.ok for r in records) and kinds - {None} <= {"dropped", "connect_error"}
    assert "dropped" in kinds  # the one in flight when the server died
    deadline = time.monotonic() + 10
    while group_alive(server):  # its engine core and worker are killed with it
        assert time.monotonic() < deadline, f"left behind: {group_alive(server)}"
        time.sleep(0.1)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streams_carry_usage_and_honour_ignore_eos_and_min_tokens(vllm, api):
    endpoint = Endpoint(vllm.url, api, None)
    body = payload(api, model_of(vllm.url), PROMPT, 128, 0.0)

    async def one() -> RequestRecord:
        pool = ConnectionPool(endpoint, connect_timeout=10)
        try:
            return await stream_completion(
                pool, build_request(endpoint, body, f"t-{api}"),
                RequestRecord(f"t-{api}", 1, 0, 0, 0.0), Clock(), 120, 60)
        finally:
            pool.close()

    record = asyncio.run(one())
    assert record.ok, record.error_message
    assert record.output_tokens == 128 and not record.output_tokens_estimated  # usage present
    assert record.finish_reason == "length"  # ignore_eos + min_tokens: never stopped early
    assert record.input_tokens > 50  # the prompt as the server counted it
    # the role-only first chat delta (content "") neither ends TTFT nor counts as a chunk
    assert 0 < record.chunks <= 128
    assert 0 < record.ttft_ms < record.latency_ms


def test_metrics_is_prometheus_text_with_vllm_names(vllm):
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(vllm.url.removesuffix("/v1") + "/metrics", timeout=10) as r:
        families = {f.name: f.type for f in text_string_to_metric_families(r.read().decode())}
    assert families["vllm:num_requests_running"] == "gauge"
    assert families["vllm:kv_cache_usage_perc"] == "gauge"
    assert families["vllm:time_to_first_token_seconds"] == "histogram"


@needs_avx512
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_sweep_calibrates_prompts_and_stores_server_metrics(vllm, tmp_path, api):
    """Single prompts spread ~+-5% in tokens around the calibrated length, so a level's mean
    is judged over 8 and 32 requests; 32 output tokens keep them short (128 are checked
    above), still forced to that length."""
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", vllm.url, "--api", api, "--levels", "2,8", "--rounds", "4",
                   "--output-tokens", "32", "--db", str(db), "--json", "--no-progress",
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["status"], summary["engine"]) == ("complete", "vllm")
    for level in summary["levels"]:
        assert level["errors"] == 0 and level["short_outputs"] == 0
        assert abs(level["mean_prompt_tokens"] / 128 - 1) <= 0.05, level
        assert level["mean_output_tokens"] == 32
    records = Store(db).requests(summary["run_id"])
    assert len(records) == 2 * 4 + 8 * 4
    assert all(r.output_tokens == 32 and not r.output_tokens_estimated for r in records)
    # token timing from vLLM's per-chunk usage (continuous_usage_stats): each chunk's tokens
    # are the server's, adding up to the request's
    for r in records:
        assert not r.tokens_per_chunk_estimated and r.tokens_per_chunk >= 1, r
        assert r.tokens_per_chunk * r.chunks == pytest.approx(32, abs=1), r
        # a gap is 0 where two chunks came in one read (vLLM's frontend behind its engine
        # writes them together): a request's median may be 0, its mean not
        assert r.tpot_ms > 0 and r.itl_mean_ms > 0 and r.itl_p99_ms >= r.itl_p50_ms >= 0
    for level in summary["levels"]:
        assert level["mean_tpot_ms"] > 0 and level["p99_itl_ms"] >= level["p50_itl_ms"] > 0
        assert level["tokens_per_chunk_estimated"] is False
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT concurrency, name, kind, stat, value FROM server_metrics "
                           "WHERE run_id = ?", [summary["run_id"]]).fetchall()
    got = {(c, name, stat): value for c, name, kind, stat, value in rows}
    for c in (2, 8):
        assert 1 <= got[(c, "vllm:num_requests_running", "max")] <= c
        assert 0 < got[(c, "vllm:kv_cache_usage_perc", "max")] <= 1
        assert got[(c, "vllm:time_to_first_token_seconds", "count")] == 4 * c  # the level's
        assert got[(c, "vllm:time_to_first_token_seconds", "p50")] > 0


@needs_avx512
def test_multi_turn_sessions_store_vllms_cached_prompt_tokens(vllm, tmp_path):
    """With prefix caching on (as runners.vllm starts it), each turn resends the conversation,
    vLLM reuses its cached blocks and says so in usage.prompt_tokens_details, and the context
    limit (max_model_len) is checked before anything is sent."""
    db = tmp_path / "t.duckdb"
    proc = run_cli("run", "--url", vllm.url, "--levels", "2", "--rounds", "3", "--turns", "3",
                   "--input-tokens", "200", "--output-tokens", "24", "--db", str(db), "--json",
                   "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    turns = summary["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[0]["mean_prompt_tokens"] < turns[1]["mean_prompt_tokens"] \
        < turns[2]["mean_prompt_tokens"]
    # vLLM caches whole blocks (their size is in vllm:cache_config_info): each turn reuses
    # the blocks the turn before it filled, so the cached share grows with the conversation
    cached = [t["mean_cached_tokens"] for t in turns]
    assert cached[0] == 0 < cached[1] < cached[2] < turns[2]["mean_prompt_tokens"], turns
    with duckdb.connect(str(db), read_only=True) as con:
        cached = con.execute("SELECT sum(value) FROM server_metrics WHERE run_id = ? AND name "
                             "= 'vllm:prompt_tokens_cached_total' AND stat = 'delta'",
                             [summary["run_id"]]).fetchone()[0]
    assert cached and cached > 0  # the server's own counter agrees that it reused tokens
    too_long = run_cli("run", "--url", vllm.url, "--levels", "1", "--rounds", "1",
                       "--input-tokens", "1000", "--db", str(db), "--no-progress")
    assert too_long.returncode == 2
    assert "above the server's 1024-token context" in too_long.stderr


def test_a_traces_shared_first_block_is_vllms_prefix_cache_hits(vllm, tmp_path):
    """A Mooncake trace whose requests share their first block, replayed one request at a
    time: vLLM's own prefix-cache hits over the level, in tokens, are within 10 % of the
    tokens the trace's hash ids say an earlier request sent first (its blocks are 64 tokens
    at --input-scale 1/8; vLLM caches whole blocks of 32)."""
    rows = [[0, 1], [0, 2], [0, 3], [0, 4]]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps(
        {"timestamp": 500 * k, "input_length": 512 * len(ids), "output_length": 2,
         "hash_ids": ids}) + "\n" for k, ids in enumerate(rows)))
    db = tmp_path / "p.duckdb"
    proc = run_cli("run", "--url", vllm.url, "--trace", str(trace), "--trace-schedule",
                   "closed", "--levels", "1", "--input-scale", "0.125", "--db", str(db),
                   "--json", "--no-progress", timeout=400)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    records = Store(db).requests(summary["run_id"])
    assert sorted(r.trace_line for r in records) == list(range(1, len(rows) + 1))
    implied = sum(r.trace_prefix_tokens or 0 for r in records)
    assert implied == 64 * (len(rows) - 1)  # the first block, sent first by the first request
    with duckdb.connect(str(db), read_only=True) as con:
        hits = con.execute("SELECT sum(value) FROM server_metrics WHERE run_id = ? AND name = "
                           "'vllm:prefix_cache_hits_total' AND stat = 'delta'",
                           [summary["run_id"]]).fetchone()[0]
    print(f"vLLM's prefix-cache hits {hits} tokens, the trace's shared blocks {implied}")
    assert hits is not None and abs(hits / implied - 1) <= 0.10, (hits, implied)
    assert summary["levels"][0]["prefix_hit_rate"] > 0


def test_the_agent_on_vllms_process_tree_stores_faults_rss_and_reads_per_level(vllm, tmp_path):
    """`engram-bench agent` on the vLLM server's PID (its engine core is a child process) and
    the tiny Llama's folder, read by `run --host-metrics`: every level stores the tree's
    faults, bytes read from storage and peak RssFile, and the weights' residency, none lost."""
    model_dir = MODELS / TinyLlama().name
    with start_agent("--pid", str(vllm.proc.pid), "--table", str(model_dir)) as (url, _, line):
        assert " processes (PID " in line, line  # the server and its children
        db = tmp_path / "h.duckdb"
        proc = run_cli("run", "--url", vllm.url, "--levels", "1,2", "--rounds", "2",
                       "--output-tokens", "16", "--host-metrics", url, "--db", str(db),
                       "--json", "--no-progress", timeout=400)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    stored = Store(db).host_levels(summary["run_id"])
    for c in (1, 2):
        [(_, level)] = stored[(c, None)]
        assert level.missing is None and level.source == "engram-bench agent", level
        assert level.major_faults is not None and level.major_faults >= 0
        assert level.minor_faults is not None and level.minor_faults > 0
        assert level.read_bytes is not None and level.read_bytes >= 0
        assert level.peak_rss_file_bytes is not None and level.peak_rss_file_bytes > 0
        assert level.table_bytes is not None and level.table_bytes > 0
        assert level.table_resident_end_bytes is not None
    for row in summary["levels"]:
        host = row["host"]
        assert host["major_faults_per_output_token"] is not None, host
        assert host["tree_read_bytes_per_output_token"] is not None, host
        assert host["peak_rss_file_bytes"] > 0
