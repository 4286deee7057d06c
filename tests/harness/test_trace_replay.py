"""A trace replayed against the fake server, checked on the server's own log: every line sent
once with its own max_tokens, on the trace's clock over the speedup, Mooncake's equal ids as
equal text at the same offset with nothing before them, prompts the length the server counts,
sessions in order, a closed replay resumed, and the highest sustained speedup found."""

from __future__ import annotations

import itertools
import json
import random

import duckdb
import pytest

from harness.config import ConfigError
from harness.run.modes import trace as trace_mode
from harness.run.prompts import pieces
from harness.run.trace.blocks import BlockText
from runners.engram.tokenizer import TOKENIZER_PATH
from tests.helpers import run_cli


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _log(server):
    """The fake server's log of the replay (calibration's max_tokens=1 probes left out)."""
    return [t for t in server.server.timings if t.sampling.get("max_tokens") != 1]


def _mooncake(path, n=16, seed=0):
    """A trace whose requests all start with block 0; every other request also shares its
    second block with the one before it; arrivals ~4 per second."""
    rng = random.Random(seed)
    rows, t, next_id = [], 0.0, 1
    for k in range(n):
        t += rng.expovariate(4.0)
        blocks = rng.randint(8, 16)
        if k % 2 and rows:
            ids = rows[-1]["hash_ids"][:2] + list(range(next_id, next_id + blocks - 2))
        else:
            ids = [0, *range(next_id, next_id + blocks - 1)]
        next_id = max(next_id, max(ids) + 1)
        rows.append({"timestamp": round(t * 1000), "input_length": 512 * (len(ids) - 1)
                     + rng.randint(100, 512), "output_length": rng.randint(3, 12),
                     "hash_ids": ids})
    return _write(path, [json.dumps(r) for r in rows]), rows


def _common(a: str, b: str) -> int:
    """Pieces (words and punctuation marks) of the words two prompts start with alike."""
    n = 0
    for x, y in zip(a.split(), b.split(), strict=False):
        if x != y:
            break
        n += pieces(x)
    return n


def test_a_mooncake_replay_sends_equal_ids_as_equal_text_on_the_traces_clock(sweep, tmp_path):
    path, rows = _mooncake(tmp_path / "mooncake.jsonl")
    run = sweep({"log_prompts": True, "ttft_ms": 2, "itl_ms": 1}, mode="trace", levels=(),
                trace=str(path), speedups=(4.0,), input_scale=0.05)
    log = _log(run.server)
    assert sorted(r.trace_line for r in run.records) == list(range(1, len(rows) + 1))
    by_line = {r.trace_line: r for r in run.records}
    sent = {by_line[int(t.request_id.rsplit("-k", 1)[1]) + 1].trace_line: t for t in log}
    assert len(log) == len(rows) and len(sent) == len(rows)  # each line once
    for line, t in sent.items():
        assert t.sampling["max_tokens"] == rows[line - 1]["output_length"]
    # on the trace's clock / 4: each send within 50 ms of its place (the bound of a busy
    # 2-core test run; the send lag's own figures are in the accuracy benchmark)
    first = min(t.body_read for t in log)
    for line, t in sent.items():
        due = (rows[line - 1]["timestamp"] - rows[0]["timestamp"]) / 1000 / 4
        assert abs((t.body_read - first) - due) < 0.05, (line, t.body_read - first, due)
    texts = {line: t.prompt[0] for line, t in sent.items()}
    # the one block every request starts with, and nothing before it: 25.6 tokens' worth
    block = min(_common(texts[1], texts[k]) for k in texts if k != 1)
    assert block > 10
    for k in range(2, len(rows) + 1):
        shared = 0
        for a, b in zip(rows[k - 2]["hash_ids"], rows[k - 1]["hash_ids"], strict=False):
            if a != b:
                break
            shared += 1
        common = _common(texts[k - 1], texts[k])
        # a block is drawn to its pieces, its last word perhaps a few past them
        if shared >= 2:
            assert common >= 2 * block - 4, (k, common, block)
        else:
            assert block <= common < 2 * block - 4, (k, common, block)
    shares = {r.trace_line: r.trace_prefix_tokens for r in run.records}
    assert shares[1] == 0 and all(shares[k] > 0 for k in range(2, len(rows) + 1))


def test_prompts_are_the_scaled_length_by_the_servers_own_count(sweep, tmp_path):
    path, rows = _mooncake(tmp_path / "mooncake.jsonl", n=12, seed=3)
    run = sweep({"tokenizer": str(TOKENIZER_PATH)}, mode="trace", levels=(),
                trace=str(path), trace_format="mooncake", speedups=(4.0,), input_scale=0.02)
    for r in run.records:
        asked = round(rows[r.trace_line - 1]["input_length"] * 0.02)
        assert r.input_tokens_requested == asked
        assert abs(r.input_tokens / asked - 1) <= 0.10, (r.trace_line, r.input_tokens, asked)


@pytest.mark.parametrize("fmt", ["azure", "burstgpt", "jsonl"])
def test_each_format_sends_every_request_once_with_its_lengths_on_its_clock(sweep, tmp_path,
                                                                           fmt):
    rng = random.Random(fmt)
    arrivals = sorted(rng.uniform(0, 2.0) for _ in range(8))
    lengths = [(rng.randint(20, 60), rng.randint(2, 9)) for _ in arrivals]
    if fmt == "azure":
        lines = ["TIMESTAMP,ContextTokens,GeneratedTokens", *(
            f"2024-05-10 00:00:{10 + t:09.6f},{i},{o}" for t, (i, o) in zip(arrivals, lengths,
                                                                          strict=True))]
    elif fmt == "burstgpt":
        lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", *(
            f"{100 + t},ChatGPT,{i},{o},{i + o},Conversation log"
            for t, (i, o) in zip(arrivals, lengths, strict=True))]
    else:
        lines = [json.dumps({"prompt": f"question {k}: " + "word " * i, "max_tokens": o,
                             "timestamp": t})
                 for k, (t, (i, o)) in enumerate(zip(arrivals, lengths, strict=True))]
    path = _write(tmp_path / f"trace.{'jsonl' if fmt == 'jsonl' else 'csv'}", lines)
    run = sweep({"log_prompts": True}, mode="trace", levels=(), trace=str(path),
                speedups=(2.0,))
    log = _log(run.server)
    assert len(log) == len(arrivals) and len(run.records) == len(arrivals)
    assert all(r.ok for r in run.records)
    first_line = 2 if fmt != "jsonl" else 1
    for r in run.records:
        k = r.trace_line - first_line
        assert r.output_tokens_requested == r.output_tokens == lengths[k][1]
        assert r.scheduled_at is not None
    start = min(r.scheduled_at for r in run.records)
    for r in run.records:
        due = (arrivals[r.trace_line - first_line] - arrivals[0]) / 2
        assert r.scheduled_at - start == pytest.approx(due, abs=1e-3)
    if fmt == "jsonl":  # its prompts as written
        assert sorted(t.prompt[0] for t in log) == sorted(json.loads(line)["prompt"]
                                                         for line in lines)


def test_a_sessions_turns_go_in_order_each_after_the_answer_before_it(sweep, tmp_path):
    lines = []
    for turn in range(3):
        for session in ("a", "b"):
            lines.append(json.dumps({"prompt": f"{session} turn {turn}", "session_id": session,
                                     "max_tokens": 6, "timestamp": turn * 0.01}))
    path = _write(tmp_path / "sessions.jsonl", lines)
    run = sweep({"log_prompts": True, "ttft_ms": 40, "itl_ms": 5}, mode="trace", levels=(),
                trace=str(path), speedups=(1.0,))
    log = sorted(_log(run.server), key=lambda t: t.body_read)
    for session in ("a", "b"):
        turns = [t for t in log if t.prompt[-1].startswith(session)]
        assert [t.prompt[-1] for t in turns] == [f"{session} turn {k}" for k in range(3)]
        for before, after in itertools.pairwise(turns):
            assert after.body_read >= before.last_write  # waited for the answer
            assert after.prompt[:-1][:len(before.prompt)] == before.prompt  # history resent
            assert len(after.prompt) == len(before.prompt) + 2  # + its answer, + a new turn
    assert sorted(r.turn for r in run.records) == [1, 1, 2, 2, 3, 3]


def test_a_closed_replay_runs_its_levels_in_trace_order_and_resumes_what_it_lacks(sweep,
                                                                                  tmp_path):
    path, _ = _mooncake(tmp_path / "mooncake.jsonl", n=10)
    first = sweep({"log_prompts": True}, mode="trace-closed", levels=(1, 3), trace=str(path),
                  input_scale=0.02)
    assert sorted((r.concurrency, r.trace_line) for r in first.records) == [
        (c, k) for c in (1, 3) for k in range(1, 11)]
    c1 = sorted((r for r in first.records if r.concurrency == 1), key=lambda r: r.sent_at)
    assert [r.trace_line for r in c1] == list(range(1, 11))  # trace order, one at a time
    with first.store._connect() as con:  # as if stopped during C=3
        con.execute("DELETE FROM requests WHERE concurrency = 3 AND round >= 6")
        con.execute("UPDATE runs SET status = 'aborted'")
    before = len(_log(first.server))
    again = sweep(first.server, config=first.config, store=first.store, run_id=first.run_id,
                  resume=True)
    assert len(_log(first.server)) - before == 4  # the four it lacked
    assert sorted((r.concurrency, r.trace_line) for r in again.records) == [
        (c, k) for c in (1, 3) for k in range(1, 11)]
    assert again.run.status == "complete"


def test_search_finds_the_highest_sustained_speedup_and_shows_the_traces_time(tmp_path,
                                                                             mock_process):
    path, _ = _mooncake(tmp_path / "mooncake.jsonl", n=20, seed=5)
    url = mock_process("--ttft-ms", "5", "--itl-ms", "4", "--shared-decode")
    done = run_cli("run", "--url", url, "--trace", str(path), "--speedup", "1,4",
                   "--input-scale", "0.02", "--max-output-tokens", "24", "--search",
                   "--db", str(tmp_path / "b.duckdb"), "--no-progress", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    passed = sorted(lv["speedup"] for lv in summary["levels"] if lv["passes"])
    failed = sorted(lv["speedup"] for lv in summary["levels"] if not lv["passes"])
    assert summary["max_speedup"] == max(passed)
    assert failed and min(f for f in failed if f > max(passed)) / max(passed) <= 1.125 + 1e-9
    assert f"{summary['max_speedup']:g}x (pass)" in summary["max_speedup_search"]
    windows = {w["speedup"]: w["windows"] for w in summary["trace_windows"]}
    assert sum(w["requests"] for w in windows[1.0]) == 20
    plain = run_cli("summary", "--db", str(tmp_path / "b.duckdb"))
    assert f"Sustains {summary['max_speedup']:g}x the trace's rate" in plain.stdout
    assert "over the trace's time" in plain.stdout


def test_lengths_past_the_servers_context_are_refused_unless_clipped(sweep, tmp_path):
    path, rows = _mooncake(tmp_path / "mooncake.jsonl", n=6)
    long = sum(1 for r in rows if r["input_length"] + r["output_length"] > 1000)
    with pytest.raises(ConfigError, match=f"{long} of the trace's 6 requests need more than "
                                        "the server's 1,000-token context"):
        sweep({"context_tokens": 1000}, mode="trace", levels=(), trace=str(path),
              speedups=(8.0,))
    run = sweep({"context_tokens": 1000}, mode="trace", levels=(), trace=str(path),
                speedups=(8.0,), max_input_tokens=900, max_output_tokens=20)
    assert all(r.ok and r.input_tokens_requested <= 900 for r in run.records)


def test_a_resume_on_a_changed_trace_names_the_trace_and_its_first_changed_line(
        tmp_path, mock_process):
    path, rows = _mooncake(tmp_path / "mooncake.jsonl", n=6)
    url, db = mock_process(), str(tmp_path / "b.duckdb")
    done = run_cli("run", "--url", url, "--trace", str(path), "--trace-schedule", "closed",
                   "--levels", "1", "--input-scale", "0.02", "--db", db, "--no-progress",
                   "--json")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.strip().splitlines()[-1])["run_id"]
    with duckdb.connect(db) as con:  # as if stopped after its third request
        con.execute("DELETE FROM requests WHERE round >= 3")
        con.execute("UPDATE runs SET status = 'aborted'")
    rows[3]["output_length"] += 1  # line 4
    _write(path, [json.dumps(r) for r in rows])
    again = run_cli("run", "--resume", run_id, "--url", url, "--db", db, "--no-progress")
    assert again.returncode == 2
    assert f"trace {path} has changed at line 4 since run {run_id} started" in again.stderr


def _session(path, turns, words=200, max_tokens=100):
    return _write(path, [json.dumps({"prompt": "word " * words, "session_id": "a",
                                     "max_tokens": max_tokens, "timestamp": turn * 0.01})
                         for turn in range(turns)])


def test_a_session_that_outgrows_the_servers_context_is_refused_before_it_is_sent(sweep,
                                                                                  tmp_path):
    """Each turn alone fits 1,000 tokens, the fourth after the three before it and their
    answers (1,200 tokens at least) does not."""
    path = _session(tmp_path / "session.jsonl", turns=4)
    with pytest.raises(ConfigError, match=r"1 of the trace's 4 requests need more than the "
                       r"server's 1,000-token context .*; the longest, line 4 \(turn 4 of "
                       r"session 'a'.*\), needs 1,200 tokens"):
        sweep({"context_tokens": 1000}, mode="trace", levels=(), trace=str(path),
              speedups=(1.0,))
    fits = _session(tmp_path / "fits.jsonl", turns=3)
    run = sweep({"context_tokens": 1000}, mode="trace", levels=(), trace=str(fits),
                speedups=(1.0,))
    assert len(run.records) == 3 and all(r.ok for r in run.records)


def test_a_session_past_what_one_request_may_hold_is_refused_where_no_context_is_said(
        sweep, tmp_path, monkeypatch):
    """A server that states no context cannot bound a session: one request's bound does
    (checked here at 1,000 tokens)."""
    monkeypatch.setattr(trace_mode, "MAX_REQUEST_TOKENS", 1000)
    path = _session(tmp_path / "session.jsonl", turns=4)
    with pytest.raises(ConfigError, match=r"longest request, line 4 \(turn 4 of session "
                       r"'a'.*\), needs 1,200 tokens, above the 1,000 one request may hold"):
        sweep(mode="trace", levels=(), trace=str(path), speedups=(1.0,))


def test_the_blocks_of_one_pass_are_its_own(tmp_path):
    """Another pass draws other text for the same ids (a level must not find the level
    before it in the server's prefix cache); within a pass an id is one text."""
    one, two = BlockText(0, "x1"), BlockText(0, "x2")
    assert one.prompt([7, 8], 20, 40, -1) == one.prompt([7, 8], 20, 40, -2)
    assert one.prompt([7], 20, 20, -1) != two.prompt([7], 20, 20, -1)
    assert one.prompt([7, 8], 20, 30, -1).startswith(one.prompt([7], 20, 20, -1))


def test_no_hash_id_names_another_requests_own_text(sweep, tmp_path):
    """A request without ids has text of its own: an id of another request, even a negative
    one, is a block of its own, not that text."""
    path = _write(tmp_path / "negative.jsonl", [
        json.dumps({"timestamp": 0, "input_length": 100, "output_length": 4}),
        json.dumps({"timestamp": 50, "input_length": 100, "output_length": 4,
                    "hash_ids": [-2]})])
    run = sweep({"log_prompts": True}, mode="trace", levels=(), trace=str(path),
                speedups=(1.0,), trace_block_tokens=100)
    texts = {int(t.request_id.rsplit("-k", 1)[1]) + 1: t.prompt[0] for t in _log(run.server)}
    assert _common(texts[1], texts[2]) < 10, texts
    assert [r.trace_prefix_tokens for r in sorted(run.records, key=lambda r: r.trace_line)] \
        == [None, 0]


def test_a_sweep_draws_its_lengths_from_a_trace(sweep, tmp_path):
    path, rows = _mooncake(tmp_path / "mooncake.jsonl", n=12, seed=7)
    run = sweep({"tokenizer": str(TOKENIZER_PATH)}, levels=(1, 2), rounds=4,
                lengths_from=str(path), input_scale=0.02, max_output_tokens=8)
    asked = {(round(r["input_length"] * 0.02), min(r["output_length"], 8)) for r in rows}
    assert len(run.records) == 12 and all(r.ok for r in run.records)
    assert len({(r.input_tokens_requested, r.output_tokens_requested)
                for r in run.records}) > 6  # the seeded walk spreads over the trace
    for r in run.records:
        assert (r.input_tokens_requested, r.output_tokens_requested) in asked
        assert r.output_tokens == r.output_tokens_requested  # its max_tokens
        assert abs(r.input_tokens / r.input_tokens_requested - 1) <= 0.10
