"""`--turns N`: conversations that resend their history, so the context grows turn by turn and
the cached prompt tokens the server reports are stored with each request."""

import json

import pytest

from harness.config import RunConfig
from harness.results.store import Store
from harness.run.modes.rounds import todo
from harness.run.workload import payload
from harness.wire.completion_stream import CompletionStream
from tests.helpers import run_cli


def test_usage_cached_tokens_and_the_answer_text_are_read_from_the_stream():
    stream = CompletionStream(keep_text=True)
    stream.add(b'{"choices":[{"index":0,"delta":{"content":"Hello"}}]}', 1)
    stream.add(b'{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}', 2)
    stream.add(b'{"choices":[{"index":0,"delta":{"content":" there"}}]}', 3)
    stream.add(b'{"choices":[],"usage":{"prompt_tokens":90,"completion_tokens":2,'
               b'"prompt_tokens_details":{"cached_tokens":64}}}', 4)
    assert "".join(stream.text) == "Hello there"
    assert (stream.prompt_tokens, stream.cached_tokens) == (90, 64)
    plain = CompletionStream()
    plain.add(b'{"choices":[{"index":0,"text":"x"}],"usage":{"prompt_tokens":3}}', 1)
    assert plain.text is None and plain.cached_tokens is None  # not reported: unknown


def test_a_turn_resends_the_conversation_before_its_new_message():
    history = [("first question", "first answer"), ("second question", "second answer")]
    chat = payload("chat", "m", "third question", 8, 0.0, history=history)
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [
        ("user", "first question"), ("assistant", "first answer"),
        ("user", "second question"), ("assistant", "second answer"),
        ("user", "third question")]
    text = payload("completions", "m", "third question", 8, 0.0, history=history)["prompt"]
    earlier = payload("completions", "m", "second question", 8, 0.0, history=history[:1])
    assert text.startswith(earlier["prompt"])  # the previous prompt is a prefix: cacheable


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_turns_grow_the_context_and_store_the_cached_tokens(tmp_path, mock_server, api):
    mock_server.configure(prefix_cache=True)
    db = tmp_path / "t.duckdb"
    out = run_cli("run", "--url", mock_server.url, "--api", api, "--levels", "2", "--rounds",
                  "6", "--turns", "3", "--input-tokens", "24", "--output-tokens", "8",
                  "--db", str(db), "--no-progress", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    turns = summary["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    prompts = [t["mean_prompt_tokens"] for t in turns]
    assert prompts[0] < prompts[1] < prompts[2]  # each turn adds a message and an answer
    assert turns[0]["mean_cached_tokens"] == 0
    assert 0 < turns[1]["mean_cached_tokens"] < turns[2]["mean_cached_tokens"]
    assert not [w for w in summary["warnings"] if "prompts averaged" in w]  # turn 1 is sized
    records = Store(db).requests(summary["run_id"])
    assert [r.turn for r in records if r.worker == 0] == [1, 2, 3, 1, 2, 3]
    assert all(r.cached_tokens is not None for r in records)
    rows = Store(db).turns(summary["run_id"])
    assert [(r["turn"], r["requests"]) for r in rows] == [(1, 4), (2, 4), (3, 4)]


def test_a_resume_runs_a_begun_conversation_again_from_its_first_turn(sweep):
    assert todo(RunConfig(url="u", model="m", turns=3, rounds=7), [4, 6]) == [3, 4, 5, 6]
    assert todo(RunConfig(url="u", model="m", rounds=7), [4, 6]) == [4, 6]
    first = sweep(levels=(1,), rounds=6, turns=3, input_tokens=16, output_tokens=4,
                  server_metrics=False, db="r.duckdb", run_id="20261129-000000-7u4n")
    before = {r.round: r for r in first.records}
    with first.store._connect() as con:  # a run killed during turn 2 of its second conversation
        con.execute("DELETE FROM requests WHERE round = 5")
        con.execute("UPDATE runs SET status = 'aborted'")
    again = sweep(first.server, config=first.config, store=first.store, run_id=first.run_id,
                  resume=True)
    after = {r.round: r for r in again.records}
    assert sorted(after) == list(range(6))
    assert after[0].sent_at == before[0].sent_at  # the whole first conversation is kept
    assert after[3].sent_at > before[4].sent_at  # the second ran again from turn 1
    assert [after[r].input_tokens for r in (3, 4, 5)] == [before[r].input_tokens
                                                          for r in (0, 1, 2)]
